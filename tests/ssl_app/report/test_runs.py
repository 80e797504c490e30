"""Finding run folders and reading events, sidecars and the linear evaluation."""

from __future__ import annotations

import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

from ssl_app.errors import ConfigError
from ssl_app.report.events import read_events
from ssl_app.report.runs import find_run_dirs, load_runs
from ssl_app.runs.layout import write_sweep_point
from ssl_app.runs.record import start_record
from tests.ssl_app.report.fakes import run_config, sweep_sidecar, write_run

FINAL = {"uniformity": 3.5, "tolerance": 0.2}


def test_a_run_is_a_folder_with_a_record_events_or_sweep_json_and_its_subfolders_belong_to_it(tmp_path):
    """Catches a walk that reads a run's probe or evaluations as runs of their own (extra seeds)."""
    write_run(tmp_path / "a" / "version_0", run_config("InfoNCE", 0, 0.3), FINAL, linear_top1=0.8)
    (tmp_path / "a" / "version_0" / "checkpoints").mkdir()
    crashed = tmp_path / "b" / "point" / "seed0"
    crashed.mkdir(parents=True)
    write_sweep_point(crashed, sweep_sidecar("point", {}, 0))
    started = tmp_path / "c" / "version_0"
    start_record(started, "fit", run_config("InfoNCE", 0, 0.3))  # failed before it logged anything
    (tmp_path / "notes").mkdir()

    assert find_run_dirs(tmp_path) == [tmp_path / "a" / "version_0", crashed, started]


@pytest.mark.parametrize("make", ["empty", "missing", "file", "no_runs"])
def test_nothing_to_read_is_one_config_error(tmp_path, make):
    target = tmp_path / "runs"
    if make == "empty":
        target.mkdir()
    elif make == "file":
        target.write_text("not a directory")
    elif make == "no_runs":
        (target / "version_0" / "checkpoints").mkdir(parents=True)
        (target / "version_0" / "config.yaml").write_text("seed_everything: 0\n")
    with pytest.raises(ConfigError, match="runs"):
        load_runs(target)


def test_runs_read_their_final_values_linear_evaluation_and_sweep_status(study):
    runs = {run.name: run for run in load_runs(study.root)}

    assert sorted(runs) == [
        "infonce_t0.3/seed0",
        "infonce_t0.3/seed1",
        "infonce_t0.3/seed2",
        "infonce_t0.7/seed0",
        "infonce_t0.7/seed1",
    ]
    done = runs["infonce_t0.7/seed1"]
    assert done.usable and done.seed == 1 and done.problems == []
    assert done.events.last("metrics/uniformity") == pytest.approx(3.12, rel=1e-6)
    assert done.events.last("metrics/tolerance") is None  # this seed never logged it
    assert done.linear.last("linear/top1") == pytest.approx(0.8213, rel=1e-6)
    assert len(done.events.histograms["similarity/positive"]) == 3  # one per epoch
    failed = runs["infonce_t0.3/seed2"]
    assert failed.status == "failed" and not failed.usable and failed.events is None


def test_unreadable_sidecars_are_recorded_not_raised(tmp_path):
    run = write_run(tmp_path / "version_0", None, FINAL)
    (run / "config.yaml").write_text("model: [unclosed\n")
    (run / "sweep.json").write_text("{not json")

    [read] = load_runs(tmp_path)

    assert read.config is None and read.sweep is None and read.usable
    assert any("config.yaml unreadable" in problem for problem in read.problems)
    assert any("sweep.json unreadable" in problem for problem in read.problems)


def test_a_sweep_run_without_events_is_listed_not_averaged(tmp_path):
    folder = tmp_path / "p" / "seed0"
    folder.mkdir(parents=True)
    write_sweep_point(folder, sweep_sidecar("p", {}, 0))

    [run] = load_runs(tmp_path)

    assert run.status == "unknown" and not run.usable


def test_histograms_keep_counts_range_and_exact_mean(tmp_path):
    values = np.random.default_rng(0).normal(0.6, 0.1, 1000).clip(-1, 1)
    writer = SummaryWriter(log_dir=str(tmp_path))
    writer.add_histogram("similarity/positive", values - 0.2, 0)
    writer.add_histogram("similarity/positive", values, 7)
    writer.close()

    [first, last] = read_events(tmp_path).histograms["similarity/positive"]

    assert (first.step, last.step) == (0, 7)
    assert last.total == 1000
    assert last.value_sum / last.total == pytest.approx(values.mean(), rel=1e-5)
    assert np.all(np.diff(last.edges) >= 0) and last.edges.size == last.counts.size + 1
    assert last.edges[0] <= values.min() + 1e-6 and last.edges[-1] >= values.max() - 1e-6
