"""Paired comparisons of configurations over their shared seeds, and the decisions read from them.

Seed k means the same data order and the same augmentation draws in every configuration
(``datamodules.keyed_draws``), so run seed k of configuration A and run seed k of B differ only
in the configuration: their difference is one paired observation. For each column and each
configuration against the reference ★:

    d_k = value_k(configuration) − value_k(reference)    for the seeds k both finished and logged
    Δ = mean_k d_k,  95% CI = Δ ± t_{0.975, n−1} · s_d / √n  (Student's t-interval, n − 1 df)
    p = 2 · P(T_{n−1} > |Δ| / (s_d / √n))                  (the paired t-test, scipy's ``ttest_rel``)

with s_d the sample std (n − 1) of the d_k. n < 2 pairs has no interval ("needs ≥ 2 seeds"). A seed
that two runs of one configuration share is ambiguous and pairs with nothing.

**Decisions** (``ssl_app.report.significance``): only a comparison with at least ``MIN_TESTED_PAIRS``
(3) pairs is tested (with 2 pairs, one degree of freedom, the interval is shown but read as nothing);
the tested comparisons of a report are one family of m tests, and a difference is called only where
its Holm-adjusted p-value is at most 0.05 (family-wise error ≤ 5% over the m tests).

The reference ★ is the configuration named by ``--baseline`` (its label), otherwise the one with
the highest mean linear top-1 (kNN accuracy when no run has a linear probe): every other
configuration is compared with it, in every column.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass

from scipy import stats

from ssl_app.errors import ConfigError
from ssl_app.report.summary import Row
from ssl_app.temperature.labels import PolicySpec

CONFIDENCE = 0.95
MIN_PAIRS = 2
#: Fewer pairs than this: an interval (from 2) but no test, no mark (1 degree of freedom reads t = 12.7 as nothing).
MIN_TESTED_PAIRS = 3
#: Accuracy columns (higher is better), in the order that picks the default reference.
RANKED_COLUMNS = ("linear_top1", "knn_acc")
REFERENCE = "★"
PAIRED_HEADING = "### Paired differences against"
TOO_FEW = f"needs ≥ {MIN_PAIRS} seeds"


@dataclass(frozen=True)
class PairedDifference:
    """``differences[i]`` = configuration − reference at ``seeds[i]``; ``low``/``high``: the 95%
    t-interval of their mean and ``p`` the paired t-test's two-sided p-value (None with fewer than
    ``MIN_PAIRS`` pairs)."""

    seeds: tuple
    differences: tuple[float, ...]
    mean: float | None
    low: float | None
    high: float | None
    p: float | None = None

    @property
    def n(self) -> int:
        return len(self.differences)

    @property
    def excludes_zero(self) -> bool | None:
        """Whether the (unadjusted) interval excludes 0 (None without an interval)."""
        if self.low is None or self.high is None:
            return None
        return not self.low <= 0.0 <= self.high

    @property
    def tested(self) -> bool:
        """Enough pairs for a decision (``MIN_TESTED_PAIRS``)."""
        return self.p is not None and self.n >= MIN_TESTED_PAIRS


def t_interval(differences: list[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Student's t-interval of the mean of ``differences`` (n ≥ 2): mean ± t_{(1+c)/2, n−1} · s / √n."""
    n = len(differences)
    mean = statistics.fmean(differences)
    half = stats.t.ppf((1 + confidence) / 2, n - 1) * statistics.stdev(differences) / math.sqrt(n)
    return mean - half, mean + half


def t_test_p(differences: list[float]) -> float:
    """The two-sided p-value of the paired t-test that the mean difference is 0 (n ≥ 2):
    2 · sf(|mean| / (s / √n), n − 1). Differences equal at every seed (s = 0) give p = 0 when they
    are not 0, and p = 1 when they are all 0 (scipy's ``ttest_rel`` gives inf/0 and nan there)."""
    n = len(differences)
    mean, sd = statistics.fmean(differences), statistics.stdev(differences)
    if sd == 0.0:
        return 1.0 if mean == 0.0 else 0.0
    return float(2.0 * stats.t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))


def unique_seeds(row: Row) -> set:
    """The seeds of the row's runs, leaving out a missing seed and one that two of its runs share."""
    counts = Counter(run.seed for run in row.runs)
    return {seed for seed, count in counts.items() if seed is not None and count == 1}


def seeded_values(row: Row, key: str) -> dict:
    """``{seed: value}`` of the row's runs with a unique seed that logged ``key``."""
    seeds = unique_seeds(row)
    return {run.seed: value for run, value in zip(row.runs, row.values[key]) if value is not None and run.seed in seeds}


def paired_difference(row: Row, reference: Row, key: str) -> PairedDifference:
    """``row`` − ``reference`` in column ``key`` over the seeds both have a value for."""
    ours, theirs = seeded_values(row, key), seeded_values(reference, key)
    seeds = tuple(sorted(ours.keys() & theirs.keys(), key=str))
    differences = tuple(ours[seed] - theirs[seed] for seed in seeds)
    if not differences:
        return PairedDifference(seeds, differences, None, None, None)
    mean = statistics.fmean(differences)
    if len(differences) < MIN_PAIRS:
        return PairedDifference(seeds, differences, mean, None, None)
    return PairedDifference(seeds, differences, mean, *t_interval(list(differences)), p=t_test_p(list(differences)))


def tau_named(rows: list[Row], baseline: str) -> list[int]:
    """The rows whose τ is the one ``baseline`` writes as a grid does (``tau=0.5``, ``τ=cosine:0.1-1.0:T=3``,
    or the policy's label alone), in any of its spellings; none when it writes no τ."""
    written = re.sub(r"^(tau|τ)=", "", baseline.strip())
    found = PolicySpec.read(written)
    if found is None:
        return []
    wanted = f"τ={found[0].label()}"
    return [index for index, row in enumerate(rows) if wanted in row.configuration.label.split()]


def reference_index(rows: list[Row], baseline: str | None = None) -> int | None:
    """The row of the reference ★: the configuration labelled ``baseline``, else the highest mean of
    the first ranked column any row has (None when no row has one). An unknown ``baseline`` is a
    ConfigError listing the labels."""
    if baseline is not None:
        labels = [row.configuration.label for row in rows]
        if baseline in labels:
            return labels.index(baseline)
        # a label as reports printed it before τ labels were canonical (``τ=cosine:0.1-1:T200``) still names its row
        named = [index for index, row in enumerate(rows) if baseline in row.configuration.aliases]
        named = named or tau_named(rows, baseline)
        if len(named) != 1:
            raise ConfigError(f"--baseline {baseline!r} is no configuration of the table; its labels: {', '.join(labels)}")
        return named[0]
    for key in RANKED_COLUMNS:
        valued = [index for index, row in enumerate(rows) if key in row.values and row.stat(key).mean is not None]
        if valued:
            return max(valued, key=lambda index: rows[index].stat(key).mean)
    return None
