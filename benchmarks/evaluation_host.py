"""The host's share of one evaluation of ``EmbeddingMetrics`` at CIFAR-10 scale, piece by piece: each piece as
the previous version did it (``before``) and as this one does (``after``), on the same inputs.

    python benchmarks/evaluation_host.py [--n 10000] [--features 512] [--repeats 5]

The inputs are what a CIFAR-10 evaluation hands the metrics: N = 10,000 validation samples, embeddings of
d = 128, ResNet-18 backbone features of 512, the top-10 negatives. The pieces are the ones that run on the
host whatever the device (on a GPU the host's time is the evaluation's time: nothing overlaps it), beside
the device arithmetic (the passes and the metrics), which ``evaluation.py --profile`` shows in a run:

- the spectra: the effective ranks, the power-law exponents and the spectrum figure each decomposed their
  own Gram matrix, six ``eigvalsh`` on the host per evaluation (512 × 512 and 128 × 128, float64); now two
  (the Gram matrices themselves are device arithmetic: on a GPU microseconds, on this CPU 0.1–0.3 s each);
- the scalars: one ``float()`` per field, a dozen host syncs on a GPU; now one transfer;
- the histograms ``similarity/positive`` (N values) and ``similarity/top10_negative`` (10 N): copied to the
  host and binned by TensorBoard in NumPy; now counted where they are and read with the other counts;
- the three figures: drawn with matplotlib and encoded as PNG in the training process; now handed over as
  plain data (``pickle``, what is sent to the drawing process) and drawn in a process of their own.

Each time is the least of ``--repeats`` of the CPU time of this process (``time.process_time``: the cores
this machine shares with other work inflate wall time, not the CPU a piece needs) and its wall time.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.tensorboard import SummaryWriter

from callbacks.distributions import similarity_distributions, write_histogram
from callbacks.plane_path import PlanePath
from callbacks.spectrum_plot import local_spectra, spectrum_drawing
from ssl_app.drawing.figures import draw
from ssl_app.metrics import EmbeddingInputs, evaluate_metrics
from ssl_app.metrics.histogram import SimilarityHistogram
from ssl_app.metrics.rank import power_law_exponent, spectrum_effective_rank


def least(piece: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """``(CPU seconds, wall seconds)``, each the least of ``repeats`` calls (after one warm-up call)."""
    piece()
    cpu, wall = [], []
    for _ in range(repeats):
        start_cpu, start_wall = time.process_time(), time.perf_counter()
        piece()
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start_wall)
    return min(cpu), min(wall)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    clean = F.normalize(torch.randn(args.n, 128, generator=g) * torch.linspace(3, 0.1, 128), dim=1)
    za = F.normalize(clean + 0.3 * torch.randn(args.n, 128, generator=g), dim=1)
    zb = F.normalize(clean + 0.3 * torch.randn(args.n, 128, generator=g), dim=1)
    backbone = torch.randn(args.n, args.features, generator=g).relu()
    labels = torch.arange(args.n) % 10
    report = evaluate_metrics(EmbeddingInputs(clean, labels, za, zb, 10, backbone, None, SimilarityHistogram()))
    path = PlanePath()
    for epoch in range(40):  # the shipped cadence: 40 evaluations in 200 epochs
        path.add(epoch * 5, 0.5 + epoch / 15, 0.6 - epoch / 100)
    writer = SummaryWriter(tempfile.mkdtemp(prefix="ssl_app_host_"))
    distributions = similarity_distributions(report, (-1.0, 1.0))
    title = "cifar10_simclr/version_0 (InfoNCE τ=0.5)\nepoch 200: x"
    drawings = [
        ("similarity/positive_vs_top10_negative", distributions.figure(10, title, (-1.0, 1.0))),
        ("figures/uniformity_tolerance_path", path.drawing(title)),
        ("figures/singular_value_spectrum", spectrum_drawing(local_spectra(clean, backbone), title)),
    ]

    grams = [(unit.T @ unit).double() for unit in (clean, backbone)]  # on a GPU: device arithmetic, microseconds

    def six_decompositions() -> None:  # before: effective rank, α and the spectrum figure each decomposed their own
        for _ in range(3):
            for gram in grams:
                sigma = torch.linalg.eigvalsh(gram).clamp(min=0).sqrt().flip(0)
                spectrum_effective_rank(sigma), power_law_exponent(sigma)

    def two_decompositions() -> None:
        for gram in grams:
            sigma = torch.linalg.eigvalsh(gram).clamp(min=0).sqrt().flip(0)
            spectrum_effective_rank(sigma), power_law_exponent(sigma)

    def scalars_one_by_one() -> None:
        [float(tensor.float().mean()) for tensor in report.fields.values()]

    def scalars_at_once() -> None:
        report._values = None
        report.values()

    def host_histograms() -> None:
        writer.add_histogram("similarity/positive", report["pos_sim"].float().cpu(), 0)
        writer.add_histogram("similarity/top10_negative", report["neg_sim"].float().cpu().flatten(), 0)

    def counted_histograms() -> None:
        found = similarity_distributions(report, (-1.0, 1.0))
        for tag, summary in found.histograms.items():
            if tag != "similarity/negative":  # logged before too
                write_histogram(writer, tag, summary, 0)

    pieces = [
        (f"spectra: eigvalsh of the {args.features}² and 128² Gram matrices", six_decompositions, two_decompositions),
        ("scalars read from the device", scalars_one_by_one, scalars_at_once),
        ("histograms positive + top-10", host_histograms, counted_histograms),
        ("three figures: drawn + PNG / handed over", lambda: draw(drawings), lambda: pickle.dumps(drawings)),
    ]
    print(f"one CIFAR-10-sized evaluation's host pieces: N = {args.n:,}, d = 128, backbone {args.features}, "
          f"{args.threads} threads, least of {args.repeats}")  # fmt: skip
    print("| piece | before: CPU s (wall s) | after: CPU s (wall s) |")
    print("| --- | ---: | ---: |")
    totals = [0.0, 0.0]
    for name, before, after in pieces:
        (cpu_before, wall_before), (cpu_after, wall_after) = least(before, args.repeats), least(after, args.repeats)
        totals[0] += cpu_before
        totals[1] += cpu_after
        print(f"| {name} | {cpu_before:.3f} ({wall_before:.3f}) | {cpu_after:.4f} ({wall_after:.4f}) |")
    print(f"| all | {totals[0]:.3f} | {totals[1]:.4f} |")
    writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
