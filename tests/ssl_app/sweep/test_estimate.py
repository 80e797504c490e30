"""``--estimate``'s calibration (``ssl_app.sweep.estimate.calibrate``) against a fake clock: a backbone
whose every forward pass moves the clock by a known time, per image or per batch, so the seconds per
image it reports, and the plan's device-seconds, are hand arithmetic."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

import ssl_app.models.backbones as backbones
import ssl_app.sweep.estimate as estimate
from tests.ssl_app.cli.test_cli import REPO


class Clock:
    """``perf_counter`` of a machine on which only the fake backbone's passes take time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TimedBackbone(nn.Module):
    """A forward pass of B images moves ``clock`` by ``per_image × B + per_batch`` seconds: ``train``'s
    with gradients (a training step), ``encode``'s without (an encoding pass)."""

    def __init__(self, clock: Clock, train: tuple[float, float], encode: tuple[float, float]) -> None:
        super().__init__()
        self.clock, self.train_cost, self.encode_cost = clock, train, encode
        self.linear = nn.Linear(3, 4)
        self.shapes: list[tuple[int, ...]] = []

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        per_image, per_batch = self.train_cost if torch.is_grad_enabled() else self.encode_cost
        self.clock.now += per_image * len(images) + per_batch
        self.shapes.append(tuple(images.shape))
        return self.linear(images.mean(dim=(2, 3)))


@pytest.fixture
def timed(monkeypatch):
    """``timed(train=(per image, per batch), encode=...)``: calibrate's backbone on the fake clock, on the
    CPU (where the timed batch is capped at ``CPU_BATCH``)."""
    clock = Clock()
    built: list[TimedBackbone] = []

    def install(train: tuple[float, float], encode: tuple[float, float]) -> list[TimedBackbone]:
        def build(name: str, *args, **kwargs):
            built.append(TimedBackbone(clock, train, encode))
            return built[-1], 4

        monkeypatch.setattr(backbones, "build_backbone", build)
        return built

    monkeypatch.setattr(estimate, "time", SimpleNamespace(perf_counter=clock))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return install


@pytest.mark.parametrize("batch", [8, 512])
def test_a_cost_per_image_is_reported_per_image_at_any_batch(timed, batch):
    """Catches the warm-up steps timed, a step's time not divided by its images (or by the steps), and the
    training and encoding times swapped: 2 s per training image and 0.5 s per encoded one come out as
    such, at a batch under the CPU's cap and at one over it."""
    timed(train=(2.0, 0.0), encode=(0.5, 0.0))
    calibration = estimate.calibrate("small_cnn", crop=8, batch=batch)
    assert calibration == estimate.Calibration("CPU", min(batch, estimate.CPU_BATCH), 2.0, 0.5)


@pytest.mark.parametrize(("batch", "timed_batch"), [(8, 8), (512, 16)])
def test_a_cost_per_batch_is_shared_by_the_images_of_the_batch_that_was_timed(timed, batch, timed_batch):
    """Catches the time divided by the batch asked for rather than the one timed (512 where the CPU timed
    16: an estimate 32 times too small), or the warm-up steps timed: 6 s a training step and 3 s an
    encoding pass, whatever the batch, are 6/b and 3/b seconds per image of the timed batch b."""
    built = timed(train=(0.0, 6.0), encode=(0.0, 3.0))
    calibration = estimate.calibrate("small_cnn", crop=8, batch=batch)
    assert calibration == estimate.Calibration("CPU", timed_batch, 6.0 / timed_batch, 3.0 / timed_batch)
    steps = estimate.WARMUP_STEPS + estimate.TIMED_STEPS
    assert built[0].shapes == [(timed_batch, 3, 8, 8)] * (2 * steps)  # each step, training then encoding


def test_the_plans_estimate_is_the_hand_arithmetic_of_the_timed_costs(timed, monkeypatch, capsys):
    """Catches the calibration timed on another input than the plan's (its crop, its batch up to the cap),
    its numbers used otherwise than per image, or a training step counted for the last partial batch,
    which the training loader drops (``drop_last``; the estimate rounded up: failed before the fix): the
    tiny plan (3 epochs of 2,000 images at batch 32, a validation pass at epoch 2, a 4-epoch linear
    evaluation validated every epoch) at 6 s a training step and 3 s an encoding pass of 16 images,
    worked out by hand."""
    from ssl_app.sweep.command import parse_args
    from ssl_app.sweep.grid import planned_runs

    monkeypatch.chdir(REPO)
    built = timed(train=(0.0, 6.0), encode=(0.0, 3.0))
    linear = "--trainer.max_epochs=4 --trainer.check_val_every_n_epoch=1"
    fit = ["--trainer.max_epochs=3", "--trainer.check_val_every_n_epoch=2", "--data.init_args.batch_size=32"]
    args = parse_args(["--plan", "table1", "--data", "shapes", "--estimate", "--linear-args", linear, "--", *fit])
    _, runs = planned_runs(args)
    fit_seconds, linear_seconds = estimate.print_estimate("table1", "shapes", runs)
    train, held = 2_000, 500  # DATA_SETS["shapes"]
    crop = built[0].shapes[0][-1]
    assert built[0].shapes[0] == (16, 3, crop, crop) and crop == 32  # the plan's crop, the CPU's batch
    # 62 whole batches of 32 an epoch (the last 16 images dropped) at 6/16 s an image; one validation pass encoding the
    # training and held-out images at 3/16 s an image; the probe encodes the training images every epoch
    # and the held-out ones at each of its 4 validations
    assert fit_seconds == 3 * 62 * 32 * 6 / 16 + (train + held) * 3 / 16 == 2700.75
    assert linear_seconds == (4 * train + 4 * held) * 3 / 16 == 1875.0
    out = capsys.readouterr().out
    assert "timed here on CPU (batch 16, 2 warm-up + 3 timed steps" in out
    assert "375.000 ms per training image, 187.500 ms per encoded image" in out
    assert "per run: 0.75 device-hours fit + 0.52 linear = 1.27 (45.01 + 31.25 min); whole plan: 12.7 device-hours" in out
