"""PaCo: parametric contrastive learning (Cui et al., ICCV 2021) over a similarity matrix plus class centres."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any, Optional

import torch
from torch import Tensor

from ssl_app.errors import ConfigError
from ssl_app.losses.base import ContrastiveLoss, check_temperature, masked_mean, negative_stats
from ssl_app.losses.info_nce import mean_over_anchors


def log_class_prior(class_counts: Sequence[int]) -> Tensor:
    """``log π_c = log(n_c / Σ_k n_k)`` as float32 [C]; a class without samples gets -inf.

    Raises ``ConfigError`` unless the counts are integers >= 0 with a positive total.
    """
    counts = list(class_counts)
    if not counts or any(isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0 for n in counts):
        raise ConfigError(f"PaCo: class_counts must be a non-empty list of integers >= 0, got {class_counts!r}")
    total = sum(int(n) for n in counts)
    if total == 0:
        raise ConfigError("PaCo: class_counts are all 0; the prior needs at least one training sample")
    return torch.tensor([math.log(n / total) if n > 0 else -math.inf for n in counts], dtype=torch.float32)


class PaCo(ContrastiveLoss):
    """Parametric contrastive loss (Cui et al., "Parametric Contrastive Learning", ICCV 2021).

    Supervised contrast plus one learnable centre per class as extra candidates. For anchor i
    with label y_i, sample candidates A(i) = P(i) ∪ N(i) (``pos_mask``: every key / queue entry
    with the anchor's label, the anchor's own key among them; ``neg_mask``: the rest), sample
    logits ``l_ij = s_ij / τ`` and centre logits ``u_ic = c_c · F(x_i) + log π_c`` (the
    method's classifier on the backbone feature, **not** divided by τ; the balanced-softmax prior
    ``log π_c`` = log class frequency is added in training only, as in the authors' code):

        log p_i(z) = ℓ_i(z) − log( Σ_{j∈A(i)} exp(l_ij) + Σ_{c=1..C} exp(u_ic) )
        L_i = −1/Z_i · [ α Σ_{j∈P(i)} log p_i(j)  +  log p_i(c_{y_i}) ]

    where ℓ_i(z) is candidate z's logit (l_ij for a sample, u_ic for a centre), with
    Z_i = α|P(i)| + 1 (``normalise_weights=True``, the authors' code: the weighted mean over
    positives) or Z_i = 1 (``False``: the summed form of the issue). The loss is the mean of L_i
    over anchors with a positive of non-zero weight.

    Special cases (tested): without centres it is α × SupCon's summed form (Z_i = 1), or SupCon
    itself (weighted mean); with α = 0 and no sample candidates it is the balanced-softmax
    cross-entropy ``CE(u_i + log π, y_i)`` (α → 0 with samples keeps them in the denominator).

    Unlabelled anchors (label < 0) have no own centre, and the centres are left out of their
    denominator too (a label-free image says nothing about the classes): their loss is the
    sample term alone, i.e. InfoNCE over their own key (× α in the summed form).

    The hand-over (``uses_centres``, ``ssl_app.losses.base``): the method calls
    ``forward(sim, pos_mask, neg_mask, centre_logits=[N, C], anchor_labels=[N])``; without
    ``centre_logits`` only the sample terms remain. The prior comes from ``class_counts`` or
    :meth:`set_class_counts` (the method passes the datamodule's ``train_class_counts()`` at
    ``setup("fit")``); it is the buffer ``log_prior``, so checkpoints carry it. Runs in float32
    even under autocast, without host syncs. ``last_stats`` adds ``num_positives`` (mean |P(i)|)
    and ``centre_prob`` (mean p_i(c_{y_i}) over labelled anchors).

    No chance value (``chance_value`` returns ``None``, so the loss-at-chance check of
    ``callbacks.EmbeddingMetrics`` is off): the centre logits are a classifier's outputs with the
    class prior added, not similarities, so "every similarity equal" does not fix the loss.

    Differences from the authors' MoCo code, by design of ssl_app's MoCo: the sample candidates
    are the keys and the queue (theirs also include the other queries of the batch).

    Args:
        temperature: τ > 0 of the sample logits (the authors' CIFAR-100-LT runs: 0.05).
        alpha: α >= 0, the weight of each sample positive (their CIFAR-100-LT runs: 0.02; the own centre has weight 1).
        class_counts: training samples per class, for the prior (None: set later by the method).
        normalise_weights: divide L_i by the sum of its weights (the authors' code) or not.

    Example:
        >>> loss_fn = PaCo(temperature=0.05, alpha=0.02, class_counts=[500, 50, 5])
        >>> loss = loss_fn(sim, pos_mask, neg_mask, centre_logits=classifier(features), anchor_labels=labels)
    """

    uses_labels = True
    uses_centres = True

    def __init__(
        self,
        temperature: float = 0.05,
        alpha: float = 0.05,
        class_counts: Optional[list[int]] = None,
        normalise_weights: bool = True,
    ) -> None:
        super().__init__()
        self.temperature = check_temperature(temperature, "PaCo")
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 <= alpha < math.inf:
            raise ConfigError(f"PaCo: alpha must be >= 0 and finite, got {alpha!r}")
        self.alpha = float(alpha)
        self.normalise_weights = bool(normalise_weights)
        self.register_buffer("log_prior", torch.empty(0))
        if class_counts is not None:
            self.set_class_counts(class_counts)

    def hparams(self) -> dict[str, object]:
        return {"temperature": self.temperature, "alpha": self.alpha, "normalise_weights": self.normalise_weights}

    @property
    def num_classes(self) -> Optional[int]:
        """Classes of the prior (None until the counts are known)."""
        return self.log_prior.numel() or None

    def set_class_counts(self, class_counts: Sequence[int]) -> None:
        """Set the prior ``log π`` from the training samples per class."""
        self.log_prior = log_class_prior(class_counts).to(self.log_prior.device)

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict,
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        # The prior's size comes from the data: take the checkpoint's (validate/test need no counts).
        saved = state_dict.get(prefix + "log_prior")
        if saved is not None and saved.shape != self.log_prior.shape:
            self.log_prior = torch.empty_like(saved, device=self.log_prior.device)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)

    def forward(
        self,
        sim: Tensor,
        pos_mask: Tensor,
        neg_mask: Tensor,
        centre_logits: Optional[Tensor] = None,
        anchor_labels: Optional[Tensor] = None,
    ) -> Tensor:
        self.check_inputs(sim, pos_mask, neg_mask)
        n = sim.shape[0]
        if centre_logits is not None:
            self._check_centres(n, centre_logits, anchor_labels)
        with torch.autocast(device_type=sim.device.type, enabled=False):
            sample_logits = sim.float() / self.temperature
            sample_weights = pos_mask.float() * self.alpha
            sample_valid = pos_mask | neg_mask
            if centre_logits is None:
                logits, valid, weights = sample_logits, sample_valid, sample_weights
                own_centre = None
            else:
                centres = centre_logits.float()
                if self.training:
                    centres = centres + self.log_prior
                labelled = anchor_labels >= 0
                num_classes = centres.shape[1]
                # A comparison, not one_hot (which checks the label range with a host sync); -1 matches nothing.
                own_centre = anchor_labels[:, None] == torch.arange(num_classes, device=sim.device)
                logits = torch.cat([sample_logits, centres], dim=1)
                valid = torch.cat([sample_valid, labelled[:, None].expand(n, num_classes)], dim=1)
                weights = torch.cat([sample_weights, own_centre.float()], dim=1)
            positive = weights > 0
            has_pos = positive.any(dim=1)
            # Rows without a positive are filled with zeros (not -inf), so their log-sum-exp and
            # gradient stay finite; their loss is masked out below.
            masked = logits.masked_fill(~valid, float("-inf")).masked_fill(~has_pos[:, None], 0.0)
            log_prob = logits - torch.logsumexp(masked, dim=1, keepdim=True)
            # where, not a product: a class without training samples has log π = -inf.
            weighted = torch.where(positive, weights * log_prob, torch.zeros((), device=sim.device))
            per_anchor = -weighted.sum(dim=1)
            if self.normalise_weights:
                per_anchor = per_anchor / weights.sum(dim=1).clamp_min(torch.finfo(torch.float32).tiny)
            per_anchor = per_anchor.masked_fill(~has_pos, 0.0)
            if self.stats_enabled:
                self._fill_stats(sample_logits, sim, pos_mask, neg_mask, log_prob, own_centre)
            else:
                self.last_stats = {}
            return mean_over_anchors(per_anchor, has_pos)

    def _check_centres(self, n: int, centre_logits: Tensor, anchor_labels: Optional[Tensor]) -> None:
        if centre_logits.dim() != 2 or centre_logits.shape[0] != n:
            raise ValueError(f"centre_logits must be [{n}, num_classes] for {n} anchors, got shape {tuple(centre_logits.shape)}")
        if anchor_labels is None or anchor_labels.shape != (n,):
            shape = None if anchor_labels is None else tuple(anchor_labels.shape)
            raise ValueError(f"anchor_labels must be [{n}] (one label per anchor, -1 = unlabelled), got {shape}")
        if self.training and self.log_prior.numel() != centre_logits.shape[1]:
            if self.log_prior.numel() == 0:
                raise ConfigError(
                    "PaCo: the class prior is not set; pass class_counts or call set_class_counts "
                    "(a method does it at setup('fit') from the datamodule's train_class_counts())"
                )
            raise ValueError(
                f"PaCo: {centre_logits.shape[1]} centre logits per anchor but the prior has {self.log_prior.numel()} classes"
            )

    def _fill_stats(
        self,
        sample_logits: Tensor,
        sim: Tensor,
        pos_mask: Tensor,
        neg_mask: Tensor,
        log_prob: Tensor,
        own_centre: Optional[Tensor],
    ) -> None:
        stats = negative_stats(sample_logits, sim, pos_mask, neg_mask)
        with torch.no_grad():
            every_anchor = torch.ones(sim.shape[0], dtype=torch.bool, device=sim.device)
            stats["num_positives"] = masked_mean(pos_mask.sum(dim=1).float(), every_anchor)
            if own_centre is not None:
                centre_log_prob = log_prob.detach()[:, sim.shape[1] :]
                stats["centre_prob"] = masked_mean(centre_log_prob.exp(), own_centre)
        self.last_stats = stats
