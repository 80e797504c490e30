"""Images per second of one training step: this application's SimCLR and MoCo steps against the
same steps written directly with lightly's building blocks, side by side in one process.

    python benchmarks/train_step.py                                  # small_cnn, batch 256, 10 rounds
    python benchmarks/train_step.py --backbone resnet18_cifar --batch 128 --rounds 4
    python benchmarks/train_step.py --like-for-like --variants stats_every_step compile

Both sides use the same backbone and projection-head modules (the reference gets deep copies
with the same weights), the same batch of two 32×32 views, SGD with the same settings, and the
same number of intra-op threads. Per step:

- ``ours``: the method as the application builds it (its defaults, ``setup("fit")`` applied:
  on the CPU that includes ``channels_last: auto`` → NHWC), then ``method.contrast(batch)`` →
  ``method.loss(contrast, with_stats)`` → backward → optimiser step; MoCo adds its EMA update
  and its queue update (``on_after_backward``). The loss diagnostics (``LossResult.stats``) are
  computed on one step in ``--log-every`` (50: Lightning's default ``log_every_n_steps``), as
  inside the Trainer, which computes them only on the steps whose values it logs.
- ``reference``: ``z = normalize(head(backbone(views)))`` → lightly's ``NTXentLoss`` (MoCo: with
  its ``memory_bank_size`` queue, keys from a momentum copy updated by ``update_momentum``) →
  backward → optimiser step, in PyTorch's default (NCHW) layout, as one writes it with lightly.
- ``--like-for-like`` adds the two comparisons in one layout: ``ours+contiguous`` (ours with
  ``channels_last: false``) against ``reference``, and ``reference+channels_last`` (the reference
  with NHWC modules and images) against ``ours``. They separate what the application's code
  costs from what its layout default gains.
- ``--key-bn split`` gives ours MoCo's one-process default (BatchNorm over sub-batches), which
  the reference does not have: it measures what that remedy costs, and, with ``--variants
  contiguous``, what NHWC gains with it.
- variants of ours (``--variants``), each timed in the same rounds and against ``reference``:
  ``stats_every_step`` (the diagnostics on every step), ``contiguous`` (NCHW), ``compile``
  (``compile: true``: each encoder pass — backbone, projection head, normalisation — compiled as
  one graph; compiled before timing), ``channels_last`` (NHWC: the default on the CPU and CUDA
  anyway) and ``channels_last_compile`` (both). The JSON keeps what dynamo did in the process
  (``dynamo``: frames compiled, recompilations included, and graph breaks), so a compiled side
  that recompiled or broke its graph shows.
- ``--profile``: after the rounds, one more step of each side under ``torch.profiler``, synchronised:
  its wall time and, on a GPU, its CUDA kernels and their summed time (``gpu_busy_ms``). A side
  whose kernels take much less than its wall time is held up by the host (Python, launches), which
  compiled kernels cannot help; one whose kernels fill it is bound by the GPU.
- ``--device cuda --precision bf16``: both sides on the GPU, forward and loss under bf16 autocast
  (as Lightning's ``bf16-mixed``); each timed round synchronises the device before reading the
  clock, and ``peak MB`` is the most memory the side's steps allocated on the device beyond what
  was allocated before them (activations, gradients; the models and optimiser state of every side
  stay resident). ``--json PATH`` writes the numbers after each method (``benchmarks/gpu_check.py``).

Rounds alternate between all sides (``--steps`` steps each after ``--warm-up`` untimed steps;
ours starts with a full MoCo queue, as lightly's bank does), so load from other
processes hits them alike; the ratio side/reference of images/s is reported per round with the
median and the spread. No Trainer on either side: this measures the step, not Lightning's loop.
Like ``python -m ssl_app``, the process keeps freed memory in malloc (``ssl_app.runtime``), which
both sides share. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from lightly.loss import NTXentLoss
from lightly.models.utils import update_momentum

from ssl_app.losses import InfoNCE
from ssl_app.methods import MoCo, SimCLR
from ssl_app.runtime import keep_freed_memory

VARIANTS = ("stats_every_step", "contiguous", "compile", "channels_last", "channels_last_compile")


def make_batch(batch: int, size: int = 32, device: str = "cpu") -> tuple:
    g = torch.Generator().manual_seed(0)
    views = [torch.randn(batch, 3, size, size, generator=g).to(device) for _ in range(2)]
    return views, torch.randint(0, 10, (batch,), generator=g).to(device), torch.arange(batch, device=device)


def autocast(device: torch.device, precision: str):
    """Forward and loss in bf16 (Lightning's ``bf16-mixed``), or nothing for ``32``."""
    if precision == "32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def ours_step(method, optimizer, log_every: int, precision: str = "32"):
    counter = iter(range(10**9))
    device = next(method.parameters()).device

    def step(batch):
        # As in the Trainer: the diagnostics only on the steps whose values are logged.
        with_stats = (next(counter) + 1) % log_every == 0
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, precision):
            contrast = method.contrast(batch)
            loss = method.loss(contrast, with_stats).value
        loss.backward()
        if isinstance(method, MoCo):
            method.on_after_backward()
        optimizer.step()
        if isinstance(method, MoCo):
            method.update_key_encoder(method.momentum)

    return step


def reference_step(method, kind: str, temperature: float, queue: int, channels_last: bool = False, precision: str = "32"):
    device = next(method.parameters()).device
    layout = torch.channels_last if channels_last else torch.contiguous_format
    backbone = copy.deepcopy(method.backbone).to(memory_format=layout)
    head = copy.deepcopy(method.projection_head)
    params = list(backbone.parameters()) + list(head.parameters())
    optimizer = torch.optim.SGD(params, lr=0.06, momentum=0.9, weight_decay=5e-4)

    def encode(encoder, images):
        return F.normalize(encoder[1](encoder[0](images.contiguous(memory_format=layout))), dim=1)

    if kind == "simclr":
        criterion = NTXentLoss(temperature=temperature)

        def step(batch):
            optimizer.zero_grad(set_to_none=True)
            with autocast(device, precision):
                z0, z1 = (encode((backbone, head), v) for v in batch[0])
                loss = criterion(z0, z1)
            loss.backward()
            optimizer.step()

        return step
    key_backbone, key_head = copy.deepcopy(backbone), copy.deepcopy(head)
    for p in list(key_backbone.parameters()) + list(key_head.parameters()):
        p.requires_grad_(False)
    criterion = NTXentLoss(temperature=temperature, memory_bank_size=(queue, method.embedding_dim)).to(device)

    def step(batch):
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, precision):
            query = encode((backbone, head), batch[0][0])
            with torch.no_grad():
                key = encode((key_backbone, key_head), batch[0][1])
            loss = criterion(query, key)
        loss.backward()
        optimizer.step()
        update_momentum(backbone, key_backbone, 0.99)
        update_momentum(head, key_head, 0.99)

    return step


def build(kind: str, backbone: str, temperature: float, queue: int, key_bn: str = "none", device: str = "cpu", **options):
    torch.manual_seed(0)
    common = dict(loss=InfoNCE(temperature=temperature), backbone=backbone, proj_hidden_dim=512, proj_dim=128, **options)
    if kind == "simclr":
        method = SimCLR(**common)
    else:
        # key_bn none by default: lightly's reference has no BatchNorm remedy, so both sides do the same work
        method = MoCo(queue_size=queue, momentum=0.99, key_bn=key_bn, **common)
    method.to(device)  # first: channels_last auto follows the parameters' device
    method.setup("fit")  # applies channels_last / compile
    return method.train()


def side(kind: str, args, variant: str | None):
    """``(name, step)`` of ours in ``variant`` (``None``: the defaults), on a fresh copy of the model."""
    options = {"compile": variant in ("compile", "channels_last_compile")}
    if variant in ("contiguous", "channels_last", "channels_last_compile"):
        options["channels_last"] = variant != "contiguous"
    method = build(kind, args.backbone, 0.5, args.queue, key_bn=args.key_bn, device=args.device, **options)
    optimizer = torch.optim.SGD(method.parameters(), lr=0.06, momentum=0.9, weight_decay=5e-4)
    if isinstance(method, MoCo):  # a full queue, as after the first steps of a run (lightly's bank starts full)
        keys = F.normalize(torch.randn(args.queue, method.embedding_dim, generator=torch.Generator().manual_seed(1)), dim=1)
        method.queue.enqueue(keys.to(args.device), torch.full((args.queue,), -1, device=args.device))
    log_every = 1 if variant == "stats_every_step" else args.log_every
    return f"ours+{variant}" if variant else "ours", ours_step(method, optimizer, log_every, args.precision), method


def timed(step, batch, steps: int, peaks: list | None = None) -> float:
    """Images per second over ``steps`` steps; on a GPU, ``peaks`` gets the most memory (MB) the
    steps allocated beyond what was allocated before them."""
    device = batch[0][0].device
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for _ in range(steps):
        step(batch)
    if cuda:
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - start
    if cuda and peaks is not None:
        peaks.append((torch.cuda.max_memory_allocated(device) - before) / 2**20)
    return steps * batch[0][0].shape[0] / elapsed


def profiled_step(step, batch) -> dict[str, float | int | None]:
    """One synchronised step of ``step``: ``wall_ms``, and on a GPU (under the profiler) ``kernels``
    (CUDA kernels launched) and ``gpu_busy_ms`` (their summed duration); ``None`` off a GPU."""
    device = batch[0][0].device
    if device.type != "cuda":
        start = time.perf_counter()
        step(batch)
        return {"wall_ms": (time.perf_counter() - start) * 1000, "kernels": None, "gpu_busy_ms": None}
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
        start = time.perf_counter()
        step(batch)
        torch.cuda.synchronize(device)
        wall = time.perf_counter() - start
    kernels = [event for event in trace.events() if event.device_type.name == "CUDA"]
    busy_us = sum(event.time_range.elapsed_us() for event in kernels)
    return {"wall_ms": wall * 1000, "kernels": len(kernels), "gpu_busy_ms": busy_us / 1000}


def _profiled(profile: dict | None) -> str:
    if not profile:
        return ""
    if profile["gpu_busy_ms"] is None:
        return f"; profiled step {profile['wall_ms']:.1f} ms"
    return (
        f"; profiled step {profile['wall_ms']:.1f} ms, {profile['kernels']} CUDA kernels busy "
        f"{profile['gpu_busy_ms']:.1f} ms ({profile['gpu_busy_ms'] / profile['wall_ms']:.0%})"
    )


def dynamo_record() -> dict[str, int]:
    """What dynamo did in this process: frames compiled (recompilations included) and graph breaks."""
    counters = torch._dynamo.utils.counters if "torch._dynamo" in sys.modules else {}
    frames = counters.get("frames", {})
    return {"frames_compiled": int(frames.get("total", 0)), "graph_breaks": int(sum(counters.get("graph_break", {}).values()))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["simclr", "moco"], choices=["simclr", "moco"])
    parser.add_argument("--backbone", default="small_cnn")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--size", type=int, default=32, help="image side in pixels (32: CIFAR; 224: ImageNet crops)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--queue", type=int, default=4096)
    parser.add_argument("--log-every", type=int, default=50, help="diagnostics every N steps (the Trainer's log_every_n_steps)")
    parser.add_argument("--variants", nargs="*", default=[], choices=VARIANTS)
    parser.add_argument("--like-for-like", action="store_true", help="add ours+contiguous and reference+channels_last")
    parser.add_argument(
        "--key-bn", default="none", help="MoCo's key_bn for ours (none: the reference's work; split: the one-process default)"
    )
    parser.add_argument("--warm-up", type=int, default=10, help="untimed steps per side first")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--precision", default="32", choices=["32", "bf16"], help="bf16: forward and loss under autocast")
    parser.add_argument("--json", type=Path, help="write the numbers here (rewritten after each method)")
    parser.add_argument("--profile", action="store_true", help="then one profiled step per side: wall, GPU kernels, GPU busy")
    args = parser.parse_args(argv)
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    batch = make_batch(args.batch, args.size, device=args.device)
    variants = list(dict.fromkeys(args.variants + (["contiguous"] if args.like_for_like else [])))
    print(
        f"{args.backbone}, batch {args.batch} of {args.size} px, {args.device}, precision {args.precision}, "
        f"{args.threads} threads, {args.rounds} rounds × {args.steps} steps"
    )
    record = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "methods": {}}
    for kind in args.methods:
        sides = [side(kind, args, variant) for variant in [None, *variants]]
        reference = reference_step(sides[0][2], kind, 0.5, args.queue, precision=args.precision)
        steps = {name: step for name, step, _ in sides} | {"reference": reference}
        # (side, the reference it is compared with)
        pairs = [(name, "reference") for name, _, _ in sides]
        if args.like_for_like:
            steps["reference+channels_last"] = reference_step(
                sides[0][2], kind, 0.5, args.queue, channels_last=True, precision=args.precision
            )
            pairs.append(("ours", "reference+channels_last"))
        # Warm-up: until malloc's heap stops growing (~10 steps; no page faults after it), as in any
        # real run after its first steps; compiles the compile variant.
        for name, step in steps.items():
            start = time.perf_counter()
            timed(step, batch, args.warm_up)
            if name == "ours+compile":
                print(f"  (compiling and {args.warm_up} warm-up steps: {time.perf_counter() - start:.0f} s)")
        rates: dict[str, list[float]] = {name: [] for name in steps}
        peaks: dict[str, list[float]] = {name: [] for name in steps}
        for _ in range(args.rounds):
            for name, step in steps.items():
                rates[name].append(timed(step, batch, args.steps, peaks[name]))
        profiles = {name: profiled_step(step, batch) for name, step in steps.items()} if args.profile else {}
        layout = "NHWC" if sides[0][2].memory_format is torch.channels_last else "NCHW"
        print(f"{kind}: ours at its defaults runs in {layout}")
        results = record["methods"][kind] = {"layout": layout, "sides": {}, "dynamo": dynamo_record()}
        for name, reference in pairs:
            ratios = [a / b for a, b in zip(rates[name], rates[reference])]
            peak = f", peak {max(peaks[name]):.0f} MB" if peaks[name] else ""
            print(
                f"{kind}: {name} {statistics.median(rates[name]):.0f} img/s, {reference} "
                f"{statistics.median(rates[reference]):.0f} img/s, ratio median "
                f"{statistics.median(ratios):.2f} (spread {min(ratios):.2f}–{max(ratios):.2f}){peak}"
                f"{_profiled(profiles.get(name))}"
            )
            results["sides"][name] = {
                "against": reference,
                "img_per_s": statistics.median(rates[name]),
                "reference_img_per_s": statistics.median(rates[reference]),
                "ratio": statistics.median(ratios),
                "ratio_spread": [min(ratios), max(ratios)],
                "peak_mb": max(peaks[name]) if peaks[name] else None,
                "reference_peak_mb": max(peaks[reference]) if peaks[reference] else None,
                "profile": profiles.get(name),
                "reference_profile": profiles.get(reference),
            }
        if any(name.endswith("compile") for name in steps):
            print(f"{kind}: dynamo in this process so far: {results['dynamo']}")
        if args.json is not None:
            args.json.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
