"""When do embedding metrics mean representation collapse? (docs/science.md, "Collapse": uniformity → 0, alignment → 0.)

Reference points, measured on the synthetic shapes' validation views:

- a *randomly initialised* encoder is already bunched but not collapsed: small CNN uniformity
  0.14 – 0.56, alignment 0.05 – 0.19; ResNet-18 uniformity 0.07, alignment 0.026, positive
  similarity 0.987. At initialisation the mean top-10 negative similarity is *above* the mean
  positive one (0.98 vs 0.95), so "negatives as close as positives" alone is no alarm. On clean
  (eval-transform) inputs, 500 validation shapes at 32 px, d = 128: small CNN uniformity 0.26,
  ResNet-18 0.067 (top-10 negatives 0.988 / 0.994, effective rank 20 / 17);
- trained models: uniformity 2.5 – 3.9 (Simple loss: ~1.4), random points on S^{d−1}: ~3.94;
- a collapse (loss stuck at log(1 + K)): all similarities equal to ~1e-3, uniformity ≲ 0.01;
- a *slow* collapse on real CIFAR-10: uniformity fell by more than 90% from its best within
  five epochs while the mean top-10 negative similarity sat at 0.998 (kNN flat). No fixed
  threshold separates its middle epochs from a fresh network, so the alarm also compares each
  evaluation with the best uniformity of the run so far (``CollapseAlarm``);
- a run that did *not learn* on real images: its loss sat at the chance value log(1 + K) from
  the third epoch on while uniformity slid 1.3 → 0.38 in ten epochs (tolerance 0.92, positives
  0.97, top-10 negatives 0.995). Its best never fell by 75%, so only the loss and the steady
  slide tell it apart (the ``loss_at_chance`` and ``concentrating`` modes).

Modes (``MODES``; ``CollapseAlarm.summary`` names the first that held): ``diverged``
(non-finite embeddings), ``sudden`` (the fixed thresholds), ``loss_at_chance`` and
``concentrating`` (not learning), ``progressive`` (fell from the best so far).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from jsonargparse.typing import restricted_number_type
from torch import Tensor

from ssl_app.checks import Finite, NonNegativeFinite, OpenUnitInterval, PositiveFinite, check, int_at_least
from ssl_app.errors import ConfigError

#: The collapse modes, in the order that breaks ties between modes first seen at one epoch.
MODES = ("diverged", "sudden", "loss_at_chance", "concentrating", "progressive")


@dataclass(frozen=True)
class CollapseEvidence:
    """The typed values one evaluation gives the alarm (NaN: not measured; never triggers).

    ``neg_sim`` is the mean of each anchor's top-k negative similarities; ``nonfinite`` of
    ``total`` embeddings had a NaN/inf entry.
    """

    uniformity: float
    alignment: float
    pos_sim: float
    neg_sim: float
    effective_rank: float = math.nan
    nonfinite: int = 0
    total: int = 0


@dataclass(frozen=True)
class LossEvidence:
    """The training loss against its chance value over the logged steps of one epoch.

    ``steps``: logged steps whose loss declared a chance value; ``max_gap``: the largest
    ``|loss − chance| / max(|chance|, 1)`` among them (NaN if a loss was NaN); ``loss`` and
    ``chance``: their means over those steps (for the message).
    """

    steps: int
    max_gap: float
    loss: float = math.nan
    chance: float = math.nan


Similarity = restricted_number_type("Similarity", float, [(">=", -1), ("<=", 1)], docstring="in [-1, 1]")
AtLeastThree = int_at_least(3)


@dataclass(frozen=True)
class CollapseCriteria:
    """Collapsed when any enabled criterion holds (``None`` disables one):

    - ``nonfinite > 0``: some embeddings are NaN/inf (the run diverged); always on;
    - ``uniformity < uniformity_below``: every embedding sits in one small cap;
    - ``alignment < alignment_below`` and ``uniformity < alignment_uniformity_below``: the two
      views coincide *and* the set is bunched (perfect invariance alone is no collapse);
    - mean positive and mean top-k negative similarity both ``≥ similarity_above``: an image is as
      close to its nearest other images as to its own second view, and all of them are ~1 (also
      catches collapse onto a few points, where uniformity stays high);
    - the slow collapse, from the run's history: ``uniformity < (1 − uniformity_drop) · best``
      where ``best ≥ drop_min_best`` is the best uniformity of the run so far, and the mean
      top-k negative similarity ``≥ drop_similarity``. ``drop_min_best`` (1.0) lies above every
      freshly initialised network measured (≤ 0.56, augmented or clean), so a run must first
      have spread its embeddings before a fall counts, and a fresh network's early wobble never
      does; the top-k negatives must also sit near 1, which they do not in a healthy run whose
      uniformity merely wobbles.
    - loss at chance (``chance_tolerance``): every logged training step of the epoch had
      ``|loss − chance| ≤ chance_tolerance · max(|chance|, 1)``, with ``chance`` the loss's value
      when all similarities are equal (``ContrastiveLoss.chance_value``; log(1 + K) for InfoNCE
      with K negatives). The default 0.01 is 0.055 nats at K = 255 (a SimCLR batch of 128): a
      stuck run sits within a few thousandths of a nat of log(1 + K), while a healthy InfoNCE run
      at τ = 1, the weakest push, sits ~0.5–0.9 nats below it (lower τ: further below) — ten to
      fifteen times the tolerance. Off for a loss without a chance value (PaCo, Simple with a
      fixed λ); never judged at epoch 0, where a fresh network starts at chance (``CollapseAlarm``).
    - concentrating (``concentrating_evaluations`` = n ≥ 3, ``concentrating_drop``): the
      uniformity fell at each of the last ≥ n evaluations in a row (each strictly below the one
      before), by at least ``concentrating_drop`` of its value at the start of that run of falls,
      while the mean top-k negative similarity is ``≥ drop_similarity``. A run of falls, not a
      fixed window: a steady slide of 1.3 → 0.38 over nine evaluations loses only 34% per three
      falls, but crosses 50% at its sixth; a healthy run's uniformity rises or wobbles (one
      fall, then a rise), which restarts the count.
    """

    uniformity_below: Finite | None = 0.05
    alignment_below: Finite | None = 1e-3
    alignment_uniformity_below: Finite = 1.0
    similarity_above: Finite | None = 0.995
    uniformity_drop: OpenUnitInterval | None = 0.75
    drop_min_best: PositiveFinite = 1.0
    drop_similarity: Similarity = 0.99
    chance_tolerance: NonNegativeFinite | None = 0.01
    concentrating_evaluations: AtLeastThree | None = 3
    concentrating_drop: OpenUnitInterval = 0.5

    def __post_init__(self) -> None:
        """Each option in its range (``RANGES``), kept as a plain number: a ``ConfigError`` names the first that is not."""
        for name, kind in RANGES.items():
            value = check(kind, getattr(self, name), f"collapse.{name}", none=name in OPTIONAL)
            object.__setattr__(self, name, value)

    def judge(
        self,
        evidence: CollapseEvidence,
        best_uniformity: float = math.nan,
        earlier: Sequence[float] = (),
        loss: LossEvidence | None = None,
    ) -> dict[str, list[str]]:
        """The modes that hold, each with its criteria in words (empty: not collapsed).

        ``best_uniformity``: the best uniformity of the run before this evaluation (NaN: none);
        ``earlier``: the uniformities of the run's earlier evaluations, oldest first; ``loss``:
        this epoch's training loss against its chance value (``None``: not judged). NaN values
        never trigger.
        """
        e, found = evidence, {}
        if e.nonfinite > 0:
            found["diverged"] = [f"{e.nonfinite} of {e.total} embeddings are non-finite (diverged)"]
        sudden = []
        if self.uniformity_below is not None and e.uniformity < self.uniformity_below:
            sudden.append(f"uniformity < {self.uniformity_below:g}")
        if (
            self.alignment_below is not None
            and e.alignment < self.alignment_below
            and e.uniformity < self.alignment_uniformity_below
        ):
            sudden.append(f"alignment < {self.alignment_below:g} with uniformity < {self.alignment_uniformity_below:g}")
        if self.similarity_above is not None and e.pos_sim >= self.similarity_above and e.neg_sim >= self.similarity_above:
            sudden.append(f"positive and top-k negative similarities >= {self.similarity_above:g}")
        if sudden:
            found["sudden"] = sudden
        if self._at_chance(loss):
            found["loss_at_chance"] = [
                f"training loss at its chance value for the whole epoch: mean {loss.loss:.4f} vs chance {loss.chance:.4f}, "
                f"every one of {loss.steps} logged steps within {self.chance_tolerance:g} x max(|chance|, 1)"
            ]
        concentrating = self._concentrating(e, earlier)
        if concentrating:
            found["concentrating"] = [concentrating]
        if self._dropped(e, best_uniformity):
            found["progressive"] = [
                f"uniformity fell below {1 - self.uniformity_drop:g} x its best {best_uniformity:.4f} "
                f"with top-k negative similarity >= {self.drop_similarity:g}"
            ]
        return found

    def _at_chance(self, loss: LossEvidence | None) -> bool:
        if self.chance_tolerance is None or loss is None or loss.steps < 1:
            return False
        return loss.max_gap <= self.chance_tolerance  # False for NaN

    def _concentrating(self, e: CollapseEvidence, earlier: Sequence[float]) -> str | None:
        if self.concentrating_evaluations is None or not e.neg_sim >= self.drop_similarity:
            return None
        values = [*earlier, e.uniformity]
        start = len(values) - 1
        while start > 0 and values[start] < values[start - 1]:  # NaN ends the run of falls
            start -= 1
        falls, first = len(values) - 1 - start, values[start]
        if falls < self.concentrating_evaluations or not (first > 0 and e.uniformity <= (1 - self.concentrating_drop) * first):
            return None
        return (
            f"uniformity fell at each of the last {falls} evaluations, {first:.4f} -> {e.uniformity:.4f} "
            f"(by >= {self.concentrating_drop:g}), with top-k negative similarity >= {self.drop_similarity:g}"
        )

    def _dropped(self, e: CollapseEvidence, best: float) -> bool:
        if self.uniformity_drop is None or not best >= self.drop_min_best:
            return False
        return e.uniformity < (1 - self.uniformity_drop) * best and e.neg_sim >= self.drop_similarity


#: Each option's range, and the options ``None`` turns off.
RANGES = {
    "uniformity_below": Finite, "alignment_below": Finite, "alignment_uniformity_below": Finite, "similarity_above": Finite,
    "uniformity_drop": OpenUnitInterval, "drop_min_best": PositiveFinite, "drop_similarity": Similarity,
    "chance_tolerance": NonNegativeFinite, "concentrating_evaluations": AtLeastThree, "concentrating_drop": OpenUnitInterval,
}  # fmt: skip
OPTIONAL = ("uniformity_below", "alignment_below", "similarity_above", "uniformity_drop", "chance_tolerance",
            "concentrating_evaluations")  # fmt: skip
#: ``EmbeddingMetrics``' options before the alarm's were one object (``collapse_uniformity``) → their field of ``collapse``.
LEGACY_OPTIONS = {
    "collapse_uniformity": "uniformity_below", "collapse_alignment": "alignment_below",
    "collapse_alignment_uniformity": "alignment_uniformity_below", "collapse_similarity": "similarity_above",
    "collapse_uniformity_drop": "uniformity_drop", "collapse_drop_min_best": "drop_min_best",
    "collapse_drop_similarity": "drop_similarity", "collapse_chance_tolerance": "chance_tolerance",
    "collapse_concentrating_evaluations": "concentrating_evaluations", "collapse_concentrating_drop": "concentrating_drop",
}  # fmt: skip


def upgrade_legacy_options(init_args: dict[str, Any]) -> bool:
    """Move ``EmbeddingMetrics`` init args written before the alarm's options were one object (``collapse_uniformity:
    0.05``, as every run folder's ``config.yaml`` of that version has them) into ``collapse`` (``collapse:
    {uniformity_below: 0.05}``), in place; True when there were any. A value given both ways is a ``ConfigError``."""
    legacy = [key for key in init_args if key in LEGACY_OPTIONS]
    if not legacy:
        return False
    collapse = init_args.get("collapse")
    collapse = dict(collapse) if isinstance(collapse, dict) else {}
    for key in legacy:
        field = LEGACY_OPTIONS[key]
        value = init_args.pop(key)
        if field in collapse and collapse[field] != value:
            raise ConfigError(
                f"EmbeddingMetrics: {key}={value!r} and collapse.{field}={collapse[field]!r}; give collapse.{field} only"
            )
        collapse[field] = value
    init_args["collapse"] = collapse
    return True


class CollapseAlarm:
    """The criteria plus the run's history they need; its state goes into checkpoints.

    ``judge`` weighs one evaluation against the history recorded *before* it (best uniformity,
    earlier uniformities), then, with ``record=True`` (i.e. during ``fit``), records it: the
    evaluation in ``history``, and for each mode that holds the first epoch it did and why
    (``modes``, read by ``summary``). The training loss is not judged at epoch 0, where a fresh
    network sits at chance. ``collapsed_at`` is the first epoch judged collapsed (set by the
    callback, which warns once).
    """

    def __init__(self, criteria: CollapseCriteria) -> None:
        self.criteria = criteria
        self.history: list[dict[str, float]] = []  # one entry per recorded evaluation
        self.best_uniformity = math.nan
        self.best_epoch: int | None = None
        self.collapsed_at: int | None = None
        self.modes: dict[str, dict[str, Any]] = {}  # mode -> {"since_epoch": int, "reasons": [str]}

    def judge(
        self, evidence: CollapseEvidence, epoch: int, record: bool = True, loss: LossEvidence | None = None
    ) -> dict[str, list[str]]:
        earlier = [entry["uniformity"] for entry in self.history]
        found = self.criteria.judge(evidence, self.best_uniformity, earlier, loss if epoch > 0 else None)
        if record:
            self.history.append({"epoch": epoch, **asdict(evidence)})
            if math.isfinite(evidence.uniformity) and not evidence.uniformity <= self.best_uniformity:
                self.best_uniformity, self.best_epoch = evidence.uniformity, epoch
            for mode, reasons in found.items():
                self.modes.setdefault(mode, {"since_epoch": int(epoch), "reasons": list(reasons)})
        return found

    def check(self, evidence: CollapseEvidence, epoch: int, record: bool = True, loss: LossEvidence | None = None) -> list[str]:
        """``judge``'s reasons over all modes, in one list (empty: not collapsed)."""
        return [reason for reasons in self.judge(evidence, epoch, record, loss).values() for reason in reasons]

    def summary(self) -> dict[str, Any] | None:
        """The collapse of the run so far as plain JSON types, or ``None`` if it never collapsed.

        ``{"mode": the first mode that held (ties: MODES order), "since_epoch": its first epoch,
        "reasons": why it held then, "modes": {each mode that held: its first epoch}}``.
        """
        if not self.modes:
            return None
        first = min(self.modes, key=lambda mode: (self.modes[mode]["since_epoch"], _mode_rank(mode)))
        return {
            "mode": first,
            "since_epoch": self.modes[first]["since_epoch"],
            "reasons": list(self.modes[first]["reasons"]),
            "modes": {mode: self.modes[mode]["since_epoch"] for mode in sorted(self.modes, key=_mode_rank)},
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "history": [dict(entry) for entry in self.history],
            "best_uniformity": self.best_uniformity,
            "best_epoch": self.best_epoch,
            "collapsed_at": self.collapsed_at,
            "modes": {mode: {"since_epoch": v["since_epoch"], "reasons": list(v["reasons"])} for mode, v in self.modes.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [dict(entry) for entry in state.get("history", [])]
        self.best_uniformity = float(state.get("best_uniformity", math.nan))
        self.best_epoch = state.get("best_epoch")
        self.collapsed_at = state.get("collapsed_at")
        self.modes = {
            mode: {"since_epoch": int(v["since_epoch"]), "reasons": [str(r) for r in v["reasons"]]}
            for mode, v in state.get("modes", {}).items()
        }


def _mode_rank(mode: str) -> int:
    return MODES.index(mode) if mode in MODES else len(MODES)


class ChanceGap:
    """How far one epoch's logged training losses sit from their chance values, kept on the device.

    ``add`` per logged step (no host sync); ``read`` once per evaluation (one host read, plus
    an all-gather under DDP so that every rank judges the same numbers); ``reset`` per epoch.
    A step whose chance value is NaN (undefined for that batch) is left out; a NaN loss makes
    the gap NaN, which is never "at chance".
    """

    def __init__(self) -> None:
        self._max_gap: Tensor | None = None
        self._sums: Tensor | None = None  # [steps, loss sum, chance sum]

    def reset(self) -> None:
        self._max_gap = self._sums = None

    def add(self, loss: Tensor, chance: Tensor) -> None:
        loss = loss.detach().float().reshape(())
        chance = chance.detach().float().reshape(()).to(loss.device)
        defined = torch.isfinite(chance)
        gap = torch.where(defined, (loss - chance).abs() / chance.abs().clamp_min(1.0), 0.0)
        sums = torch.stack([defined.float(), torch.where(defined, loss, 0.0), torch.where(defined, chance, 0.0)])
        if self._max_gap is None:
            self._max_gap, self._sums = gap, sums
        else:
            self._max_gap, self._sums = torch.maximum(self._max_gap, gap), self._sums + sums

    def read(self, strategy: Any = None, device: Any = None) -> LossEvidence:
        """The epoch so far as ``LossEvidence`` (every rank's steps, given the Trainer's strategy)."""
        if self._max_gap is None:
            values = torch.zeros(4, device=device)
        else:
            values = torch.cat([self._max_gap.reshape(1), self._sums])
        if strategy is not None and getattr(strategy, "world_size", 1) > 1:
            rows = strategy.all_gather(values).reshape(-1, 4)
            values = torch.cat([rows[:, 0].amax().reshape(1), rows[:, 1:].sum(dim=0)])  # amax keeps a NaN
        max_gap, steps, loss_sum, chance_sum = values.tolist()
        steps = int(steps)
        if steps == 0:
            return LossEvidence(0, math.nan)
        return LossEvidence(steps, max_gap, loss_sum / steps, chance_sum / steps)


def random_points_uniformity(dim: int, t: float = 2.0) -> float:
    """Uniformity ``−log E exp(−t||x − y||²)`` of independent uniform points on S^{dim−1}.

    ``E exp(2t·x·y) = 0F1(; dim/2; t²) = Σ_n t^{2n} / ((dim/2)_n n!)``, so the value is
    ``2t − log 0F1(; dim/2; t²)`` (3.9375 for dim = 128, t = 2).
    """
    total, term, n = 1.0, 1.0, 0
    while term > 1e-12 * total:
        term *= t * t / ((dim / 2 + n) * (n + 1))
        total += term
        n += 1
    return 2 * t - math.log(total)


def reasons(found: dict[str, list[str]]) -> list[str]:
    """Every criterion that holds, in words, over all modes of ``CollapseCriteria.judge``'s answer."""
    return [reason for mode in found.values() for reason in mode]
