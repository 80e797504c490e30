"""The power-law exponent α of the clean embeddings' singular values (α-ReQ, Agrawal et al. 2022).

    log σ_i ≈ c − α log i,  least squares over the ranks i whose σ_i > 1e-6 σ_1

``spectrum_alpha`` reads the unit rows of the projections, ``spectrum_alpha_backbone`` the backbone
features as they are; σ the same exact values the effective rank reads (``ssl_app.metrics.rank``,
computed once per input: ``EmbeddingInputs.singular_values``). Larger α: a faster-decaying spectrum (dimensional collapse).
"""

from torch import Tensor

from ssl_app.metrics.rank import power_law_exponent
from ssl_app.metrics.registry import EmbeddingInputs, register

_FORMULA = "α of the fit log σ_i ≈ c − α log i over the ranks with σ_i > 1e-6 σ_1, σ the singular values of the clean input"


@register("spectrum_alpha", reads=("clean",), formula=_FORMULA + " (α-ReQ)")
def _spectrum_alpha(x: EmbeddingInputs) -> dict[str, Tensor]:
    return {"spectrum_alpha": power_law_exponent(x.singular_values("clean"))}


@register("spectrum_alpha_backbone", reads=("backbone",), formula=_FORMULA + "'s backbone features, unnormalised (α-ReQ)")
def _spectrum_alpha_backbone(x: EmbeddingInputs) -> dict[str, Tensor]:
    return {"spectrum_alpha_backbone": power_law_exponent(x.singular_values("backbone"))}
