"""The r(s) curve of a run whose τ is a policy: drawn at the τ in force at the end of the run."""

from __future__ import annotations

import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

from ssl_app.report.groups import group_runs
from ssl_app.report.penalty import penalty_curves
from ssl_app.report.runs import load_runs
from ssl_app.report.summary import build_rows
from tests.ssl_app.report.fakes import run_config, write_run


def test_a_policy_s_curve_is_drawn_at_the_last_logged_tau_in_force(tmp_path):
    """Catches a run with a temperature policy left without a curve (its config holds no number), and
    a curve drawn at a τ other than the one in force at the end (the schedule's start, another epoch's)."""
    cosine = {"class_path": "ssl_app.temperature.Cosine", "init_args": {"low": 0.1, "high": 1.0, "period": 4}}
    rng = np.random.default_rng(0)
    for seed, last_tau in ((0, 0.3), (1, 0.5)):
        folder = write_run(
            tmp_path / "runs" / "study" / f"version_{seed}",
            run_config("InfoNCE", seed, temperature=cosine),
            {"uniformity": 3.0},
            positive=rng.uniform(0.5, 1.0, 200),
            negatives=rng.uniform(-0.2, 0.6, 2000),
        )
        writer = SummaryWriter(log_dir=str(folder))
        for step, tau in ((5, 0.9), (11, last_tau)):
            writer.add_scalar("loss/temperature_epoch", tau, step)
        writer.close()
    (curve,) = penalty_curves(build_rows(group_runs(load_runs(tmp_path / "runs"))))
    assert curve.temperature == pytest.approx(0.4)  # the mean of the runs' last τ
    slope = np.polyfit(curve.similarity, np.log(curve.penalty), 1)[0]
    assert slope == pytest.approx(1 / 0.4)
