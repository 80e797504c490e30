"""Which checkpoint ``--ckpt_path`` means and whether this config may resume it (``ssl_app.resume``),
and the optimiser following the config on resume (``ConfigWinsOnResume``)."""

from __future__ import annotations

import copy
import os
import time

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from ssl_app.checkpointing import ConfigWinsOnResume
from ssl_app.errors import ConfigError
from ssl_app.losses import InfoNCE
from ssl_app.methods import SimCLR
from ssl_app.optim import Optimization
from ssl_app.resume import check_same_experiment, describe_changes, find_last
from ssl_app.runs.record import start_record
from ssl_app.runs.recorder import claim
from tests.helpers import tiny_data, tiny_trainer

CONFIG = {
    "trainer": {"max_epochs": 2},
    "model": {
        "class_path": "ssl_app.methods.SimCLR",
        "init_args": {
            "backbone": "small_cnn",
            "loss": {"class_path": "ssl_app.losses.InfoNCE", "init_args": {"temperature": 0.5}},
            "optim": {"lr": 0.06},
        },
    },  # fmt: skip
    "data": {"class_path": "datamodules.SyntheticDataModule", "init_args": {"root": "a", "num_workers": 2}},
}


def changed(config: dict, path: str, value) -> dict:
    config = copy.deepcopy(config)
    *parents, last = path.split(".")
    node = config
    for key in parents:
        node = node[key]
    node[last] = value
    return config


def run_with_last(root, name: str, config: dict | None, age: float) -> None:
    folder = root / name
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"x")
    os.utime(folder / "checkpoints" / "last.ckpt", (time.time() - age,) * 2)
    if config is not None:
        start_record(folder, "fit", config)


def test_last_takes_the_newest_run_of_this_experiment_and_names_the_others(tmp_path):
    """Catches ``--ckpt_path last`` resuming the newest run under the logger name though it was trained
    on other data (it continued that run on the shapes and mixed both data sets' curves)."""
    run_with_last(tmp_path, "version_0", CONFIG, age=30)
    run_with_last(tmp_path, "version_1", changed(CONFIG, "data.init_args.root", "b"), age=10)
    run_with_last(tmp_path, "version_2", None, age=5)  # an older version's run: nothing to check it against
    found = find_last(tmp_path, "version_*", CONFIG)
    assert found.path == tmp_path / "version_0" / "checkpoints" / "last.ckpt"
    assert [folder.name for folder, _ in found.passed_over] == ["version_2", "version_1"]
    assert "data.init_args.root" in found.passed_over[1][1]
    # only the data loader changes: the same experiment
    assert find_last(tmp_path, "version_*", changed(CONFIG, "data.init_args.num_workers", 8)).path == found.path
    # where and in what batches the evaluation reads its images: also the loader (and new keys for older runs)
    for key, value in (("eval_on", "workers"), ("eval_batch_size", 4096)):
        assert find_last(tmp_path, "version_*", changed(CONFIG, f"data.init_args.{key}", value)).path == found.path
    assert find_last(tmp_path, "version_*", changed(CONFIG, "data.init_args.root", "c")).path is None
    assert find_last(tmp_path, "version_1", CONFIG).path is None  # a named version is the only candidate


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("data.init_args.root", "b"),
        ("model.init_args.loss.init_args.temperature", 0.2),
        ("model.init_args.loss.class_path", "ssl_app.losses.Simple"),
        ("model.init_args.backbone", "resnet18_cifar"),
        ("model.class_path", "ssl_app.methods.MoCo"),
    ],
)
def test_another_experiments_checkpoint_is_refused_naming_the_key_unless_resume_anyway(key, value):
    """Catches a resume with a different loss (or data, backbone, method) that silently trains on."""
    other = changed(CONFIG, key, value)
    with pytest.raises(ConfigError, match=f"was trained with other settings: {key.replace('.', '[.]')} = ") as error:
        check_same_experiment("x.ckpt", CONFIG, other, anyway=False)
    assert "--resume_anyway=true" in str(error.value)
    [note] = check_same_experiment("x.ckpt", CONFIG, other, anyway=True)
    assert "--resume_anyway" in note and key in note


def test_what_may_change_on_resume_is_listed_with_both_values():
    now = changed(changed(CONFIG, "model.init_args.optim.lr", 0.01), "trainer.max_epochs", 4)
    now["ckpt_path"] = "x.ckpt"  # where it resumed from is not a change of the run
    assert describe_changes(CONFIG, now) == {
        "model.init_args.optim.lr": {"checkpoint": 0.06, "now": 0.01},
        "trainer.max_epochs": {"checkpoint": 2, "now": 4},
    }
    assert check_same_experiment("x.ckpt", CONFIG, now, anyway=False) == []
    assert "does not record the config" in check_same_experiment("x.ckpt", None, now, anyway=False)[0]


def test_claim_takes_the_next_free_number_when_another_start_took_this_one(tmp_path):
    """Catches two starts racing for one ``version_<n>`` and writing one folder together."""
    from lightning.pytorch.loggers import TensorBoardLogger

    from ssl_app.cli.plan import next_version_name as _next_version_name

    first = TensorBoardLogger(str(tmp_path), name="q")
    second = TensorBoardLogger(str(tmp_path), name="q")
    assert first.log_dir == second.log_dir  # both computed version_0 before either created it
    assert claim(first, _next_version_name).name == "version_0"
    assert claim(second, _next_version_name).name == "version_1" and second.log_dir.endswith("version_1")


def make(lr: float, weight_decay: float = 5e-4) -> SimCLR:
    torch.manual_seed(0)
    optim = Optimization(lr=lr, weight_decay=weight_decay, schedule="cosine")
    return SimCLR(loss=InfoNCE(temperature=0.5), backbone="small_cnn", proj_dim=16, proj_hidden_dim=32, optim=optim)


def test_the_configs_learning_rate_and_weight_decay_win_on_resume(tmp_path):
    """Catches the bug the divergence advice fell into: a resume with ``--model.init_args.optim.lr``
    kept the checkpoint's rate (the optimiser and the schedule restore their saved values)."""
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    tiny_trainer(tmp_path, max_epochs=1, enable_checkpointing=True, callbacks=[checkpoints]).fit(make(0.5), tiny_data())
    last = tmp_path / "ckpt" / "last.ckpt"

    follow = ConfigWinsOnResume()
    seen = {}

    class Read(L.Callback):  # reads the optimiser right after the restore and the override
        def on_train_start(self, trainer, pl_module):
            seen["lr"] = trainer.optimizers[0].param_groups[0]["lr"]
            seen["decay"] = trainer.optimizers[0].param_groups[0]["weight_decay"]
            scheduler = trainer.lr_scheduler_configs[0].scheduler
            seen["expected"] = 0.01 * scheduler.lr_lambdas[0](scheduler.last_epoch)
            seen["momentum_kept"] = bool(trainer.optimizers[0].state)

    trainer = tiny_trainer(tmp_path, max_epochs=2, callbacks=[follow, Read()])
    trainer.fit(make(0.01, weight_decay=0.0), tiny_data(), ckpt_path=last, weights_only=True)
    assert follow.changed == ["lr", "weight_decay"]
    assert seen["lr"] == pytest.approx(seen["expected"]) and seen["lr"] < 0.05 and seen["decay"] == 0.0
    assert seen["momentum_kept"]  # the restored state (momentum buffers) stays

    same = ConfigWinsOnResume()
    tiny_trainer(tmp_path, max_epochs=2, callbacks=[same]).fit(make(0.5), tiny_data(), ckpt_path=last, weights_only=True)
    assert same.changed == []  # the same config resumes bit-identically (tests/ssl_app/methods/test_resume.py)
