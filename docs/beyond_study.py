"""The beyond-softmax study (issue 41 item 3) from its run folders: ``python docs/beyond_study.py RUNS_DIR``.

Reads every finished run of the sweep with the report's own readers (``ssl_app.report``: the runs, their grouping
and labels, each column's final value as the report's table takes it, the last hardness profile) and, where a run
holds a finished ``validate`` of its last checkpoint (``<run>/evaluations/validate_<n>/``), the geometry metrics that
validation logged (−W₂ ``metrics/wasserstein_uniformity``, ``metrics/lidar``). It writes into ``docs/beyond_study/``:

* ``per_seed.csv``: one row per run (configuration, seed) with every value the page uses: the report's columns,
  the validation's, the Sigmoid's learnt τ, scale 1/τ and bias (its last checkpoint), the measured hardness profile's
  log-slope and the fraction of negatives at a share ≤ 0 (as docs/hardness_study.md defines them), and the
  commit and wall time of the fit and of the validation (their run records); ``fit_wasserstein_uniformity``: −W₂
  as the training itself logged it, for the runs that trained with the geometry metrics' code (empty otherwise);
* ``comparisons.csv`` / ``comparisons.md``: every pair of configurations in every compared metric, the report's
  paired difference (``ssl_app.report.paired``: mean Δ = a − b over the shared seeds, its 95% t-interval, the
  paired t-test's p) with Holm's adjustment (``ssl_app.report.significance.holm_adjusted``) over all m of them
  at once, and the quote the page uses: ``Δ +0.362 [+0.118, +0.606] (p̃ 0.351, not called)``;
* ``orders.csv``: each configuration's mean (and sample std over its seeds) in each compared metric and in the
  profile's log-slope and share ≤ 0, and its rank (1 = highest);
* ``rank_agreement.csv``: Kendall's τ_b (scipy) between each metric and kNN over the 15 runs, over the 5
  configurations' means, and within each seed (the 5 runs of one seed), with the pairs of configurations whose
  means a metric orders unlike kNN, and unlike Wang–Isola uniformity;
* ``summary.md``: the page's tables (mean ± std, the per-seed values, the rank agreement), from the above;
* ``profile.csv``: each configuration's pooled measured profile (the report's pooling, ``hardness_curves``);
* ``geometry_vs_knn.png``: each metric against kNN, one point per run.

Deterministic: running it again on the same runs rewrites the same files.
"""

from __future__ import annotations

import csv
import itertools
import json
import statistics
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import torch
from scipy import stats

OUT = Path(__file__).resolve().parent / "beyond_study"
sys.path.insert(0, str(OUT.parent.parent))

from ssl_app.report.events import read_events  # noqa: E402
from ssl_app.report.groups import group_runs  # noqa: E402
from ssl_app.report.hardness import _last_profile, hardness_curves  # noqa: E402
from ssl_app.report.paired import t_interval, t_test_p  # noqa: E402
from ssl_app.report.runs import load_runs  # noqa: E402
from ssl_app.report.significance import ALPHA, holm_adjusted  # noqa: E402
from ssl_app.report.summary import build_rows  # noqa: E402
from ssl_app.runs.layout import newest_done_evaluation  # noqa: E402

#: The report's columns the page reads (key in the report's table.csv).
REPORT_KEYS = (
    "knn_acc", "uniformity", "tolerance", "alignment", "pos_sim", "top10_neg_sim", "effective_negatives",
    "effective_rank", "effective_rank_backbone",
)  # fmt: skip
#: The geometry metrics of the validation of each run's last checkpoint (issue 41 item 2), and its kNN and
#: effective rank, which must equal the training's last values (the same weights, the same evaluation images).
VALIDATE_TAGS = {
    "wasserstein_uniformity": "metrics/wasserstein_uniformity",
    "lidar": "metrics/lidar",
    "validate_knn_acc": "metrics/knn_acc",
    "validate_uniformity": "metrics/uniformity",
    "validate_effective_rank": "metrics/effective_rank",
}
#: The metrics compared pairwise (one Holm family) and ranked against kNN: (key, digits quoted).
COMPARED = (
    ("knn_acc", 2), ("uniformity", 3), ("tolerance", 3), ("top10_neg_sim", 3), ("wasserstein_uniformity", 3),
    ("lidar", 2), ("effective_rank", 2), ("effective_rank_backbone", 2),
)  # fmt: skip
#: Ranked against kNN (higher = "better" in every one of them: −W₂ is 0 at best, uniformity is −log of the potential).
RANKED = ("uniformity", "wasserstein_uniformity", "lidar", "effective_rank", "effective_rank_backbone", "tolerance")
MINUS = "−"


def signed(value: float, digits: int) -> str:
    return f"{MINUS if value < 0 else '+'}{abs(value):.{digits}f}"


def profile_numbers(run) -> tuple[float | None, float | None]:
    """(log-slope of the share over the bins holding negatives with a share > 0, weights √negatives;
    fraction of the negatives in bins whose mean share is ≤ 0): docs/hardness_study.md's definitions."""
    profile = _last_profile(run)
    if profile is None:
        return None, None
    s, w, n = profile
    keep = (n > 0) & (w > 0)
    slope = float(np.polyfit(s[keep], np.log(w[keep]), 1, w=np.sqrt(n[keep]))[0]) if keep.sum() >= 2 else None
    return slope, float(n[(n > 0) & (w <= 0)].sum() / n.sum())


def provenance(folder: Path) -> tuple[str, float | None]:
    """The commit a run (or evaluation) ran at and its wall time in seconds, from its run record."""
    record = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    started, ended = (record.get(key) for key in ("started", "ended"))
    seconds = (datetime.fromisoformat(ended) - datetime.fromisoformat(started)).total_seconds() if started and ended else None
    return record.get("git_commit") or "", seconds


def sigmoid_state(run) -> tuple[float | None, float | None]:
    """The Sigmoid loss's learnt τ and bias from the run's last checkpoint (None for another loss)."""
    path = run.path / "checkpoints" / "last.ckpt"
    if not path.is_file():
        return None, None
    state = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
    bias = [v for k, v in state.items() if k.endswith("loss.bias")]
    if not bias:
        return None, None
    tau = run.events.last("loss/temperature_epoch") if run.events else None
    return tau, float(bias[0])


def per_seed(rows) -> list[dict]:
    records = []
    for row in rows:
        for index, run in enumerate(row.runs):
            record = {"configuration": row.configuration.label, "point": run.name.rsplit("/", 1)[0], "seed": run.seed}
            for key in REPORT_KEYS:
                record[key] = row.values["top{k}_neg_sim" if key == "top10_neg_sim" else key][index]
            folder = newest_done_evaluation(run.path, "validate")
            events = read_events(folder) if folder is not None else None
            for key, tag in VALIDATE_TAGS.items():
                value = events.last(tag) if events is not None else None
                record[key] = None if value is None else value * (100.0 if key.endswith("knn_acc") else 1.0)
            record["validate_folder"] = folder.name if folder is not None else ""
            record["git_commit"], record["fit_seconds"] = provenance(run.path)
            record["validate_git_commit"], record["validate_seconds"] = provenance(folder) if folder is not None else ("", None)
            record["log_slope"], record["share_le_0"] = profile_numbers(run)
            record["sigmoid_tau"], record["sigmoid_bias"] = sigmoid_state(run)
            record["sigmoid_scale"] = 1.0 / record["sigmoid_tau"] if record["sigmoid_tau"] else None
            # −W₂ as the training logged it, for the runs that trained with the geometry metrics' code
            record["fit_wasserstein_uniformity"] = run.events.last(VALIDATE_TAGS["wasserstein_uniformity"])
            records.append(record)
    return records


def logged(records: list[dict], label: str, key: str) -> list[dict]:
    """The runs of configuration ``label`` that have a value in ``key``."""
    return [r for r in records if r["configuration"] == label and r[key] is not None]


def mean_of(records: list[dict], label: str, key: str) -> float | None:
    values = [r[key] for r in logged(records, label, key)]
    return statistics.fmean(values) if values else None


def comparisons(records: list[dict], labels: list[str]) -> list[dict]:
    """Every pair (a before b in the table's order) in every compared metric the runs logged; Holm over all."""
    found = []
    for key, digits in COMPARED:
        values = {label: {r["seed"]: r[key] for r in logged(records, label, key)} for label in labels}
        for a, b in itertools.combinations(labels, 2):
            seeds = sorted(values[a].keys() & values[b].keys())
            if len(seeds) < 3:
                continue
            d = [values[a][seed] - values[b][seed] for seed in seeds]
            low, high = t_interval(d)
            found.append({"metric": key, "a": a, "b": b, "pairs": len(seeds), "seeds": " ".join(map(str, seeds)),
                          "differences": " ".join(repr(x) for x in d), "delta": statistics.fmean(d), "low": low,
                          "high": high, "p": t_test_p(d), "digits": digits})  # fmt: skip
    for row, adjusted in zip(found, holm_adjusted([row["p"] for row in found])):
        row["holm_m"] = len(found)
        row["holm_p"] = adjusted
        row["holm"] = "called" if adjusted <= ALPHA else "not called"
        row["interval"] = "covers 0" if row["low"] <= 0 <= row["high"] else "excludes 0"
        row["quote"] = quote(row)
    return found


def quote(row: dict) -> str:
    d = row["digits"]
    p = "<0.001" if row["holm_p"] < 0.001 else f"{row['holm_p']:.3f}"
    interval = f"Δ {signed(row['delta'], d)} [{signed(row['low'], d)}, {signed(row['high'], d)}]"
    return f"{interval} (p̃ {p}, {row['holm']})"


def orders(records: list[dict], labels: list[str]) -> list[dict]:
    found = []
    keys = [key for key, _ in COMPARED] + ["log_slope", "share_le_0"]
    means = {key: {label: mean_of(records, label, key) for label in labels} for key in keys}
    for label in labels:
        row = {"configuration": label}
        for key in keys:
            row[f"{key}_mean"] = means[key][label]
            values = [r[key] for r in logged(records, label, key)]
            row[f"{key}_std"] = statistics.stdev(values) if len(values) > 1 else None
            present = [m for m in means[key].values() if m is not None]
            row[f"{key}_rank"] = 1 + sum(m > means[key][label] for m in present) if means[key][label] is not None else None
        found.append(row)
    return found


def rank_agreement(records: list[dict], labels: list[str]) -> list[dict]:
    """Kendall's τ_b of each metric with kNN: over the runs, over the configurations' means, within each seed."""
    found = []
    seeds = sorted({r["seed"] for r in records})
    for key in RANKED:
        runs = [r for r in records if r[key] is not None and r["knn_acc"] is not None]
        if len(runs) < 3:
            continue
        pooled = stats.kendalltau([r[key] for r in runs], [r["knn_acc"] for r in runs])
        means = [(statistics.fmean(r[key] for r in runs if r["configuration"] == label),
                  statistics.fmean(r["knn_acc"] for r in runs if r["configuration"] == label)) for label in labels]  # fmt: skip
        between = stats.kendalltau([m for m, _ in means], [k for _, k in means])
        within = []
        for seed in seeds:
            one = [r for r in runs if r["seed"] == seed]
            within.append(stats.kendalltau([r[key] for r in one], [r["knn_acc"] for r in one]).statistic)
        discordant = [f"{a} / {b}" for (a, (ma, ka)), (b, (mb, kb)) in itertools.combinations(zip(labels, means), 2)
                      if (ma - mb) * (ka - kb) < 0]  # fmt: skip
        wang_isola = [mean_of(records, label, "uniformity") for label in labels]
        against_uniformity = [
            f"{a} / {b}" for (a, (ma, _), ua), (b, (mb, _), ub) in itertools.combinations(zip(labels, means, wang_isola), 2)
            if (ma - mb) * (ua - ub) < 0
        ]  # fmt: skip
        found.append({
            "metric": key, "runs": len(runs), "tau_runs": pooled.statistic, "p_runs": pooled.pvalue,
            "tau_means": between.statistic, "p_means": between.pvalue,
            "tau_within_seed": " ".join(f"{t:.3f}" for t in within), "tau_within_seed_mean": statistics.fmean(within),
            "discordant_pairs_of_means": len(discordant), "discordant": "; ".join(discordant),
            "pairs_ordered_unlike_uniformity": len(against_uniformity), "unlike_uniformity": "; ".join(against_uniformity),
        })  # fmt: skip
    return found


def write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        path.write_text("", encoding="utf-8")
        return
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})


def write_comparisons_md(path: Path, found: list[dict]) -> None:
    called = sum(row["holm"] == "called" for row in found)
    lines = [
        "# The beyond-softmax study's paired comparisons (written by `python docs/beyond_study.py`)",
        "",
        f"Every pair of the 5 configurations in every metric below: Δ = a − b over the 3 shared seeds, its 95% "
        f"t-interval (2 df) and the paired t-test's p (`ssl_app.report.paired`), Holm-adjusted over all m = {len(found)} "
        f"at once (`ssl_app.report.significance.holm_adjusted`); called where p̃ ≤ {ALPHA:g}. Holm calls {called} of "
        f"the {len(found)}. The per-seed values are in `per_seed.csv`.",
        "",
        "| metric | a | b | Δ [95% interval] (p̃, decision) | p | interval |",
        "|---|---|---|---|---|---|",
    ]
    for row in found:
        lines.append(f"| {row['metric']} | {row['a']} | {row['b']} | {row['quote']} | {row['p']:.4f} | {row['interval']} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_profiles(path: Path, rows) -> None:
    out = []
    for curve in hardness_curves(rows):
        for s, share, negatives in zip(curve.similarity, curve.share, curve.negatives):
            out.append({"configuration": curve.label, "s": float(s), "mean_share": float(share),
                        "negatives": float(negatives), "per_anchor": curve.per_anchor, "runs": curve.runs})  # fmt: skip
    write_csv(path, out)


SUMMARY_COLUMNS = (
    ("knn_acc", "kNN (%)", 2), ("uniformity", "uniformity", 3), ("tolerance", "tolerance", 3),
    ("wasserstein_uniformity", "−W₂", 3), ("lidar", "LiDAR", 2), ("effective_rank", "eff. rank", 2),
    ("effective_rank_backbone", "RankMe", 2), ("log_slope", "log-slope", 2), ("share_le_0", "share ≤ 0", 2),
)  # fmt: skip


def cell(values: list[float], digits: int) -> str:
    if not values:
        return ""
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{plain(statistics.fmean(values), digits)} ± {sd:.{digits}f}"


def plain(value: float, digits: int) -> str:
    """``value`` at ``digits`` decimals with the typographic minus of the pages."""
    return f"{value:.{digits}f}".replace("-", MINUS)


def write_summary_md(path: Path, records: list[dict], labels: list[str], agreement: list[dict]) -> None:
    """The page's tables: mean ± std per configuration, the per-seed values, the rank agreement with kNN."""
    head = [name for _, name, _ in SUMMARY_COLUMNS]
    lines = ["| configuration | n | " + " | ".join(head) + " |", "|---" * (len(head) + 2) + "|"]
    for label in labels:
        cells = [cell([r[key] for r in logged(records, label, key)], d) for key, _, d in SUMMARY_COLUMNS]
        lines.append(f"| {label} | {len(logged(records, label, 'knn_acc'))} | " + " | ".join(cells) + " |")
    lines += ["", "| configuration | seed | " + " | ".join(head) + " |", "|---" * (len(head) + 2) + "|"]
    for r in records:
        cells = ["" if r[key] is None else plain(r[key], d) for key, _, d in SUMMARY_COLUMNS]
        lines.append(f"| {r['configuration']} | {r['seed']} | " + " | ".join(cells) + " |")
    lines += ["", "| metric | Kendall τ_b with kNN, 15 runs (p) | τ_b, 5 means (p) | τ_b within each seed | pairs of means "
              "ordered unlike kNN | pairs of means ordered unlike uniformity |", "|---|---|---|---|---|---|"]  # fmt: skip
    for a in agreement:
        lines.append(
            f"| {a['metric']} | {a['tau_runs']:.3f} ({a['p_runs']:.3f}) | {a['tau_means']:.3f} ({a['p_means']:.3f}) | "
            f"{a['tau_within_seed']} | {a['discordant_pairs_of_means']}: {a['discordant']} | "
            f"{a['pairs_ordered_unlike_uniformity']}: {a['unlike_uniformity']} |"
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def figure(path: Path, records: list[dict], labels: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = {"uniformity": "uniformity (Wang–Isola)", "wasserstein_uniformity": "−W₂", "lidar": "LiDAR",
             "effective_rank": "effective rank (embedding)", "effective_rank_backbone": "RankMe (backbone)",
             "tolerance": "tolerance"}  # fmt: skip
    keys = [key for key in RANKED if any(r[key] is not None for r in records)]
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3.2), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for label in labels:
            one = [r for r in records if r["configuration"] == label and r[key] is not None]
            ax.scatter([r[key] for r in one], [r["knn_acc"] for r in one], label=label, s=22)
        ax.set_xlabel(names[key])
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("kNN (%)")
    axes[0][-1].legend(fontsize=6, loc="best")
    fig.suptitle("Each run's final metric against its kNN accuracy (beyond-softmax study, CPU scale)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(root: Path) -> None:
    rows = build_rows(group_runs(load_runs(root)))
    labels = [row.configuration.label for row in rows]
    records = per_seed(rows)
    OUT.mkdir(exist_ok=True)
    write_csv(OUT / "per_seed.csv", records)
    found = comparisons(records, labels)
    write_csv(OUT / "comparisons.csv", found)
    write_comparisons_md(OUT / "comparisons.md", found)
    write_csv(OUT / "orders.csv", orders(records, labels))
    agreement = rank_agreement(records, labels)
    write_csv(OUT / "rank_agreement.csv", agreement)
    write_summary_md(OUT / "summary.md", records, labels, agreement)
    write_profiles(OUT / "profile.csv", rows)
    figure(OUT / "geometry_vs_knn.png", records, labels)
    print(f"{len(records)} runs, {len(found)} comparisons, Holm calls {sum(r['holm'] == 'called' for r in found)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
