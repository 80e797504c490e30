"""The measured hardness profile of each configuration, from the histograms the methods log.

A method logs, at the end of every training epoch, ``hardness/mean_share`` (per similarity bin,
the mean share of its anchor's penalty that a negative there received) and ``hardness/negatives``
(how many negatives each bin held): ``ssl_app.losses.hardness``, docs/science.md, "The measured
hardness profile". A configuration's curve pools its finished runs' **last** profiles, each bin
weighted by its negatives:

    w(s_b) = Σ_r share_rb · count_rb / Σ_r count_rb

drawn over the bins that held negatives. Unlike the r(s) curve (``ssl_app.report.penalty``),
which is derived from a τ, it needs nothing from the loss: every loss, a user's own included,
gets one. ``K`` is the mean number of negatives per counted anchor (each anchor's shares sum to
1, so Σ_b share_b · count_b counts the anchors): an equal penalty on every negative is 1/K.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ssl_app.losses.hardness import BINS, COUNT_TAG, SHARE_TAG
from ssl_app.report.events import Histogram
from ssl_app.report.summary import Row


@dataclass(frozen=True)
class HardnessCurve:
    """One configuration's measured profile: bin ``similarity`` centres holding negatives, the
    pooled ``share`` there, ``negatives`` per bin, ``per_anchor`` K, ``runs`` pooled."""

    label: str
    series: str
    similarity: np.ndarray
    share: np.ndarray
    negatives: np.ndarray
    per_anchor: float
    runs: int


def hardness_curves(rows: list[Row]) -> list[HardnessCurve]:
    """A curve per configuration whose finished runs logged a profile, in the rows' order."""
    curves = []
    for row in rows:
        profiles = [profile for profile in (_last_profile(run) for run in row.runs) if profile is not None]
        if not profiles:
            continue
        centres = profiles[0][0]
        counts = np.sum([count for _, _, count in profiles], axis=0)
        weighted = np.sum([share * count for _, share, count in profiles], axis=0)
        keep = counts > 0
        anchors = float(weighted.sum())
        configuration = row.configuration
        curves.append(
            HardnessCurve(
                configuration.label,
                configuration.series,
                centres[keep],
                weighted[keep] / counts[keep],
                counts[keep],
                float(counts.sum()) / anchors if anchors > 0 else float("nan"),
                len(profiles),
            )
        )
    return curves


def _last_profile(run) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(bin centres, mean share, negatives)`` of the run's last profile, or None if it logged none."""
    if not run.events:
        return None
    shares = run.events.histograms.get(SHARE_TAG)
    counts = {histogram.step: histogram for histogram in run.events.histograms.get(COUNT_TAG, [])}
    if not shares or shares[-1].step not in counts:
        return None
    share, count = _fixed_bins(shares[-1]), _fixed_bins(counts[shares[-1].step])
    return (share[0][:-1] + share[0][1:]) / 2, share[1], count[1]


def _fixed_bins(histogram: Histogram) -> tuple[np.ndarray, np.ndarray]:
    """The profile's ``BINS`` bins as written (edges, heights): the writer's leading empty bucket
    at the lower edge, read back as a zero-width bin, is dropped."""
    return histogram.edges[-(BINS + 1) :], histogram.counts[-BINS:]
