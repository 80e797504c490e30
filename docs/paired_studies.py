"""The re-run studies' comparisons from their per-seed values (issue 40 item 11): ``python docs/paired_studies.py``.

Each re-run study keeps, beside its page, the report's ``runs.csv`` (every run's configuration, seed and final
values) and, where the page reads a script's per-run numbers, that script's per-run CSV (the hardness profiles'
slopes: ``profile_slopes.csv``; the τ study's run averages: ``run_averages.csv``). For every comparison the page
reads (``FAMILIES`` below: metric, a, b), this writes the report's paired difference over the seeds a and b share
(``ssl_app.report.paired``: d_k = a_k − b_k, Δ = mean d_k, its 95% t-interval with n − 1 degrees of freedom, the
paired t-test's two-sided p) and Holm's adjustment over all m of the page's comparisons at once
(``ssl_app.report.significance.holm_adjusted``): a difference is *called* where p̃ ≤ 0.05. Into ``docs/<study>/``:
``comparisons.csv`` (one row per comparison, with the seeds, the differences and the quote the page uses,
``Δ +0.362 [+0.118, +0.606] (p̃ 0.351, not called)``) and ``comparisons.md`` (the same as a table); for a family
with a ``seed_table``, ``per_seed.md``: each configuration's values seed by seed, the table the page shows beside
the report's.

Only committed files are read, so running it again rewrites the same files.
"""

from __future__ import annotations

import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))

from ssl_app.report.paired import MIN_TESTED_PAIRS, t_interval, t_test_p  # noqa: E402
from ssl_app.report.significance import ALPHA, holm_adjusted  # noqa: E402

MINUS = "−"
#: Decimals a metric is quoted with (the report's table: accuracies 2, eff. negatives 1, the rest 3; slopes 2).
DIGITS = {"knn_acc": 2, "linear_top1": 2, "effective_negatives": 1, "log_slope": 2, "upper_log_slope": 2}
DIGITS |= {f"knn_{group}": 2 for group in ("many", "medium", "few")}
DIGITS |= {"effective_rank": 2, "effective_rank_backbone": 2}


@dataclass(frozen=True)
class Family:
    """One page's comparisons: the per-seed CSVs they read (in its folder) and the (metric, a, b) they make."""

    title: str
    sources: tuple[str, ...]
    comparisons: tuple[tuple[str, str, str], ...]
    #: (column, heading) of the per-seed table the page shows beside the report's (``per_seed.md``); none if empty.
    seed_table: tuple[tuple[str, str], ...] = ()


# --- docs/hardness_study.md --------------------------------------------------------------------------------------
HCL, HARD, HYP = "HCL τ=0.5 beta=1 tau_plus=0.1", "HardContrastive τ=0.5 q=0.1", "Hypersphere λ=1 alpha=2 t=2"
INFONCE, DCL, DEB, MACL = "InfoNCE τ=0.5", "DCL τ=0.5", "Debiased τ=0.5 tau_plus=0.1", "MACL τ=0.5 a_0=0 alpha=0.5"
STEEP, FLAT = (HYP, HARD, HCL), (INFONCE, DCL, DEB)
HARDNESS_ROWS = (INFONCE, HARD, DCL, DEB, HCL, HYP, MACL)
HARDNESS = (
    *[("upper_log_slope", a, INFONCE) for a in (HYP, HARD, HCL, DCL, DEB, MACL)],
    *[("uniformity", s, f) for s in STEEP for f in FLAT],
    ("uniformity", DCL, INFONCE), ("uniformity", DEB, INFONCE), ("uniformity", DEB, DCL),
    *[("uniformity", MACL, f) for f in FLAT],
    ("uniformity", HYP, HARD), ("uniformity", HYP, HCL), ("uniformity", HARD, HCL),
    *[("top10_neg_sim", s, f) for s in STEEP for f in FLAT],
    ("top10_neg_sim", MACL, INFONCE),
    *[("tolerance", a, b) for i, a in enumerate(HARDNESS_ROWS) for b in HARDNESS_ROWS[i + 1:]],
    *[("knn_acc", s, f) for s in STEEP for f in FLAT],
    *[("knn_acc", MACL, s) for s in STEEP],
)  # fmt: skip

# --- docs/tau_study.md: every pair of the four configurations in every metric the page reads ----------------------
T01, T05, T1, COS = "InfoNCE τ=0.1", "InfoNCE τ=0.5", "InfoNCE τ=1", "InfoNCE τ=cosine:0.1-1:T=12"
TAU_PAIRS = ((T01, T05), (T01, T1), (T05, T1), (COS, T01), (COS, T05), (COS, T1))
TAU_METRICS = (
    "knn_acc", "uniformity", "tolerance", "top10_neg_sim", "effective_negatives", "effective_rank",
    "knn_many", "knn_medium", "knn_few", "uniformity_epoch_mean", "tolerance_epoch_mean",
)  # fmt: skip
#: Each run's lowest uniformity and highest tolerance over epochs 5–7, around the cosine's lowest τ: the cosine
#: against each constant.
TAU_LOWEST = ("uniformity_min_epochs5to7", "tolerance_max_epochs5to7")
TAU = tuple((metric, a, b) for metric in TAU_METRICS for a, b in TAU_PAIRS)
TAU += tuple((metric, COS, b) for metric in TAU_LOWEST for b in (T01, T05, T1))

# --- docs/study.md: the pairs its claims read, in each of the four headline metrics --------------------------------
#: Chosen from the first recording's sentences before any re-run comparison was computed: τ within InfoNCE (every pair:
#: its steps and τ 0.07 against 0.7 and 1.0), τ steps within the hard loss, the hard loss against InfoNCE at each τ,
#: Simple against InfoNCE's lowest and highest τ, HardSimple against Simple, InfoNCE τ = 0.07 and the hard loss at
#: its highest τ (HardSimple is the hard loss's τ → ∞, as Simple is InfoNCE's).
NCE = {t: f"InfoNCE τ={t}" for t in ("0.07", "0.3", "0.7", "1")}
HCE = {t: f"HardContrastive τ={t} K=128" for t in NCE}
SIMPLE, HSIMPLE = "Simple", "HardSimple K=128"
STUDY_PAIRS = (
    *[(NCE[a], NCE[b]) for i, a in enumerate(NCE) for b in list(NCE)[i + 1:]],
    *[(HCE[a], HCE[b]) for a, b in (("0.07", "0.3"), ("0.3", "0.7"), ("0.7", "1"))],
    *[(HCE[t], NCE[t]) for t in NCE],
    (SIMPLE, NCE["0.07"]), (SIMPLE, NCE["1"]),
    (HSIMPLE, SIMPLE), (HSIMPLE, NCE["0.07"]), (HSIMPLE, HCE["1"]),
)  # fmt: skip
STUDY_METRICS = ("knn_acc", "linear_top1", "uniformity", "tolerance")
STUDY = tuple((metric, a, b) for metric in STUDY_METRICS for a, b in STUDY_PAIRS)
STUDY_SEED_TABLE = (("linear_top1", "linear top-1 (%)"), ("knn_acc", "kNN (%)"), ("uniformity", "uniformity"))
STUDY_SEED_TABLE += (("tolerance", "tolerance"),)

FAMILIES = {
    "hardness_study": Family("Hardness study", ("runs.csv", "profile_slopes.csv"), HARDNESS),
    "tau_study": Family("τ study", ("runs.csv", "run_averages.csv"), TAU),
    "study": Family("CIFAR-10 at CPU scale", ("runs.csv",), STUDY, seed_table=STUDY_SEED_TABLE),
}


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def per_seed(folder: Path, sources: tuple[str, ...]) -> dict[tuple[str, str], dict[str, float]]:
    """``{(configuration, seed): {metric: value}}`` from the sources' rows (empty cells left out)."""
    found: dict[tuple[str, str], dict[str, float]] = {}
    for source in sources:
        for row in read_rows(folder / source):
            values = found.setdefault((row["configuration"], row["seed"]), {})
            for key, cell in row.items():
                if key in ("configuration", "seed") or cell in ("", None):
                    continue
                try:
                    values[key] = float(cell)
                except ValueError:
                    continue
    return found


def signed(value: float, digits: int) -> str:
    return f"{MINUS if value < 0 else '+'}{abs(value):.{digits}f}"


def quote(row: dict) -> str:
    """``Δ +0.362 [+0.118, +0.606] (p̃ 0.351, not called)``: as the page quotes a comparison."""
    d = row["digits"]
    p = "<0.001" if row["holm_p"] < 0.001 else f"{row['holm_p']:.3f}"
    return f"Δ {signed(row['delta'], d)} [{signed(row['low'], d)}, {signed(row['high'], d)}] (p̃ {p}, {row['holm']})"


def compare(values: dict[tuple[str, str], dict[str, float]], family: Family) -> list[dict]:
    """Each (metric, a, b): the paired difference a − b over their shared seeds; Holm over all of them."""
    found = []
    for metric, a, b in family.comparisons:
        mine = {seed: v[metric] for (label, seed), v in values.items() if label == a and metric in v}
        theirs = {seed: v[metric] for (label, seed), v in values.items() if label == b and metric in v}
        seeds = sorted(mine.keys() & theirs.keys(), key=int)
        if len(seeds) < MIN_TESTED_PAIRS:
            raise SystemExit(f"error: {metric} {a} − {b}: {len(seeds)} shared seeds, fewer than {MIN_TESTED_PAIRS}")
        d = [mine[seed] - theirs[seed] for seed in seeds]
        low, high = t_interval(d)
        found.append({
            "metric": metric, "a": a, "b": b, "pairs": len(seeds), "seeds": " ".join(seeds),
            "a_values": " ".join(repr(mine[s]) for s in seeds), "b_values": " ".join(repr(theirs[s]) for s in seeds),
            "delta": statistics.fmean(d), "low": float(low), "high": float(high), "p": t_test_p(d),
            "digits": DIGITS.get(metric, 3),
        })  # fmt: skip
    for row, adjusted in zip(found, holm_adjusted([row["p"] for row in found])):
        row["holm_m"] = len(found)
        row["holm_p"] = adjusted
        row["holm"] = "called" if adjusted <= ALPHA else "not called"
        row["interval"] = "covers 0" if row["low"] <= 0 <= row["high"] else "excludes 0"
        row["quote"] = quote(row)
    return found


def write_csv(path: Path, rows: list[dict]) -> None:
    """``rows`` as CSV: floats by ``repr`` (every digit kept), ``None`` as an empty cell."""
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else repr(v) if isinstance(v, float) else v for k, v in row.items()})


def write_markdown(path: Path, rows: list[dict], family: Family) -> None:
    m, called = len(rows), sum(row["holm"] == "called" for row in rows)
    lines = [
        f"# {family.title}: every comparison the page reads (written by `python docs/paired_studies.py`)",
        "",
        f"Δ = a − b over the seeds both share (seed k: the same data order and augmentations in every configuration), "
        f"its 95% t-interval (n − 1 df) and the paired t-test's p (`ssl_app.report.paired`), Holm-adjusted over all "
        f"m = {m} at once (`ssl_app.report.significance.holm_adjusted`); called where p̃ ≤ {ALPHA:g}. Holm calls "
        f"{called} of the {m}. The per-seed values: {', '.join(f'`{s}`' for s in family.sources)}; each row's seeds "
        f"and values are in `comparisons.csv`.",
        "",
        "| metric | a | b | Δ [95% interval] (p̃, decision) | p | raw interval |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(f"| {row['metric']} | {row['a']} | {row['b']} | {row['quote']} | {row['p']:.4f} | {row['interval']} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_seed_table(path: Path, folder: Path, family: Family) -> None:
    """Each configuration's values seed by seed (seeds in order, as the page quotes them), in runs.csv's row order."""
    found = read_rows(folder / "runs.csv")
    labels = list(dict.fromkeys(row["configuration"] for row in found))
    lines = [
        "| configuration | seeds | " + " | ".join(heading for _, heading in family.seed_table) + " |",
        "|---|---|" + "---|" * len(family.seed_table),
    ]
    for label in labels:
        mine = sorted((row for row in found if row["configuration"] == label), key=lambda row: int(row["seed"]))
        cells = [", ".join(row["seed"] for row in mine)]
        for key, _ in family.seed_table:
            d = DIGITS.get(key, 3)
            cells.append(", ".join(f"{float(row[key]):.{d}f}" if row[key] else "–" for row in mine))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(names: list[str]) -> None:
    for name in names or list(FAMILIES):
        family, folder = FAMILIES[name], DOCS / name
        rows = compare(per_seed(folder, family.sources), family)
        write_csv(folder / "comparisons.csv", rows)
        write_markdown(folder / "comparisons.md", rows, family)
        if family.seed_table:
            write_seed_table(folder / "per_seed.md", folder, family)
        print(f"{name}: m = {len(rows)}, Holm calls {sum(row['holm'] == 'called' for row in rows)}")


if __name__ == "__main__":
    main(sys.argv[1:])
