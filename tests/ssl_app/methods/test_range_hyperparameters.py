"""A method's options declared as ranges (``queue_size: PositiveInt``, ``proj_dim: PositiveInt``) reach its
hyper-parameters, and so every checkpoint and the logger's ``hparams.yaml``, as plain numbers: jsonargparse gives an
instance of the range type (an ``int``/``float`` subclass), which ``torch.load(..., weights_only=True)`` refuses to
unpickle (issue 40, item 7). The head's options are the hard case: a subclass passes them on through ``**kwargs``, and
Lightning keeps the subclass's value over the base's (``checks.plain_hyperparameters``)."""

from __future__ import annotations

import pytest
import torch
import yaml
from jsonargparse import ArgumentParser
from lightning.pytorch.loggers import CSVLogger

from ssl_app.checks import IntAtLeast2, NonNegativeInt, PositiveInt, UnitIntervalOpenAbove, UnitIntervalOpenBelow
from ssl_app.evaluation import LinearProbe
from ssl_app.methods import MemoryBank, MoCo, SimCLR
from ssl_app.optim import Optimization
from tests.helpers import tiny_data, tiny_trainer
from tests.ssl_app.evaluation.test_linear_frozen_backbone import method_checkpoint

#: The base's head options, given as the parser gives them (each a ``PositiveInt``).
HEAD = dict(proj_dim=PositiveInt(16), proj_hidden_dim=PositiveInt(32), proj_layers=PositiveInt(2))
#: Each method with its range-typed options given as the parser gives them.
CASES = [
    (SimCLR, HEAD),
    (
        MoCo,
        dict(queue_size=PositiveInt(16), momentum=UnitIntervalOpenAbove(0.9), split_bn_groups=IntAtLeast2(2), **HEAD),
    ),
    (
        MemoryBank,
        dict(
            bank_size=PositiveInt(48),
            bank_momentum=UnitIntervalOpenAbove(0.5),
            num_negatives=PositiveInt(8),
            **{**HEAD, "proj_layers": PositiveInt(1)},  # MemoryBank's own option (its default differs)
        ),
    ),
]


def test_the_parser_gives_a_range_s_own_type():
    """The premise: without the conversion, these values would be of the range types, not plain numbers."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--queue_size", type=PositiveInt)
    assert type(parser.parse_args(["--queue_size=16"]).queue_size) is PositiveInt


def plain_type(value):
    return int if isinstance(value, int) else float


@pytest.mark.parametrize(("method", "options"), CASES, ids=lambda value: getattr(value, "__name__", ""))
def test_a_checkpoint_of_range_typed_options_loads_with_weights_only(tmp_path, method, options):
    """Catches a range type (or ``optim.gamma``'s ``UnitIntervalOpenBelow``) kept in ``hparams``: the checkpoint
    would then be refused by ``weights_only=True``, which every checkpoint a user hands in is loaded with; and kept in
    ``hparams_initial``, which the logger writes to ``hparams.yaml`` (as ``!!python/object/new:…PositiveInt``)."""
    torch.manual_seed(0)
    optim = Optimization(gamma=UnitIntervalOpenBelow(0.5), lr=0.01)
    model = method(backbone="small_cnn", optim=optim, **options)
    trainer = tiny_trainer(tmp_path, max_steps=1, logger=CSVLogger(tmp_path, name="log"))
    trainer.fit(model, tiny_data(batch_size=8))
    path = tmp_path / "model.ckpt"
    trainer.save_checkpoint(path)
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    saved = checkpoint["hyper_parameters"]
    assert checkpoint["hparams_name"] == "kwargs"  # what load_from_checkpoint reads the hyper-parameters by
    for name, value in options.items():
        assert saved[name] == value and type(saved[name]) is plain_type(value), name
    assert type(saved["optim"].gamma) is float
    written = yaml.unsafe_load((tmp_path / "log" / "version_0" / "hparams.yaml").read_text())
    for name, value in options.items():
        assert written[name] == value and type(written[name]) is plain_type(value), name
    loaded = method.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    assert {name: getattr(loaded.hparams, name) for name in options} == options
    assert loaded.embedding_dim == 16 and type(loaded.embedding_dim) is int


def test_a_model_rebuilt_from_a_cli_checkpoint_saves_plain_numbers(tmp_path):
    """Catches the range types coming back through ``load_from_checkpoint``: a checkpoint written by the CLI names
    Lightning's instantiator, which parses the saved options again (into range types) before building the model;
    its next checkpoint must still load with ``weights_only=True``."""
    model = MoCo(backbone="small_cnn", queue_size=16, split_bn_groups=2, proj_dim=16, proj_hidden_dim=32)
    path = tmp_path / "cli.ckpt"
    tiny_trainer(tmp_path, max_steps=1).fit(model, tiny_data(batch_size=8))
    checkpoint = {"state_dict": model.state_dict(), "pytorch-lightning_version": "2.6.6", "hparams_name": "kwargs"}
    checkpoint["hyper_parameters"] = {
        "_class_path": "ssl_app.methods.MoCo",
        "_instantiator": "lightning.pytorch.cli.instantiate_module",
        **{key: value for key, value in model.hparams.items() if key != "optim"},
    }
    torch.save(checkpoint, path)
    loaded = MoCo.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    assert type(loaded.hparams["proj_dim"]) is int and type(loaded.hparams["queue_size"]) is int
    assert type(loaded.hparams_initial["momentum"]) is float
    again = tmp_path / "again.ckpt"
    torch.save({"hyper_parameters": dict(loaded.hparams)}, again)
    assert torch.load(again, weights_only=True)["hyper_parameters"]["queue_size"] == 16


def test_the_linear_probe_s_ranges_are_saved_as_plain_numbers(tmp_path):
    """Catches ``LinearProbe``'s thresholds (checked into attributes, not into the constructor's own names, which
    Lightning reads) reaching its hyper-parameters as the parser's range types."""
    options = dict(num_classes=IntAtLeast2(3), many_shot_above=NonNegativeInt(10), few_shot_below=NonNegativeInt(2))
    probe = LinearProbe(str(method_checkpoint(tmp_path)), **options)
    for saved in (probe.hparams, probe.hparams_initial):
        assert {name: (saved[name], type(saved[name])) for name in options} == {
            name: (value, int) for name, value in options.items()
        }
    path = tmp_path / "probe_hparams.pt"
    torch.save({"hyper_parameters": dict(probe.hparams)}, path)
    assert torch.load(path, weights_only=True)["hyper_parameters"]["many_shot_above"] == 10
