"""The τ study's paths, epoch by epoch (docs/tau_study.md): ``python docs/tau_study.py RUNS_DIR``.

Reads every finished run of the sweep with the report's own readers (the runs, their grouping and labels, their
events) and writes into ``docs/tau_study/``:

* ``epochs.csv``: one row per run and epoch: τ at the epoch's last step (``loss/temperature_epoch``), uniformity,
  tolerance and kNN (%) at the end of the epoch (``metrics/uniformity``, ``metrics/tolerance``,
  ``metrics/knn_acc``);
* ``epoch_means.csv``: each configuration's mean of those over its seeds, epoch by epoch (the path table);
* ``run_averages.csv``: one row per run: τ, uniformity and tolerance averaged over its epochs, and its lowest
  uniformity and highest tolerance at the ends of epochs 5–7 (around the cosine's lowest τ), the per-seed values
  ``docs/paired_studies.py`` compares (the final values, shot groups included, are the report's ``runs.csv``);
* ``paths.md``: the path table and the run averages (mean ± sample std over seeds), as the page shows them.

Deterministic: running it again on the same runs rewrites the same files.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "tau_study"
sys.path.insert(0, str(OUT.parent.parent))

from paired_studies import write_csv  # noqa: E402  (docs/, the script's own folder)

from ssl_app.report.groups import group_runs  # noqa: E402
from ssl_app.report.runs import load_runs  # noqa: E402
from ssl_app.report.summary import build_rows  # noqa: E402

#: Per-epoch tags (key: tag, scale).
EPOCH_TAGS = {
    "tau": ("loss/temperature_epoch", 1.0),
    "uniformity": ("metrics/uniformity", 1.0),
    "tolerance": ("metrics/tolerance", 1.0),
    "knn_acc": ("metrics/knn_acc", 100.0),
}
MINUS = "−"
#: The epochs around the cosine schedule's lowest τ (0.1 at the middle of its 12-epoch period, the end of epoch 6).
LOWEST = (5, 6, 7)


def per_epoch(run, tag: str) -> list[float]:
    return [value for _, value in run.events.scalars.get(tag, [])]


def collect(rows) -> tuple[list[dict], list[dict]]:
    """(per-epoch rows, per-run rows) of every finished run."""
    epochs, runs = [], []
    for row in rows:
        for run in row.runs:
            label, seed = row.configuration.label, run.seed
            series = {key: [scale * v for v in per_epoch(run, tag)] for key, (tag, scale) in EPOCH_TAGS.items()}
            count = min(len(values) for values in series.values())
            for epoch in range(count):
                epochs.append({"configuration": label, "seed": seed, "epoch": epoch + 1,
                               **{key: values[epoch] for key, values in series.items()}})  # fmt: skip
            record = {"configuration": label, "seed": seed, "run": run.name, "epochs": count}
            for key in ("tau", "uniformity", "tolerance"):
                record[f"{key}_epoch_mean"] = statistics.fmean(series[key][:count])
            low = slice(LOWEST[0] - 1, LOWEST[-1])  # the epochs around the cosine's lowest τ
            record["uniformity_min_epochs5to7"] = min(series["uniformity"][low]) if count >= LOWEST[-1] else None
            record["tolerance_max_epochs5to7"] = max(series["tolerance"][low]) if count >= LOWEST[-1] else None
            runs.append(record)
    return epochs, runs


def epoch_means(epochs: list[dict]) -> list[dict]:
    found = []
    labels = list(dict.fromkeys(e["configuration"] for e in epochs))
    for label in labels:
        mine = [e for e in epochs if e["configuration"] == label]
        for epoch in sorted({e["epoch"] for e in mine}):
            at = [e for e in mine if e["epoch"] == epoch]
            row = {"configuration": label, "epoch": epoch, "n": len(at)}
            row |= {key: statistics.fmean(e[key] for e in at) for key in EPOCH_TAGS}
            found.append(row)
    return found


def mean_std(values: list[float], digits: int) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.{digits}f} ± {sd:.{digits}f}".replace("-", MINUS)


def tables(means: list[dict], runs: list[dict]) -> str:
    labels = list(dict.fromkeys(m["configuration"] for m in means))
    varying = [label for label in labels if len({round(m["tau"], 6) for m in means if m["configuration"] == label}) > 1]
    head = [f"τ {label}" for label in varying]
    head += [f"{key} {label}" for key in ("uniformity", "tolerance", "kNN (%)") for label in labels]
    lines = ["| epoch | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for epoch in sorted({m["epoch"] for m in means}):
        at = {m["configuration"]: m for m in means if m["epoch"] == epoch}
        cells = [f"{at[label]['tau']:.3f}" for label in varying]
        for key, digits in (("uniformity", 3), ("tolerance", 3), ("knn_acc", 1)):
            cells += [f"{at[label][key]:.{digits}f}" for label in labels]
        lines.append(f"| {epoch} | " + " | ".join(cells) + " |")
    head = ["configuration", "n", "τ, mean over epochs", "uniformity, mean over epochs", "tolerance, mean over epochs"]
    lines += ["", "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for label in labels:
        mine = [r for r in runs if r["configuration"] == label]
        cells = [mean_std([r[f"{key}_epoch_mean"] for r in mine], 3) for key in ("tau", "uniformity", "tolerance")]
        lines.append(f"| {label} | {len(mine)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(root: Path) -> None:
    rows = build_rows(group_runs(load_runs(root)))
    epochs, runs = collect(rows)
    means = epoch_means(epochs)
    OUT.mkdir(exist_ok=True)
    write_csv(OUT / "epochs.csv", epochs)
    write_csv(OUT / "epoch_means.csv", means)
    write_csv(OUT / "run_averages.csv", runs)
    text = tables(means, runs)
    (OUT / "paths.md").write_text(text, encoding="utf-8")
    print(text, end="")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
