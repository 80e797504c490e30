"""``--trainer.max_epochs=-1``, Lightning's "train until stopped": supported where nothing needs the
run's length, refused in one line naming the option that does (a cosine schedule, MoCo's cosine
momentum) — not ``OverflowError: cannot convert float infinity to integer`` from the schedules.
"""

from __future__ import annotations

import lightning as L
import pytest

from ssl_app.errors import ConfigError
from ssl_app.losses import InfoNCE
from ssl_app.methods import MoCo, SimCLR
from ssl_app.optim import Optimization
from tests.helpers import tiny_data, tiny_trainer
from tests.ssl_app.cli.test_cli import QUICKSTART, TINY
from tests.ssl_app.test_run_folders import error_line, run_cli

SMALL = dict(backbone="small_cnn", proj_dim=16, proj_hidden_dim=32, loss=InfoNCE(0.2))
CONSTANT = Optimization(schedule="constant")


class StopAfter(L.Callback):
    """Stops a run without a limit after ``steps`` optimiser steps, keeping the lr of each."""

    def __init__(self, steps: int) -> None:
        self.steps, self.lrs = steps, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])
        if trainer.global_step >= self.steps:
            trainer.should_stop = True


def test_a_run_without_a_limit_trains_with_a_schedule_that_needs_no_length():
    """Catches the schedules' ``int(estimated_stepping_batches)`` overflowing, and a warm-up of one
    step because the epoch's length was unknown (Lightning's estimate skips the dataloader for -1)."""
    stop = StopAfter(7)
    model = SimCLR(**SMALL, optim=Optimization(lr=0.4, schedule="constant", warmup_epochs=1))
    trainer = tiny_trainer(max_epochs=-1, callbacks=[stop])
    trainer.fit(model, datamodule=tiny_data())  # 48 images, batches of 8: 6 steps per epoch
    assert trainer.global_step == 7
    assert stop.lrs[0] == pytest.approx(0.4 * 2 / 6)  # step 1 of a 6-step warm-up (the lr after the first step)
    assert stop.lrs[-1] == pytest.approx(0.4)


@pytest.mark.parametrize(
    ("model", "named"),
    [
        (lambda: SimCLR(**SMALL), "model.init_args.optim.schedule=cosine"),
        (
            lambda: MoCo(**SMALL, queue_size=16, key_bn="none", optim=CONSTANT, momentum_schedule="cosine"),
            "model.init_args.momentum_schedule=cosine",
        ),
    ],
)
def test_what_needs_the_runs_length_refuses_a_run_without_a_limit(model, named):
    trainer = tiny_trainer(max_epochs=-1)
    with pytest.raises(ConfigError, match="trainer.max_epochs=-1 .no limit. without trainer.max_steps: " + named):
        trainer.fit(model(), datamodule=tiny_data())
    assert trainer.global_step == 0


def test_max_epochs_minus_one_on_the_quickstart_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    """The quickstart (cosine schedule) with ``--trainer.max_epochs=-1``: refused before its first step."""
    monkeypatch.chdir(tmp_path)
    args = [a for a in TINY if not a.startswith("--trainer.max_epochs")] + ["--trainer.max_epochs=-1"]
    code, err = run_cli(["fit", "--config", QUICKSTART, *args], capsys)
    line = error_line(err)
    assert code == 2 and "trainer.max_epochs=-1" in line and "model.init_args.optim.schedule=cosine" in line, err[-2000:]
    assert "OverflowError" not in err and list(tmp_path.iterdir()) == []
