"""The hardness study's measured profiles, run by run (docs/hardness_study.md): ``python docs/hardness_study.py RUNS_DIR``.

Reads every finished run of the sweep with the report's own readers (``ssl_app.report``: the runs, their grouping
and labels, each run's last ``hardness/mean_share`` and ``hardness/negatives`` histograms) and writes into
``docs/hardness_study/``:

* ``profile_bins.csv``: one row per run and similarity bin that held negatives: the bin's centre s, the mean share
  of its anchor's penalty a negative there received, and how many negatives it held (the run's last profile, the
  second epoch's logged steps);
* ``profile_slopes.csv``: one row per run, each slope with the bins it is fitted on:

  - ``log_slope``: the least-squares slope of ln(mean share) against s over **every bin holding negatives with a
    share > 0**, each bin weighted by √negatives (numpy's ``polyfit`` weights; InfoNCE: 1/τ up to the binning);
  - ``upper_log_slope``: the same fit over the **upper bins**, s ≥ 0.45 (centres 0.45 … 0.95), the same bins for
    every loss: right of the rise where the hard loss and HCL go from no share to a share (each anchor's cut lies
    at its own similarity, so that rise spans several bins), so that among the negatives every loss pushes, the
    slopes compare on one footing;
  - ``share_le_0``: the fraction of the negatives in bins whose mean share is ≤ 0 (negatives the loss does not push);

* ``profile_summary.md``: mean ± sample std over each configuration's seeds, and the per-seed values.

Deterministic: running it again on the same runs rewrites the same files.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "hardness_study"
sys.path.insert(0, str(OUT.parent.parent))

from paired_studies import write_csv  # noqa: E402  (docs/, the script's own folder)

from ssl_app.report.groups import group_runs  # noqa: E402
from ssl_app.report.hardness import _last_profile  # noqa: E402
from ssl_app.report.runs import load_runs  # noqa: E402
from ssl_app.report.summary import build_rows  # noqa: E402

MINUS = "−"


def fit(s: np.ndarray, share: np.ndarray, negatives: np.ndarray) -> float:
    """Weighted least-squares slope of ln(share) against s (weights √negatives, numpy's ``polyfit`` convention)."""
    return float(np.polyfit(s, np.log(share), 1, w=np.sqrt(negatives))[0])


#: The upper bins' lowest centre: ``upper_log_slope`` is fitted on the bins of centre ≥ this.
UPPER = 0.45


def span(s: np.ndarray) -> tuple[float, float, int]:
    return round(float(s.min()), 2), round(float(s.max()), 2), len(s)


def slopes(rows) -> tuple[list[dict], list[dict]]:
    """(per-bin rows, per-run rows) of every finished run's last profile."""
    bins, runs = [], []
    for row in rows:
        for run in row.runs:
            profile = _last_profile(run)
            if profile is None:
                print("no profile:", run.name)
                continue
            s, share, negatives = (np.asarray(x, dtype=float) for x in profile)
            held = negatives > 0
            s, share, negatives = s[held], share[held], negatives[held]
            label, seed = row.configuration.label, run.seed
            for centre, w, n in zip(s, share, negatives):
                bins.append({"configuration": label, "seed": seed, "s": round(float(centre), 2),
                             "mean_share": float(w), "negatives": float(n)})  # fmt: skip
            positive, kept = share > 0, (s >= UPPER - 1e-9) & (share > 0)
            low, high, count = span(s[positive])
            k_low, k_high, k_count = span(s[kept])
            runs.append({
                "configuration": label, "seed": seed, "run": run.name,
                "log_slope": fit(s[positive], share[positive], negatives[positive]),
                "s_low": low, "s_high": high, "bins": count,
                "upper_log_slope": fit(s[kept], share[kept], negatives[kept]),
                "upper_s_low": k_low, "upper_s_high": k_high, "upper_bins": k_count,
                "share_le_0": float(negatives[share <= 0].sum() / negatives.sum()),
            })  # fmt: skip
    return bins, runs


def plain(value: float, digits: int) -> str:
    return f"{value:.{digits}f}".replace("-", MINUS)


def summary(runs: list[dict]) -> str:
    """Mean ± sample std per configuration, then each run, with the bins each slope is fitted on."""
    head = "| configuration | n | log-slope (bins: share > 0) | upper-bin log-slope (bins) | negatives at share ≤ 0 |"
    lines = [head, "|---|---|---|---|---|"]
    labels = list(dict.fromkeys(r["configuration"] for r in runs))
    for label in labels:
        mine = [r for r in runs if r["configuration"] == label]
        cells = []
        for key, where in (("log_slope", "s_"), ("upper_log_slope", "upper_s_"), ("share_le_0", None)):
            values = [r[key] for r in mine]
            text = f"{plain(statistics.fmean(values), 2)} ± {statistics.stdev(values):.2f}"
            if where:
                spans = sorted({f"s = {plain(r[where + 'low'], 2)}–{r[where + 'high']:.2f}" for r in mine})
                text += f" ({', '.join(spans)})"
            cells.append(text)
        lines.append(f"| {label} | {len(mine)} | " + " | ".join(cells) + " |")
    lines += ["", "| configuration | seed | log-slope | bins | upper-bin log-slope | bins | share ≤ 0 |", "|---" * 7 + "|"]
    for r in runs:
        lines.append(
            f"| {r['configuration']} | {r['seed']} | {plain(r['log_slope'], 2)} | s = {plain(r['s_low'], 2)}–"
            f"{r['s_high']:.2f} ({r['bins']}) | {plain(r['upper_log_slope'], 2)} | s = {plain(r['upper_s_low'], 2)}–"
            f"{r['upper_s_high']:.2f} ({r['upper_bins']}) | {r['share_le_0']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(root: Path) -> None:
    rows = build_rows(group_runs(load_runs(root)))
    bins, runs = slopes(rows)
    OUT.mkdir(exist_ok=True)
    write_csv(OUT / "profile_bins.csv", bins)
    write_csv(OUT / "profile_slopes.csv", runs)
    text = summary(runs)
    (OUT / "profile_summary.md").write_text(text, encoding="utf-8")
    print(text, end="")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
