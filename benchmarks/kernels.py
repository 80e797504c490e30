"""Micro-benchmarks behind choices in the code: each case times what ships against the alternative
it replaced, side by side in one process, rounds alternating.

    python benchmarks/kernels.py                       # every case
    python benchmarks/kernels.py --cases loss split_bn

Cases (milliseconds per call, median over ``--rounds``):

- ``loss``: the similarity matmul, InfoNCE and its backward at MoCo's [256, 4352] (full queue,
  one positive per row) and SimCLR's [512, 512]: ``masked`` (masks seen for the first time),
  ``planned`` (masks reused from the previous step: ``MaskPlan``), and ``cross_entropy`` on the
  positive's index (the floor for one positive per row, which InfoNCE cannot assume).
- ``log_softmax_fill``: the fused log-softmax over [256, 4352] with 1/17 of the entries excluded
  by −inf, −1e30 (``MaskPlan``'s bias), −1e4 or −120 (whose exp results are denormal).
- ``split_bn``: ``SplitBatchNorm`` (S = 8) forward + backward as shipped, and the two ways it
  can compute (without running statistics): one ``batch_norm`` per sub-batch (what ships for
  images on the CPU) and the batch regrouped as [G, S·C, ...] channels (what ships for vectors,
  and for images off the CPU: NHWC stays NHWC); plain BatchNorm for scale; images in NCHW and
  NHWC, and vectors.
- ``encoder_pass``: SimCLR's encoder forward + backward over both views as one batch of 2B
  (what ships: BatchNorm over both views) against two passes of B (lightly's examples).

Not part of the test suite.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ssl_app.losses import InfoNCE, MaskedSimilarities
from ssl_app.losses.base import masked_info_nce, mean_over_anchors
from ssl_app.losses.info_nce import MaskPlan
from ssl_app.methods import SimCLR
from ssl_app.models.split_batchnorm import SplitBatchNorm
from ssl_app.runtime import keep_freed_memory


def compare(title: str, calls: dict[str, Callable[[], object]], rounds: int, repeats: int) -> None:
    """Print the median milliseconds per call of each of ``calls``, timed in alternating rounds."""
    for call in calls.values():
        call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            for _ in range(repeats):
                call()
            times[name].append((time.perf_counter() - start) / repeats * 1e3)
    cells = ", ".join(f"{name} {statistics.median(values):.2f} ms" for name, values in times.items())
    print(f"{title}: {cells}")


def instance_masks(anchors: int, candidates: int, simclr: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(pos, neg, target)``: MoCo's own key at column i, or SimCLR's other view with the anchor excluded."""
    rows = torch.arange(anchors)
    target = (rows + anchors // 2) % anchors if simclr else rows
    pos = torch.zeros(anchors, candidates, dtype=torch.bool)
    pos[rows, target] = True
    neg = ~pos & ~torch.eye(anchors, candidates, dtype=torch.bool) if simclr else ~pos
    return pos, neg, target


def loss_calls(queries: torch.Tensor, keys: torch.Tensor, simclr: bool) -> dict[str, Callable[[], None]]:
    pos, neg, target = instance_masks(queries.shape[0], keys.shape[0], simclr)
    plan = MaskPlan.of(pos, neg)
    losses = {
        "masked": lambda sim: mean_over_anchors(*masked_info_nce(sim / 0.2, pos, neg)),
        "planned": lambda sim: plan.mean_loss(sim, 0.2),
        "cross_entropy": lambda sim: F.cross_entropy(sim / 0.2, target),
    }
    # The shipped loss takes the plan on its second call with the same masks: the same loss.
    loss_fn = InfoNCE(0.2)
    first, second = (loss_fn(MaskedSimilarities(queries @ keys.T, pos, neg)).value for _ in range(2))
    assert torch.allclose(first, second, rtol=1e-6), (float(first), float(second))

    def step(loss_of: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], None]:
        return lambda: loss_of(queries.clone().requires_grad_(True) @ keys.T).backward()

    return {name: step(loss_of) for name, loss_of in losses.items()}


def loss_case(rounds: int) -> None:
    generator = torch.Generator().manual_seed(0)
    for label, anchors, candidates, simclr in (("MoCo [256, 4352]", 256, 4352, False), ("SimCLR [512, 512]", 512, 512, True)):
        queries = F.normalize(torch.randn(anchors, 128, generator=generator), dim=1)
        keys = queries if simclr else F.normalize(torch.randn(candidates, 128, generator=generator), dim=1)
        compare(f"loss {label}", loss_calls(queries, keys, simclr), rounds, repeats=50)


def log_softmax_fill_case(rounds: int) -> None:
    generator = torch.Generator().manual_seed(1)
    logits = (torch.rand(256, 4352, generator=generator) * 2 - 1) / 0.2
    excluded = torch.rand(256, 4352, generator=generator) < 1 / 17
    filled = {f"{fill:g}": logits.masked_fill(excluded, fill) for fill in (float("-inf"), -1e30, -1e4, -120.0)}
    calls = {name: functools.partial(torch.log_softmax, x, dim=1) for name, x in filled.items()}
    compare("log_softmax [256, 4352], 1/17 excluded", calls, rounds, repeats=200)


def regrouped(bn: SplitBatchNorm) -> Callable[[torch.Tensor], torch.Tensor]:
    """The batch regrouped as [G, S·C, ...] channels for one batch_norm call (no running statistics):
    ``SplitBatchNorm``'s own regrouping (what ships off the CPU), which keeps NHWC in NHWC."""
    return lambda x: bn._grouped_as_channels(x, None, None, 0.1)


def per_sub_batch(bn: SplitBatchNorm) -> Callable[[torch.Tensor], torch.Tensor]:
    """One batch_norm call per contiguous sub-batch (no running statistics)."""

    def forward(x: torch.Tensor) -> torch.Tensor:
        groups = x.chunk(bn.num_splits)
        return torch.cat([F.batch_norm(g, None, None, bn.weight, bn.bias, True, 0.1, bn.eps) for g in groups])

    return forward


def forward_backward(module: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, grad: torch.Tensor) -> None:
    module(x.detach().requires_grad_(True)).backward(grad)


def split_bn_case(rounds: int) -> None:
    generator = torch.Generator().manual_seed(2)
    for shape in ((256, 16, 32, 32), (256, 512)):
        images = len(shape) == 4
        for layout in (torch.contiguous_format, torch.channels_last) if images else (torch.contiguous_format,):
            x = torch.randn(*shape, generator=generator).contiguous(memory_format=layout)
            grad = torch.randn(*shape, generator=generator).contiguous(memory_format=layout)
            split = SplitBatchNorm(shape[1], num_splits=8)
            plain = (torch.nn.BatchNorm2d if images else torch.nn.BatchNorm1d)(shape[1])
            modules = {
                "shipped": split,
                "per sub-batch": per_sub_batch(split),
                "regrouped": regrouped(split),
                "plain BatchNorm": plain,
            }
            calls = {name: functools.partial(forward_backward, module, x, grad) for name, module in modules.items()}
            name = ("NHWC" if layout is torch.channels_last else "NCHW") if images else "vectors"
            compare(f"SplitBatchNorm {list(shape)} {name}", calls, rounds, repeats=10)


def encoder_calls(backbone: str, batch: int, channels_last: bool) -> dict[str, Callable[[], None]]:
    model = SimCLR(backbone=backbone, proj_hidden_dim=512, proj_dim=128, channels_last=channels_last)
    model.setup("fit")
    model.train()
    generator = torch.Generator().manual_seed(3)
    views = [torch.randn(batch, 3, 32, 32, generator=generator) for _ in range(2)]

    def encode(images: torch.Tensor) -> torch.Tensor:
        return model.projection_head(model.backbone(model.to_memory_format(images))).square().sum()

    return {
        "joint 2B": lambda: encode(torch.cat(views)).backward(),
        "two passes of B": lambda: (encode(views[0]) + encode(views[1])).backward(),
    }


def encoder_pass_case(rounds: int) -> None:
    for backbone, batch, repeats in (("small_cnn", 256, 4), ("resnet18_cifar", 128, 1)):
        for channels_last in (False, True):
            layout = "NHWC" if channels_last else "NCHW"
            compare(f"encoder {backbone} 2×{batch} {layout}", encoder_calls(backbone, batch, channels_last), rounds, repeats)


CASES = {
    "loss": loss_case,
    "log_softmax_fill": log_softmax_fill_case,
    "split_bn": split_bn_case,
    "encoder_pass": encoder_pass_case,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    print(f"{args.threads} threads, {args.rounds} rounds, torch {torch.__version__}")
    for name in args.cases:
        CASES[name](args.rounds)


if __name__ == "__main__":
    main()
