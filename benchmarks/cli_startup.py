"""Seconds until ``python -m ssl_app`` answers ``--help``, ``list`` and argument errors, beside a bare ``import torch``.

Each command runs as a fresh process, ``--rounds`` times, the commands alternated within each round so a change
of load on the machine falls on all of them alike; the median of each is printed with the load average before
and after. ``--tree DIR`` measures another checkout (PYTHONPATH=DIR, run from DIR), e.g. an older commit in a
``git worktree``, side by side with this one::

    python benchmarks/cli_startup.py --rounds 5 --tree /tmp/old-main
    python benchmarks/cli_startup.py --rounds 3 --caches cold cached --only "import torch (bare)" "fit --help"

``--caches cold cached`` measures each command with an empty cache folder (the first call after an install or an
edit: ``list`` and ``--help`` read the parser and the registries) and with a filled one (every later call).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = ["--config", "configs/quickstart.yaml"]
#: A linear probe of a checkpoint that need not exist: the error measured comes before it is read.
LINEAR = ["--config", "configs/linear.yaml", "--model.init_args.checkpoint=last.ckpt"]
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
    "fit: image_size 4": ["-m", "ssl_app", "fit", *QUICKSTART, "--data.init_args.image_size=4"],
    "fit: optim gamma 2": ["-m", "ssl_app", "fit", *QUICKSTART, "--model.init_args.optim.gamma=2"],
    "fit: accumulate_grad_batches 0": ["-m", "ssl_app", "fit", *QUICKSTART, "--trainer.accumulate_grad_batches=0"],
    "fit: max_epochs -5": ["-m", "ssl_app", "fit", *QUICKSTART, "--trainer.max_epochs=-5"],
    "fit: val_check_interval abc": ["-m", "ssl_app", "fit", *QUICKSTART, "--trainer.val_check_interval=abc"],
    "fit: logger named alone, misspelled": ["-m", "ssl_app", "fit", *QUICKSTART, "--trainer.logger=TensorBoardLoger"],
    "fit: logger path misspelled": [
        "-m",
        "ssl_app",
        "fit",
        *QUICKSTART,
        "--trainer.logger=lightning.pytorch.loggers.TensorBoardLoger",
    ],
    "fit: callback named alone, misspelled": ["-m", "ssl_app", "fit", *QUICKSTART, "--trainer.callbacks+=KNNMonitorr"],
    "fit: MoCo queue_size 0": ["-m", "ssl_app", "fit", "--config", "configs/moco.yaml", "--model.init_args.queue_size=0"],
    "fit: proj_dim 0": ["-m", "ssl_app", "fit", *QUICKSTART, "--model.init_args.proj_dim=0"],
    "fit: bank proj_layers": ["-m", "ssl_app", "fit", "--config", "configs/memory_bank.yaml", "--model.init_args.proj_layers=0"],
    "fit: probe num_classes 1": ["-m", "ssl_app", "fit", *LINEAR, "--model.init_args.num_classes=1"],
    "sweep: empty grid value": ["-m", "ssl_app.sweep", *QUICKSTART, "--grid", "tau=0.5,,0.2", "--dry-run"],
    "fit --help": ["-m", "ssl_app", "fit", "--help"],
    "fit --config --help": ["-m", "ssl_app", "fit", *QUICKSTART, "--help"],
    "validate --help": ["-m", "ssl_app", "validate", "--help"],
    "test --help": ["-m", "ssl_app", "test", "--help"],
    "export --help": ["-m", "ssl_app", "export", "--help"],
    "embed --help": ["-m", "ssl_app", "embed", "--help"],
    "export: no --ckpt": ["-m", "ssl_app", "export", "--out", "encoder.pt"],
    "report --help": ["-m", "ssl_app.report", "--help"],
    "report: unknown option": ["-m", "ssl_app.report", "runs", "--bogus"],
    "sweep --help": ["-m", "ssl_app.sweep", "--help"],
    "sweep: bad --seeds": ["-m", "ssl_app.sweep", *QUICKSTART, "--seeds", "a"],
}
#: ``--caches``: ``cold``, every call with an empty cache folder (the first call after an install or an edit);
#: ``cached``, one folder per tree filled by an untimed call of each command first; ``user``, the environment's.
CACHES = ("cold", "cached", "user")


def seconds(args: list[str], tree: Path, cache: Optional[Path] = None) -> float:
    """Wall-clock seconds of ``python args`` in ``tree`` (its output discarded), with ``SSL_APP_CACHE=cache`` if given."""
    env = {**os.environ, "PYTHONPATH": str(tree), **({"SSL_APP_CACHE": str(cache)} if cache is not None else {})}
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", type=Path, default=None, help="another checkout, measured beside this one")
    parser.add_argument("--only", nargs="*", default=None, help="names of COMMANDS to measure (default: all)")
    parser.add_argument("--caches", nargs="+", choices=CACHES, default=["user"], help="see CACHES (default: user)")
    args = parser.parse_args()
    trees = {"this": REPO, **({"other": args.tree.resolve()} if args.tree else {})}
    chosen = {name: cmd for name, cmd in COMMANDS.items() if args.only is None or name in args.only}
    columns = [(label, mode) for label in trees for mode in args.caches]
    times: dict[tuple[str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="cli_startup_") as scratch:
        kept = {label: Path(scratch) / f"kept-{label}" for label in trees}
        if "cached" in args.caches:
            for cmd in chosen.values():
                for label, tree in trees.items():
                    seconds(cmd, tree, kept[label])
        load_before = os.getloadavg()
        for round_ in range(args.rounds):
            for name, cmd in chosen.items():
                for label, mode in columns:
                    if label != "this" and "(bare)" in name:
                        continue
                    cache = {"cold": Path(scratch) / f"cold-{round_}-{name}-{label}", "cached": kept[label]}.get(mode)
                    times.setdefault((name, label, mode), []).append(seconds(cmd, trees[label], cache))
        load_after = os.getloadavg()
    print(f"load average (1, 5, 15 min) before {load_before}, after {load_after}; {os.cpu_count()} cores; {args.rounds} rounds")
    print(f"{'command':<30}" + "".join(f"{label + ' ' + mode:>22}" for label, mode in columns))
    for name in chosen:
        cells = []
        for label, mode in columns:
            found = times.get((name, label, mode))
            cells.append(f"{statistics.median(found):8.2f} s ({min(found):.1f}-{max(found):.1f})" if found else "")
        print(f"{name:<30}" + "".join(f"{cell:>22}" for cell in cells))


if __name__ == "__main__":
    main()
