"""The loss-strategy interface: every contrastive loss reads one hand-over and is called one way.

A method (SimCLR, MoCo, memory bank) turns images into a :class:`~ssl_app.handover.MaskedSimilarities`
(``sim`` [N, M], ``pos_mask``, ``neg_mask``, and the anchors' features and labels for a loss that needs
them: ``ssl_app.handover``) and hands it to a strategy; the strategy never needs to know where the
candidates came from.

One entrance: ``loss(handover, with_stats=False) -> LossResult(value, stats, hardness, tau)``.
:meth:`ContrastiveLoss.forward` is a template that checks the inputs, runs the loss in float32
(even under bf16/fp16 autocast), computes the τ in force once and decides the diagnostics once; a
loss writes only :meth:`ContrastiveLoss.terms` ``(handover, tau, with_stats)``, its value for the step
(and what its diagnostics read) at the τ it is given. A call leaves nothing behind on the instance, so
``terms`` may run twice (the hardness profile does). ``stats``
are detached 0-d tensors (``effective_negatives``, ``used_negatives``, ``pos_sim``,
``mean_neg_sim``, ``used_neg_sim``, ``chance`` and a loss's own), computed only when asked for:
a method asks on the steps whose values reach the logger (every ``trainer.log_every_n_steps``),
so a step that logs nothing pays nothing for them (benchmarks/README.md, "Training step").

What a loss declares (class attributes, read by the methods, the warnings and the generic tests;
never a class name):

- ``uses_labels``: positives are the candidates with the anchor's label (SupCon, PaCo), not
  only its other views.
- ``needs_anchor_features``: the method fills ``anchor_features`` and ``anchor_labels`` (PaCo's
  class centres read the backbone features).
- ``needs_embedding_norms``: the method fills ``anchor_norms`` and ``candidate_norms``, the L2 norms
  of the projections before normalisation (Spectral clips the embeddings to a ball, as its authors
  do); a hand-over without them reads as unit-norm embeddings.
- ``same_as_with_every_negative``: the loss this one equals when it keeps every negative
  (HardContrastive with K ≥ the negatives: InfoNCE; HardSimple: Simple), with ``num_negatives``.
- :meth:`ContrastiveLoss.chance_value`: the value at "every similarity equal", when that value
  does not depend on the common similarity (``log(1 + K)`` for InfoNCE with one positive and K
  negatives): a loss that stays there has stopped telling positives from negatives
  (``callbacks.EmbeddingMetrics``' loss-at-chance rule reads it from ``stats["chance"]``).
- ``examples``: the constructor arguments the generic tests run the loss with (``{}``: its defaults).
- :meth:`ContrastiveLoss.prepare`: the one hook through which a loss that owns parameters sized
  by the data (PaCo's class centres and prior) receives the backbone's feature width and the
  datamodule's class counts; ``classify`` (present only on such losses) serves evaluation, and
  :meth:`ContrastiveLoss.evaluation_metrics` what the loss measures of itself there (PaCo's top-1).

A loss with a temperature stores ``self.temperature = check_temperature(temperature, owner)`` in
``__init__`` (a number becomes ``ssl_app.temperature.Constant``; any policy is taken as it is) and
divides by the ``tau`` its ``terms`` receives: the policy at the progress the method hands over
(:meth:`ContrastiveLoss.set_progress`); its diagnostics then report it as ``temperature``. Instance
state is set in ``__init__`` (and :meth:`prepare`), never during a call. A loss written before τ was
passed in (``terms(handover, with_stats)``, reading ``self.tau(handover)``) is still called that way.
"""

from __future__ import annotations

import copy
import inspect
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Union

import torch
from torch import Tensor, nn

from ssl_app.checks import PositiveFinite, PositiveInt, check
from ssl_app.errors import ConfigError
from ssl_app.handover import MaskedSimilarities
from ssl_app.losses.hardness import hardness_profile
from ssl_app.temperature import Constant, Progress, TemperaturePolicy
from ssl_app.temperature.base import PolicyUsedAsNumber

#: The τ of one call: a float, a 0-d tensor (a learnable or adaptive τ), or ``None`` for a loss without a temperature.
Tau = Union[float, Tensor, None]


@dataclass(frozen=True)
class LossResult:
    """A loss's answer for one step: its ``value`` (a differentiable scalar, the mean over anchors
    with a positive), ``stats`` (detached 0-d diagnostics; empty unless asked for), ``hardness``
    (with the stats: the step's measured hardness profile, [2, BINS] sums of shares and counts of
    negatives per similarity bin, ``ssl_app.losses.hardness``; ``None`` otherwise) and ``tau`` (the τ
    the call used, detached; ``None`` for a loss without a temperature)."""

    value: Tensor
    stats: dict[str, Tensor] = field(default_factory=dict)
    hardness: Optional[Tensor] = None
    tau: Tau = None


@dataclass
class LossTerms:
    """What :meth:`ContrastiveLoss.terms` computed: the ``value`` and what the diagnostics read.

    ``logits``: the penalty logits of the sample candidates (``s/τ`` for the InfoNCE family;
    ``None`` when every used negative gets the same penalty, as in Simple). ``used_negatives``:
    the negatives that entered the loss (``None``: all of ``neg_mask``). ``extra``: the loss's own
    detached diagnostics (SupCon's ``num_positives``, PaCo's ``centre_prob``), computed only when
    ``with_stats`` (``terms`` receives it).
    """

    value: Tensor
    logits: Optional[Tensor] = None
    used_negatives: Optional[Tensor] = None
    extra: dict[str, Tensor] = field(default_factory=dict)


class ContrastiveLoss(nn.Module):
    """Base class of the loss strategies: the template of the one entrance (module docstring).

    A subclass states its hyper-parameters in ``__init__`` (validated, with messages naming them),
    implements :meth:`terms`, and declares what it needs with the class attributes below.
    """

    uses_labels: ClassVar[bool] = False
    needs_anchor_features: ClassVar[bool] = False
    needs_embedding_norms: ClassVar[bool] = False
    same_as_with_every_negative: ClassVar[Optional[str]] = None
    #: Keys of parameters or buffers the loss sizes from the data in :meth:`prepare` (relative to the loss).
    state_built_in_setup: ClassVar[tuple[str, ...]] = ()
    #: Constructor arguments of the configurations the generic tests run this loss in (every method,
    #: mixed precision, no host sync, checkpoints, the CLI): the constructor's defaults, ``{}``, unless
    #: the loss has required arguments or modes worth covering (a hard loss's top-K and quantile).
    examples: ClassVar[tuple[dict[str, Any], ...]] = ({},)

    def __init__(self) -> None:
        super().__init__()
        #: Where training stands, as the method last said (:meth:`set_progress`); the start of a run until then.
        self.progress = Progress()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A loss written before τ was passed in: ``terms(handover, with_stats)``, reading ``self.tau(handover)``.
        cls._terms_reads_tau_itself = "tau" not in inspect.signature(cls.terms).parameters

    def forward(self, handover: MaskedSimilarities, with_stats: bool = False) -> LossResult:
        """The loss of one step (and its diagnostics when ``with_stats``), in float32: τ is computed once,
        here, and handed to :meth:`terms` (and to the hardness profile's second call); nothing is kept."""
        self.check_inputs(handover)
        with torch.autocast(device_type=handover.sim.device.type, enabled=False):
            tau = self.tau(handover) if self.has_temperature else None
            terms = self.call_terms(handover, tau, with_stats)
            stats = self.statistics(handover, terms, tau) if with_stats else {}
        profile = None
        if with_stats:
            profile = hardness_profile(lambda detached: self.call_terms(detached, tau, False).value, handover)
        return LossResult(terms.value, stats, profile, tau.detach() if isinstance(tau, Tensor) else tau)

    def call_terms(self, handover: MaskedSimilarities, tau: Tau, with_stats: bool) -> LossTerms:
        """:meth:`terms` as the subclass wrote it: with the τ of the call (a loss written before τ was
        passed in reads ``self.tau(handover)``, the same value). A loss that still divides by
        ``self.temperature`` (a policy since ``ssl_app.temperature``, no longer a number) gets one
        ``ConfigError`` naming the change (:class:`~ssl_app.temperature.base.PolicyUsedAsNumber`)."""
        try:
            if self._terms_reads_tau_itself:
                return self.terms(handover, with_stats)  # type: ignore[call-arg]
            return self.terms(handover, tau, with_stats)
        except PolicyUsedAsNumber as error:
            raise ConfigError(f"{type(self).__name__}: {error}") from None

    # --- the temperature ----------------------------------------------------------------------
    @property
    def temperature_policy(self) -> Optional[TemperaturePolicy]:
        """This loss's τ policy (``ssl_app.temperature``), or ``None`` for a loss without a temperature."""
        policy = self._modules.get("temperature")
        return policy if isinstance(policy, TemperaturePolicy) else None

    @property
    def has_temperature(self) -> bool:
        """Whether this loss has a τ (a ``temperature`` policy, ``ssl_app.temperature``)."""
        return self.temperature_policy is not None

    def undecayed_parameters(self) -> list[nn.Parameter]:
        """The loss's parameters that the optimiser trains without weight decay: a learnable τ's, and a
        loss's own scalars (Sigmoid's bias) that decay would pull towards 0 for no reason of the loss."""
        policy = self.temperature_policy
        return list(policy.parameters()) if policy is not None else []

    def set_progress(self, progress: Progress) -> None:
        """Where training stands (epoch, step, fraction of the run): the method calls this once per
        training step, before the loss; a temperature policy reads it, never the Trainer."""
        self.progress = progress

    def tau(self, handover: Optional[MaskedSimilarities] = None) -> Union[float, Tensor]:
        """The τ the policy gives now: at :attr:`progress` (and, for an adaptive τ, the batch). A float when
        it depends on the progress alone, else a 0-d float32 tensor (with the gradient of a learnable τ).
        :meth:`forward` computes it once per call and passes it to :meth:`terms`. Outside training
        (validation, test) the progress is the last training step's, so a schedule's τ is that step's; an
        adaptive τ comes from the evaluated batch, a learnable one is its current value."""
        return self.temperature(self.progress, handover)

    def temperature_setting(self) -> object:
        """The temperature as the hyper-parameters show it: the number of a constant τ, else the policy's label."""
        policy = self.temperature
        return policy.constant if isinstance(policy, Constant) else policy.label()

    def terms(self, handover: MaskedSimilarities, tau: Tau, with_stats: bool) -> LossTerms:
        """The step's value (and what the diagnostics read) at the τ in force, ``tau`` (``None`` for a loss
        without a temperature); runs in float32 (autocast is off).

        On the steps with diagnostics it runs a second time, on the similarities detached from the
        encoder, to measure the hardness profile (``ssl_app.losses.hardness``), so it must not change
        the loss's state (``tests/ssl_app/losses/test_loss_contracts.py`` checks every registered loss)."""
        raise NotImplementedError

    def statistics(self, handover: MaskedSimilarities, terms: LossTerms, tau: Tau = None) -> dict[str, Tensor]:
        """The diagnostics of one step: :func:`negative_stats`, the chance value, τ, the loss's own."""
        used = terms.used_negatives if terms.used_negatives is not None else handover.neg_mask
        stats = negative_stats(terms.logits, handover.sim, handover.pos_mask, handover.neg_mask, used_mask=used)
        chance = self.chance_value(handover.pos_mask, used)
        if chance is not None:
            stats["chance"] = chance
        if tau is not None:
            device = handover.sim.device
            stats["temperature"] = tau.detach().float() if isinstance(tau, Tensor) else torch.full((), tau, device=device)
        stats.update(terms.extra)
        return stats

    def chance_value(self, pos_mask: Tensor, neg_mask: Tensor) -> Tensor | None:
        """The loss at "all similarities equal" for these masks, a 0-d float32 tensor, or ``None``.

        ``neg_mask`` holds the negatives that enter the loss (a hard loss's selection). NaN where the
        step has no such value (no anchor with a positive). The base class: ``None`` (not defined).
        """
        return None

    def evaluation_metrics(self, handover: MaskedSimilarities, stage: str) -> dict[str, Any]:
        """What the loss measures of itself on a validation or test batch (``stage``): ``{name: torchmetrics
        Metric}``, updated with the batch, which the method logs as ``{stage}/{name}`` (PaCo's
        ``classifier_top1``). The base class: nothing."""
        return {}

    def prepare(self, feature_dim: int, num_classes: Optional[int], class_counts: Optional[Sequence[int]], fitting: bool) -> None:
        """Receive what the data decides: the backbone's feature width, the datamodule's number of
        classes and training samples per class (each ``None`` when the datamodule does not say), and
        whether this is ``fit`` (``validate``/``test`` restore data-sized state from the checkpoint).
        Called by the method at every ``setup``; the base class needs nothing."""

    def check_handed_over(self, handover: MaskedSimilarities, method: str) -> None:
        """Raise a ``ConfigError`` naming ``method`` and this loss when the hand-over lacks what the loss
        declares it needs (``needs_anchor_features``, ``needs_embedding_norms``); the method calls it."""
        for declared, fields, what in HANDED_OVER:
            if getattr(self, declared) and any(getattr(handover, name) is None for name in fields):
                raise ConfigError(
                    f"{method} does not hand {what} to the loss, which {type(self).__name__} needs "
                    f"(MaskedSimilarities.{' / '.join(fields)})"
                )

    @staticmethod
    def check_inputs(handover: MaskedSimilarities) -> None:
        """Raise a ``ValueError`` naming the argument if shapes or dtypes do not fit."""
        sim, pos_mask, neg_mask = handover.sim, handover.pos_mask, handover.neg_mask
        if sim.dim() != 2:
            raise ValueError(f"sim must be a 2-D [anchors, candidates] matrix, got shape {tuple(sim.shape)}")
        for name, mask in (("pos_mask", pos_mask), ("neg_mask", neg_mask)):
            if mask.shape != sim.shape:
                raise ValueError(f"{name} must have the shape of sim {tuple(sim.shape)}, got {tuple(mask.shape)}")
            if mask.dtype != torch.bool:
                raise ValueError(f"{name} must be a bool tensor, got {mask.dtype}")
        for name, norms, size in (
            ("anchor_norms", handover.anchor_norms, sim.shape[0]),
            ("candidate_norms", handover.candidate_norms, sim.shape[1]),
        ):
            if norms is not None and tuple(norms.shape) != (size,):
                raise ValueError(f"{name} must have shape ({size},) to fit sim {tuple(sim.shape)}, got {tuple(norms.shape)}")

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.hparams().items())

    def __repr__(self) -> str:
        # ``InfoNCE(temperature=0.5)`` on one line: the temperature policy is shown by hparams already.
        if set(self._modules) <= {"temperature"}:
            return f"{self._get_name()}({self.extra_repr()})"
        return super().__repr__()

    def hparams(self) -> dict[str, object]:
        """The strategy's hyper-parameters, for reprs and run reports."""
        return {}


#: What each declaration asks a method to fill in the hand-over, and how an error names it.
HANDED_OVER = (
    ("needs_anchor_features", ("anchor_features", "anchor_labels"), "its anchors' features and labels"),
    ("needs_embedding_norms", ("anchor_norms", "candidate_norms"), "the norms of its projections (embed_for_loss)"),
)


#: What a loss's ``temperature`` option takes: a number > 0 (a constant τ) or a policy (``ssl_app.temperature``).
#: The policy first: jsonargparse chains the first alternative's exception to its error, so a policy's
#: ConfigError (``Cosine: low must be <= high``) reaches the CLI as one ``error:`` line. The range is declared
#: (``PositiveFinite``), so the parser refuses τ = -1 while it parses (``…temperature: must be > 0 and finite,
#: got -1``, ``ssl_app.cli.parser_errors``), and so does the check before Lightning is imported (issue 40).
Temperature = Union[TemperaturePolicy, PositiveFinite]


def check_temperature(temperature: Temperature, owner: str = "loss") -> TemperaturePolicy:
    """The loss's temperature policy: a number becomes :class:`~ssl_app.temperature.Constant`; raise
    ``ConfigError`` unless it is a finite number > 0 or a policy. A loss stores it as ``self.temperature``
    (a submodule, so a learnable τ's parameter is the loss's) and reads ``self.tau(handover)``."""
    if isinstance(temperature, TemperaturePolicy):
        return temperature
    if isinstance(temperature, (numbers.Real, str)) or temperature is None:
        return Constant(check(PositiveFinite, temperature, f"{owner}: temperature"))
    raise ConfigError(
        f"{owner}: temperature must be a number > 0 or an ssl_app.temperature policy, got {type(temperature).__name__}"
    )


def check_num_negatives(num_negatives: int, owner: str) -> int:
    """Return K; raise ``ConfigError`` unless it is an int >= 1."""
    return check(PositiveInt, num_negatives, f"{owner}: num_negatives")


def own_copy(loss: ContrastiveLoss) -> ContrastiveLoss:
    """A model's own loss object: a copy, since the default (jsonargparse's ``lazy_instance``) is one object
    shared by every model built without a loss, and a real instance of its class, since a copied lazy instance
    forwards its calls to the original (its own state never changed)."""
    if callable(getattr(loss, "lazy_get_init_args", None)):
        lazy = [cls for cls in type(loss).__mro__ if hasattr(cls, "lazy_get_init_args")]
        real = next(cls for cls in type(loss).__mro__ if issubclass(cls, ContrastiveLoss) and cls not in lazy)
        return real(**dict(loss.lazy_get_init_args()))
    return copy.deepcopy(loss)


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
      (docs/science.md, "Relative penalty", with ``l = s/τ`` for InfoNCE) and ``H(r_i) = −Σ_j r_i(j) log r_i(j)``. It
      equals the number of used negatives when all penalties are equal (τ → ∞, or Simple) and
      tends to 1 as τ → 0.
    - ``used_negatives``: mean number of negatives that enter the loss, over the same anchors.
    - ``pos_sim`` / ``mean_neg_sim``: mean positive and mean negative cosine similarity (over all
      the negatives; ``metrics/top10_neg_sim`` is the mean of each anchor's hardest ones).
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
            "mean_neg_sim": masked_mean(sim, neg_mask),
            "used_neg_sim": masked_mean(sim, used_mask),
        }


# --- pieces several losses share --------------------------------------------------------------------
def masked_info_nce(logits: Tensor, pos_mask: Tensor, neg_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per-anchor InfoNCE over masked logits, in float32, stable for any logit scale.

    For anchor i with positives P(i) and negatives N(i), A(i) = P(i) ∪ N(i):

        L_i = -1/|P(i)| Σ_{p∈P(i)} [ l_ip − log Σ_{a∈A(i)} exp(l_ia) ]

    With one positive this is ``-log(exp(l_ii) / (exp(l_ii) + Σ_k exp(l_ik)))``; with several
    it is SupCon's "L_out" form. Returns ``(L [N], has_positive [N] bool)``; anchors without a
    positive get L_i = 0 and a zero (not NaN) gradient. Entries in neither mask are never read.
    """
    logits = logits.float()
    num_pos = pos_mask.sum(dim=1)
    has_pos = num_pos > 0
    # Excluded entries become -inf, which exp() turns into 0 on its fast path (a large finite
    # stand-in such as -1e30 sends exp() to its underflow path, ~4× slower per entry:
    # benchmarks/README.md). A row without a positive has its excluded entries at 0 instead, so
    # a row with no candidate at all keeps a finite log-softmax and gradient; its loss is masked
    # out below. The fused log-softmax is the cheapest form of this on every step's path.
    fill = torch.where(has_pos, float("-inf"), 0.0).unsqueeze(1)
    log_prob = torch.log_softmax(torch.where(pos_mask | neg_mask, logits, fill), dim=1)
    per_anchor = -torch.where(pos_mask, log_prob, 0.0).sum(dim=1) / num_pos.clamp_min(1)
    return per_anchor.masked_fill(~has_pos, 0.0), has_pos


def mean_over_anchors(per_anchor: Tensor, has_pos: Tensor) -> Tensor:
    """Mean of the per-anchor losses over anchors with a positive (0 if there is none)."""
    return per_anchor.sum() / has_pos.sum().clamp_min(1).to(per_anchor.dtype)


def top_k_negatives(scores: Tensor, neg_mask: Tensor, k: int) -> Tensor:
    """Bool mask [N, M] of each anchor's ``min(k, n_i)`` highest-scoring negatives.

    ``n_i`` is the anchor's number of negatives; ties are broken arbitrarily, so exactly
    ``min(k, n_i)`` entries are kept per row. Sync-free: non-negatives are pushed to -inf,
    ``topk`` picks k columns per row, and the result is ANDed with ``neg_mask`` so a row with
    fewer than k negatives keeps all of them and nothing else.
    """
    if k >= scores.shape[1]:
        return neg_mask
    masked = scores.detach().masked_fill(~neg_mask, float("-inf"))
    index = masked.topk(k, dim=1, sorted=False).indices
    keep = torch.zeros_like(neg_mask).scatter_(1, index, True)
    return keep & neg_mask
