"""Temperature policies in real (tiny, in-process) runs: τ(t) at every logged step, across a mid-epoch
interrupt and resume; the checkpoint layout of a number τ; bad policies through the CLI."""

from __future__ import annotations

import math
import signal

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ssl_app.checkpointing import InterruptCheckpoint
from ssl_app.losses import InfoNCE
from ssl_app.methods import SimCLR
from ssl_app.report.events import read_events
from ssl_app.temperature import Adaptive, Cosine, Learnable, Progress
from tests.generic import TINY_MODEL
from tests.helpers import tiny_data, tiny_trainer
from tests.ssl_app.cli.test_cli import QUICKSTART, error_lines

BATCHES = 6  # tiny_data: 48 training samples in batches of 8
# epochs: τ changes at every step (no two consecutive steps share a value, so each is written:
# loss/temperature is written when it changes), and the resumed epoch starts at a fraction of it
PERIOD = 1.7


class StopAfter(L.Callback):
    """Asks for a stop after optimiser step ``step``, as the SIGTERM handler does."""

    def __init__(self, interrupt: InterruptCheckpoint, step: int) -> None:
        self.interrupt, self.step = interrupt, step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            self.interrupt.requested = signal.SIGTERM


def run(root, stop_after=None, ckpt_path=None):
    L.seed_everything(0)
    interrupt = InterruptCheckpoint()
    callbacks = [interrupt] if stop_after is None else [interrupt, StopAfter(interrupt, stop_after)]
    logger = TensorBoardLogger(root, name="", version="")
    trainer = tiny_trainer(root, max_epochs=2, logger=logger, log_every_n_steps=1, callbacks=callbacks)
    model = SimCLR(loss=InfoNCE(temperature=Cosine(low=0.1, high=1.0, period=PERIOD)), **TINY_MODEL)
    if stop_after is None:
        trainer.fit(model, datamodule=tiny_data(), ckpt_path=ckpt_path, weights_only=False)
    else:
        with pytest.raises(SIGTERMException):
            trainer.fit(model, datamodule=tiny_data())
    return read_events(root).scalars, model.loss.progress


def test_tau_is_the_schedule_s_at_every_logged_step_across_a_mid_epoch_resume(tmp_path):
    """Catches a schedule that counts whole epochs only, restarts at its start after a resume (or at
    the resumed epoch's start), a logged τ that is not the one in force, and an epoch value of another step."""
    stopped, _ = run(tmp_path / "stopped", stop_after=BATCHES + 2)  # mid epoch 1
    checkpoint = next((tmp_path / "stopped").rglob("last.ckpt"))
    resumed, last = run(tmp_path / "resumed", ckpt_path=str(checkpoint))
    # what the method handed the loss at the last step: fractional epochs, steps done, their share of the run
    assert last == Progress(
        epoch=pytest.approx(1 + (BATCHES - 1) / BATCHES), step=2 * BATCHES - 1, fraction=pytest.approx(11 / 12)
    )

    def tau(step: int) -> float:
        return 0.1 + 0.9 * (1 + math.cos(2 * math.pi * (step / BATCHES) / PERIOD)) / 2

    logged, after = dict(stopped["loss/temperature"]), dict(resumed["loss/temperature"])
    assert BATCHES < max(logged) < min(after)  # stopped in the middle of epoch 1, resumed there
    assert sorted([*logged, *after]) == list(range(2 * BATCHES))  # every step logged once
    for step, value in {**logged, **after}.items():
        assert value == pytest.approx(tau(step), rel=1e-6), step
    epoch_values = [value for _, value in stopped["loss/temperature_epoch"] + resumed["loss/temperature_epoch"]]
    assert epoch_values == pytest.approx([tau(BATCHES - 1), tau(2 * BATCHES - 1)], rel=1e-6)


def test_a_number_tau_keeps_the_checkpoint_layout_of_earlier_versions():
    """Catches a constant τ that adds a state-dict key or an optimiser parameter group: a checkpoint
    written before temperature policies (no such key, one group) would no longer load or resume."""
    torch.manual_seed(0)
    old_layout = SimCLR(loss=InfoNCE(temperature=0.5), **TINY_MODEL)
    state = old_layout.state_dict()
    assert not any(key.startswith("loss.") for key in state)
    assert len(old_layout.parameter_groups()) == 1
    SimCLR(loss=InfoNCE(temperature=0.2), **TINY_MODEL).load_state_dict(state, strict=True)
    learnable = SimCLR(loss=InfoNCE(temperature=Learnable()), **TINY_MODEL)
    assert [len(group["params"]) for group in learnable.parameter_groups()] == [len(list(old_layout.parameters())), 1]


def test_a_bad_policy_is_one_error_line_before_training(capsys, tmp_path, monkeypatch):
    """Catches a policy's ConfigError lost inside jsonargparse's report of a union type (a traceback),
    and a policy given to a loss without a temperature that is silently ignored."""
    monkeypatch.chdir(tmp_path)
    policy = "--model.init_args.loss.init_args.temperature=ssl_app.temperature.Cosine"
    cases = [
        ([policy, "--model.init_args.loss.init_args.temperature.low=2"], "Cosine: low must be <= high"),
        (
            ["--model.init_args.loss=ssl_app.losses.Simple", policy],
            "Option 'temperature' is not accepted by ssl_app.losses.Simple",
        ),
    ]
    for options, message in cases:
        lines = error_lines(["fit", "--config", QUICKSTART, *options], capsys)
        assert len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "runs").exists()


def test_the_epoch_tau_is_the_last_training_step_s_even_after_validation(tmp_path):
    """Catches ``loss/temperature_epoch`` taken from the loss after the epoch's validation, which runs
    before ``on_train_epoch_end``: an adaptive τ would then be a validation batch's."""
    L.seed_everything(0)
    logger = TensorBoardLogger(tmp_path, name="", version="")
    trainer = tiny_trainer(tmp_path, max_epochs=1, logger=logger, log_every_n_steps=1, limit_val_batches=1)
    model = SimCLR(loss=InfoNCE(temperature=Adaptive(base=0.1, alpha=0.9)), **TINY_MODEL)
    trainer.fit(model, datamodule=tiny_data())
    scalars = read_events(tmp_path).scalars
    steps = dict(scalars["loss/temperature"])
    assert len(set(steps.values())) == len(steps)  # a τ of its own at every step
    assert [value for _, value in scalars["loss/temperature_epoch"]] == [steps[BATCHES - 1]]
    validation = model.loss(model.contrast(next(iter(trainer.val_dataloaders)))).tau
    assert validation.item() != steps[BATCHES - 1]  # validation's batch had another τ
