"""The config hash: one per experiment, whichever folder it was written to."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ssl_app.runs.identity import config_hash
from tests.ssl_app.cli.test_cli import REPO

#: Keys of what a run *is*: each changes the hash (a new value for each).
EXPERIMENT_KEYS = {
    "seed_everything": 1,
    "data.class_path": "datamodules.CIFAR100DataModule",
    "data.init_args.root": "/elsewhere/data",  # which images: for an image folder the root is the data
    "data.init_args.batch_size": 256,
    "data.init_args.augmentation.min_scale": 0.08,
    "trainer.max_epochs": 100,
    "trainer.precision": "bf16-mixed",
    "trainer.accumulate_grad_batches": 2,
    "trainer.callbacks": [],
    "model.init_args.loss.init_args.temperature": 0.3,
    "model.init_args.optim.lr": 0.06,
    "checkpoint.every_n_train_steps": 100,
}
#: Keys that only say where the run writes or what it resumed from: none changes the hash.
LOCATION_KEYS = {
    "trainer.logger.init_args.save_dir": "/elsewhere/runs",
    "trainer.logger.init_args.name": "other",
    "trainer.logger.init_args.version": "seed3",
    "trainer.default_root_dir": "/elsewhere",
    "checkpoint.dirpath": "/elsewhere/checkpoints",
    "ckpt_path": "/elsewhere/last.ckpt",
    "resume_anyway": True,
    "attach_to_run": "/elsewhere/run",
}


@pytest.fixture(scope="module")
def resolved_config() -> dict[str, Any]:
    """The CIFAR-10 recipe as the CLI resolves it (every key a real run records)."""
    from ssl_app.sweep.estimate import resolved

    return resolved(["fit", "--config", str(REPO / "configs" / "cifar10" / "memory_bank.yaml")])


def with_value(config: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(config)
    *parents, last = key.split(".")
    node = changed
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return changed


@pytest.mark.parametrize(("key", "value"), EXPERIMENT_KEYS.items(), ids=list(EXPERIMENT_KEYS))
def test_a_key_of_the_experiment_changes_the_hash(resolved_config, key, value):
    """Catches the hash leaving out a key that is not a location (a seed, the data, a trainer option):
    two different experiments would share a hash."""
    from ssl_app.runs.identity import flatten

    assert key in flatten(resolved_config) and flatten(resolved_config)[key] != value  # a real key, a new value
    assert config_hash(with_value(resolved_config, key, value)) != config_hash(resolved_config)


@pytest.mark.parametrize(("key", "value"), LOCATION_KEYS.items(), ids=list(LOCATION_KEYS))
def test_where_a_run_writes_or_resumed_from_does_not_change_the_hash(resolved_config, key, value):
    """Catches the same experiment getting two hashes because it was written to another folder."""
    assert config_hash(with_value(resolved_config, key, value)) == config_hash(resolved_config)
