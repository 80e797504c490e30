"""Where a training iteration's host time goes outside the model's forward and backward, per method,
on the CPU: tensor ops per iteration by the code that dispatched them, and host milliseconds per
iteration in the Trainer against the bare step on the same batches (issue 38 item 4).

    python benchmarks/overhead.py                          # SimCLR, MoCo, the memory bank
    python benchmarks/overhead.py --methods moco --steps 20 --profile

On a GPU every tensor op outside a CUDA graph is a kernel launch, a few microseconds of CPU each,
and with small images the GPU waits for the CPU: the epoch is as slow as the host's work per step.
That work is found on the CPU. Each method's shipped CIFAR-10 config (``configs/cifar10/*.yaml``)
is built as ``python -m ssl_app fit`` builds it (``common.build_run``), shrunk: a tiny backbone
(``small_cnn``), batch ``--batch``, random 32×32 images (``common.fake_cifar10``), views made on
the device (``augment_on: device``, here the CPU), no workers, the health check deciding on the
device as on a GPU (``health.read_every_step: false``), logging every 50 steps as shipped.

- **ops per iteration**: the aten ops dispatched (views apart: no kernel) from one
  ``on_train_batch_end`` to the next, over the steps that do not log (49 of 50 as shipped), split by
  the code that dispatched them: the forward (``contrast``), the loss, the backward, the optimiser
  step (the bare step's own work), and everything else (the views, the health check, the key
  encoder's EMA, the queue or bank update, logging, metrics, callbacks) by its innermost frame in the
  application, Lightning, torchmetrics, lightly or ``torch.optim``.
- **host ms per iteration**: the median wall time from one ``on_train_batch_end`` to the next over
  the steps that do not log, against the bare step (``common.bare_step``: contrast, loss, backward,
  the update, the queue/bank and EMA) on views made before it, over the same number of batches.
  With ``--profile``: the slowest functions by cumulative time inside those iterations (cProfile).

By default (``--like-cuda``) the process dispatches what a CUDA run would where the code chooses by
device (:func:`like_cuda`: the optimiser's update, MoCo's split BatchNorm, the views' graph), so the
counts are those of a GPU step; ``--no-like-cuda`` keeps the CPU's own choices. ``--device cuda``
runs it for real on a GPU (bf16-mixed, the bare step under the same autocast; ``--batch 0``: the
configs' own batches), the Trainer's iterations and the bare steps back to back, as they run.

Run it on a git revision to compare (``git worktree add /tmp/old REV`` and the same command there:
the script only needs ``common.build_run`` and ``common.fake_cifar10``).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import functools
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
from lightning.pytorch.callbacks import Callback
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {
    "simclr": "configs/cifar10/simclr.yaml",
    "moco": "configs/cifar10/moco.yaml",
    "memory_bank": "configs/cifar10/memory_bank.yaml",
}
# The bare step's own work, by the function on the stack that dispatched it (outermost match wins).
STEP_PARTS = (("contrast", "forward (contrast)"), ("compute_loss", "loss"), ("backward", "backward"))
PACKAGES = ("ssl_app", "datamodules", "callbacks", "lightning", "torchmetrics", "lightly", "torchdata")
DETAIL = os.environ.get("OVERHEAD_DETAIL") == "1"  # split the bare step's parts by their innermost frame too
SKIP = ("/torch/utils/_python_dispatch.py", "/overhead.py", "/torch/utils/_contextlib.py")


@functools.cache
def _package_path(path: str) -> str | None:
    """``package/module.py`` of a file in one of ``PACKAGES`` or ``torch/optim``, else None."""
    if "/torch/utils/data/" in path:
        return "torch/utils/data (the loader)"
    if path.endswith(SKIP):
        return None
    parts = Path(path).parts
    for at in range(len(parts) - 1, -1, -1):
        if parts[at] in PACKAGES or (parts[at] == "optim" and at > 0 and parts[at - 1] == "torch"):
            return "/".join(parts[at:])
    return None


def site_of(frame: Any) -> str:
    """Where an op came from: a part of the bare step, else its innermost frame in an application or
    library package (``package/module.py:function``), else ``torch``."""
    innermost = None
    names = []
    while frame is not None:
        code = frame.f_code
        names.append(code.co_name)
        if innermost is None:
            path = _package_path(code.co_filename)
            if path is not None:
                innermost = path if path.startswith("torch/utils/data") else f"{path}:{code.co_name}"
        frame = frame.f_back
    for name in reversed(names):  # outermost first: the optimiser step runs the closure (forward, backward)
        for function, part in STEP_PARTS:
            if name == function:
                return f"{part}: {innermost or 'torch'}" if DETAIL else part
    # No frame of the application or a library: the autograd engine's own thread (CUDA's backward).
    return innermost or "backward"


class OpsBySite(TorchDispatchMode):
    """Counts the aten ops dispatched inside it, views apart, by :func:`site_of`."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.counts[site_of(sys._getframe(1))] += 1
        return func(*args, **(kwargs or {}))


class IterationProbe(Callback):
    """Per iteration (one ``on_train_batch_end`` to the next) after ``warm_up`` steps, in three phases
    of ``steps`` iterations each (apart, since counting costs host time): timed (and with ``profile``
    profiled); tensor ops counted by site; Python function calls counted. Each with whether the step
    logged."""

    PHASES = ("timed", "ops", "calls")
    #: The profile counting calls now (``like_cuda``'s stand-in replay pauses it).
    active_calls: cProfile.Profile | None = None

    def __init__(self, warm_up: int, steps: int, profile: bool) -> None:
        self.warm_up, self.steps = warm_up, steps
        self.iterations: list[dict[str, Any]] = []
        self.profiler = cProfile.Profile() if profile else None
        self._phase: str | None = None
        self._mode: OpsBySite | None = None
        self._calls: cProfile.Profile | None = None
        self._start = 0.0
        self._logged = False

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        try:
            from ssl_app.io.changes import logs_this_step
        except ImportError:  # a revision before ssl_app.io
            from ssl_app.health import logs_this_step

        self._logged = self._logged or logs_this_step(trainer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = time.perf_counter()
        self._finish(now)
        self._logged = False
        number = (trainer.global_step - self.warm_up) // self.steps
        self._phase = self.PHASES[number] if 0 <= number < len(self.PHASES) else None
        if self._phase == "ops":
            self._mode = OpsBySite()
            self._mode.__enter__()
        elif self._phase == "calls":
            self._calls = IterationProbe.active_calls = cProfile.Profile()
            self._calls.enable()
        elif self._phase == "timed" and self.profiler is not None:
            self.profiler.enable()
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._finish(None)  # the epoch's last iteration is not a whole one (no next batch)

    def _finish(self, now: float | None) -> None:
        if self._phase is None:
            return
        record = {"phase": self._phase, "seconds": None if now is None else now - self._start, "logged": self._logged}
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            record["ops"], self._mode = self._mode.counts, None
        if self._calls is not None:
            self._calls.disable()
            record["calls"], record["calls_by_package"] = calls_by_package(self._calls)
            record["calls_profile"] = self._calls
            self._calls = IterationProbe.active_calls = None
        if self._phase == "timed" and self.profiler is not None:
            self.profiler.disable()
        if now is not None:
            self.iterations.append(record)
        self._phase = None


def calls_by_package(profile: cProfile.Profile) -> tuple[int, collections.Counter]:
    """The Python function calls a profile saw (built-in ones too), in all and by package."""
    stats = pstats.Stats(profile)
    by_package: collections.Counter = collections.Counter()
    for (path, _, _name), (_, calls, *_) in stats.stats.items():  # type: ignore[attr-defined]
        package = _package_path(path) if path != "~" else None
        if package is None and path == "~":
            package = "built-in"
        elif package is None:
            package = "torch" if "/torch/" in path else "other"
        by_package[package.split("/")[0] if "/" in package else package] += calls
    return stats.total_calls, by_package  # type: ignore[attr-defined]


def like_cuda() -> list[str]:
    """Make this process dispatch what a CUDA run dispatches, where the code chooses by device: the SGD
    update ``foreach`` (torch's CUDA default) or fused (``ssl_app.optim.fused_pays``), MoCo's split
    BatchNorm regrouped (``SplitBatchNorm.regroup``), and the training views replayed from a graph
    (``datamodules.view_graphs``: the capture stood in for by a replay whose ops are not dispatched
    to the counter, as a graph's kernels are not). Each only where the code has it (an older
    revision); returns what was changed."""
    import torch.optim.sgd as sgd
    from torch.utils._python_dispatch import _disable_current_modes

    changed = []
    default = sgd._default_to_fused_or_foreach
    sgd._default_to_fused_or_foreach = lambda params, differentiable, use_fused=False: (
        default(params, differentiable, use_fused)[0],
        True,
    )
    changed.append("SGD foreach")
    try:
        import ssl_app.optim as optim

        if hasattr(optim, "fused_pays"):
            optim.fused_pays = lambda params: True
            changed.append("fused SGD")
    except ImportError:
        pass
    from ssl_app.models.split_batchnorm import SplitBatchNorm

    if "regroup" in vars(SplitBatchNorm):
        SplitBatchNorm.regroup = True
        changed.append("split BatchNorm regrouped")
    try:
        import datamodules.base as base
        from datamodules.view_graphs import ViewGraphs
    except ImportError:
        return changed

    def replay_uncounted(fn):
        output = fn()

        def replay() -> None:
            profiler = IterationProbe.active_calls  # a graph's replay runs no Python either
            if profiler is not None:
                profiler.disable()
            with _disable_current_modes():
                output.copy_(fn())
            if profiler is not None:
                profiler.enable()

        return replay, output

    base.ViewGraphs = functools.partial(ViewGraphs, capture=replay_uncounted, devices=("cpu",))
    changed.append("views from a graph")
    return changed


def measure(method: str, args: argparse.Namespace, root: Path, logs: Path) -> dict[str, Any]:
    from common import bare_step, build_run, take_batches

    cuda = args.device == "cuda"
    config = ["--config", str(ROOT / CONFIGS[method]), f"--data.init_args.root={root}", "--data.init_args.augment_on=device"]
    config += [f"--trainer.logger.init_args.save_dir={logs}", f"--data.init_args.num_workers={args.workers}"]
    config += ["--trainer.enable_progress_bar=false", "--trainer.num_sanity_val_steps=0", "--trainer.enable_model_summary=false"]
    config += ["--trainer.max_epochs=1", f"--trainer.limit_train_batches={3 * args.steps + args.warm_up + 1}"]
    config += ["--trainer.limit_val_batches=0", f"--model.init_args.backbone={args.backbone}"]
    if cuda:  # as a GPU run trains: bf16, the health check reading its flag on logged steps only
        config += ["--trainer.accelerator=gpu", "--trainer.precision=bf16-mixed"]
    else:  # the health check deciding on the device as on a GPU
        config += ["--trainer.accelerator=cpu", "--trainer.precision=32-true", "--health.read_every_step=false"]
    config += [f"--data.init_args.batch_size={args.batch}"] if args.batch else []  # 0: the config's own
    cli = build_run(config)
    probe = IterationProbe(args.warm_up, args.steps, args.profile)
    cli.trainer.callbacks.append(probe)
    cli.trainer.fit(cli.model, cli.datamodule)

    model, datamodule = cli.model, cli.datamodule
    batches = take_batches(datamodule.train_dataloader(), args.steps, datamodule, model.train_views)
    device = torch.device(args.device)
    batches = [([view.to(device) for view in views], labels.to(device), index.to(device)) for views, labels, index in batches]
    model.to(device).train()  # Lightning's teardown left it on the CPU
    plain = bare_step(model, torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9))

    def step(batch: Any) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            plain(batch)

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    step(batches[0])
    bare_ops, bare_calls = OpsBySite(), cProfile.Profile()
    with bare_ops:
        step(batches[-1])
    bare_calls.enable()
    step(batches[-1])
    bare_calls.disable()
    sync()
    start = time.perf_counter()
    for batch in batches:
        step(batch)
    sync()
    bare_seconds = [(time.perf_counter() - start) / len(batches)]  # steps back to back, as the Trainer's

    def quiet(phase: str) -> list[dict[str, Any]]:
        return [it for it in probe.iterations if it["phase"] == phase and not it["logged"]]

    ops = collections.Counter()
    for it in quiet("ops"):
        ops.update(it["ops"])
    per_iteration = {site: count / len(quiet("ops")) for site, count in ops.items()}
    profile_text = ""
    if probe.profiler is not None:
        buffer = io.StringIO()
        stats = pstats.Stats(probe.profiler, stream=buffer).sort_stats(args.sort)
        stats.print_stats(args.profile_rows)
        if args.callers:
            stats.print_callers(args.callers)
        profile_text = buffer.getvalue()
    if args.calls_rows:
        buffer = io.StringIO()
        pstats.Stats(quiet("calls")[-1]["calls_profile"], stream=buffer).sort_stats("ncalls").print_stats(args.calls_rows)
        profile_text += buffer.getvalue()
    return {
        "method": method, "batch": datamodule.batch_size, "backbone": args.backbone, "iterations": len(quiet("timed")),
        "host_ms": 1000 * statistics.median(it["seconds"] for it in quiet("timed")),
        "calls": statistics.median(it["calls"] for it in quiet("calls")), "bare_calls": pstats.Stats(bare_calls).total_calls,
        "calls_by_package": {
            package: statistics.median(it["calls_by_package"][package] for it in quiet("calls"))
            for package in set().union(*(it["calls_by_package"] for it in quiet("calls")))
        },
        "bare_ms": 1000 * statistics.median(bare_seconds),
        "ops": per_iteration, "ops_total": sum(per_iteration.values()),
        "bare_ops": sum(bare_ops.counts.values()), "profile": profile_text,
    }  # fmt: skip


STEP_SITES = {part for _, part in STEP_PARTS}


def in_step(site: str) -> bool:
    return site.split(":")[0] in STEP_SITES or site.startswith("torch/optim")


def report(record: dict[str, Any], rows: int) -> None:
    ops = record["ops"]
    step_ops = sum(count for site, count in ops.items() if in_step(site))
    print(
        f"\n## {record['method']} ({record['backbone']}, batch {record['batch']}, "
        f"{record['iterations']} iterations that do not log)\n"
        f"host ms per iteration: Trainer {record['host_ms']:.1f}, bare step {record['bare_ms']:.1f}, "
        f"outside the bare step {record['host_ms'] - record['bare_ms']:.1f}\n"
        f"ops per iteration: {record['ops_total']:.0f} (bare step {record['bare_ops']}; forward, loss, backward and "
        f"torch.optim {step_ops:.0f}; everything else {record['ops_total'] - step_ops:.0f})\n"
        f"Python function calls per iteration: {record['calls']:,.0f} (bare step {record['bare_calls']:,}; "
        f"outside it {record['calls'] - record['bare_calls']:,.0f}); by package: "
        + ", ".join(f"{name} {count:,.0f}" for name, count in sorted(record["calls_by_package"].items(), key=lambda kv: -kv[1]))
    )
    print("| ops per iteration | dispatched from |\n| ---: | --- |")
    for site, count in sorted(ops.items(), key=lambda item: -item[1])[:rows]:
        print(f"| {count:.1f} | {site} |")
    if record["profile"]:
        print(record["profile"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--batch", type=int, default=16, help="0: the config's own")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cuda: the real thing, bf16-mixed")
    parser.add_argument("--backbone", default="small_cnn", help="resnet18_cifar: the shipped one (its op counts)")
    parser.add_argument("--steps", type=int, default=12, help="iterations timed, then as many ops counted, calls counted")
    parser.add_argument("--warm-up", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1, help="loader workers (on a GPU the batches come from workers)")
    parser.add_argument("--rows", type=int, default=25)
    parser.add_argument("--profile", action="store_true", help="cProfile the measured iterations")
    parser.add_argument("--like-cuda", action=argparse.BooleanOptionalAction, default=True, help="dispatch what CUDA would")
    parser.add_argument("--profile-rows", type=int, default=40)
    parser.add_argument("--sort", default="cumulative", help="the profile's order: cumulative, tottime")
    parser.add_argument("--callers", help="with --profile: who calls the functions matching this")
    parser.add_argument("--calls-rows", type=int, default=0, help="the functions called most in one iteration")
    parser.add_argument("--json", type=Path, help="also write the records here (after each method)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from common import fake_cifar10

    work = Path(tempfile.mkdtemp(prefix="ssl_app_overhead_"))
    root = fake_cifar10(work / "cifar10", (args.batch or 512) * (3 * args.steps + args.warm_up + 2), 64, "cpu")
    changed = like_cuda() if args.like_cuda and args.device == "cpu" else []
    as_on_cuda = ", ".join(changed) or "nothing"
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), {args.device}; tensor ops exclude views; as on CUDA: {as_on_cuda}"
    )
    records = []
    for method in args.methods:
        records.append(measure(method, args, root, work / "runs"))
        report(records[-1], args.rows)
        if args.json is not None:
            args.json.write_text(json.dumps([{k: v for k, v in r.items() if k != "profile"} for r in records], indent=1))


if __name__ == "__main__":
    main()
