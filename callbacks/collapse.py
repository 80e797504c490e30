"""When do embedding metrics mean representation collapse? (PAPER.md: uniformity → 0, alignment → 0.)

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
  evaluation with the best uniformity of the run so far (``CollapseAlarm``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from ssl_app.errors import ConfigError


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
    """

    uniformity_below: float | None = 0.05
    alignment_below: float | None = 1e-3
    alignment_uniformity_below: float = 1.0
    similarity_above: float | None = 0.995
    uniformity_drop: float | None = 0.75
    drop_min_best: float = 1.0
    drop_similarity: float = 0.99

    def reasons(self, evidence: CollapseEvidence, best_uniformity: float = math.nan) -> list[str]:
        """The criteria that hold, in words (empty: not collapsed). NaN values never trigger.

        ``best_uniformity``: the best uniformity of the run before this evaluation (NaN: none).
        """
        e, found = evidence, []
        if e.nonfinite > 0:
            found.append(f"{e.nonfinite} of {e.total} embeddings are non-finite (diverged)")
        if self.uniformity_below is not None and e.uniformity < self.uniformity_below:
            found.append(f"uniformity < {self.uniformity_below:g}")
        if (
            self.alignment_below is not None
            and e.alignment < self.alignment_below
            and e.uniformity < self.alignment_uniformity_below
        ):
            found.append(f"alignment < {self.alignment_below:g} with uniformity < {self.alignment_uniformity_below:g}")
        if self.similarity_above is not None and e.pos_sim >= self.similarity_above and e.neg_sim >= self.similarity_above:
            found.append(f"positive and top-k negative similarities >= {self.similarity_above:g}")
        if self._dropped(e, best_uniformity):
            found.append(
                f"uniformity fell below {1 - self.uniformity_drop:g} x its best {best_uniformity:.4f} "
                f"with top-k negative similarity >= {self.drop_similarity:g}"
            )
        return found

    def _dropped(self, e: CollapseEvidence, best: float) -> bool:
        if self.uniformity_drop is None or not best >= self.drop_min_best:
            return False
        return e.uniformity < (1 - self.uniformity_drop) * best and e.neg_sim >= self.drop_similarity

    def validate(self) -> None:
        """Raise ``ConfigError`` naming the ``collapse_*`` option that is out of range."""
        if self.uniformity_drop is not None and not 0 < self.uniformity_drop < 1:
            raise ConfigError(f"collapse_uniformity_drop must be in (0, 1) or null, got {self.uniformity_drop!r}")
        if not self.drop_min_best > 0:
            raise ConfigError(f"collapse_drop_min_best must be > 0, got {self.drop_min_best!r}")
        if not -1 <= self.drop_similarity <= 1:
            raise ConfigError(f"collapse_drop_similarity must be in [-1, 1], got {self.drop_similarity!r}")


class CollapseAlarm:
    """The criteria plus the run's history they need; its state goes into checkpoints.

    ``check`` judges one evaluation against the best uniformity recorded *before* it, then
    (with ``record=True``, i.e. during ``fit``) records it. ``collapsed_at`` is the first epoch
    judged collapsed (the warning is given once).
    """

    def __init__(self, criteria: CollapseCriteria) -> None:
        self.criteria = criteria
        self.history: list[dict[str, float]] = []  # one entry per recorded evaluation
        self.best_uniformity = math.nan
        self.best_epoch: int | None = None
        self.collapsed_at: int | None = None

    def check(self, evidence: CollapseEvidence, epoch: int, record: bool = True) -> list[str]:
        reasons = self.criteria.reasons(evidence, self.best_uniformity)
        if record:
            self.history.append({"epoch": epoch, **asdict(evidence)})
            if math.isfinite(evidence.uniformity) and not evidence.uniformity <= self.best_uniformity:
                self.best_uniformity, self.best_epoch = evidence.uniformity, epoch
        return reasons

    def state_dict(self) -> dict[str, Any]:
        return {
            "history": [dict(entry) for entry in self.history],
            "best_uniformity": self.best_uniformity,
            "best_epoch": self.best_epoch,
            "collapsed_at": self.collapsed_at,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [dict(entry) for entry in state.get("history", [])]
        self.best_uniformity = float(state.get("best_uniformity", math.nan))
        self.best_epoch = state.get("best_epoch")
        self.collapsed_at = state.get("collapsed_at")


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
