"""Time and peak extra memory of the exact metrics, side by side with the naive formulas and
with the floor of any exact uniformity, in one run.

    python benchmarks/metrics.py                          # N = 10k, 50k, 200k; d = 128
    python benchmarks/metrics.py --sizes 2000 10000 --repeats 3

Cases (all single-process, float32 embeddings, t = 2, k = 10, 100 classes):

- ``floor``: what every exact uniformity must pay, the dot products of the N(N−1)/2 pairs as
  blocked matrix products (upper-triangle tiles of 1000 × 4000) plus one exp per pair, summed;
  no masking, no normalisation, no bookkeeping.
- ``uniformity``, ``alignment``, ``tolerance``, ``topk``: ``ssl_app.metrics`` with its defaults.
- ``*_naive``: the direct formulas (``torch.pdist``, or the full N×N similarity matrix). They
  are skipped when their estimated memory exceeds ``--naive-budget-gb``.

Each measurement runs in a fresh subprocess: the inputs are built in small pieces, the case is
warmed up on 512 rows, the kernel's resident-set high-water mark is reset
(``/proc/self/clear_refs``), and the peak extra memory is ``VmHWM`` after the call minus
``VmRSS`` before it. (tracemalloc does not see torch's CPU allocations.) Repeats are interleaved
across cases so that load from other processes hits every case alike; the table reports the
fastest repeat (wall clock and, separately, process CPU time over all threads, which other
processes disturb less) and the 1-minute load average when that repeat started. Not part of
the test suite.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

CASES = [
    "floor",
    "uniformity",
    "uniformity_naive",
    "alignment",
    "alignment_naive",
    "tolerance",
    "tolerance_naive",
    "topk",
    "topk_naive",
]
T, K, CLASSES = 2.0, 10, 100


def naive_bytes(case: str, n: int, d: int) -> float:
    """Rough peak extra memory of a naive case (the largest temporaries alive at once)."""
    pairs = n * (n - 1) / 2
    if case == "uniformity_naive":
        return 2 * 4 * pairs  # pdist vector and one elementwise temporary
    if case == "tolerance_naive":
        return 4 * n * n + 2 * n * n  # similarities, the same-label mask and its negation/eye
    if case == "topk_naive":
        return 4 * n * n
    return 3 * 4 * n * d  # alignment: a few [N, d] temporaries


# ----------------------------------------------------------------------------- the cases
def floor(u, t: float = T, rows: int = 1000, cols: int = 4000):
    """Σ_{i<j} exp(2t u_i·u_j) by upper-triangle tiles (the diagonal tiles count a few extra pairs).

    Not 1024 × 4096: with a power-of-two row stride sgemm ran 2.5x slower on this CPU.
    """
    import torch

    total = torch.zeros((), dtype=torch.float64)
    scaled = u * (2 * t)
    n = u.shape[0]
    for a in range(0, n, rows):
        block = scaled[a : a + rows]
        for j in range(a, n, cols):
            g = torch.mm(block, u[j : j + cols].T)
            total += g.exp_().sum(dim=1).double().sum()
    return total


def run_case(case: str, data: dict):
    import torch
    import torch.nn.functional as F

    from ssl_app.metrics import alignment, positive_and_topk_negatives, tolerance, uniformity

    za, zb, labels = data.get("za"), data.get("zb"), data.get("labels")
    if case == "floor":
        return floor(za).item()
    if case == "uniformity":
        return uniformity(za, t=T).item()
    if case == "uniformity_naive":
        squared = torch.pdist(F.normalize(za, dim=1)).pow_(2)
        return -squared.mul_(-T).exp_().mean().log().item()
    if case == "alignment":
        return alignment(za, zb).item()
    if case == "alignment_naive":
        return (F.normalize(za, dim=1) - F.normalize(zb, dim=1)).norm(dim=1).pow(2).mean().item()
    if case == "tolerance":
        return tolerance(za, labels).item()
    if case == "tolerance_naive":
        u = F.normalize(za, dim=1)
        sim = u @ u.T
        same = labels[:, None] == labels[None, :]
        same.fill_diagonal_(False)
        return sim[same].double().mean().item()
    if case == "topk":
        positive, negatives = positive_and_topk_negatives(za, zb, k=K)
        return [positive.double().mean().item(), negatives[:, 0].double().mean().item()]
    if case == "topk_naive":
        sim = F.normalize(za, dim=1) @ F.normalize(zb, dim=1).T
        positive = sim.diagonal().clone()
        sim.fill_diagonal_(float("-inf"))
        negatives = sim.topk(K, dim=1).values
        return [positive.double().mean().item(), negatives[:, 0].double().mean().item()]
    raise ValueError(f"case must be one of {CASES}, got {case!r}")


def make_data(case: str, n: int, d: int, seed: int) -> dict:
    """Unit-norm embeddings built 8192 rows at a time, so no large temporary inflates the baseline."""
    import torch
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(seed)
    data = {"za": torch.empty(n, d)}
    if case.startswith(("alignment", "topk")):
        data["zb"] = torch.empty(n, d)
    for a in range(0, n, 8192):
        rows = torch.randn(min(8192, n - a), d, generator=generator)
        data["za"][a : a + len(rows)] = F.normalize(rows, dim=1)
        if "zb" in data:
            noise = torch.randn(rows.shape, generator=generator)
            data["zb"][a : a + len(rows)] = F.normalize(rows + 0.5 * noise, dim=1)
    if case.startswith("tolerance"):
        data["labels"] = torch.randint(0, CLASSES, (n,), generator=generator)
    return data


# ------------------------------------------------------------------- one fresh measurement
def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure(case: str, n: int, d: int, seed: int) -> dict:
    """Run one case once in this process and return its time and peak extra memory."""
    data = make_data(case, n, d, seed)
    warm = {key: value[:512] for key, value in data.items()}
    run_case(case, warm)
    del warm
    gc.collect()
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset VmHWM to the current RSS
    before = _status_kb("VmRSS")
    load = os.getloadavg()[0]
    start, start_cpu = time.perf_counter(), time.process_time()
    value = run_case(case, data)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - start_cpu
    peak = _status_kb("VmHWM")
    return {
        "case": case,
        "n": n,
        "d": d,
        "seed": seed,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "load": load,
        "extra_mb": (peak - before) / 1024,
        "value": value,
    }


def measure_in_subprocess(case: str, n: int, d: int, seed: int) -> dict:
    command = [sys.executable, __file__, "--measure", case, str(n), str(d), str(seed)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{case} at N={n} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------- the report
def fmt_value(value) -> str:
    if isinstance(value, list):
        return "pos " + ", top-1 neg ".join(f"{v:.4f}" for v in value)
    return f"{value:.6g}"


def report(results: list[dict], skipped: dict, sizes: list[int]) -> str:
    """One markdown table per N: the fastest repeat's times, the largest peak memory, seed 0's value."""
    lines = []
    for n in sizes:
        runs = [r for r in results if r["n"] == n]
        fastest = {}
        for r in runs:
            if r["case"] not in fastest or r["seconds"] < fastest[r["case"]]["seconds"]:
                fastest[r["case"]] = r
        cpu = {case: min(r["cpu_seconds"] for r in runs if r["case"] == case) for case in fastest}
        memory = {case: max(r["extra_mb"] for r in runs if r["case"] == case) for case in fastest}
        floor_wall = fastest["floor"]["seconds"] if "floor" in fastest else math.nan
        floor_cpu = cpu.get("floor", math.nan)
        value = {r["case"]: r["value"] for r in runs if r["seed"] == 0}  # same inputs for every case
        lines += [
            f"\nN = {n:,} (d = {runs[0]['d']}, {n * (n - 1) / 2:.3g} pairs)\n",
            "| case | wall (s) | / floor | CPU (s) | / floor | peak extra memory (MB) | value (seed 0) | load |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for case in CASES:
            if case in fastest:
                r = fastest[case]
                lines.append(
                    f"| {case} | {r['seconds']:.3f} | {r['seconds'] / floor_wall:.2f} | {cpu[case]:.3f} | "
                    f"{cpu[case] / floor_cpu:.2f} | {memory[case]:.0f} | "
                    f"{fmt_value(value.get(case, math.nan))} | {r['load']:.1f} |"
                )
            elif (case, n) in skipped:
                lines.append(f"| {case} | skipped: needs ~{skipped[case, n] / 2**30:.1f} GB > budget | | | | | | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000, 200_000], help="numbers of embeddings N")
    parser.add_argument("--dim", type=int, default=128, help="embedding dimension d")
    parser.add_argument("--repeats", type=int, default=2, help="fresh runs per case; the fastest is reported")
    parser.add_argument("--cases", nargs="+", default=CASES, choices=CASES)
    parser.add_argument("--naive-budget-gb", type=float, default=4.0, help="skip naive cases estimated above this")
    parser.add_argument("--json", type=Path, help="also write every raw measurement here")
    parser.add_argument("--measure", nargs=4, metavar=("CASE", "N", "D", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        case, n, d, seed = args.measure
        print(json.dumps(measure(case, int(n), int(d), int(seed))))
        return

    import torch

    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, load average {os.getloadavg()}", flush=True)
    results, skipped = [], {}
    for n in args.sizes:
        cases = []
        for case in args.cases:
            need = naive_bytes(case, n, args.dim) if case.endswith("_naive") else 0
            if need > args.naive_budget_gb * 2**30:
                skipped[case, n] = need
            else:
                cases.append(case)
        for repeat in range(args.repeats):
            for case in cases:
                r = measure_in_subprocess(case, n, args.dim, seed=repeat)
                results.append(r)
                print(
                    f"N={n} {case} repeat {repeat}: {r['seconds']:.3f} s (CPU {r['cpu_seconds']:.3f} s), "
                    f"{r['extra_mb']:.0f} MB, load {r['load']:.1f}",
                    file=sys.stderr,
                    flush=True,
                )
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
    print(report(results, skipped, args.sizes))
    print(f"\n# load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
