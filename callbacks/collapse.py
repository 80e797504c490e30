"""When do embedding metrics mean representation collapse? (PAPER.md: uniformity → 0, alignment → 0.)

Reference points, measured on the synthetic shapes' validation views:

- a *randomly initialised* encoder is already bunched but not collapsed: small CNN uniformity
  0.14 – 0.56, alignment 0.05 – 0.19; ResNet-18 uniformity 0.07, alignment 0.026, positive
  similarity 0.987. At initialisation the mean top-10 negative similarity is *above* the mean
  positive one (0.98 vs 0.95), so "negatives as close as positives" alone is no alarm;
- trained models: uniformity 2.5 – 3.9 (Simple loss: ~1.4), random points on S^{d−1}: ~3.94;
- a collapse (loss stuck at log(1 + K)): all similarities equal to ~1e-3, uniformity ≲ 0.01.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class CollapseCriteria:
    """Collapsed when any enabled criterion holds (``None`` disables one):

    - ``uniformity < uniformity_below``: every embedding sits in one small cap;
    - ``alignment < alignment_below`` and ``uniformity < alignment_uniformity_below``: the two
      views coincide *and* the set is bunched (perfect invariance alone is no collapse);
    - mean positive and mean top-k negative similarity both ``≥ similarity_above``: an image is as
      close to its nearest other images as to its own second view, and all of them are ~1 (also
      catches collapse onto a few points, where uniformity stays high).
    """

    uniformity_below: Optional[float] = 0.05
    alignment_below: Optional[float] = 1e-3
    alignment_uniformity_below: float = 1.0
    similarity_above: Optional[float] = 0.995

    def reasons(self, alignment: float, uniformity: float, pos_sim: float, neg_sim: float) -> list[str]:
        """The criteria that hold, in words (empty: not collapsed). NaN values never trigger."""
        found = []
        if self.uniformity_below is not None and uniformity < self.uniformity_below:
            found.append(f"uniformity < {self.uniformity_below:g}")
        if (
            self.alignment_below is not None
            and alignment < self.alignment_below
            and uniformity < self.alignment_uniformity_below
        ):
            found.append(f"alignment < {self.alignment_below:g} with uniformity < {self.alignment_uniformity_below:g}")
        if self.similarity_above is not None and min(pos_sim, neg_sim) >= self.similarity_above:
            found.append(f"positive and top-k negative similarities >= {self.similarity_above:g}")
        return found


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
