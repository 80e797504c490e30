"""The relative penalty r(s) against the similarity s, one curve per τ, from the logged histograms.

docs/science.md: ``r_i(s_ij) = exp(s_ij/τ) / Σ_{k∈N(i)} exp(s_ik/τ)``. The runs log, at every
evaluation, the histogram ``similarity/top{k}_negative`` of each evaluation anchor's k hardest
negative similarities (``callbacks.EmbeddingMetrics``); the full set N(i) is not logged. So the
curve is the penalty **shared among the k hardest negatives**, N(i) taken as the top k:

    r(s) = exp(s/τ) / Z,   Z = k · Σ_b p_b exp(s_b/τ)

with ``p_b`` the fraction of the final epoch's top-k negatives (the configuration's seeds
pooled) in bin b, ``s_b`` its centre, and τ the configuration's loss temperature. ``Z`` is the
anchor-averaged normaliser of the top-k softmax, so ``k Σ_b p_b r(s_b) = 1``: an anchor's k
hardest negatives share a penalty of 1. The curve is drawn over the bins that hold negatives;
its log-slope is 1/τ, so a small τ puts nearly all the penalty on the most similar negatives.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ssl_app.report.events import Histogram
from ssl_app.report.summary import Row

NEGATIVE_TAG = "similarity/top{k}_negative"  # {k}: each run's EmbeddingMetrics.top_k
BINS = 40


@dataclass(frozen=True)
class PenaltyCurve:
    """One configuration's curve: ``similarity`` (bin centres holding negatives), ``penalty`` r(s)
    there, ``weight`` p_b the fraction of the top-k negatives in each bin, ``k``, ``runs`` pooled."""

    label: str
    series: str
    temperature: float
    k: int
    similarity: np.ndarray
    penalty: np.ndarray
    weight: np.ndarray
    runs: int


def penalty_curves(rows: list[Row]) -> list[PenaltyCurve]:
    """A curve per configuration that has a τ and whose finished runs logged the top-k negative
    histogram, ordered by series then τ."""
    curves = []
    for row in rows:
        tau = row.configuration.temperature
        if tau is None or tau <= 0:
            continue
        histograms, ks = [], set()
        for run in row.runs:
            logged = run.events.histograms.get(run.options.fill(NEGATIVE_TAG)) if run.events else None
            if logged:
                histograms.append(logged[-1])
                ks.add(run.options.top_k)
        if not histograms:
            continue
        centres, weight = pooled_fractions(histograms)
        k = min(ks)  # runs of one configuration share their callbacks; min is a safe pick otherwise
        keep = weight > 0
        centres, weight = centres[keep], weight[keep]
        penalty = relative_penalty(centres, weight, tau, k)
        curves.append(
            PenaltyCurve(row.configuration.label, row.configuration.series, tau, k, centres, penalty, weight, len(histograms))
        )
    return sorted(curves, key=lambda curve: (curve.series, curve.temperature))


def relative_penalty(similarity: np.ndarray, weight: np.ndarray, tau: float, k: int) -> np.ndarray:
    """``exp(s/τ) / (k Σ_b p_b exp(s_b/τ))`` at each ``similarity``, computed stably (shifted by the max)."""
    logits = similarity / tau
    shifted = np.exp(logits - logits.max())
    return shifted / (k * float(np.sum(weight * shifted)))


def pooled_fractions(histograms: list[Histogram], bins: int = BINS) -> tuple[np.ndarray, np.ndarray]:
    """Bin centres and the fraction of all values in each bin, the histograms re-binned onto
    ``bins`` common edges spanning them all."""
    low = min(float(h.edges[0]) for h in histograms)
    high = max(float(h.edges[-1]) for h in histograms)
    if high - low < 1e-6:
        low, high = low - 0.005, high + 0.005
    edges = np.linspace(low, high, bins + 1)
    pooled = rebin(histograms, edges)
    return (edges[:-1] + edges[1:]) / 2, pooled / pooled.sum()


def rebin(histograms: list[Histogram], edges: np.ndarray) -> np.ndarray:
    """The histograms' counts summed onto ``edges``: each bin's count spread evenly over its width,
    a zero-width bin's count (every value equal) into the bin holding it."""
    pooled = np.zeros(edges.size - 1)
    for histogram in histograms:
        for left, right, count in zip(histogram.edges[:-1], histogram.edges[1:], histogram.counts):
            if count <= 0:
                continue
            if right > left:
                overlap = np.clip(np.minimum(right, edges[1:]) - np.maximum(left, edges[:-1]), 0.0, None)
                pooled += count * overlap / (right - left)
            else:
                pooled[min(max(np.searchsorted(edges, left, side="right") - 1, 0), pooled.size - 1)] += count
    return pooled
