"""Images per second of one training step: this application's SimCLR and MoCo steps against the
same steps written directly with lightly's building blocks, side by side in one process.

    python benchmarks/train_step.py                                  # small_cnn, batch 256, 6 rounds
    python benchmarks/train_step.py --backbone resnet18_cifar --batch 128 --rounds 4

Both sides use the same backbone and projection-head modules (the reference gets deep copies
with the same weights), the same batch of two 32×32 views, SGD with the same settings, and the
same number of intra-op threads. Per step:

- ``ours``: ``method.contrast(batch)`` → ``method.loss(sim, pos_mask, neg_mask)`` (which also
  fills the loss diagnostics of ``last_stats``) → backward → optimiser step; MoCo adds its EMA
  update and its queue update (``on_after_backward``).
- ``reference``: ``z = normalize(head(backbone(views)))`` → lightly's ``NTXentLoss`` (MoCo: with
  its ``memory_bank_size`` queue, keys from a momentum copy updated by ``update_momentum``) →
  backward → optimiser step.

Rounds alternate A/B (``--steps`` steps each after a warm-up), so load from other processes
hits both alike; the ratio ours/reference of images/s is reported per round with the median and
the spread. No Trainer on either side: this measures the step, not Lightning's loop. Not part
of the test suite.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
import torch.nn.functional as F
from lightly.loss import NTXentLoss
from lightly.models.utils import update_momentum

from ssl_app.losses import InfoNCE
from ssl_app.methods import MoCo, SimCLR


def make_batch(batch: int, size: int = 32) -> tuple:
    g = torch.Generator().manual_seed(0)
    views = [torch.randn(batch, 3, size, size, generator=g) for _ in range(2)]
    return views, torch.randint(0, 10, (batch,), generator=g), torch.arange(batch)


def ours_step(method, optimizer):
    def step(batch):
        optimizer.zero_grad(set_to_none=True)
        contrast = method.contrast(batch)
        loss = method.loss(contrast.sim, contrast.pos_mask, contrast.neg_mask)
        loss.backward()
        if isinstance(method, MoCo):
            method.on_after_backward()
        optimizer.step()
        if isinstance(method, MoCo):
            method.update_key_encoder(method.momentum)

    return step


def reference_step(method, kind: str, temperature: float, queue: int):
    backbone, head = copy.deepcopy(method.backbone), copy.deepcopy(method.projection_head)
    params = list(backbone.parameters()) + list(head.parameters())
    optimizer = torch.optim.SGD(params, lr=0.06, momentum=0.9, weight_decay=5e-4)
    if kind == "simclr":
        criterion = NTXentLoss(temperature=temperature)

        def step(batch):
            optimizer.zero_grad(set_to_none=True)
            z0, z1 = (F.normalize(head(backbone(v)), dim=1) for v in batch[0])
            criterion(z0, z1).backward()
            optimizer.step()

        return step
    key_backbone, key_head = copy.deepcopy(backbone), copy.deepcopy(head)
    for p in list(key_backbone.parameters()) + list(key_head.parameters()):
        p.requires_grad_(False)
    criterion = NTXentLoss(temperature=temperature, memory_bank_size=(queue, method.embedding_dim))

    def step(batch):
        optimizer.zero_grad(set_to_none=True)
        query = F.normalize(head(backbone(batch[0][0])), dim=1)
        with torch.no_grad():
            key = F.normalize(key_head(key_backbone(batch[0][1])), dim=1)
        criterion(query, key).backward()
        optimizer.step()
        update_momentum(backbone, key_backbone, 0.99)
        update_momentum(head, key_head, 0.99)

    return step


def build(kind: str, backbone: str, temperature: float, queue: int):
    torch.manual_seed(0)
    common = dict(loss=InfoNCE(temperature=temperature), backbone=backbone, proj_hidden_dim=512, proj_dim=128)
    if kind == "simclr":
        return SimCLR(**common)
    # key_bn none: lightly's reference has no BatchNorm remedy, so both sides do the same work
    return MoCo(queue_size=queue, momentum=0.99, key_bn="none", **common)


def timed(step, batch, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step(batch)
    return steps * batch[0][0].shape[0] / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["simclr", "moco"], choices=["simclr", "moco"])
    parser.add_argument("--backbone", default="small_cnn")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--queue", type=int, default=4096)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    batch = make_batch(args.batch)
    print(f"{args.backbone}, batch {args.batch}, {args.threads} threads, {args.rounds} rounds × {args.steps} steps")
    for kind in args.methods:
        method = build(kind, args.backbone, 0.5, args.queue).train()
        optimizer = torch.optim.SGD(method.parameters(), lr=0.06, momentum=0.9, weight_decay=5e-4)
        ours, reference = ours_step(method, optimizer), reference_step(method, kind, 0.5, args.queue)
        for step in (ours, reference):
            timed(step, batch, 2)  # warm-up (and fill the MoCo queues)
        ratios, rates = [], []
        for _ in range(args.rounds):
            a = timed(ours, batch, args.steps)
            b = timed(reference, batch, args.steps)
            ratios.append(a / b)
            rates.append((a, b))
        median = statistics.median(ratios)
        print(
            f"{kind}: ours {statistics.median(r[0] for r in rates):.0f} img/s, reference "
            f"{statistics.median(r[1] for r in rates):.0f} img/s, ratio ours/reference median {median:.2f} "
            f"(spread {min(ratios):.2f}–{max(ratios):.2f})"
        )


if __name__ == "__main__":
    main()
