"""The loss-strategy interface: every contrastive loss reads one similarity matrix.

A method (SimCLR, MoCo, memory bank) turns images into three tensors and hands them to a
strategy; the strategy never needs to know where the candidates came from:

    sim       [N, M] float  cosine similarities of N anchors to M candidates (not divided by τ)
    pos_mask  [N, M] bool   True where candidate j is a positive of anchor i
    neg_mask  [N, M] bool   True where candidate j is a negative of anchor i
                            (an entry in neither mask, e.g. the anchor itself, is ignored)

Strategies report what they did to the negatives through ``last_stats``, a dict of detached
scalar tensors refreshed by every forward call while ``stats_enabled`` is True (and emptied
while it is False); methods log it under ``loss/<key>``. A method turns the statistics on only
for the steps whose values reach the logger (every ``trainer.log_every_n_steps``), so a step
that logs nothing pays nothing for them (benchmarks/README.md, "Training step").

A strategy whose value at "every similarity equal" does not depend on that common value
declares it with ``chance_value(pos_mask, neg_mask)`` and puts it in ``last_stats["chance"]``
(logged as ``loss/chance``): a loss that stays there has stopped telling positives from
negatives (``callbacks.EmbeddingMetrics``' loss-at-chance rule reads it).

Losses with class centres (``uses_centres = True``, PaCo) read two more tensors, passed by
keyword and only to such losses, so every other strategy keeps the three-tensor call:

    centre_logits  [N, C] float  the method's classifier on each anchor's backbone feature,
                                 ``c_c · F(x_i)`` (no prior, not divided by τ): one extra
                                 candidate column per class centre
    anchor_labels  [N] int64     each anchor's class (< 0: unlabelled, no own centre)

i.e. ``forward(sim, pos_mask, neg_mask, centre_logits=..., anchor_labels=...)``. Such a loss
also has ``num_classes`` (None until known) and ``set_class_counts(counts)``, which the method
calls at ``setup("fit")`` with the datamodule's ``train_class_counts()``. The method
owns the classifier (``ContrastiveMethod.classifier``, built when the loss has centres); the
loss owns what is its own: the per-positive weights (α for samples, 1 for the own centre) and
the class prior, added to the centre logits in training only.
"""

from __future__ import annotations

import numbers

import torch
from torch import Tensor, nn

from ssl_app.errors import ConfigError


class ContrastiveLoss(nn.Module):
    """Base class of the loss strategies.

    Subclasses implement ``forward(sim, pos_mask, neg_mask) -> Tensor`` (a scalar, the mean
    over anchors that have at least one positive) and fill ``self.last_stats``.

    Class attribute ``uses_labels``: when True, the method builds ``pos_mask`` from class
    labels (every candidate with the anchor's label, except the anchor itself) instead of
    from instance identity. SupCon sets it.

    Class attribute ``uses_centres``: when True, the method owns a linear classifier whose
    weights are the class centres and passes ``centre_logits`` and ``anchor_labels`` as
    keyword arguments (module docstring). PaCo sets it.

    Instance attribute ``stats_enabled`` (default True): whether ``forward`` computes the
    diagnostics of ``last_stats``; when False it leaves ``last_stats`` empty, and the loss value
    and its gradient are the same either way.

    Method ``chance_value(pos_mask, neg_mask)``: the loss's value when every similarity of the
    step is equal (a uniform softmax for the InfoNCE family), which ``forward`` adds to
    ``last_stats`` as ``chance`` with the masks of the candidates that entered the loss; ``None``
    (the default) when that value depends on the common similarity, i.e. is not defined.
    """

    uses_labels: bool = False
    uses_centres: bool = False

    def __init__(self) -> None:
        super().__init__()
        self.last_stats: dict[str, Tensor] = {}
        self.stats_enabled = True

    @staticmethod
    def check_inputs(sim: Tensor, pos_mask: Tensor, neg_mask: Tensor) -> None:
        """Raise a ``ValueError`` naming the argument if shapes or dtypes do not fit."""
        if sim.dim() != 2:
            raise ValueError(f"sim must be a 2-D [anchors, candidates] matrix, got shape {tuple(sim.shape)}")
        for name, mask in (("pos_mask", pos_mask), ("neg_mask", neg_mask)):
            if mask.shape != sim.shape:
                raise ValueError(f"{name} must have the shape of sim {tuple(sim.shape)}, got {tuple(mask.shape)}")
            if mask.dtype != torch.bool:
                raise ValueError(f"{name} must be a bool tensor, got {mask.dtype}")

    def chance_value(self, pos_mask: Tensor, neg_mask: Tensor) -> Tensor | None:
        """The loss at "all similarities equal" for these masks, a 0-d float32 tensor, or ``None``.

        ``neg_mask`` holds the negatives that enter the loss (a hard loss passes its selection).
        NaN where the step has no such value (no anchor with a positive). The base class: ``None``.
        """
        return None

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.hparams().items())

    def hparams(self) -> dict[str, object]:
        """The strategy's hyper-parameters, for reprs and run reports."""
        return {}


def check_temperature(temperature: float, owner: str = "loss") -> float:
    """Return τ as a float; raise ``ConfigError`` unless it is a finite number > 0."""
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or not 0 < temperature < float("inf"):
        raise ConfigError(f"{owner}: temperature must be > 0 and finite, got {temperature!r}")
    return float(temperature)


def check_num_negatives(num_negatives: int, owner: str) -> int:
    """Return K; raise ``ConfigError`` unless it is an int >= 1."""
    if isinstance(num_negatives, bool) or not isinstance(num_negatives, numbers.Integral) or num_negatives < 1:
        raise ConfigError(f"{owner}: num_negatives must be an int >= 1, got {num_negatives!r}")
    return int(num_negatives)


#: Stands in for the logits of excluded candidates in the diagnostics: exp() of it is an exact 0
#: beside any real logit (|s/τ| ≤ 1/τ), and unlike -inf, 0 · it is 0 in the entropy's sum.
EXCLUDED_LOGIT = -1e30


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` where ``mask`` is True (0 where it is nowhere True), without a host sync.

    Entries outside the mask are never read, so an inf or NaN there does not leak in.
    """
    selected = torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device))
    return selected.sum() / mask.sum().to(values.dtype).clamp_min(1.0)


def uniform_softmax_loss(pos_mask: Tensor, neg_mask: Tensor) -> Tensor:
    """InfoNCE's value when every logit is equal: ``mean_i log(|P(i)| + |N(i)|)``, sync-free.

    With all logits equal each candidate of A(i) = P(i) ∪ N(i) gets probability 1/|A(i)|, so
    ``L_i = −1/|P(i)| Σ_p log(1/|A(i)|) = log |A(i)|`` (``log(1 + K)`` with one positive and K
    negatives), whatever τ. The mean runs over the anchors with a positive, as the loss's does;
    NaN when there is none (the loss is then 0, not a chance value).
    """
    num_pos = pos_mask.sum(dim=1)
    has_pos = num_pos > 0
    candidates = (pos_mask | neg_mask).sum(dim=1).float()
    per_anchor = torch.where(has_pos, candidates.clamp_min(1).log(), 0.0)
    anchors = has_pos.sum()
    mean = per_anchor.sum() / anchors.clamp_min(1).float()
    return torch.where(anchors > 0, mean, float("nan"))


def negative_stats(
    logits: Tensor | None,
    sim: Tensor,
    pos_mask: Tensor,
    neg_mask: Tensor,
    used_mask: Tensor | None = None,
) -> dict[str, Tensor]:
    """Diagnostics of one step, detached and free of host syncs.

    ``neg_mask`` holds all the anchor's negatives; ``used_mask`` (default: ``neg_mask``) the
    ones that enter the loss (a hard loss keeps only some). ``logits=None`` means that every
    used negative gets the same penalty (Simple, HardSimple).

    - ``effective_negatives``: ``exp(H(r_i))`` averaged over anchors that use negatives, where
      ``r_i(j) = exp(l_ij) / Σ_{k∈used(i)} exp(l_ik)`` is the relative penalty on negative j
      (PAPER.md, with ``l = s/τ`` for InfoNCE) and ``H(r_i) = −Σ_j r_i(j) log r_i(j)``. It
      equals the number of used negatives when all penalties are equal (τ → ∞, or Simple) and
      tends to 1 as τ → 0.
    - ``used_negatives``: mean number of negatives that enter the loss, over the same anchors.
    - ``pos_sim`` / ``neg_sim``: mean positive and negative cosine similarity (all negatives).
    - ``used_neg_sim``: mean cosine similarity of the negatives that enter the loss.
    """
    if used_mask is None:
        used_mask = neg_mask
    with torch.no_grad():
        sim = sim.detach().float()
        count = used_mask.sum(dim=1).float()
        has_used = count > 0
        if logits is None:
            effective = count
        else:
            # log r_i(j) from log_softmax: the hardest negative's term is computed without the
            # cancellation of log Σ exp − l, so exp(H) stays exact as τ → 0; r is exactly 0 outside used(i).
            log_penalty = torch.log_softmax(torch.where(used_mask, logits.detach().float(), EXCLUDED_LOGIT), dim=1)
            entropy = -torch.linalg.vecdot(log_penalty.exp(), log_penalty)
            effective = entropy.exp()
        return {
            "effective_negatives": masked_mean(effective, has_used),
            "used_negatives": masked_mean(count, has_used),
            "pos_sim": masked_mean(sim, pos_mask),
            "neg_sim": masked_mean(sim, neg_mask),
            "used_neg_sim": masked_mean(sim, used_mask),
        }
