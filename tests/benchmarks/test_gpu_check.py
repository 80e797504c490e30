"""benchmarks/gpu_check.py, the one command a lent GPU runs: its table, its cut-offs, and its parts on
the CPU (``--quick``). The numbers themselves are not checked here (benchmarks/README.md holds them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check  # noqa: E402
from syncs import SYNC_MESSAGE, SyncListing  # noqa: E402


def listed_syncs() -> dict[str, Any]:
    """The ``syncs`` part's record of 3 steps, made by its own code: a sync in the first step (left
    out), one in a step that does not log, one in a logged step."""
    listing = SyncListing(own_code=[str(Path(__file__).parent) + "/"], host_reads=False)
    for logged in (False, False, True):
        listing.start(logged=logged)
        warnings.warn(f"called a {SYNC_MESSAGE}", UserWarning, stacklevel=1)
        listing.stop()
    return gpu_check.syncs_record(listing, "cuda")


SIDE = {"against": "reference", "img_per_s": 900.0, "reference_img_per_s": 1000.0, "ratio": 0.9, "ratio_spread": [0.8, 1.0]}
RESULTS = {
    "run": {"device": "cuda", "device_name": "NVIDIA H100", "quick": False, "cpus": 16, "started": "now",
            "parts": {"tests": {"status": "ok", "seconds": 20, "budget": 50},
                      "loader": {"status": "timeout (partial)", "seconds": 80, "budget": 80}}},
    "tests": {"device": "cuda", "rc": 1,
              "cases": [{"name": "test_a", "outcome": "passed"}, {"name": "test_b", "outcome": "failed"}]},
    "train_step/layouts/simclr": {
        "settings": {"backbone": "resnet18_cifar", "batch": 512, "precision": "bf16", "key_bn": "none"},
        "methods": {"simclr": {"sides": {"ours": SIDE | {"peak_mb": 5000.0, "reference_peak_mb": 6000.0}}}}},
    "epoch/cifar10_simclr": {"model": "SimCLR/resnet18_cifar", "batch": 512, "train_images": 50000, "seconds_per_epoch": 9.5,
                             "img_per_s": 5263.0, "first_epoch_s": 20.0, "scaled": "a whole epoch", "precision": "bf16-mixed",
                             "evaluations": [{"epoch": 1, "eval": 6.0, "loop": 2.0}],
                             "evaluation_pieces": [
                                 {"epoch": 0, "eval": 6.0, "loop": 2.0, "callbacks": {"KNNMonitor": 3.0, "ModelCheckpoint": 0.0}},
                                 {"epoch": 1, "eval": 0.9, "loop": 0.3,
                                  "callbacks": {"KNNMonitor": 0.4, "EmbeddingMetrics": 0.2}}],
                             "fit_end_s": {"EmbeddingProjector": 0.05, "EmbeddingMetrics": 0.3},
                             "figures_async_s": [0.4, 0.3], "val_batch": 512},
    "epoch/metrics": {"n": 50000, "seconds": {"uniformity": 0.02}},
    "compiled/cifar10_simclr": {"model": "SimCLR/resnet18_cifar", "batch": 512, "train_images": 50000, "precision": "bf16-mixed",
                                "epochs_s": [5.8, 2.9], "evaluations": [{"epoch": 1, "eval": 20.0, "loop": 12.9}],
                                "scaled": "whole epochs", "after_last_evaluation_s": 55.7, "compile": True,
                                "channels_last": True,
                                "dynamo": [{"epoch": 0, "validating": False, "frames_compiled": 1, "graph_breaks": 0},
                                           {"epoch": 1, "validating": True, "frames_compiled": 1, "graph_breaks": 0},
                                           {"epoch": 1, "validating": False, "frames_compiled": 2, "graph_breaks": 0}]},
    "syncs/cifar10_moco": listed_syncs(),
    "loader": {"batch": 128, "images": 3200, "sizes": "mixed", "loader_img_per_s": {"2": 2000.0}, "precision": "",
               "workers": {"2": {"start": "fork_server", "cpu_ms_per_image": 5.5, "busy": 0.5}},
               "other_start": {"workers": 1, "img_per_s": 1000.0, "start": "fork", "cpu_ms_per_image": 5.0, "busy": 0.9}},
    "augment": {"batch": 512, "paths": {"keys": {"ops_per_call": 230, "kernels_per_call": 190, "ms_per_call": 1.25},
                                        "generator": {"ops_per_call": 159, "kernels_per_call": None, "ms_per_call": 1.0}}},
}  # fmt: skip


def test_the_summary_is_one_table_with_every_part_and_what_a_timeout_left(tmp_path):
    """Catches a part's numbers missing from the table, a failed test or a timed-out part not shown,
    the lightly / 6 s comparison dropped, or the table split in several (a reader pastes one)."""
    (tmp_path / "results.json").write_text(json.dumps(RESULTS))
    text = gpu_check.write_summary(tmp_path)
    assert text == (tmp_path / "summary.md").read_text()
    lines = text.splitlines()
    table = [number for number, line in enumerate(lines) if line.startswith("|")]
    assert table == list(range(table[0], table[-1] + 1)) and sum(line.startswith("| part |") for line in lines) == 1
    rows = {tuple(cell.strip() for cell in line.strip("|").split("|")) for line in lines[table[0] + 2 :]}
    assert ("tests", "test_on_device.py on cuda", "passed", "1 of 2", "failed: test_b") in rows
    assert any(row[0] == "train_step" and row[3] == "900; **0.90**" and "peak 5,000 MB" in row[4] for row in rows)
    (epoch,) = [row for row in rows if row[0] == "epoch" and row[2] == "s per training epoch"]
    assert epoch[3] == "**9.5**" and "lightly ~26 s" in epoch[4] and "≤ 1.5 s (H200" in epoch[4]
    (against,) = [row for row in rows if row[1] == "cifar10_simclr s per epoch / bare step"]
    assert against[3] == "**0.17**" and "bare step 900 img/s = 55.56 s per epoch" in against[4] and "585%" in against[4]
    assert any(row[1] == "cifar10_simclr evaluation 1" and row[3] == "**6.00**" and "callbacks 4.00 s" in row[4] for row in rows)
    (steady,) = [row for row in rows if row[1] == "cifar10_simclr evaluation 2"]
    assert steady[3] == "**0.90**" and steady[4].startswith("steady") and "target ≤ 1.0 s" in steady[4]
    # the evaluation's breakdown by callback, and the projector at the end of fit
    assert ("epoch", "cifar10_simclr evaluation 2: KNNMonitor", "s", "0.400", "steady") in rows
    assert ("epoch", "cifar10_simclr evaluation 2: EmbeddingMetrics", "s", "0.200", "steady") in rows
    assert not any("ModelCheckpoint" in row[1] for row in rows)  # nothing to show
    assert ("epoch", "cifar10_simclr end of fit: EmbeddingProjector", "s", "0.050", "target ≤ 1.0 s (H200)") in rows
    (waits,) = [row for row in rows if row[1] == "cifar10_simclr end of fit: EmbeddingMetrics"]  # not the projector's target
    assert waits[3] == "0.300" and "waits for the figures" in waits[4] and "target" not in waits[4]
    (figures,) = [row for row in rows if row[1] == "cifar10_simclr figures (async)"]  # what the evaluation no longer waits for
    assert figures[3] == "0.400" and "own process" in figures[4] and "2 evaluations" in figures[4]
    assert "loop 0.30 s (batches of 512)" in steady[4]
    (compiled,) = [row for row in rows if row[0] == "compiled" and row[2] == "s per training epoch"]
    assert compiled[3] == "**2.9**" and "first epoch 5.8 s (compiling)" in compiled[4] and "compile true" in compiled[1]
    assert "frames compiled so far at the end of epoch 1: 1, evaluation 2: 1, epoch 2: 2; 0 graph breaks" in compiled[4]
    (compiled_end,) = [row for row in rows if row[0] == "compiled" and "end of fit" in row[1]]
    assert ("compiled", "cifar10_simclr end of fit", "s", "55.7") == compiled_end[:4]
    (syncs,) = [row for row in rows if row[0] == "syncs"]
    assert syncs[2] == "syncs per step that does not log" and syncs[3] == "**1.0**"
    assert "1 such steps of 3" in syncs[4] and "logged: [2]" in syncs[4] and "test_gpu_check.py" in syncs[4]
    (loader,) = [row for row in rows if row[0] == "loader" and row[3] == "2,000"]
    assert "step not measured" in loader[4] and "started by fork_server, their CPU 5.5 ms per image, busy 50%" in loader[4]
    (other,) = [row for row in rows if row[0] == "loader" and row[1].endswith("workers=1, fork")]
    assert other[3] == "1,000" and "does not take on this machine" in other[4] and "busy 90%" in other[4]
    assert not any(row[1] == "(the summary)" for row in rows)
    assert ("loader", "(the part)", "status", "timeout (partial)", "after 80 of 80 s") in rows
    (keys,) = [row for row in rows if row[0] == "train_step" and "batched views, keys" in row[1]]
    assert keys[3] == "**1.25**" and "230 tensor ops, 190 CUDA kernels per call" in keys[4] and "≤ 2 ms" in keys[4]
    assert "NVIDIA H100" in lines[0]


def test_a_record_the_table_cannot_read_is_one_row_and_the_other_parts_still_show(tmp_path):
    """Catches the summary crashing on one part's record (a field renamed, a partial or older record:
    the CPU quick run and the first GPU call crashed there, issue 38), which loses every part's table."""
    broken = json.loads(json.dumps(RESULTS)) | {"epoch/cifar10_simclr": {"model": "SimCLR/resnet18_cifar"}}
    broken["syncs/cifar10_moco"] = {"steps": 12, "sites": []}  # the record of the first GPU call's listing
    (tmp_path / "results.json").write_text(json.dumps(broken))
    rows = gpu_check.summary_rows(broken)
    unreadable = {row[0]: row[3] for row in rows if row[1] == "(the summary)"}
    assert unreadable.keys() == {"epoch", "syncs"} and unreadable["epoch"].startswith("KeyError")
    assert {"tests", "train_step", "compiled", "loader"} <= {row[0] for row in rows if row[1] != "(the summary)"}
    assert "| epoch | (the summary) | unreadable record |" in gpu_check.write_summary(tmp_path)


def test_the_gpu_budgets_fit_one_gpu_call_and_every_part_has_one():
    """Catches a part added without a budget (a KeyError in the driver) or budgets that no longer fit
    the one GPU call: 8 minutes with the machine's start and the other measurements, so at most 420 s."""
    assert set(gpu_check.BUDGETS) == set(gpu_check.QUICK_BUDGETS) == set(gpu_check.PARTS)
    assert sum(gpu_check.BUDGETS.values()) <= 420 and sum(gpu_check.QUICK_BUDGETS.values()) <= 300


def missing_keys(fake: Any, real: Any, path: str = "") -> list[str]:
    """The keys of ``fake`` (recursively; a list by its first item) that ``real`` does not have."""
    if isinstance(fake, dict) and isinstance(real, dict):
        return [found for key, value in fake.items() for found in
                (missing_keys(value, real[key], f"{path}.{key}") if key in real else [f"{path}.{key}"])]  # fmt: skip
    if isinstance(fake, list) and isinstance(real, list) and fake and real:
        return missing_keys(fake[0], real[0], f"{path}[0]")
    return []


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> Path:
    """``benchmarks/gpu_check.sh --device cpu --quick``, every part, once for this module (2–4 minutes here)."""
    out = tmp_path_factory.mktemp("gpu_check") / "out"
    env = os.environ | {"PYTHONPATH": str(ROOT), "PYTHON": sys.executable}
    result = subprocess.run([str(ROOT / "benchmarks" / "gpu_check.sh"), "--device", "cpu", "--quick", "--out", str(out)],
                            capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)  # fmt: skip
    assert (out / "summary.md").is_file(), result.stdout[-2000:] + result.stderr[-3000:]
    return out


@pytest.mark.slow
def test_the_quick_run_measures_every_part_and_its_table_reads_every_record(quick_run):
    """Catches a part that fails or times out on the CPU, a record the table cannot read (the crash
    after the loader part, issue 38), a part with no row, and the fake records of the test above
    drifting from what the parts write (a key the table reads that the real record lacks)."""
    results = json.loads((quick_run / "results.json").read_text())
    assert {part: status["status"] for part, status in results["run"]["parts"].items()} == dict.fromkeys(gpu_check.PARTS, "ok")
    rows = gpu_check.summary_rows(results)
    assert not [row for row in rows if row[1] in ("(the summary)", "(the part)")]
    assert {row[0] for row in rows} == set(gpu_check.PARTS)
    for key, fake in RESULTS.items():
        if key != "run":
            assert key in results and missing_keys(fake, results[key]) == [], key
    assert (quick_run / "summary.md").read_text() == gpu_check.write_summary(quick_run)
    assert sorted(path.name for path in quick_run.iterdir()) == ["log.txt", "results.json", "summary.md"]


@pytest.mark.slow
def test_a_part_over_its_budget_is_killed_and_the_run_still_reports(tmp_path, monkeypatch):
    """Catches one overrunning part eating the lease (no cut-off), or a cut-off that leaves no summary."""
    monkeypatch.setitem(gpu_check.QUICK_BUDGETS, "tests", 2)  # pytest cannot even start in 2 s
    args = gpu_check.argparse.Namespace(device="cpu", quick=True, out=tmp_path / "out", parts=["tests"])
    assert gpu_check.drive(args) == 1
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    status = results["run"]["parts"]["tests"]
    assert status["status"] == "timeout (partial)" and status["seconds"] < 10
    assert "| tests | (the part) | status | timeout (partial) |" in (tmp_path / "out" / "summary.md").read_text()
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["log.txt", "results.json", "summary.md"]


@pytest.mark.slow
def test_cuda_asked_for_without_one_is_one_error_line_and_writes_nothing(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cuda", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2 and result.stderr.splitlines()[-1].endswith("error: --device cuda: torch sees no CUDA device")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_quick_epoch_part_trains_both_cifar10_configs_and_times_their_evaluation(tmp_path):
    """Catches the epoch part rotting as the configs or the CLI change (an override renamed, the
    composed SimCLR config no longer parsing): its numbers are the ones compared with lightly's."""
    out = tmp_path / "out"
    command = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu", "--quick", "--out", str(out)]
    result = subprocess.run([*command, "--part", "epoch"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                            env={"PYTHONPATH": f"{ROOT}:{ROOT / 'benchmarks'}", "OMP_WAIT_POLICY": "PASSIVE"})  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    for name, model in (("cifar10_simclr", "SimCLR/small_cnn"), ("cifar10_memory_bank", "MemoryBank/small_cnn")):
        record = results[f"epoch/{name}"]
        assert record["model"] == model and record["seconds_per_epoch"] > 0 and record["scaled"].startswith("scaled ×5")
        assert len(record["evaluations"]) == 2 and record["evaluations"][0]["eval"] > record["evaluations"][0]["loop"] > 0
        pieces = record["evaluation_pieces"]  # the breakdown by callback, and the projector's time
        assert len(pieces) == 2 and {"KNNMonitor", "EmbeddingMetrics"} <= set(pieces[1]["callbacks"])
        assert "EpochTimer" not in pieces[1]["callbacks"] and record["fit_end_s"]["EmbeddingProjector"] > 0
        assert len(record["figures_async_s"]) == 2 and record["val_batch"] == (512 if "bank" in name else 64)
    assert sorted(results["epoch/metrics"]["seconds"]) == ["alignment", "positive_and_top10_negatives", "tolerance", "uniformity"]


def test_the_compiled_step_rows_show_what_dynamo_compiled_and_where_the_step_waits():
    """Catches the compiled step's diagnosis measured but not shown: the frames dynamo compiled (a
    recompiling step shows) and one profiled step's GPU kernel time against its wall time."""
    profile = {"wall_ms": 20.0, "kernels": 400, "gpu_busy_ms": 12.0}
    side = SIDE | {"peak_mb": 2300.0, "reference_peak_mb": 2317.0, "profile": profile,
                   "reference_profile": {"wall_ms": 50.0, "kernels": 900, "gpu_busy_ms": 45.0}}  # fmt: skip
    record = {"settings": {"backbone": "resnet18_cifar", "batch": 512, "precision": "bf16"},
              "methods": {"simclr": {"sides": {"ours": SIDE | {"peak_mb": 1.0, "reference_peak_mb": 1.0},
                                               "ours+channels_last_compile": side},
                                     "dynamo": {"frames_compiled": 1, "graph_breaks": 0}}}}  # fmt: skip
    rows = {row[1]: row[4] for row in gpu_check.summary_rows({"train_step/compiled/simclr": record}) if row[0] == "train_step"}
    compiled = rows["simclr ours+channels_last_compile (resnet18_cifar, b512, bf16)"]
    assert "one profiled step 20.0 ms, 400 kernels busy 12.0 ms (60%) (reference 50.0 ms, busy 45.0 ms)" in compiled
    assert "dynamo: 1 frame(s) compiled, 0 graph breaks" in compiled
    assert "dynamo" not in rows["simclr ours (resnet18_cifar, b512, bf16)"]


def test_the_loader_rows_show_both_paths_against_the_step():
    """Catches the device-decode numbers measured but not shown, or shown without their ratio to the step."""
    loader = {"batch": 128, "images": 3200, "sizes": "mixed", "precision": "bf16", "step_img_per_s": 2000.0,
              "loader_img_per_s": {"8": 1500.0, "16": 1600.0},
              "decoded_on_device_img_per_s": {"8": 5000.0, "16": 6000.0}}  # fmt: skip
    rows = gpu_check.summary_rows({"loader": loader})
    shown = {(row[1], row[3]): row[4] for row in rows if row[0] == "loader"}
    assert "loader / step **0.80**" in shown[("ImageNet-100 shape, b128, views in the workers, workers=16", "1,600")]
    assert "loader / step **3.00**" in shown[("ImageNet-100 shape, b128, decoded on the device, workers=16", "6,000")]
    assert ("ResNet-50 step, b128, bf16", "2,000") in shown and len(shown) == 5
    assert "started by" not in shown[("ImageNet-100 shape, b128, views in the workers, workers=16", "1,600")]  # an older record
