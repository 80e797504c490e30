"""The recorded studies re-read under the report's statistics (issue 40 item 11): ``python docs/reread_studies.py``.

For the studies recorded before per-seed values were kept. A re-run study keeps its per-seed values beside its
table and is read by ``docs/paired_studies.py`` instead (docs/hardness_study.md). What each study here kept, and
so what can be computed from it:

* ``docs/study`` kept each configuration's mean and sample std over its 3 seeds
  (``table.csv``), **not the per-seed values** (the run folders are gone). A paired 95% t-interval needs the
  seed-by-seed differences d_k = a_k − b_k; their std s_d is known only up to the (unrecorded) correlation ρ of
  a and b across the seeds: s_d² = s_a² + s_b² − 2ρ s_a s_b, so |s_a − s_b| ≤ s_d ≤ s_a + s_b. This script
  writes, for every comparison a study's text reads, Δ = mean_a − mean_b and the paired interval's half-width
  t_{0.975, n−1} · s_d / √n at both ends of that range, the paired t-test's p-value at both ends, and the
  Holm-adjusted decisions (``ssl_app.report.significance.holm_adjusted``, over the m comparisons of the study)
  at both ends. Holm's rule is monotone in the p-values, so a difference called with every p at its largest is
  called whatever the pairing, and one not called with every p at its smallest is called under none; the rest
  "depends on the pairing", which was not recorded. The unpaired (Welch) interval is written beside them.
* ``docs/tau_study`` kept the report's paired intervals (mean Δ, 95% t-interval, pairs): the full-precision ones
  of its ★ τ = 0.1 in ``table.csv``, and the ``--baseline`` ones as printed in ``docs/tau_study.md`` (the
  report's output folders are gone; 3 digits). The p-value follows from an interval: s_d/√n = half-width /
  t_{0.975, n−1}; the comparisons with ≥ 3 pairs are one Holm family, those with 2 pairs are not tested.

Outputs: ``comparisons.csv`` in ``docs/study`` and ``docs/tau_study``, ``comparisons.md`` beside each (the table,
with the quote each study's text uses). Deterministic: running it again rewrites the same files.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

from scipy import stats

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))

from ssl_app.report.paired import CONFIDENCE, MIN_TESTED_PAIRS  # noqa: E402
from ssl_app.report.significance import ALPHA, holm_adjusted  # noqa: E402

CALLED, NOT_CALLED, DEPENDS = "called", "not called", "depends on the pairing"
COVERS, EXCLUDES = "covers 0", "excludes 0"

# --- docs/study.md: every pair its text compares, by metric (configuration labels as in its table.csv) ---------
I = {t: f"InfoNCE τ={t}" for t in ("0.07", "0.3", "0.7", "1")}  # noqa: E741
H = {t: f"HardContrastive τ={t} K=128" for t in ("0.07", "0.3", "0.7", "1")}
SIMPLE, HSIMPLE = "Simple", "HardSimple K=128"
STUDY_ROWS = [*I.values(), SIMPLE, *H.values(), HSIMPLE]
STUDY = [
    *[("uniformity", I[a], I[b]) for a, b in (("0.3", "0.7"), ("0.7", "1"), ("0.07", "0.3"))],
    *[("tolerance", I[a], I[b]) for a, b in (("0.3", "0.7"), ("0.7", "1"))],
    *[("knn_acc", I[a], I[b]) for a, b in (("0.07", "0.3"), ("0.3", "0.7"), ("0.7", "1"))],
    *[("linear_top1", I[a], I[b]) for i, a in enumerate(I) for b in list(I)[i + 1:]],
    *[(metric, H[t], I[t]) for metric in ("uniformity", "tolerance", "knn_acc") for t in ("0.3", "0.7", "1")],
    *[("uniformity", H[a], H[b]) for a, b in (("0.3", "0.7"), ("0.7", "1"))],
    ("uniformity", H["0.07"], I["0.07"]),
    ("knn_acc", H["0.07"], I["0.07"]),
    *[("knn_acc", H[t], I["0.07"]) for t in ("0.3", "0.7", "1")],
    *[(metric, SIMPLE, other) for metric in ("uniformity", "knn_acc", "linear_top1") for other in STUDY_ROWS if other != SIMPLE],
    ("knn_acc", HSIMPLE, I["0.07"]),
    ("linear_top1", HSIMPLE, H["0.07"]),
]  # fmt: skip

# --- docs/tau_study.md: the report's --baseline intervals, as its text printed them (Δ = row − ★) --------------
COS, T05, T1 = "InfoNCE τ=cosine:0.1-1:T12", "InfoNCE τ=0.5", "InfoNCE τ=1"
TAU_BASELINES = [
    # ★, row, metric, Δ, low, high, pairs
    (COS, T05, "knn_acc", 0.07, -1.59, 1.72, 3), (COS, T05, "uniformity", -0.231, -0.325, -0.137, 3),
    (COS, T05, "tolerance", 0.034, 0.021, 0.047, 3), (COS, T05, "top10_neg_sim", 0.057, 0.029, 0.085, 3),
    (COS, T05, "effective_negatives", -48.9, -52.0, -45.8, 3), (COS, T05, "effective_rank", -8.853, -11.670, -6.035, 3),
    (COS, T05, "knn_few", -0.89, -1.37, -0.41, 3),
    (COS, T1, "knn_acc", -1.20, -4.31, 1.91, 3), (COS, T1, "uniformity", -0.383, -0.549, -0.217, 3),
    (COS, T1, "tolerance", 0.039, 0.011, 0.066, 3), (COS, T1, "top10_neg_sim", 0.082, 0.039, 0.125, 3),
    (COS, T1, "effective_negatives", -6.6, -10.7, -2.6, 3), (COS, T1, "effective_rank", -7.218, -12.378, -2.059, 3),
    (COS, T1, "knn_few", -0.67, -4.90, 3.57, 2),
    (T05, T1, "knn_acc", -1.27, -3.13, 0.60, 3), (T05, T1, "uniformity", -0.151, -0.276, -0.027, 3),
    (T05, T1, "tolerance", 0.005, -0.017, 0.026, 3), (T05, T1, "top10_neg_sim", 0.025, 0.007, 0.043, 3),
    (T05, T1, "effective_negatives", 42.3, 37.4, 47.2, 3), (T05, T1, "effective_rank", 1.634, -1.134, 4.403, 3),
    (T05, T1, "knn_few", 0.33, -3.90, 4.57, 2),
]  # fmt: skip
TAU_METRICS = ["knn_acc", "uniformity", "tolerance", "alignment", "pos_sim", "top10_neg_sim", "effective_negatives"]
TAU_METRICS += ["effective_rank", "effective_rank_backbone", "knn_many", "knn_medium", "knn_few"]


def t_quantile(n: int) -> float:
    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1))


def paired_p(delta: float, sd: float, n: int) -> float:
    """The paired t-test's two-sided p-value for mean difference ``delta``, std of the differences ``sd``."""
    if sd == 0.0:
        return 0.0 if delta != 0.0 else 1.0
    return float(2 * stats.t.sf(abs(delta) / (sd / math.sqrt(n)), n - 1))


def read_table(path: Path) -> dict[str, dict[str, str]]:
    with path.open(encoding="utf-8") as handle:
        return {row["configuration"]: row for row in csv.DictReader(handle)}


def holm_decisions(p_values: list[float]) -> list[bool]:
    return [p <= ALPHA for p in holm_adjusted(p_values)]


def from_summaries(table: dict[str, dict[str, str]], pairs: list[tuple[str, str, str]]) -> list[dict[str, object]]:
    """One row per (metric, a, b): Δ = a − b, Welch's interval, and the paired interval's range over ρ."""
    rows = []
    for metric, a, b in pairs:
        ma, sa, na = (float(table[a][f"{metric}_{part}"]) for part in ("mean", "std", "n"))
        mb, sb, nb = (float(table[b][f"{metric}_{part}"]) for part in ("mean", "std", "n"))
        n = int(min(na, nb))
        delta = ma - mb
        se = math.sqrt(sa**2 / na + sb**2 / nb)
        dof = se**4 / ((sa**2 / na) ** 2 / (na - 1) + (sb**2 / nb) ** 2 / (nb - 1))
        welch = float(stats.t.ppf(0.5 + CONFIDENCE / 2, dof)) * se
        sd_low, sd_high = abs(sa - sb), sa + sb
        half_low, half_high = (t_quantile(n) * sd / math.sqrt(n) for sd in (sd_low, sd_high))
        rows.append({
            "metric": metric, "a": a, "b": b, "n": n, "mean_a": ma, "std_a": sa, "mean_b": mb, "std_b": sb,
            "delta": delta, "welch_low": delta - welch, "welch_high": delta + welch,
            "paired_half_min": half_low, "paired_half_max": half_high,
            "paired_p_min": paired_p(delta, sd_low, n), "paired_p_max": paired_p(delta, sd_high, n),
            "sd_separated": abs(delta) > sa + sb,
        })  # fmt: skip
    best = holm_decisions([row["paired_p_min"] for row in rows])
    worst = holm_decisions([row["paired_p_max"] for row in rows])
    for row, lucky, unlucky in zip(rows, best, worst):
        lo, hi = row["paired_half_min"], row["paired_half_max"]
        row["paired_interval"] = EXCLUDES if abs(row["delta"]) > hi else COVERS if abs(row["delta"]) <= lo else DEPENDS
        row["holm_m"] = len(rows)
        row["holm"] = CALLED if unlucky else NOT_CALLED if not lucky else DEPENDS
    return rows


def from_intervals(table: dict[str, dict[str, str]]) -> list[dict[str, object]]:
    """The tau study's recorded paired intervals, each with its p-value and the Holm decision."""
    recorded = []
    for row, values in table.items():
        if values["paired_reference"] == "1":
            continue
        for metric in TAU_METRICS:
            parts = [values[f"{metric}_paired_{part}"] for part in ("delta", "low", "high", "n")]
            recorded.append(("InfoNCE τ=0.1", row, metric, *map(float, parts[:3]), int(parts[3]), "table.csv"))
    recorded += [(*entry, "tau_study.md") for entry in TAU_BASELINES]
    rows = []
    for reference, row, metric, delta, low, high, n, source in recorded:
        se = (high - low) / 2 / t_quantile(n)
        rows.append({
            "reference": reference, "configuration": row, "metric": metric, "pairs": n, "delta": delta, "low": low,
            "high": high, "p": paired_p(delta, se * math.sqrt(n), n), "interval": COVERS if low <= 0 <= high else EXCLUDES,
            "source": source,
        })  # fmt: skip
    tested = [row for row in rows if row["pairs"] >= MIN_TESTED_PAIRS]
    for row, adjusted in zip(tested, holm_adjusted([row["p"] for row in tested])):
        row["holm_p"] = adjusted
        row["holm"] = CALLED if adjusted <= ALPHA else NOT_CALLED
    for row in rows:
        row.setdefault("holm_p", "")
        row.setdefault("holm", f"not tested ({row['pairs']} pairs)")
        row["holm_m"] = len(tested)
    return rows


def write(path: Path, rows: list[dict[str, object]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({key: repr(value) if isinstance(value, float) else value for key, value in row.items()})


#: Digits a metric is quoted with (as the report's table).
DIGITS = {"knn_acc": 2, "linear_top1": 2, "effective_negatives": 1}


def signed(value: float, digits: int) -> str:
    return f"{'−' if value < 0 else '+'}{abs(value):.{digits}f}"


def quote(row: dict[str, object]) -> str:
    """How a study's text quotes a comparison: ``Δ +0.431 (paired ±0.010–0.193; excludes 0, Holm: called)``."""
    d = DIGITS.get(str(row["metric"]), 3)
    half = f"±{row['paired_half_min']:.{d}f}–{row['paired_half_max']:.{d}f}"
    return f"Δ {signed(row['delta'], d)} (paired {half}; {row['paired_interval']}, Holm: {row['holm']})"


def write_markdown(path: Path, rows: list[dict[str, object]], title: str) -> None:
    """The comparisons as a table, each with the quote the study's text uses."""
    m = rows[0]["holm_m"]
    lines = [
        f"# {title}: every comparison the text reads (written by `python docs/reread_studies.py`)",
        "",
        "Δ = a − b over the 3 seeds of each (mean of a minus mean of b). The per-seed values were not recorded, so the "
        "paired 95% t-interval (2 df) Δ ± 4.303 · s_d / √3 is known only up to the seeds' correlation: "
        "|s_a − s_b| ≤ s_d ≤ s_a + s_b gives its half-width's range. *excludes 0* / *covers 0*: for every "
        "correlation; *depends on the pairing*: not decided by what was recorded. Holm: the paired t-tests' "
        f"p-values adjusted over the m = {m} comparisons below (family-wise error ≤ 5%), *called* / *not called* "
        "whatever the pairing, or *depends on the pairing*. Welch: the unpaired 95% interval, for comparison. "
        "old ±1 sd rule: whether the page's earlier reading (mean ± std intervals apart) called the pair separated.",
        "",
        "| metric | a | b | quote | Welch 95% | old ±1 sd rule |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        d = DIGITS.get(str(row["metric"]), 3)
        welch = f"[{signed(row['welch_low'], d)}, {signed(row['welch_high'], d)}]"
        old = "separated" if row["sd_separated"] else "not separated"
        lines.append(f"| {row['metric']} | {row['a']} | {row['b']} | {quote(row)} | {welch} | {old} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    study = from_summaries(read_table(DOCS / "study" / "table.csv"), STUDY)
    write(DOCS / "study" / "comparisons.csv", study)
    write_markdown(DOCS / "study" / "comparisons.md", study, "CIFAR-10 at CPU scale")
    tau = from_intervals(read_table(DOCS / "tau_study" / "table.csv"))
    write(DOCS / "tau_study" / "comparisons.csv", tau)
    lines = [
        "# τ study: the recorded paired intervals and their Holm decisions (written by `python docs/reread_studies.py`)",
        "",
        "Δ = configuration − ★, mean [95% t-interval] of the paired differences over the shared seeds, as the report "
        "printed them (source: `table.csv` at full precision, or `docs/tau_study.md`'s `--baseline` table at 3 digits); "
        "p: the paired t-test's two-sided p-value recovered from the interval (s_d/√n = half-width / t_{0.975, n−1}); "
        f"Holm: p adjusted over the m = {tau[0]['holm_m']} comparisons with ≥ {MIN_TESTED_PAIRS} pairs (family-wise "
        f"error ≤ 5%); fewer than {MIN_TESTED_PAIRS} pairs: not tested (the interval is shown, nothing is read from it).",
        "",
        "| ★ | configuration | metric | pairs | Δ [95% t-interval] | raw interval | p | Holm p̃ | Holm |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in tau:
        d = 2 if str(row["metric"]).startswith(("knn", "linear")) else DIGITS.get(str(row["metric"]), 3)
        interval = f"{signed(row['delta'], d)} [{signed(row['low'], d)}, {signed(row['high'], d)}]"
        holm_p = f"{row['holm_p']:.3f}" if row["holm_p"] != "" else ""
        cells = [row["reference"], row["configuration"], row["metric"], str(row["pairs"]), interval, row["interval"]]
        lines.append("| " + " | ".join([*cells, f"{row['p']:.4f}", holm_p, row["holm"]]) + " |")
    (DOCS / "tau_study" / "comparisons.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
