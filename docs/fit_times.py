"""What a re-run study's runs took, from their run records: ``python docs/fit_times.py RUNS_DIR DOCS_FOLDER``.

One row per run record under RUNS_DIR: each fit's (``<point>/seed<k>/run.json``) and each evaluation's inside it
(``evaluations/linear_0/run.json``, …): its folder relative to RUNS_DIR, kind, status, the commit it ran at
(``git_commit``), when it started and ended (the record's whole seconds, UTC) and the wall time between. Written to
``DOCS_FOLDER/fits.csv``, the times a study's page quotes.
"""

from __future__ import annotations

import csv
import json
import sys
from datetime import datetime
from pathlib import Path


def records(root: Path) -> list[dict]:
    found = []
    for path in sorted(root.rglob("run.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        started, ended = record.get("started"), record.get("ended")
        seconds = (datetime.fromisoformat(ended) - datetime.fromisoformat(started)).total_seconds() if started and ended else ""
        found.append({
            "run": path.parent.relative_to(root).as_posix(), "kind": record.get("kind", ""),
            "status": record.get("status", ""), "git_commit": record.get("git_commit") or "",
            "started": started or "", "ended": ended or "", "seconds": seconds,
        })  # fmt: skip
    return found


def main(root: Path, folder: Path) -> None:
    found = records(root)
    with (folder / "fits.csv").open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(found[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(found)
    fits = [r for r in found if r["kind"] == "fit"]
    print(f"{len(found)} records, {len(fits)} fits, {sum(r['seconds'] for r in fits) / 60:.1f} min of fit time")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
