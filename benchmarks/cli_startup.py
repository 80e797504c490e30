"""Seconds until ``python -m ssl_app`` answers ``--help``, ``list`` and argument errors, beside a bare ``import torch``.

Each command runs as a fresh process, ``--rounds`` times, the commands alternated within each round so a change
of load on the machine falls on all of them alike; the median of each is printed with the load average before
and after. ``--tree DIR`` measures another checkout (PYTHONPATH=DIR, run from DIR), e.g. an older commit in a
``git worktree``, side by side with this one::

    python benchmarks/cli_startup.py --rounds 5 --tree /tmp/old-main
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = ["--config", "configs/quickstart.yaml"]
#: name → arguments after ``python``: each answers before any work (status 0 or 2).
COMMANDS = {
    "import torch (bare)": ["-c", "import torch"],
    "import lightning (bare)": ["-c", "import lightning.pytorch"],
    "ssl_app --help": ["-m", "ssl_app", "--help"],
    "ssl_app list --help": ["-m", "ssl_app", "list", "--help"],
    "fti (misspelled command)": ["-m", "ssl_app", "fti"],
    "list losses": ["-m", "ssl_app", "list", "losses"],
    "list (all)": ["-m", "ssl_app", "list"],
    "fit: misspelled loss class": ["-m", "ssl_app", "fit", *QUICKSTART, "--model.init_args.loss=ssl_app.losses.InfoNCe"],
    "fit: misspelled option": ["-m", "ssl_app", "fit", *QUICKSTART, "--trainer.max_epoch=3"],
    "fit: misspelled loss option": ["-m", "ssl_app", "fit", *QUICKSTART, "--model.init_args.loss.init_args.temperatur=0.2"],
    "fit: bad int value": ["-m", "ssl_app", "fit", *QUICKSTART, "--trainer.max_epochs=abc"],
    "fit: bad bool value": ["-m", "ssl_app", "fit", *QUICKSTART, "--trainer.enable_progress_bar=maybe"],
    "fit: negative tau": ["-m", "ssl_app", "fit", *QUICKSTART, "--model.init_args.loss.init_args.temperature=-1"],
    "fit: backbone not a choice": ["-m", "ssl_app", "fit", *QUICKSTART, "--model.init_args.backbone=small_cnnn"],
    "fit: misspelled loss module": ["-m", "ssl_app", "fit", *QUICKSTART, "--model.init_args.loss=ssl_app.loses.InfoNCE"],
    "fit: misspelled logger class": [
        "-m",
        "ssl_app",
        "fit",
        *QUICKSTART,
        "--trainer.logger.class_path=lightning.pytorch.loggers.TensorBoardLoger",
    ],
    "fit: misspelled logger option": ["-m", "ssl_app", "fit", *QUICKSTART, "--trainer.logger.init_args.save_dirr=x"],
    "fit: devices not a count": ["-m", "ssl_app", "fit", *QUICKSTART, "--trainer.devices=abc"],
    "fit: tau not a tau": ["-m", "ssl_app", "fit", *QUICKSTART, "--model.init_args.loss.init_args.temperature=abc"],
    "fit: gradient_clip_val 0.x": ["-m", "ssl_app", "fit", *QUICKSTART, "--trainer.gradient_clip_val=0.x"],
    "fit: limit_train_batches 0.x": ["-m", "ssl_app", "fit", *QUICKSTART, "--trainer.limit_train_batches=0.x"],
    "fit: precision bogus": ["-m", "ssl_app", "fit", *QUICKSTART, "--trainer.precision=bogus"],
    "fit: seed_everything abc": ["-m", "ssl_app", "fit", *QUICKSTART, "--seed_everything=abc"],
    "fit: fast_dev_run maybe": ["-m", "ssl_app", "fit", *QUICKSTART, "--trainer.fast_dev_run=maybe"],
    "fit: dataclass lr abc": ["-m", "ssl_app", "fit", *QUICKSTART, "--model.init_args.optim.lr=abc"],
    "fit: negative batch size": ["-m", "ssl_app", "fit", *QUICKSTART, "--data.init_args.batch_size=-3"],
    "sweep: empty grid value": ["-m", "ssl_app.sweep", *QUICKSTART, "--grid", "tau=0.5,,0.2", "--dry-run"],
}


def seconds(args: list[str], tree: Path) -> float:
    """Wall-clock seconds of ``python args`` in ``tree`` (its output discarded)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", type=Path, default=None, help="another checkout, measured beside this one")
    parser.add_argument("--only", nargs="*", default=None, help="names of COMMANDS to measure (default: all)")
    args = parser.parse_args()
    trees = {"this": REPO, **({"other": args.tree.resolve()} if args.tree else {})}
    chosen = {name: cmd for name, cmd in COMMANDS.items() if args.only is None or name in args.only}
    times: dict[tuple[str, str], list[float]] = {}
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        for name, cmd in chosen.items():
            for label, tree in trees.items():
                if label != "this" and "(bare)" in name:
                    continue
                times.setdefault((name, label), []).append(seconds(cmd, tree))
    load_after = os.getloadavg()
    print(f"load average (1, 5, 15 min) before {load_before}, after {load_after}; {os.cpu_count()} cores; {args.rounds} rounds")
    print(f"{'command':<30}" + "".join(f"{label:>22}" for label in trees))
    for name in chosen:
        cells = []
        for label in trees:
            found = times.get((name, label))
            cells.append(f"{statistics.median(found):8.2f} s ({min(found):.1f}-{max(found):.1f})" if found else "")
        print(f"{name:<30}" + "".join(f"{cell:>22}" for cell in cells))


if __name__ == "__main__":
    main()
