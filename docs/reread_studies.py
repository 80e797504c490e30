"""The recorded studies re-read under the report's statistics (issue 40 item 11): ``python docs/reread_studies.py``.

For the studies recorded before per-seed values were kept. A re-run study keeps its per-seed values beside its
table and is read by ``docs/paired_studies.py`` instead (docs/hardness_study.md, docs/tau_study.md). What the
study here kept, and so what can be computed from it:

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

Outputs: ``docs/study/comparisons.csv`` and ``comparisons.md`` beside it (the table, with the quote the study's
text uses). Deterministic: running it again rewrites the same files.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

from scipy import stats

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))

from ssl_app.report.paired import CONFIDENCE  # noqa: E402
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


if __name__ == "__main__":
    main()
