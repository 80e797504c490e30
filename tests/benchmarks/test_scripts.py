"""The benchmark scripts still run (they are not timed here: their numbers live in benchmarks/README.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow
def test_train_step_compares_ours_at_the_defaults_and_like_for_like():
    """Catches the step benchmark rotting as the methods change (a renamed option, a new argument)."""
    tiny = ["--batch", "16", "--queue", "64", "--rounds", "1", "--steps", "1", "--warm-up", "1"]
    out = _run("train_step.py", *tiny, "--like-for-like")
    for method in ("simclr", "moco"):
        assert f"{method}: ours at its defaults runs in NHWC" in out
        assert f"{method}: ours+contiguous " in out and f"{method}: ours " in out
        assert out.count(f"{method}: ") == 4  # the layout line and three comparisons
    assert out.count("ratio median") == 6 and out.count("reference+channels_last") == 2


@pytest.mark.slow
def test_kernels_times_each_shipped_kernel_against_its_alternatives():
    out = _run("kernels.py", "--cases", "loss", "log_softmax_fill", "split_bn", "--rounds", "1")
    assert "loss MoCo [256, 4352]: masked" in out and "planned" in out and "cross_entropy" in out
    assert "SplitBatchNorm [256, 16, 32, 32] NHWC: shipped" in out and "per sub-batch" in out and "regrouped" in out


@pytest.mark.slow
def test_train_step_runs_in_bf16_and_writes_its_numbers_as_json(tmp_path):
    """Catches the device options of the step benchmark (gpu_check's train_step part) rotting: bf16
    autocast on both sides, the channels_last variant, the JSON (no peak memory off a GPU)."""
    tiny = ["--batch", "8", "--rounds", "1", "--steps", "1", "--warm-up", "1", "--methods", "simclr"]
    _run("train_step.py", *tiny, "--precision", "bf16", "--variants", "channels_last", "--json", str(tmp_path / "step.json"))
    record = json.loads((tmp_path / "step.json").read_text())
    assert record["settings"]["precision"] == "bf16" and record["settings"]["device"] == "cpu"
    sides = record["methods"]["simclr"]["sides"]
    assert sorted(sides) == ["ours", "ours+channels_last"] and all(side["against"] == "reference" for side in sides.values())
    assert all(side["img_per_s"] > 0 and side["ratio"] > 0 and side["peak_mb"] is None for side in sides.values())


@pytest.mark.slow
def test_augment_counts_a_calls_tensor_ops_beside_a_git_revision_and_times_the_fetch():
    """Catches the views benchmark rotting: the baseline's modules loaded from git beside this
    tree's (keys given as each version takes them), the op counts, and the fetch's two cases."""
    out = _run("augment.py", "--calls", "--batch", "8", "--batches", "1", "--rounds", "1", "--baseline", "HEAD")
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| HEAD") or line.startswith("| this tree")]
    assert [(row[0].strip(), row[1].strip()) for row in rows] == [
        ("HEAD", "keys"), ("HEAD", "generator"), ("this tree", "keys"), ("this tree", "generator")
    ]  # fmt: skip
    assert all(int(row[2]) > 0 and row[3].strip() == "–" and float(row[4]) > 0 for row in rows)
    out = _run("augment.py", "--fetch", "--batch", "16", "--batches", "2", "--rounds", "1")
    assert "| item by item (a PIL image per sample) |" in out and "| one indexing of the array (__getitems__) |" in out


@pytest.mark.slow
def test_evaluation_times_each_callback_here_and_in_another_checkout(tmp_path):
    """Catches the evaluation benchmark rotting: a callback's hooks no longer timed (the projector
    writes at the end of training), or the side-by-side run in another checkout failing."""
    quick = ["--config", "configs/quickstart.yaml", "--epochs", "2", "--set", "trainer.limit_train_batches=2"]
    out = _run("evaluation.py", *quick, "--against", str(ROOT), "--profile", "--json", str(tmp_path / "evaluation.json"))
    results = json.loads((tmp_path / "evaluation.json").read_text())
    assert sorted(results) == [str(ROOT), "this tree"]
    for (summary,) in results.values():
        assert summary["steady"]["eval"] > summary["steady"]["loop"] > 0
        assert {"KNNMonitor", "EmbeddingMetrics"} <= set(summary["steady"]["callbacks"])
        assert summary["fit_end"]["EmbeddingProjector"] > 0
        # --profile: the pieces by name (a renamed function drops its piece), the figures drawn apart
        pieces = summary["steady"]["pieces"]
        assert {"embedding passes", "metrics (evaluate_metrics)", "kNN vote", "  figures handed to their process"} <= set(pieces)
        assert "  figures drawn in the training process" not in pieces and len(summary["figures_async"]) == 2
    assert "figures (async, in their own process, not waited for)" in out


@pytest.mark.slow
def test_evaluation_host_times_each_host_piece_before_and_after():
    """Catches the host-piece benchmark rotting as the metrics, histograms or figures it calls change."""
    out = _run("evaluation_host.py", "--n", "400", "--features", "64", "--repeats", "1", "--threads", "1")
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ") and "---" not in line][1:]
    names = ["spectra", "scalars read from the device", "histograms positive + top-10", "three figures", "all"]
    assert [row[0].split(":")[0].strip() for row in rows] == names
    assert all(float(row[1].split()[0]) >= 0 and float(row[2].split()[0]) >= 0 for row in rows)
    assert float(rows[3][1].split()[0]) > 0  # drawing three figures takes time; handing them over is what is left
