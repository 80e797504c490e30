"""Trainer values the parser takes but Lightning cannot use (``ssl_app.cli.trainer_values``): one line before the
imports and again before the Trainer is built, never a traceback in the first epoch (issue 40, item 7)."""

from __future__ import annotations

import pytest

from ssl_app.cli.trainer_values import trainer_problem
from tests.ssl_app.cli.test_entry import QUICKSTART, probe

#: A value Lightning cannot use, and the line that names it.
BAD = {
    "accumulate_grad_batches=0": "trainer.accumulate_grad_batches: must be an int >= 1, got 0",
    "accumulate_grad_batches=-2": "trainer.accumulate_grad_batches: must be an int >= 1, got -2",
    "check_val_every_n_epoch=0": "trainer.check_val_every_n_epoch: must be an int >= 1, got 0",
    "log_every_n_steps=-1": "trainer.log_every_n_steps: must be an int >= 0 (0: never), got -1",
    "max_epochs=-5": "trainer.max_epochs: must be an int >= -1 (-1: no limit), got -5",
    "max_steps=-5": "trainer.max_steps: must be an int >= -1 (-1: no limit), got -5",
    "min_epochs=-3": "trainer.min_epochs: must be an int >= 0, got -3",
    "num_nodes=0": "trainer.num_nodes: must be an int >= 1, got 0",
    "num_sanity_val_steps=-2": "trainer.num_sanity_val_steps: must be an int >= -1 (-1: every batch), got -2",
    "fast_dev_run=-1": "trainer.fast_dev_run: must be an int >= 0, got -1",
    "limit_train_batches=-1": (
        "trainer.limit_train_batches: must be a count of batches >= 0 or a fraction in [0.0, 1.0], got -1"
    ),
    "limit_val_batches=1.5": "trainer.limit_val_batches: must be a count of batches >= 0 or a fraction in [0.0, 1.0], got 1.5",
    "val_check_interval=0": (
        "trainer.val_check_interval: must be a count of batches >= 1, a fraction of the epoch in (0.0, 1.0] or a "
        "duration 'DD:HH:MM:SS', got 0"
    ),
    "val_check_interval=abc": (
        "trainer.val_check_interval: must be a count of batches >= 1, a fraction of the epoch in (0.0, 1.0] or a "
        "duration 'DD:HH:MM:SS', got 'abc'"
    ),
    "max_time=abc": "trainer.max_time: must be a duration 'DD:HH:MM:SS' (days, then two digits each), got 'abc'",
    "gradient_clip_val=-1.0": "trainer.gradient_clip_val: must be a number >= 0, got -1.0",
}
#: Values Lightning takes, each at a range's edge or in a form of its own.
GOOD = [
    "max_epochs=-1",
    "max_steps=-1",
    "min_epochs=0",
    "log_every_n_steps=0",
    "check_val_every_n_epoch=null",
    "num_sanity_val_steps=-1",
    "fast_dev_run=true",
    "fast_dev_run=3",
    "limit_train_batches=0",
    "limit_train_batches=1.0",
    "limit_train_batches=2.0",
    "limit_val_batches=7",
    "val_check_interval=1",
    "val_check_interval=0.25",
    "val_check_interval=00:00:10:00",
    "max_time=00:01:30:00",
    "gradient_clip_val=0",
]


def test_each_value_lightning_cannot_use_is_refused_before_torch_is_imported():
    """Catches ``accumulate_grad_batches=0``, ``check_val_every_n_epoch=0`` or ``val_check_interval=0`` ending in a
    ZeroDivisionError traceback in the first epoch, ``min_epochs=-3`` taken as given, and the refusals Lightning
    makes itself (``max_epochs=-5``) waiting 6–15 s for its import."""
    cases = [["fit", "--config", QUICKSTART, f"--trainer.{given}"] for given in BAD]
    results, imported = probe(*cases)
    assert imported == []
    for case, (code, _, err), line in zip(cases, results, BAD.values()):
        assert code == 2, case
        assert err.splitlines() == [f"error: {line}", "(options: python -m ssl_app fit --help)"], case


@pytest.mark.parametrize("given", GOOD)
def test_what_lightning_takes_is_not_refused(given):
    """Catches a refusal of a value Lightning reads (a fraction, a duration, -1 for no limit, ``null``)."""
    import yaml

    name, _, text = given.partition("=")
    assert trainer_problem({name: yaml.safe_load(text)}) is None


def test_the_good_values_build_a_trainer():
    """Catches the table refusing less than Lightning does for these: each value of ``GOOD`` builds a Trainer."""
    import yaml
    from lightning.pytorch import Trainer

    for given in GOOD:
        name, _, text = given.partition("=")
        Trainer(**{name: yaml.safe_load(text)}, logger=False, enable_checkpointing=False, enable_progress_bar=False)
