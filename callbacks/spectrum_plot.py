"""The singular-value spectrum of the clean evaluation embeddings as a TensorBoard image.

Log–log axes, σ_i / σ_1 against the rank i (so runs and epochs share the y-axis: 1 at rank 1,
down to ``SPECTRUM_FLOOR``), one curve for the projections (unit rows) and one for the backbone
features (unnormalised), each with its α (``ssl_app.metrics.rank.power_law_exponent``) and
effective rank in the legend. Dimensional collapse (Jing et al., ICLR 2022) shows as a cliff.
"""

from __future__ import annotations

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torch import Tensor

from callbacks.plots import fixed_margins, plain_log_labels
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


def spectrum_figure(spectra: dict[str, Tensor], title: str) -> Figure:
    """σ_i / σ_1 against i on log–log axes, one curve per entry of ``spectra`` (the fixed y-range
    [``SPECTRUM_FLOOR``, 1]; x from rank 1 to the largest dimension)."""
    figure = Figure(figsize=(5.5, 3.8), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    widest = 1
    for (name, sigma), colour in zip(spectra.items(), ("tab:blue", "tab:orange")):
        sigma = sigma.double()
        if not sigma.numel() or not sigma[0] > 0:
            continue
        relative = (sigma / sigma[0]).clamp(min=SPECTRUM_FLOOR).numpy()
        ranks = range(1, relative.size + 1)
        widest = max(widest, relative.size)
        alpha, erank = float(power_law_exponent(sigma)), float(spectrum_effective_rank(sigma))
        axes.plot(ranks, relative, color=colour, label=f"{name} (d={relative.size}): α={alpha:.2f}, eff. rank {erank:.1f}")
    axes.set_xscale("log")
    axes.set_yscale("log")
    plain_log_labels(axes.xaxis)
    plain_log_labels(axes.yaxis)
    axes.set_xlim(1, max(widest, 2))
    axes.set_ylim(SPECTRUM_FLOOR, 1.5)
    axes.set_xlabel("rank i")
    axes.set_ylabel("σ_i / σ_1")
    axes.grid(alpha=0.3, which="both")
    axes.legend(loc="lower left", fontsize="small")
    axes.set_title(title, fontsize="small")
    fixed_margins(figure, left=0.17, bottom=0.13)
    return figure
