"""The report's τ views (``ssl_app.report.tau_figures``), read from event files written by TensorBoard's writer."""

from __future__ import annotations

import math

import pytest
from torch.utils.tensorboard import SummaryWriter

from ssl_app.report.events import read_events
from ssl_app.report.groups import group_runs
from ssl_app.report.runs import load_runs
from ssl_app.report.summary import build_rows
from ssl_app.report.tau_figures import MIN_SPANS, draw_tau_figures, fractional_epochs, plane_path, readable_limits, tau_curve
from tests.ssl_app.report.fakes import STEPS_PER_EPOCH, run_config, write_run
from tests.ssl_app.report.test_figures import assert_valid_png

PERIOD = 2.0  # epochs: a fake run of 3 epochs sees one and a half cycles
COSINE = {"class_path": "ssl_app.temperature.Cosine", "init_args": {"low": 0.1, "high": 1.0, "period": PERIOD, "unit": "epoch"}}


def cosine(t: float) -> float:
    return 0.1 + 0.9 * (1 + math.cos(2 * math.pi * t / PERIOD)) / 2


def write_tau_study(root):
    """A constant τ = 0.5 that logged no τ (as runs before policies did), and a cosine schedule, two seeds."""
    write_run(root / "constant" / "seed0", run_config("InfoNCE", 0, temperature=0.5), {"uniformity": 3.2, "tolerance": 0.30})
    for seed in (0, 1):
        final = {"uniformity": 3.0 + 0.1 * seed, "tolerance": 0.35 + 0.02 * seed}
        write_run(root / "cosine" / f"seed{seed}", run_config("InfoNCE", seed, temperature=COSINE), final, temperature=cosine)
    return build_rows(group_runs(load_runs(root)))


def test_tau_and_the_path_are_read_at_the_time_they_describe(tmp_path):
    """Catches τ drawn against the global step or the whole epoch (a schedule's shape lost: τ(t) must equal the
    policy's formula at t = epoch + batch / batches), a metric of epoch e drawn before the epoch it measures,
    and a path whose points are out of epoch order (its start and end swapped)."""
    rows = write_tau_study(tmp_path)
    constant, scheduled = sorted(rows, key=lambda row: row.configuration.temperature is None)
    run = scheduled.runs[0]
    curve = tau_curve(run)
    times = [epoch + i / STEPS_PER_EPOCH for epoch in range(3) for i in range(STEPS_PER_EPOCH)]
    assert [t for t, _ in curve] == pytest.approx(times)
    assert [tau for _, tau in curve] == pytest.approx([cosine(t) for t in times], abs=1e-6)
    assert curve[0][1] == pytest.approx(1.0) and curve[4][1] == pytest.approx(0.1)  # high at 0, low at half a period
    # the constant run logged no τ: a flat line at its configured number over the epochs its metrics cover
    assert tau_curve(constant.runs[0], constant.configuration.temperature) == [(0.0, 0.5), (3.0, 0.5)]
    assert tau_curve(constant.runs[0]) == []
    # the fake's metrics rise by 0.1 an epoch to their final value: epochs 0, 1, 2 in order
    path = plane_path(run.events)
    assert [u for u, _ in path] == pytest.approx([2.8, 2.9, 3.0]) and [t for _, t in path] == pytest.approx([0.15, 0.25, 0.35])


def test_a_nearly_flat_series_gets_the_least_span_and_a_wide_one_keeps_its_range():
    """Catches a τ axis spanning 0.003 (a schedule's float noise, an adaptive τ that barely moves) drawn full
    height, as if τ swung."""
    low, high = readable_limits([0.5, 0.503], MIN_SPANS["tau"])
    assert high - low == pytest.approx(MIN_SPANS["tau"]) and low < 0.5 and high > 0.503
    assert readable_limits([0.1, 1.0], MIN_SPANS["tau"]) == pytest.approx((0.055, 1.045))


def test_the_tau_figures_are_drawn_or_skipped_with_a_note(tmp_path):
    """Catches a τ figure that fails on runs that logged no τ (every run before policies) instead of drawing their
    configured constant, and one that fails, instead of saying so, when no run has a τ at all."""
    results = draw_tau_figures(write_tau_study(tmp_path / "runs"), tmp_path / "out", "fake")
    assert [result.name for result in results] == ["temperature_curves.png", "uniformity_tolerance_paths.png"]
    for result in results:
        assert_valid_png(result.path)
    write_run(tmp_path / "old" / "s0", run_config("InfoNCE", 0, 0.5), {"uniformity": 3.0, "tolerance": 0.3}, epochs=1)
    old = draw_tau_figures(build_rows(group_runs(load_runs(tmp_path / "old"))), tmp_path / "old_out", None)
    assert_valid_png(old[0].path)  # its configured τ, a flat line
    assert old[1].path is None and "two epochs" in old[1].note
    write_run(tmp_path / "simple" / "s0", run_config("Simple", 0), {"uniformity": 3.0, "tolerance": 0.3}, epochs=2)
    skipped = draw_tau_figures(build_rows(group_runs(load_runs(tmp_path / "simple"))), tmp_path / "simple_out", None)
    assert skipped[0].path is None and "loss/temperature" in skipped[0].note


def test_a_step_is_placed_in_its_epoch_when_lightning_logs_every_few_steps(tmp_path):
    """Catches t measured from an epoch's first *logged* step: with 16 steps an epoch and ``epoch`` logged every
    5th step (4, 9, 14, 19, …) and at each epoch's last step (its epoch-end metrics: 15, 31, 47), step 19 is the
    4th step of epoch 1 (t = 1 + 3/16), not its start, and the last step 47 ends the run at t = 3 − 1/16."""
    per_epoch, every = 16, 5
    writer = SummaryWriter(log_dir=str(tmp_path))
    for step in range(3 * per_epoch):
        if (step + 1) % every == 0 or (step + 1) % per_epoch == 0:
            writer.add_scalar("epoch", step // per_epoch, step)
    writer.close()
    times = fractional_epochs(read_events(tmp_path), [4, 19, 32, 47])
    assert times == pytest.approx([4 / 16, 1 + 3 / 16, 2.0, 2 + 15 / 16])
