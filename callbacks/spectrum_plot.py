"""The singular-value spectrum of the clean evaluation embeddings as a TensorBoard image.

Log–log axes, σ_i / σ_1 against the rank i (so runs and epochs share the y-axis: 1 at rank 1,
down to ``SPECTRUM_FLOOR``), one curve for the projections (unit rows) and one for the backbone
features (unnormalised), each with its α (``ssl_app.metrics.rank.power_law_exponent``) and
effective rank in the legend. Dimensional collapse (Jing et al., ICLR 2022) shows as a cliff.
"""

from __future__ import annotations

import torch
from matplotlib.figure import Figure
from torch import Tensor

from ssl_app.drawing.figures import SpectrumCurve, SpectrumFigure
from ssl_app.metrics.rank import SPECTRUM_FLOOR, power_law_exponent, singular_values, spectrum_effective_rank

SPECTRUM_TAG = "figures/singular_value_spectrum"


def local_spectra(clean: Tensor, backbone: Tensor | None) -> dict[str, Tensor]:
    """``{"projection": σ, "backbone": σ}`` of the gathered rows, on this process alone (no
    collective: the caller is rank 0 only); non-finite rows are left out, as the metrics leave
    them out; an input without 2 finite rows (or a ``None`` backbone) is left out."""
    spectra = {}
    for name, rows, normalize in (("projection", clean, True), ("backbone", backbone, False)):
        rows = None if rows is None else rows[torch.isfinite(rows).all(dim=1)]
        if rows is not None and rows.shape[0] >= 2:
            spectra[name] = singular_values(rows, rank=0, world_size=1, normalize=normalize)
    return spectra


def spectrum_drawing(spectra: dict[str, Tensor], title: str) -> SpectrumFigure:
    """The spectrum as a figure to draw (``ssl_app.drawing.figures.SpectrumFigure``): for each entry of
    ``spectra`` (σ, descending, on the host) σ_i / σ_1 clamped at ``SPECTRUM_FLOOR``, with its α and
    effective rank; an entry with no positive σ_1 is left out."""
    curves = []
    for name, sigma in spectra.items():
        sigma = sigma.detach().double().cpu()
        if not sigma.numel() or not sigma[0] > 0:
            continue
        relative = tuple((sigma / sigma[0]).clamp(min=SPECTRUM_FLOOR).tolist())
        alpha, effective_rank = float(power_law_exponent(sigma)), float(spectrum_effective_rank(sigma))
        curves.append(SpectrumCurve(name, relative, alpha, effective_rank))
    return SpectrumFigure(tuple(curves), title)


def spectrum_figure(spectra: dict[str, Tensor], title: str) -> Figure:
    """``spectrum_drawing``'s matplotlib figure: σ_i / σ_1 against i on log–log axes, one curve per entry
    of ``spectra`` (the fixed y-range [``SPECTRUM_FLOOR``, 1]; x from rank 1 to the largest dimension)."""
    return spectrum_drawing(spectra, title).figure()
