"""Where an evaluation's time goes: the validation loop and each metric callback, and the projector
at the end of ``fit``, in a run built from a config as ``python -m ssl_app fit`` builds it.

    python benchmarks/evaluation.py --config configs/quickstart.yaml --epochs 3
    python benchmarks/evaluation.py --config configs/quickstart.yaml --against /path/to/older/checkout
    python benchmarks/evaluation.py --config configs/cifar10/simclr.yaml --fake-cifar10 50000 10000 --profile \
        --set model.init_args.backbone=small_cnn trainer.limit_train_batches=2 trainer.check_val_every_n_epoch=1

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

``--fake-cifar10 TRAIN TEST`` writes random 32×32 images in CIFAR-10's files (``common.fake_cifar10``)
to a temporary folder once and points ``data.init_args.root`` at it, in this tree and the other.

``--profile`` runs every timed hook under cProfile and reports, per evaluation, the cumulative seconds
of the pieces in :data:`PIECES` (the passes, the metrics, the spectra and their eigen-decomposition on
the host, the histograms, the figures drawn in the training process, the kNN vote), whichever the
checkout has; cProfile's own cost inflates the Python-heavy pieces (the figures) more than the others.
Figures drawn in ``EmbeddingMetrics``' own process (``figure_process``) are reported as ``figures
(async)``: their drawing seconds, which no evaluation waits for.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import os
import pstats
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
#: ``--profile``: each piece of an evaluation and the functions whose cumulative time it is (any checkout's).
PIECES = {
    "embedding passes": ("embed_split",),
    "metrics (evaluate_metrics)": ("evaluate_metrics",),
    "  spectra (singular_values: Gram + eigvalsh)": ("singular_values", "local_spectra"),
    "    eigvalsh on the host": ("<built-in method torch._C._linalg.linalg_eigvalsh>",),
    "histograms and figures (_log_distributions)": ("_log_distributions",),
    "  histograms": ("add_histogram", "log_negative_histogram", "similarity_distributions", "write_histogram"),
    "  figures drawn in the training process": ("add_figure", "_draw_here"),
    "  figures handed to their process": ("submit",),
    "kNN vote": ("weighted_knn_votes",),
}


class EvaluationTimer(Callback):
    """Per evaluation: ``{"epoch", "eval", "loop", "callbacks": {name: seconds}}`` in ``evaluations``;
    the seconds per callback at the end of ``fit`` (the projector) in ``fit_end``. Callbacks of the
    ``ignore`` types (other timers) are not timed."""

    def __init__(self, ignore: tuple[type, ...] = (), profile: bool = False) -> None:
        self.ignore = ignore
        self.profile = profile
        self._profiler: cProfile.Profile | None = None
        self._trainer: Any = None
        self.evaluations: list[dict[str, Any]] = []
        self.fit_end: dict[str, float] = {}
        self._current: dict[str, float] = {}
        self._start = self._loop_end = 0.0
        self._wrapped = False

    def setup(self, trainer, pl_module, stage: str) -> None:
        self._trainer = trainer
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
            profiler = self._profiler if not at_end else None
            start = time.perf_counter()
            try:
                if profiler is None:
                    return hook(trainer, pl_module, *args, **kwargs)
                return profiler.runcall(hook, trainer, pl_module, *args, **kwargs)
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
            self._profiler = cProfile.Profile() if self.profile else None

    def on_validation_batch_end(self, trainer, pl_module, *args, **kwargs) -> None:
        self._loop_end = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            _synchronize(pl_module.device)
            self.evaluations.append({
                "epoch": trainer.current_epoch, "eval": time.perf_counter() - self._start,
                "loop": self._loop_end - self._start, "callbacks": dict(self._current),
            })  # fmt: skip
            if self._profiler is not None:
                self.evaluations[-1]["pieces"] = pieces(self._profiler)

    def summary(self) -> dict[str, Any]:
        """``first`` (the first evaluation), ``steady`` (the median of each piece over the later
        ones; the first when there is only one), ``fit_end`` and ``figures_async`` (the seconds each
        evaluation's figures took in ``EmbeddingMetrics``' own process)."""
        later = self.evaluations[1:] or self.evaluations[:1]
        names = sorted({name for evaluation in later for name in evaluation["callbacks"]})
        steady: dict[str, Any] = {
            key: statistics.median(evaluation[key] for evaluation in later) for key in ("eval", "loop")
        } if later else {}  # fmt: skip
        steady["callbacks"] = {name: statistics.median(e["callbacks"].get(name, 0.0) for e in later) for name in names}
        if later and "pieces" in later[0]:
            labels = [label for label in PIECES if any(label in e.get("pieces", {}) for e in later)]
            steady["pieces"] = {label: statistics.median(e["pieces"].get(label, 0.0) for e in later) for label in labels}
        first = self.evaluations[0] if self.evaluations else None
        figures = figures_drawn_apart(self._trainer) if self._trainer is not None else []
        return {"first": first, "steady": steady, "later": later, "fit_end": dict(self.fit_end), "figures_async": figures}


def pieces(profiler: cProfile.Profile) -> dict[str, float]:
    """The cumulative seconds of each of :data:`PIECES` found in ``profiler``'s calls."""
    stats = pstats.Stats(profiler).stats  # {(file, line, function): (calls, primitive calls, own, cumulative, callers)}
    found = {}
    for label, names in PIECES.items():
        seconds = [entry[3] for (_, _, function), entry in stats.items() if function in names]
        if seconds:
            found[label] = sum(seconds)
    return found


def figures_drawn_apart(trainer) -> list[float]:
    """The seconds each job of figures took in a process of its own (``EmbeddingMetrics.figure_process``)."""
    found = []
    for callback in trainer.callbacks:
        drawer = getattr(getattr(callback, "figures", None), "drawer", None)
        found += [seconds for seconds, where in getattr(drawer, "drawn", []) if where == "process"]
    return found


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(config: list[str], epochs: int, profile: bool = False) -> dict[str, Any]:
    """Fit ``config`` for ``epochs`` epochs with an ``EvaluationTimer``; its summary."""
    from common import build_run, trust_cifar_files

    trust_cifar_files()  # --fake-cifar10's files (torchvision would check the published ones' md5)
    work = Path(tempfile.mkdtemp(prefix="ssl_app_eval_"))
    cli = build_run([*config, f"--trainer.max_epochs={epochs}", f"--trainer.logger.init_args.save_dir={work}",
                     "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"])  # fmt: skip
    timer = EvaluationTimer(profile=profile)
    cli.trainer.callbacks.append(timer)
    cli.trainer.fit(cli.model, cli.datamodule)
    return timer.summary()


def best(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Each piece's least time over the later evaluations of several rounds (and the least end of fit)."""
    later = [evaluation for summary in summaries for evaluation in summary["later"]]
    if not later:
        return {"first": None, "steady": {}, "fit_end": {}, "figures_async": []}
    names = sorted({name for evaluation in later for name in evaluation["callbacks"]})
    ends = sorted({name for summary in summaries for name in summary["fit_end"]})
    steady = {"eval": min(e["eval"] for e in later), "loop": min(e["loop"] for e in later),
              "callbacks": {name: min(e["callbacks"].get(name, 0.0) for e in later) for name in names}}  # fmt: skip
    labels = [label for label in PIECES if any(label in e.get("pieces", {}) for e in later)]
    if labels:
        steady["pieces"] = {label: min(e.get("pieces", {}).get(label, 0.0) for e in later) for label in labels}
    figures = [seconds for summary in summaries for seconds in summary.get("figures_async", [])[1:]]  # after the first
    return {
        "first": min((s["first"] for s in summaries if s["first"]), key=lambda first: first["eval"], default=None),
        "steady": steady, "figures_async": [min(figures)] if figures else [],
        "fit_end": {name: min(summary["fit_end"].get(name, 0.0) for summary in summaries) for name in ends},
    }  # fmt: skip


def describe(name: str, summary: dict[str, Any]) -> list[str]:
    steady = summary["steady"]
    if "eval" not in steady:
        return [f"{name}: no evaluation ran (trainer.check_val_every_n_epoch above --epochs?)"]
    lines = [f"{name}: evaluation {steady['eval']:.3f} s (loop {steady['loop']:.3f} s)"]
    lines += [f"  {callback}: {seconds:.3f} s" for callback, seconds in steady["callbacks"].items()]
    lines += [f"    {label}: {seconds:.3f} s (cProfile)" for label, seconds in steady.get("pieces", {}).items()]
    figures = summary.get("figures_async", [])
    if figures:
        lines.append(f"  figures (async, in their own process, not waited for): {statistics.median(figures):.3f} s")
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
    parser.add_argument("--profile", action="store_true", help="each evaluation's pieces (cProfile; see the docstring)")
    parser.add_argument("--fake-cifar10", nargs=2, type=int, metavar=("TRAIN", "TEST"), help="random CIFAR-10-shaped data")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.fake_cifar10:
        from common import fake_cifar10

        root = fake_cifar10(Path(tempfile.mkdtemp(prefix="ssl_app_cifar10_")), *args.fake_cifar10, "cpu")
        args.set = [*args.set, f"data.init_args.root={root}"]
    config = [part for path in args.config for part in ("--config", path)] + [f"--{item}" for item in args.set]
    results: dict[str, list[dict[str, Any]]] = {"this tree": []}
    if args.against is not None:
        results[str(args.against)] = []
    for _ in range(args.rounds):
        if args.against is not None:
            results[str(args.against)].append(_measure_in(args.against, args))
        results["this tree"].append(measure(config, args.epochs, args.profile))
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
            "json.dump(measure(json.loads(sys.argv[3]), int(sys.argv[4]), sys.argv[7] == '1'), open(sys.argv[6], 'w'))"
        )
        config = [part for path in args.config for part in ("--config", path)] + [f"--{item}" for item in args.set]
        env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{Path(__file__).parent}"}
        command = [sys.executable, "-c", code, str(tree), str(Path(__file__).parent), json.dumps(config), str(args.epochs),
                   str(args.threads), str(out), "1" if args.profile else "0"]  # fmt: skip
        subprocess.run(command, check=True, env=env, cwd=tree)  # its own configs
        return json.loads(out.read_text())


if __name__ == "__main__":
    sys.exit(main())
