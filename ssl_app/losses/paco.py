"""PaCo: parametric contrastive learning (Cui et al., ICCV 2021) over a similarity matrix plus class centres."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from ssl_app.checks import NonNegativeFinite, NonNegativeInt, check, check_all, int_at_least, is_a
from ssl_app.errors import ConfigError
from ssl_app.losses.base import (
    ContrastiveLoss,
    LossTerms,
    MaskedSimilarities,
    Tau,
    Temperature,
    check_temperature,
    masked_mean,
    mean_over_anchors,
)
from ssl_app.losses.registry import LOSSES


def log_class_prior(class_counts: Sequence[int]) -> Tensor:
    """``log π_c = log(n_c / Σ_k n_k)`` as float32 [C]; a class without samples gets -inf.

    Raises ``ConfigError`` unless the counts are integers >= 0 with a positive total.
    """
    counts = check_all(NonNegativeInt, class_counts, "PaCo: class_counts")
    if not counts:
        raise ConfigError(f"PaCo: class_counts must be a non-empty list, got {class_counts!r}")
    total = sum(counts)
    if total == 0:
        raise ConfigError("PaCo: class_counts are all 0; the prior needs at least one training sample")
    return torch.tensor([math.log(n / total) if n > 0 else -math.inf for n in counts], dtype=torch.float32)


@LOSSES.register
class PaCo(ContrastiveLoss):
    """Parametric contrastive loss (Cui et al., "Parametric Contrastive Learning", ICCV 2021).

    Supervised contrast plus one learnable centre per class as extra candidates. For anchor i
    with label y_i, sample candidates A(i) = P(i) ∪ N(i) (``pos_mask``: every key / queue entry
    with the anchor's label, the anchor's own key among them; ``neg_mask``: the rest), sample
    logits ``l_ij = s_ij / τ`` and centre logits ``u_ic = c_c · F(x_i) + log π_c`` (this loss's
    classifier on the anchor's backbone feature, **not** divided by τ; the balanced-softmax prior
    ``log π_c`` = log class frequency is added in training only, as in the authors' code):

        log p_i(z) = ℓ_i(z) − log( Σ_{j∈A(i)} exp(l_ij) + Σ_{c=1..C} exp(u_ic) )
        L_i = −1/Z_i · [ α Σ_{j∈P(i)} log p_i(j)  +  log p_i(c_{y_i}) ]

    where ℓ_i(z) is candidate z's logit (l_ij for a sample, u_ic for a centre), with
    Z_i = α|P(i)| + 1 (``normalise_weights=True``, the authors' code: the weighted mean over
    positives) or Z_i = 1 (``False``: the summed form). The loss is the mean of L_i over anchors
    with a positive of non-zero weight.

    Special cases (tested): without centres it is α × SupCon's summed form (Z_i = 1), or SupCon
    itself (weighted mean); with α = 0 and no sample candidates it is the balanced-softmax
    cross-entropy ``CE(u_i + log π, y_i)`` (α → 0 with samples keeps them in the denominator).

    Unlabelled anchors (label < 0) have no own centre, and the centres are left out of their
    denominator too (a label-free image says nothing about the classes): their loss is the
    sample term alone, i.e. InfoNCE over their own key (× α in the summed form).

    What PaCo owns: the centres (``classifier = nn.Linear(feature_dim, num_classes)``, whose
    weights and bias are the centres c_c) and the prior (the buffer ``log_prior``, so checkpoints
    carry it). Both are sized by the data through :meth:`prepare`, which the method calls at every
    ``setup`` with the backbone's feature width, the number of classes and, in ``fit``, the
    datamodule's ``train_class_counts()``; ``validate``/``test`` take the prior from the
    checkpoint. :meth:`classify` (features → logits, no prior) serves evaluation
    (``callbacks.LongTailAccuracy`` through the method's ``class_logits``). It needs the anchors'
    backbone features and labels in the hand-over (``needs_anchor_features``: the method checks
    it gives them); without ``anchor_features`` only the sample terms remain. Runs in float32 even
    under autocast, without host syncs. Its diagnostics add ``num_positives`` (mean |P(i)|) and
    ``centre_prob`` (mean p_i(c_{y_i}) over labelled anchors).

    No chance value (``chance_value`` returns ``None``, so the loss-at-chance check of
    ``callbacks.EmbeddingMetrics`` is off): the centre logits are a classifier's outputs with the
    class prior added, not similarities, so "every similarity equal" does not fix the loss.

    Differences from the authors' MoCo code, by design of ssl_app's MoCo: the sample candidates
    are the keys and the queue (theirs also include the other queries of the batch).

    Args:
        temperature: τ > 0 of the sample logits (the authors' CIFAR-100-LT runs: 0.05).
        alpha: α >= 0, the weight of each sample positive (their CIFAR-100-LT runs: 0.02; the own centre has weight 1).
        class_counts: training samples per class, for the prior (None: the datamodule's, at ``fit``).
        normalise_weights: divide L_i by the sum of its weights (the authors' code) or not.
        num_classes: classes of the centres (None: the datamodule's ``num_classes``, or the
            length of ``class_counts``).

    Example:
        >>> loss_fn = PaCo(temperature=0.05, alpha=0.02, class_counts=[500, 50, 5])
        >>> loss_fn.prepare(feature_dim=512, num_classes=3, class_counts=None, fitting=True)
        >>> handover = MaskedSimilarities(sim, pos_mask, neg_mask, anchor_features=features, anchor_labels=labels)
        >>> loss = loss_fn(handover).value
    """

    uses_labels = True
    needs_anchor_features = True
    state_built_in_setup = ("classifier.",)

    def __init__(
        self,
        temperature: Temperature = 0.05,
        alpha: NonNegativeFinite = 0.05,
        class_counts: Optional[list[int]] = None,
        normalise_weights: bool = True,
        num_classes: Optional[int] = None,
    ) -> None:
        super().__init__()
        self.temperature = check_temperature(temperature, "PaCo")
        self.alpha = check(NonNegativeFinite, alpha, "PaCo: alpha")
        num_classes = check(int_at_least(2), num_classes, "PaCo: num_classes", none=True)
        self.normalise_weights = bool(normalise_weights)
        self.register_buffer("log_prior", torch.empty(0))
        self.classifier: Optional[nn.Linear] = None
        #: The centres' top-1 on validation and test anchors (``evaluation_metrics``), built with the centres.
        self.classifier_top1: Optional[nn.ModuleDict] = None
        self._wanted_classes = num_classes
        self._given_counts = None if class_counts is None else list(class_counts)
        if class_counts is not None:
            self.set_class_counts(class_counts)
            if num_classes is not None and num_classes != len(self._given_counts):
                raise ConfigError(f"PaCo: num_classes={num_classes} but class_counts has {len(self._given_counts)} classes")

    def hparams(self) -> dict[str, object]:
        return {"temperature": self.temperature_setting(), "alpha": self.alpha, "normalise_weights": self.normalise_weights}

    @property
    def num_classes(self) -> Optional[int]:
        """Classes of the centres (None until known)."""
        if self.classifier is not None:
            return self.classifier.out_features
        return self._wanted_classes or self.log_prior.numel() or None

    def set_class_counts(self, class_counts: Sequence[int]) -> None:
        """Set the prior ``log π`` from the training samples per class."""
        self.log_prior = log_class_prior(class_counts).to(self.log_prior.device)

    # --- the data hook ---------------------------------------------------------------------
    def prepare(self, feature_dim: int, num_classes: Optional[int], class_counts: Optional[Sequence[int]], fitting: bool) -> None:
        """Build the centres for ``feature_dim``-wide features and, in ``fit``, set the prior from the
        datamodule's ``class_counts``; counts given to the loss must agree with them."""
        width = self.num_classes or num_classes
        if not is_a(int_at_least(2), width):
            raise ConfigError(
                "PaCo needs the number of classes: set model.init_args.loss.init_args.num_classes (the datamodule does "
                "not say how many classes it has)"
            )
        if num_classes is not None and num_classes != width:
            raise ConfigError(f"PaCo: num_classes is {width} but the datamodule has {num_classes} classes")
        if self.classifier is None:
            device = self.log_prior.device
            self.classifier = nn.Linear(feature_dim, width).to(device)
        if self.classifier_top1 is None:
            self.classifier_top1 = nn.ModuleDict(
                {split: MulticlassAccuracy(width, top_k=1, average="micro", ignore_index=-1) for split in ("val", "test")}
            ).to(self.log_prior.device)
        elif self.classifier.in_features != feature_dim:
            raise ConfigError(
                f"PaCo: the centres are {self.classifier.in_features}-d but the backbone gives {feature_dim}-d features"
            )
        if not fitting:
            return  # validate/test: the prior (not used outside training) comes with the checkpoint
        if class_counts is None:
            if self._given_counts is None:
                raise ConfigError(
                    "PaCo needs a labelled datamodule with class counts (train_class_counts()) for its class prior, "
                    "or model.init_args.loss.init_args.class_counts"
                )
            return
        counts = [int(n) for n in class_counts]
        if len(counts) != width:
            raise ConfigError(f"the datamodule's train_class_counts() has {len(counts)} classes but PaCo's centres have {width}")
        if self._given_counts is not None and self._given_counts != counts:
            raise ConfigError(
                f"model.init_args.loss.init_args.class_counts disagree with the datamodule's train_class_counts() {counts}; "
                "leave class_counts unset to take them from the datamodule"
            )
        self.set_class_counts(counts)

    def classify(self, features: Tensor) -> Tensor:
        """The centres' logits ``c · F(x)`` [B, num_classes] of backbone features, without the prior
        (what evaluation reads), in float32 even under autocast."""
        if self.classifier is None:
            raise ConfigError(
                "PaCo: the centres are not built yet: set model.init_args.loss.init_args.num_classes or run it through a "
                "Trainer whose datamodule has num_classes"
            )
        with torch.autocast(device_type=features.device.type, enabled=False):
            return F.linear(features.float(), self.classifier.weight.float(), self.classifier.bias.float())

    def evaluation_metrics(self, handover: MaskedSimilarities, stage: str) -> dict[str, Any]:
        """``classifier_top1``: the centres' top-1 (no prior) on the batch's anchors, updated with them (val/test)."""
        if self.classifier_top1 is None or handover.anchor_features is None or handover.anchor_labels is None:
            return {}
        metric = self.classifier_top1[stage]
        metric.update(self.classify(handover.anchor_features.detach()), handover.anchor_labels)
        return {"classifier_top1": metric}

    def upgrade_state_dict(self, state_dict: dict[str, Any], prefix: str) -> None:
        """Checkpoints written before the centres moved into the loss kept them as the method's
        ``classifier.*``: move those keys under this loss's ``prefix`` (in place)."""
        for name in ("weight", "bias"):
            old, new = f"classifier.{name}", f"{prefix}classifier.{name}"
            if old in state_dict and new not in state_dict:
                state_dict[new] = state_dict.pop(old)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *rest: Any) -> None:
        # rest: torch's local_metadata, strict, missing_keys, unexpected_keys, error_msgs, passed on as they are
        # The prior's and the centres' sizes come from the data: take the checkpoint's.
        saved = state_dict.get(prefix + "log_prior")
        if saved is not None and saved.shape != self.log_prior.shape:
            self.log_prior = torch.empty_like(saved, device=self.log_prior.device)
        weight = state_dict.get(prefix + "classifier.weight")
        if weight is not None and (self.classifier is None or self.classifier.weight.shape != weight.shape):
            self.classifier = nn.Linear(weight.shape[1], weight.shape[0]).to(self.log_prior.device)
        super()._load_from_state_dict(state_dict, prefix, *rest)

    # --- the loss --------------------------------------------------------------------------
    def terms(self, handover: MaskedSimilarities, tau: Tau, with_stats: bool) -> LossTerms:
        sim, pos_mask, neg_mask = handover.sim, handover.pos_mask, handover.neg_mask
        n = sim.shape[0]
        features, anchor_labels = handover.anchor_features, handover.anchor_labels
        sample_logits = sim.float() / tau
        sample_weights = pos_mask.float() * self.alpha
        sample_valid = pos_mask | neg_mask
        if features is None:  # no anchors' features: the sample terms alone (α × SupCon, tested)
            logits, valid, weights, own_centre = sample_logits, sample_valid, sample_weights, None
        else:
            if anchor_labels is None:
                raise ValueError("anchor_labels must be given with anchor_features (one label per anchor, -1 = unlabelled)")
            centre_logits = self.classify(features)
            self._check_centres(n, centre_logits, anchor_labels)
            centres = centre_logits + self.log_prior if self.training else centre_logits
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
        extra: dict[str, Tensor] = {}
        if with_stats:
            with torch.no_grad():
                every_anchor = torch.ones(n, dtype=torch.bool, device=sim.device)
                extra["num_positives"] = masked_mean(pos_mask.sum(dim=1).float(), every_anchor)
                if own_centre is not None:
                    extra["centre_prob"] = masked_mean(log_prob.detach()[:, sim.shape[1] :].exp(), own_centre)
        return LossTerms(mean_over_anchors(per_anchor, has_pos), logits=sample_logits, extra=extra)

    def _check_centres(self, n: int, centre_logits: Tensor, anchor_labels: Tensor) -> None:
        if anchor_labels.shape != (n,):
            shape = tuple(anchor_labels.shape)
            raise ValueError(f"anchor_labels must be [{n}] (one label per anchor, -1 = unlabelled), got {shape}")
        if centre_logits.shape[0] != n:
            raise ValueError(f"anchor_features must have one row per anchor ({n}), got {centre_logits.shape[0]}")
        if self.training and self.log_prior.numel() != centre_logits.shape[1]:
            if self.log_prior.numel() == 0:
                raise ConfigError(
                    "PaCo: the class prior is not set; pass class_counts or train with a datamodule that has "
                    "train_class_counts() (the method passes them to prepare() at setup('fit'))"
                )
            raise ValueError(
                f"PaCo: {centre_logits.shape[1]} centre logits per anchor but the prior has {self.log_prior.numel()} classes"
            )
