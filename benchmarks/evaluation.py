"""Where an evaluation's time goes: the validation loop and each metric callback, and the projector
at the end of ``fit``, in a run built from a config as ``python -m ssl_app fit`` builds it.

    python benchmarks/evaluation.py --config configs/quickstart.yaml --epochs 3
    python benchmarks/evaluation.py --config configs/quickstart.yaml --against /path/to/older/checkout

``EvaluationTimer`` wraps the evaluation hooks of the trainer's other callbacks
(``on_validation_epoch_end``, ``on_validation_end``; ``on_train_end`` and ``on_fit_end`` for the end
of ``fit``) and adds up their wall time per
callback (after a device synchronisation, so a callback's queued GPU work is charged to it); the
**loop** is the time from the start of validation to its last batch (the validation steps and the
callbacks' per-batch hooks), **eval** the whole evaluation, from the start of validation to its end.
The first evaluation pays one-off costs (the callbacks' first set-up, a device image cache's build):
it is reported, and the steady value is the median of the later ones; at the end, each piece's least
time over every later evaluation of every round (on a shared machine, the least disturbed).

``--against DIR`` runs the same command in ``DIR`` (another checkout, e.g. the previous version: its
code and its configs) in a subprocess, alternating rounds with this tree: before and after side by
side on the same machine (benchmarks/README.md, "Evaluation").
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

#: The callback hooks an evaluation runs in; the end of ``fit`` (the projector writes in ``on_train_end``).
EVALUATION_HOOKS = ("on_validation_epoch_end", "on_validation_end")
END_HOOKS = ("on_train_end", "on_fit_end")


class EvaluationTimer(Callback):
    """Per evaluation: ``{"epoch", "eval", "loop", "callbacks": {name: seconds}}`` in ``evaluations``;
    the seconds per callback at the end of ``fit`` (the projector) in ``fit_end``. Callbacks of the
    ``ignore`` types (other timers) are not timed."""

    def __init__(self, ignore: tuple[type, ...] = ()) -> None:
        self.ignore = ignore
        self.evaluations: list[dict[str, Any]] = []
        self.fit_end: dict[str, float] = {}
        self._current: dict[str, float] = {}
        self._start = self._loop_end = 0.0
        self._wrapped = False

    def setup(self, trainer, pl_module, stage: str) -> None:
        if self._wrapped:
            return
        self._wrapped = True
        names: dict[str, int] = {}
        for callback in trainer.callbacks:
            if callback is self or isinstance(callback, self.ignore):
                continue
            name = type(callback).__name__
            names[name] = names.get(name, 0) + 1
            label = name if names[name] == 1 else f"{name}#{names[name]}"
            for hook in EVALUATION_HOOKS + END_HOOKS:
                if getattr(type(callback), hook) is not getattr(Callback, hook):  # overridden: it does work there
                    setattr(callback, hook, self._timed(getattr(callback, hook), label, hook in END_HOOKS))

    def _timed(self, hook, label: str, at_end: bool):
        @functools.wraps(hook)
        def timed(trainer, pl_module, *args, **kwargs):
            start = time.perf_counter()
            try:
                return hook(trainer, pl_module, *args, **kwargs)
            finally:
                _synchronize(pl_module.device)
                into = self.fit_end if at_end else self._current
                into[label] = into.get(label, 0.0) + time.perf_counter() - start

        return timed

    def on_validation_start(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            _synchronize(pl_module.device)
            self._start = self._loop_end = time.perf_counter()
            self._current = {}

    def on_validation_batch_end(self, trainer, pl_module, *args, **kwargs) -> None:
        self._loop_end = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            _synchronize(pl_module.device)
            self.evaluations.append({
                "epoch": trainer.current_epoch, "eval": time.perf_counter() - self._start,
                "loop": self._loop_end - self._start, "callbacks": dict(self._current),
            })  # fmt: skip

    def summary(self) -> dict[str, Any]:
        """``first`` (the first evaluation), ``steady`` (the median of each piece over the later
        ones; the first when there is only one) and ``fit_end``."""
        later = self.evaluations[1:] or self.evaluations[:1]
        names = sorted({name for evaluation in later for name in evaluation["callbacks"]})
        steady: dict[str, Any] = {
            key: statistics.median(evaluation[key] for evaluation in later) for key in ("eval", "loop")
        } if later else {}  # fmt: skip
        steady["callbacks"] = {name: statistics.median(e["callbacks"].get(name, 0.0) for e in later) for name in names}
        first = self.evaluations[0] if self.evaluations else None
        return {"first": first, "steady": steady, "later": later, "fit_end": dict(self.fit_end)}


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(config: list[str], epochs: int) -> dict[str, Any]:
    """Fit ``config`` for ``epochs`` epochs with an ``EvaluationTimer``; its summary."""
    from common import build_run

    work = Path(tempfile.mkdtemp(prefix="ssl_app_eval_"))
    cli = build_run([*config, f"--trainer.max_epochs={epochs}", f"--trainer.logger.init_args.save_dir={work}",
                     "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"])  # fmt: skip
    timer = EvaluationTimer()
    cli.trainer.callbacks.append(timer)
    cli.trainer.fit(cli.model, cli.datamodule)
    return timer.summary()


def best(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Each piece's least time over the later evaluations of several rounds (and the least end of fit)."""
    later = [evaluation for summary in summaries for evaluation in summary["later"]]
    names = sorted({name for evaluation in later for name in evaluation["callbacks"]})
    ends = sorted({name for summary in summaries for name in summary["fit_end"]})
    return {
        "first": min((s["first"] for s in summaries if s["first"]), key=lambda first: first["eval"], default=None),
        "steady": {"eval": min(e["eval"] for e in later), "loop": min(e["loop"] for e in later),
                   "callbacks": {name: min(e["callbacks"].get(name, 0.0) for e in later) for name in names}},
        "fit_end": {name: min(summary["fit_end"].get(name, 0.0) for summary in summaries) for name in ends},
    }  # fmt: skip


def describe(name: str, summary: dict[str, Any]) -> list[str]:
    steady = summary["steady"]
    lines = [f"{name}: evaluation {steady['eval']:.3f} s (loop {steady['loop']:.3f} s)"]
    lines += [f"  {callback}: {seconds:.3f} s" for callback, seconds in steady["callbacks"].items()]
    lines += [f"  at the end of fit, {callback}: {seconds:.3f} s" for callback, seconds in summary["fit_end"].items()]
    lines = [line for line in lines if not line.endswith(" 0.000 s")]  # callbacks that do nothing there
    first = summary["first"]
    if first is not None:
        lines.append(f"  first evaluation {first['eval']:.3f} s (loop {first['loop']:.3f} s)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", required=True)
    parser.add_argument("--set", nargs="*", default=[], help="config overrides, e.g. trainer.limit_train_batches=4")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--against", type=Path, help="another checkout, measured in a subprocess beside this tree")
    parser.add_argument("--json", type=Path, help="write the summaries here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = [part for path in args.config for part in ("--config", path)] + [f"--{item}" for item in args.set]
    results: dict[str, list[dict[str, Any]]] = {"this tree": []}
    if args.against is not None:
        results[str(args.against)] = []
    for _ in range(args.rounds):
        if args.against is not None:
            results[str(args.against)].append(_measure_in(args.against, args))
        results["this tree"].append(measure(config, args.epochs))
    for name, summaries in results.items():
        for summary in summaries:
            print("\n".join(describe(name, summary)))
    for name, summaries in results.items():  # on a shared machine the fastest is the least disturbed
        count = sum(len(summary["later"]) for summary in summaries)
        print("\n".join(describe(f"{name}, the least of {count} evaluations after the first", best(summaries))))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


def _measure_in(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    """This script's ``measure`` with ``tree`` first on the path (its ssl_app, callbacks, datamodules)."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "summary.json"
        code = (
            "import json, sys, torch; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
            "torch.set_num_threads(int(sys.argv[5])); from evaluation import measure; "
            "json.dump(measure(json.loads(sys.argv[3]), int(sys.argv[4])), open(sys.argv[6], 'w'))"
        )
        config = [part for path in args.config for part in ("--config", path)] + [f"--{item}" for item in args.set]
        env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{Path(__file__).parent}"}
        command = [sys.executable, "-c", code, str(tree), str(Path(__file__).parent), json.dumps(config), str(args.epochs),
                   str(args.threads), str(out)]  # fmt: skip
        subprocess.run(command, check=True, env=env, cwd=tree)  # its own configs
        return json.loads(out.read_text())


if __name__ == "__main__":
    sys.exit(main())
