"""``--estimate`` of a plan: device-hours from a short timed calibration on this machine.

What is timed: the plan's backbone and a linear 128-d head, a forward and backward pass and an SGD
step on random tensors of the plan's input size (training), and a forward pass without gradients
(the kNN monitor's and the linear evaluation's encoding), after warm-up steps; on CUDA when it is
available, else on the CPU (at a smaller batch there, scaled per image). What is multiplied out:
the recipe's epochs × the training images in whole batches (the training loader drops the last
partial batch) × the views each image is trained on (one for the memory bank, two for SimCLR,
``TRAINED_VIEWS``),
the validation passes (every ``check_val_every_n_epoch``: the training and evaluation images
encoded once), and the linear evaluation (its epochs × the training images encoded, plus its
validation passes). Left out: data loading and augmentation, the loss and bank update,
checkpoints, start-up. It is an estimate of the model's compute, not a measurement of a run.
"""

from __future__ import annotations

import contextlib
import io
import time
from dataclasses import dataclass

import torch
import yaml
from torch import nn

from ssl_app.runs.spec import RunSpec
from ssl_app.sweep.plans import DATA_SETS

#: Calibration steps: warm-up (not timed), then timed.
WARMUP_STEPS, TIMED_STEPS = 2, 3
#: Views of each image a training step runs forward and backward, by method (others: one, as the memory bank).
TRAINED_VIEWS = {"ssl_app.methods.SimCLR": 2}
#: Largest batch timed on the CPU (a 224-px ResNet-50 step of 128 images takes minutes there).
CPU_BATCH = 16


@dataclass
class Calibration:
    device: str
    batch: int
    train_seconds_per_image: float
    encode_seconds_per_image: float


def resolved(args: list[str]) -> dict:
    """The config a command line resolves to (``--print_config``), as a dict."""
    from ssl_app.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            main([*args, "--print_config"])
        except SystemExit:
            pass
    return yaml.safe_load(out.getvalue())


def calibrate(backbone: str, crop: int, batch: int) -> Calibration:
    """Seconds per image of a training step and of an encoding pass, timed on random tensors."""
    from ssl_app.models.backbones import build_backbone

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        batch = min(batch, CPU_BATCH)
    network, features = build_backbone(backbone)
    model = nn.Sequential(network, nn.Linear(features, 128)).to(device)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(batch, 3, crop, crop, device=device)

    def train_step() -> None:
        optimiser.zero_grad(set_to_none=True)
        model(images).square().mean().backward()
        optimiser.step()

    def encode() -> None:
        with torch.no_grad():
            model(images)

    timings = []
    for step in (train_step, encode):
        for _ in range(WARMUP_STEPS):
            step()
        _synchronise(device)
        start = time.perf_counter()
        for _ in range(TIMED_STEPS):
            step()
        _synchronise(device)
        timings.append((time.perf_counter() - start) / (TIMED_STEPS * batch))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    return Calibration(name, batch, timings[0], timings[1])


def _synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def print_estimate(plan: str, data: str, runs: list) -> tuple[float, float]:
    """Time the plan's model here and print the expected device-hours per run and for the whole plan.
    Returns the device-seconds of one run's fit and of its linear evaluation."""
    data_set = DATA_SETS[data]
    fit = RunSpec.from_config(resolved(runs[0].fit_args))
    linear = RunSpec.from_config(resolved(runs[0].linear_args)) if runs[0].linear_args else None
    batch, crop, epochs = fit.batch_size, fit.crop_size, fit.epochs
    if batch is None or crop is None or epochs is None or fit.backbone is None:
        raise ValueError(f"--estimate: the plan's fit config does not say its batch, crop size, epochs and backbone ({fit})")
    calibration = calibrate(fit.backbone, crop, batch)
    train, held = data_set.train_images, data_set.eval_images
    validations = epochs // (fit.val_every or 1)
    views = TRAINED_VIEWS.get(fit.method, 1)
    fit_images = epochs * (train // batch) * batch * views  # whole batches: the training loader drops the last partial one
    fit_seconds = fit_images * calibration.train_seconds_per_image
    fit_seconds += validations * (train + held) * calibration.encode_seconds_per_image
    linear_seconds = 0.0
    if linear is not None:
        linear_epochs = linear.epochs or 0
        linear_validations = linear_epochs // (linear.val_every or 1)
        linear_seconds = (linear_epochs * train + linear_validations * held) * calibration.encode_seconds_per_image
    per_run = (fit_seconds + linear_seconds) / 3600
    print(
        f"[estimate] plan {plan} on {data}: {len(runs)} runs, each {epochs} epochs of {train:,} images at batch {batch} "
        f"({fit.backbone}, {crop}x{crop} px{', 2 views an image' if views == 2 else ''})"
        + (f" then a {linear_epochs}-epoch linear evaluation" if linear else "")
    )
    print(
        f"[estimate] timed here on {calibration.device} (batch {calibration.batch}, {WARMUP_STEPS} warm-up + {TIMED_STEPS} "
        f"timed steps, random tensors): {calibration.train_seconds_per_image * 1e3:.3f} ms per training image, "
        f"{calibration.encode_seconds_per_image * 1e3:.3f} ms per encoded image"
    )
    print(
        f"[estimate] per run: {fit_seconds / 3600:.2f} device-hours fit + {linear_seconds / 3600:.2f} linear = {per_run:.2f} "
        f"({fit_seconds / 60:.2f} + {linear_seconds / 60:.2f} min); whole plan: {per_run * len(runs):.1f} device-hours"
    )
    print(
        "[estimate] an estimate of the model's compute on this device, not a measurement: data loading, augmentation, "
        "the loss and bank update, checkpoints and start-up are left out (a data-loader-bound run takes longer)"
    )
    return fit_seconds, linear_seconds
