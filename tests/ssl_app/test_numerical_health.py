"""Never train on NaN: a forced non-finite loss or gradient stops the run with a message and a
checkpoint of the last good state; with ``--health.on_nonfinite=skip`` the run trains on and
counts the skips in TensorBoard, and a skipped step changes no parameter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from ssl_app.cli import main
from ssl_app.errors import NonFiniteError
from ssl_app.health import NumericalHealth
from ssl_app.methods import SimCLR
from ssl_app.optim import Optimization
from tests.helpers import tiny_data, tiny_trainer

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from syncs import SyncListing  # noqa: E402

QUICKSTART = str(REPO / "configs" / "quickstart.yaml")
STEPS = 4  # per epoch
TINY = [
    "--trainer.max_epochs=2",
    f"--trainer.limit_train_batches={STEPS}",
    "--trainer.limit_val_batches=1",
    "--trainer.log_every_n_steps=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.num_sanity_val_steps=0",
    "--trainer.callbacks=[]",
    "--data.init_args.train_size=128",
    "--data.init_args.val_size=32",
    "--data.init_args.batch_size=32",
    f"--model={__name__}.Poisoned",
]


class Poisoned(SimCLR):
    """SimCLR whose loss is NaN at the steps ``nan_loss_at`` and whose gradient (only) is NaN at
    ``nan_grad_at``; records whether the parameters changed over each poisoned step, and (with
    ``record`` set) the bits of the parameters and the optimiser state after every step."""

    def __init__(self, nan_loss_at: list[int] = [], nan_grad_at: list[int] = [], nan_rank: int = -1, **kwargs: Any) -> None:  # noqa: B006
        super().__init__(**kwargs)
        self.nan_loss_at, self.nan_grad_at, self.nan_rank = list(nan_loss_at), list(nan_grad_at), nan_rank
        self.unchanged: dict[int, bool] = {}
        self._before: list[torch.Tensor] = []
        self.record, self.after = False, {}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        step = self.trainer.global_step
        if self.nan_rank >= 0 and self.global_rank != self.nan_rank:
            return loss
        if step in self.nan_loss_at:
            loss = loss * float("nan")
        if step in self.nan_grad_at:
            # forward: + 0 (finite); backward: d sqrt(x - 2)/dx at x = 0 is NaN, and where() passes 0 * NaN.
            x = sum(p.sum() for p in self.parameters()) * 0
            loss = loss + torch.where(x > 1, torch.sqrt(x - 2), torch.zeros_like(x))
        return loss

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self._before = [p.detach().clone() for p in self.parameters()]

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = self.trainer.global_step - 1
        if step in self.nan_loss_at + self.nan_grad_at:
            self.unchanged[step] = all(torch.equal(a, b) for a, b in zip(self._before, self.parameters()))
        if self.record:
            self.after[step] = state_bits(self)


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes (-0.0 and 0.0 differ, NaN equals itself)."""
    return tensor.detach().reshape(-1).clone().view(torch.uint8)


def state_bits(model: Any) -> dict[str, torch.Tensor]:
    """Every parameter and every tensor of the optimiser's state, as bytes."""
    found = {name: bits(p) for name, p in model.named_parameters()}
    for index, state in model.trainer.optimizers[0].state_dict()["state"].items():
        found |= {f"{index}.{key}": bits(value) for key, value in state.items() if isinstance(value, torch.Tensor)}
    return found


def same_bits(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


def run(args: list[str], capsys: Any) -> tuple[int, str, Any]:
    try:
        cli = main(["fit", "--config", QUICKSTART, *TINY, *args])
    except SystemExit as exit_info:
        return int(exit_info.code or 0), capsys.readouterr().err, None
    return 0, capsys.readouterr().err, cli


def last_checkpoint(root: Path) -> dict:
    return torch.load(
        root / "runs" / "quickstart" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False, map_location="cpu"
    )


@pytest.mark.parametrize(
    ("poison", "named"),
    [("--model.init_args.nan_loss_at=[5]", "loss nan"), ("--model.init_args.nan_grad_at=[5]", "gradient norm nan")],
    ids=["nan_loss", "nan_gradient"],
)
def test_nonfinite_stops_with_the_step_the_value_and_the_last_good_checkpoint(poison, named, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, err, _ = run([poison], capsys)
    assert code == 1, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err[-3000:]
    assert "at step 5 (epoch 1)" in lines[0] and named in lines[0], lines[0]
    assert "last finite loss" in lines[0] and "at step 4" in lines[0], lines[0]
    assert "Traceback" not in err
    assert "runs/quickstart/version_0/checkpoints/last.ckpt" in err and "--ckpt_path=" in err, err[-2000:]
    saved = last_checkpoint(tmp_path)
    assert saved["global_step"] == 5  # the state before the bad update: 5 good steps
    assert all(torch.isfinite(v).all() for v in saved["state_dict"].values() if v.is_floating_point())
    momentum = [s["momentum_buffer"] for s in saved["optimizer_states"][0]["state"].values()]
    assert momentum and all(torch.isfinite(m).all() for m in momentum)


def test_skip_trains_on_counts_the_skips_and_leaves_the_weights_untouched(tmp_path, monkeypatch, capsys, recwarn):
    monkeypatch.chdir(tmp_path)
    code, err, cli = run(
        ["--health.on_nonfinite=skip", "--model.init_args.nan_loss_at=[1]", "--model.init_args.nan_grad_at=[6]"], capsys
    )
    assert code == 0, err[-3000:]
    warned = " | ".join(str(w.message) for w in recwarn)
    assert "at step 1 (epoch 0): loss nan" in warned and "step skipped (1 skipped so far)" in warned, warned
    assert "at step 6 (epoch 1)" in warned and "gradient norm nan" in warned and "(2 skipped so far)" in warned, warned
    assert cli.model.unchanged == {1: True, 6: True}
    saved = last_checkpoint(tmp_path)
    assert saved["global_step"] == 2 * STEPS
    assert all(torch.isfinite(v).all() for v in saved["state_dict"].values() if v.is_floating_point())
    events = EventAccumulator(str(tmp_path / "runs" / "quickstart" / "version_0"))
    events.Reload()
    skips = {event.step: event.value for event in events.Scalars("health/nonfinite_skips")}
    assert skips[0] == 0 and skips[1] == 1 and skips[5] == 1 and skips[6] == 2 and max(skips.values()) == 2, skips
    assert "NumericalHealth" in str(saved["callbacks"].keys())


def test_too_many_consecutive_skips_stop(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, err, _ = run(
        ["--health.on_nonfinite=skip", "--health.max_consecutive_skips=2", "--model.init_args.nan_loss_at=[1,2,3]"], capsys
    )
    assert code == 1, err[-3000:]
    assert "at step 3" in err and "max_consecutive_skips" in err, err[-3000:]


@pytest.mark.parametrize(
    ("nan_at", "log_every", "on_host", "stop_at"), [(2, 1, "true", 2), (4, 3, "false", 5)], ids=["on_the_host", "on_the_device"]
)
def test_ddp_nan_on_one_rank_stops_every_rank_at_the_same_step(nan_at, log_every, on_host, stop_at, tmp_path):
    """2 gloo processes, NaN loss on rank 1 only, gradients unchecked: the ranks must agree, or
    rank 0 would train on while rank 1 stops (and wait for it in a collective). Read on every
    step, and decided on the device (step 4 does not log; the flag is read at step 5)."""
    args = [
        "fit",
        "--config",
        QUICKSTART,
        *TINY,
        "--trainer.accelerator=cpu",
        "--trainer.devices=2",
        "--trainer.strategy=ddp",
        "--data.init_args.batch_size=16",
        "--health.check_gradients=false",
        f"--model.init_args.nan_loss_at=[{nan_at}]",
        "--model.init_args.nan_rank=1",
        f"--trainer.log_every_n_steps={log_every}",
        f"--health.read_every_step={on_host}",  # false: decided on the device, as on GPUs (read on logged steps)
    ]
    result = subprocess.run(
        [sys.executable, "-m", "ssl_app", *args],
        cwd=tmp_path,
        check=False,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
    )
    err = result.stderr
    assert result.returncode == 1, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and f"at step {nan_at} (epoch {nan_at // STEPS})" in lines[0], err[-3000:]
    assert "Traceback" not in err and "another process" not in err, err[-3000:]
    assert last_checkpoint(tmp_path)["global_step"] == stop_at


def fit_poisoned(
    nan_loss_at: list[int], max_consecutive_skips: int, read_every_step: bool | None = None, **options: Any
) -> tuple[Any, Any, Any]:
    """Two epochs of 6 steps in-process (logging every 50: never), NaN losses at ``nan_loss_at``;
    (trainer, health, error)."""
    torch.manual_seed(0)
    model = Poisoned(nan_loss_at=nan_loss_at, backbone="small_cnn", proj_dim=16, proj_hidden_dim=32, **options)
    health = NumericalHealth(on_nonfinite="skip", max_consecutive_skips=max_consecutive_skips, read_every_step=read_every_step)
    trainer = tiny_trainer(max_epochs=2, callbacks=[health], log_every_n_steps=50)
    try:
        trainer.fit(model, tiny_data())  # 48 samples, batches of 8: 6 steps an epoch
    except NonFiniteError as error:
        return trainer, health, error
    return trainer, health, None


@pytest.mark.parametrize(("read_every_step", "stopped_at"), [(None, 8), (False, 12)], ids=["on_the_host", "on_the_device"])
def test_scattered_skips_never_stop_only_more_than_k_in_a_row_do(read_every_step, stopped_at, recwarn):  # recwarn: the skips
    """Catches the skip limit counting all skips instead of those in a row (the streak not reset by
    a finite step), or off by one: with k = 2, five scattered NaN steps (more than k in all) train
    to the end; two in a row (k) are skipped; the third in a row stops, naming that step. Read on
    every step (the CPU's default), the stop comes at that step; decided on the device and read on
    logged steps only (none here), at the epoch's end, with the count the same."""
    trainer, health, error = fit_poisoned([1, 3, 5, 7, 9], max_consecutive_skips=2, read_every_step=read_every_step)
    assert error is None and trainer.global_step == 12 and health.skipped == 5
    trainer, health, error = fit_poisoned([2, 3, 6, 7, 8], max_consecutive_skips=2, read_every_step=read_every_step)
    assert error is not None and "at step 8" in str(error) and "2 steps in a row" in str(error)
    assert health.skipped == 4 and trainer.global_step == stopped_at


@pytest.mark.parametrize("optimizer", ["sgd", "adamw", "lars", "sgd_fused", "adamw_fused"])
def test_a_skip_decided_on_the_device_leaves_parameters_and_optimiser_state_bit_identical(optimizer, recwarn, monkeypatch):
    """Catches a masked update that leaks (momentum buffers, Adam's moments or its step count changed
    by a NaN step, a parameter restored but not its state) or a skip that reads its flag on the host
    in a step that does not log (the on-device path not taken). A NaN gradient at step 2 and a NaN
    loss at step 3, neither logged: the state after each equals the state before it, bit for bit,
    and the steps around them do change it. The fused optimisers (what ``ssl_app.optim`` builds on
    CUDA, here on the CPU) skip through their own ``found_inf`` flag, with no copy of the parameters,
    and the flag is gone after the step."""
    fused = optimizer.endswith("_fused")
    optimizer = optimizer.removesuffix("_fused")
    monkeypatch.setattr("ssl_app.optim.fused_pays", lambda params: fused)
    masked, mask = [], NumericalHealth._mask
    monkeypatch.setattr(NumericalHealth, "_mask", lambda self, *args: (masked.append(1), mask(self, *args))[1])
    torch.manual_seed(0)
    optim = Optimization(optimizer=optimizer, lr=0.05, weight_decay=1e-3)
    small = dict(backbone="small_cnn", proj_dim=16, proj_hidden_dim=32, optim=optim)
    model = Poisoned(nan_grad_at=[2], nan_loss_at=[3], **small)
    model.record = True
    health = NumericalHealth(on_nonfinite="skip", read_every_step=False)  # on the CPU, as on a GPU
    listing = SyncListing(own_code=[str(REPO / "ssl_app") + "/"], host_reads=True)
    trainer = tiny_trainer(max_steps=5, callbacks=[health, listing], log_every_n_steps=50)
    trainer.fit(model, tiny_data())
    after = model.after
    assert same_bits(after[1], after[2]) and same_bits(after[2], after[3])
    assert not same_bits(after[0], after[1]) and not same_bits(after[3], after[4])
    assert health.skipped == 2 and listing.logged == []
    read = [row["ours"] for row in listing.sites() if "ssl_app/health.py" in row["ours"] and row["unlogged"]]
    assert read == []  # the health check's host reads: the first step (it creates the state) and the fit's end only
    built = trainer.optimizers[0]
    assert bool(built.defaults.get("fused")) == fused and not hasattr(built, "found_inf")
    assert (masked == []) == fused  # fused: no copy of the parameters


@pytest.mark.parametrize("poison", ["nan_loss_at", "nan_grad_at"])
def test_a_stop_read_after_the_bad_step_keeps_the_state_before_it(poison):
    """Catches the steps between a bad one and the next read being applied (the stop then comes with a
    state that is not the last good one: here the finite step 2), or the message naming the step of
    the read instead of the bad one. A NaN at step 1 with ``log_every_n_steps: 4``: the flag is read
    at step 3, which stops the run naming step 1 and the last finite loss, of step 0; the parameters
    and optimiser state are those after step 0, bit for bit."""
    torch.manual_seed(0)
    model = Poisoned(**{poison: [1]}, backbone="small_cnn", proj_dim=16, proj_hidden_dim=32)
    model.record = True
    trainer = tiny_trainer(max_steps=6, callbacks=[NumericalHealth(read_every_step=False)], log_every_n_steps=4)
    with pytest.raises(NonFiniteError) as raised:
        trainer.fit(model, tiny_data())
    message = str(raised.value)
    assert "at step 1 (epoch 0)" in message and "last finite loss" in message and "at step 0" in message
    assert raised.value.state_is_good and trainer.global_step == 3 and sorted(model.after) == [0, 1, 2]
    assert same_bits(state_bits(model), model.after[0])
