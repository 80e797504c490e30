"""Effective rank (Roy & Vetterli 2007) of the clean embeddings and of their backbone features.

    effective_rank = exp(H(p)),  p = σ / Σσ,  σ the singular values  (1: one direction; d: all equal)

``effective_rank`` reads the unit rows of the projections; ``effective_rank_backbone`` the
backbone features as they are, unnormalised (RankMe, Garrido et al. 2023); σ as the spectrum's
α reads it (``EmbeddingInputs.singular_values``: one decomposition per input).
"""

from torch import Tensor

from ssl_app.metrics.rank import spectrum_effective_rank
from ssl_app.metrics.registry import EmbeddingInputs, register


@register("effective_rank", reads=("clean",), formula="exp(entropy of σ/Σσ), σ the singular values of the clean input")
def _effective_rank(x: EmbeddingInputs) -> dict[str, Tensor]:
    return {"effective_rank": spectrum_effective_rank(x.singular_values("clean"))}


@register(
    "effective_rank_backbone",
    reads=("backbone",),
    formula="exp(entropy of σ/Σσ), σ the singular values of the clean input's backbone features, unnormalised "
    "(RankMe as Garrido et al. define it)",
)
def _effective_rank_backbone(x: EmbeddingInputs) -> dict[str, Tensor]:
    return {"effective_rank_backbone": spectrum_effective_rank(x.singular_values("backbone"))}
