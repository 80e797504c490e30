"""The relative penalty r(s) against the similarity s, one curve per τ, from the logged histograms.

docs/science.md: ``r_i(s_ij) = exp(s_ij/τ) / Σ_{k∈N(i)} exp(s_ik/τ)``. Each curve is

    r(s) = exp(s/τ) / Z,   Z = m · Σ_b p_b exp(s_b/τ)

with ``p_b`` the fraction of the final epoch's negatives (the configuration's seeds pooled) in
bin b, ``s_b`` its centre, m the number of negatives per anchor and τ the configuration's loss
temperature (for a temperature policy, the τ in force at the end of its runs:
``temperature_in_force``). Which negatives, per configuration (``PenaltyCurve.negatives``):

- ``all`` (runs that logged ``similarity/negative``, ``callbacks.EmbeddingMetrics``): every
  negative of every evaluation anchor, N(i) the whole set as in the paper. m is the mean number
  of negatives per anchor, the histogram's count over the number of anchors (the count of
  ``similarity/positive``, one value per anchor, at the same step). The 200 fixed bins are used
  as logged (width 0.01), not re-binned.
- ``top{k}`` (older runs, which logged only ``similarity/top{k}_negative``): each anchor's k
  hardest negatives, N(i) taken as the top k, m = k; re-binned to 40 bins spanning the values.

``Z`` is the **mean over anchors** of the normaliser, ``(1/N) Σ_i Σ_{k∈N(i)} exp(s_ik/τ)``, up to
binning: the curve replaces each anchor's own normaliser by that mean, so it is exactly the
anchor-averaged r(s) when all anchors share one normaliser, and otherwise below it by the Jensen
gap ``mean_i(1/Z_i) ≥ 1/mean_i(Z_i)`` (the histograms keep no per-anchor sums). It is
normalised so that ``m Σ_b p_b r(s_b) = 1``: an anchor's negatives share a penalty of 1. The
curve is drawn over the bins that hold negatives; its log-slope is 1/τ, so a small τ puts nearly
all the penalty on the most similar negatives.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ssl_app.report.events import Histogram
from ssl_app.report.summary import Row

NEGATIVE_TAG = "similarity/top{k}_negative"  # {k}: each run's EmbeddingMetrics.top_k
ALL_NEGATIVE_TAG = "similarity/negative"
POSITIVE_TAG = "similarity/positive"
TEMPERATURE_TAG = "loss/temperature_epoch"
BINS = 40


@dataclass(frozen=True)
class PenaltyCurve:
    """One configuration's curve: ``similarity`` (bin centres holding negatives), ``penalty`` r(s)
    there, ``weight`` p_b the fraction of the negatives in each bin, ``k`` the negatives per
    anchor m (top-k: k; all: their mean number), ``negatives`` which ones (``all`` or
    ``top{k}``), ``runs`` pooled; ``label`` the configuration's canonical label (the policy's, for a
    schedule: never its ``temperature``), ``scheduled`` whether ``temperature`` is the τ a policy
    ended at (``temperature_in_force``) rather than the configured number."""

    label: str
    series: str
    temperature: float
    k: float
    similarity: np.ndarray
    penalty: np.ndarray
    weight: np.ndarray
    runs: int
    negatives: str
    scheduled: bool = False


def penalty_curves(rows: list[Row]) -> list[PenaltyCurve]:
    """A curve per configuration that has a τ and whose finished runs logged a negative
    histogram, ordered by series then τ: over all negatives when every such run logged
    ``similarity/negative``, else over the top-k."""
    curves = []
    for row in rows:
        tau = temperature_in_force(row)
        if tau is None or tau <= 0:
            continue
        curve = _all_negatives_curve(row, tau) or _top_k_curve(row, tau)
        if curve is not None:
            curves.append(curve)
    return sorted(curves, key=lambda curve: (curve.series, curve.temperature))


def temperature_in_force(row: Row) -> float | None:
    """The τ of the curve: the configuration's number, or for a temperature policy (``ssl_app.temperature``,
    no number in the config) the τ in force when the final histograms were logged, each run's last
    ``loss/temperature_epoch`` (the τ of its last training step), averaged over its runs."""
    if row.configuration.temperature is not None:
        return row.configuration.temperature
    values = [run.events.last(TEMPERATURE_TAG) for run in row.runs if run.events]
    found = [value for value in values if value is not None]
    return float(np.mean(found)) if found else None


def _all_negatives_curve(row: Row, tau: float) -> PenaltyCurve | None:
    """The curve over every negative, or None unless each run with events logged
    ``similarity/negative`` and ``similarity/positive`` at its last step."""
    histograms, negatives, anchors = [], 0.0, 0.0
    for run in row.runs:
        if not run.events:
            continue
        logged = run.events.histograms.get(ALL_NEGATIVE_TAG)
        positives = {h.step: h for h in run.events.histograms.get(POSITIVE_TAG, [])}
        if not logged or logged[-1].step not in positives:
            return None
        histograms.append(logged[-1])
        negatives += logged[-1].total
        anchors += positives[logged[-1].step].total
    if not histograms or anchors <= 0:
        return None
    centres, weight = summed_fractions(histograms)
    per_anchor = negatives / anchors
    return _curve(row, tau, per_anchor, centres, weight, len(histograms), "all")


def _top_k_curve(row: Row, tau: float) -> PenaltyCurve | None:
    """The curve over each anchor's k hardest negatives (runs that logged only those)."""
    histograms, ks = [], set()
    for run in row.runs:
        logged = run.events.histograms.get(run.options.fill(NEGATIVE_TAG)) if run.events else None
        if logged:
            histograms.append(logged[-1])
            ks.add(run.options.top_k)
    if not histograms:
        return None
    centres, weight = pooled_fractions(histograms)
    k = min(ks)  # runs of one configuration share their callbacks; min is a safe pick otherwise
    return _curve(row, tau, k, centres, weight, len(histograms), f"top{k}")


def _curve(
    row: Row, tau: float, per_anchor: float, centres: np.ndarray, weight: np.ndarray, runs: int, negatives: str
) -> PenaltyCurve:
    keep = weight > 0
    centres, weight = centres[keep], weight[keep]
    penalty = relative_penalty(centres, weight, tau, per_anchor)
    configuration = row.configuration
    scheduled = configuration.temperature is None
    return PenaltyCurve(
        configuration.label, configuration.series, tau, per_anchor, centres, penalty, weight, runs, negatives, scheduled
    )


def relative_penalty(similarity: np.ndarray, weight: np.ndarray, tau: float, k: float) -> np.ndarray:
    """``exp(s/τ) / (k Σ_b p_b exp(s_b/τ))`` at each ``similarity`` (k: negatives per anchor),
    computed stably (shifted by the max)."""
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


def summed_fractions(histograms: list[Histogram]) -> tuple[np.ndarray, np.ndarray]:
    """Bin centres and fractions of histograms logged on the same edges (``similarity/negative``'s
    fixed bins), summed as logged; re-binned as ``pooled_fractions`` if their edges differ."""
    first = histograms[0].edges
    if not all(h.edges.shape == first.shape and np.array_equal(h.edges, first) for h in histograms):
        return pooled_fractions(histograms)
    counts = np.sum([h.counts for h in histograms], axis=0)
    return (first[:-1] + first[1:]) / 2, counts / counts.sum()


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
