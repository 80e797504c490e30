"""A method's options declared as ranges (``queue_size: PositiveInt``) reach its hyper-parameters, and so every
checkpoint, as plain numbers: jsonargparse gives an instance of the range type (an ``int``/``float`` subclass), which
``torch.load(..., weights_only=True)`` refuses to unpickle (issue 40, item 7)."""

from __future__ import annotations

import pytest
import torch
from jsonargparse import ArgumentParser

from ssl_app.checks import IntAtLeast2, PositiveInt, UnitIntervalOpenAbove, UnitIntervalOpenBelow
from ssl_app.methods import MemoryBank, MoCo
from ssl_app.optim import Optimization
from tests.helpers import tiny_data, tiny_trainer

#: Each method with its range-typed options given as the parser gives them.
CASES = [
    (MoCo, dict(queue_size=PositiveInt(16), momentum=UnitIntervalOpenAbove(0.9), split_bn_groups=IntAtLeast2(2))),
    (MemoryBank, dict(bank_size=PositiveInt(48), bank_momentum=UnitIntervalOpenAbove(0.5), num_negatives=PositiveInt(8))),
]


def test_the_parser_gives_a_range_s_own_type():
    """The premise: without the conversion, these values would be of the range types, not plain numbers."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--queue_size", type=PositiveInt)
    assert type(parser.parse_args(["--queue_size=16"]).queue_size) is PositiveInt


@pytest.mark.parametrize(("method", "options"), CASES, ids=lambda value: getattr(value, "__name__", ""))
def test_a_checkpoint_of_range_typed_options_loads_with_weights_only(tmp_path, method, options):
    """Catches a range type (or ``optim.gamma``'s ``UnitIntervalOpenBelow``) kept in ``hparams``: the checkpoint
    would then be refused by ``weights_only=True``, which every checkpoint a user hands in is loaded with."""
    torch.manual_seed(0)
    optim = Optimization(gamma=UnitIntervalOpenBelow(0.5), lr=0.01)
    model = method(backbone="small_cnn", proj_hidden_dim=32, proj_dim=16, optim=optim, **options)
    trainer = tiny_trainer(tmp_path, max_steps=1)
    trainer.fit(model, tiny_data(batch_size=8))
    path = tmp_path / "model.ckpt"
    trainer.save_checkpoint(path)
    saved = torch.load(path, map_location="cpu", weights_only=True)["hyper_parameters"]
    for name, value in options.items():
        assert saved[name] == value and type(saved[name]) is (int if isinstance(value, int) else float), name
    assert type(saved["optim"].gamma) is float
    loaded = method.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    assert {name: getattr(loaded.hparams, name) for name in options} == options
