"""A value or a class path the parser refuses is refused before torch or Lightning is imported, in the parser's
words (``ssl_app.cli.early_values``, ``ssl_app.cli.source_classes``), and nothing the parser takes is refused:
issue 40, item 7 ("every argument error prints within 2 s"; benchmarks/README.md has the seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ssl_app.cli.early import check_class_paths
from ssl_app.cli.early_values import check_values
from ssl_app.cli.given_config import given_tree
from ssl_app.cli.tau_words import CLASS_FORM, TAU_FORMS
from ssl_app.errors import ConfigError
from tests.ssl_app.cli.test_entry import QUICKSTART, REPO, probe

TAU = "model.init_args.loss.init_args.temperature"
BAD_LOGGER_NAME = (
    "trainer.logger: no Logger class is named TensorBoardLoger; did you mean lightning.pytorch.loggers.TensorBoardLogger?"
)
#: Bad options, each with the line the parser says for it (held equal to the real parser's below).
BAD = {
    "--trainer.max_epochs=abc": "trainer.max_epochs: Expected a <class 'int'>",
    "--trainer.max_epochs=3.5": "trainer.max_epochs: Expected a <class 'int'>",
    "--trainer.max_epochs=true": "trainer.max_epochs: Expected a <class 'int'>. Got value: True",
    "--trainer.enable_progress_bar=maybe": "trainer.enable_progress_bar: Expected a <class 'bool'>",
    "--trainer.enable_progress_bar=1": "trainer.enable_progress_bar: Expected a <class 'bool'>",
    "--checkpoint.every_n_epochs=abc": "checkpoint.every_n_epochs: Expected a <class 'int'>",
    "--data.init_args.batch_size=abc": "data.init_args.batch_size: must be an int >= 1, got 'abc'",
    # ranges declared as types (issue 40): once refused by __init__ only, after the imports
    "--data.init_args.batch_size=-3": "data.init_args.batch_size: must be an int >= 1, got -3",
    "--data.init_args.num_workers=-1": "data.init_args.num_workers: must be an int >= 0, got -1",
    "--data.init_args.train_size=0": "data.init_args.train_size: must be an int >= 1, got 0",
    "--data.init_args.seed=-1": "data.init_args.seed: must be an int >= 0, got -1",
    "--model.init_args.optim.lr=-1": "model.init_args.optim.lr: must be > 0 and finite, got -1",
    "--model.init_args.optim.weight_decay=-0.1": "model.init_args.optim.weight_decay: must be >= 0 and finite, got -0.1",
    "--model.init_args.optim.reference_batch_size=0": ("model.init_args.optim.reference_batch_size: must be an int >= 1, got 0"),
    # ranges once checked only in __init__ (issue 40, item 7: the second batch)
    "--data.init_args.image_size=4": "data.init_args.image_size: must be an int >= 8, got 4",
    "--data.init_args.num_classes=11": "data.init_args.num_classes: must be an int in [2, 10], got 11",
    "--data.init_args.num_classes=1": "data.init_args.num_classes: must be an int in [2, 10], got 1",
    "--model.init_args.optim.gamma=0": "model.init_args.optim.gamma: must be in (0, 1], got 0",
    "--model.init_args.optim.gamma=1.5": "model.init_args.optim.gamma: must be in (0, 1], got 1.5",
    # the head's ranges (issue 40, item 7: saved as plain numbers by checks.plain_hyperparameters)
    "--model.init_args.proj_dim=0.x": "model.init_args.proj_dim: must be an int >= 1, got '0.x'",
    "--model.init_args.proj_dim=0": "model.init_args.proj_dim: must be an int >= 1, got 0",
    "--model.init_args.proj_hidden_dim=-8": "model.init_args.proj_hidden_dim: must be an int >= 1, got -8",
    "--model.init_args.proj_layers=0": "model.init_args.proj_layers: must be an int >= 1, got 0",
    "--model.init_args.backbone=small_cnnn": (
        "model.init_args.backbone: Expected a typing.Literal['small_cnn', 'resnet32_cifar', 'resnet18_cifar', "
        "'resnet18', 'resnet50']. Got value: small_cnnn"
    ),
    "--model.init_args.loss.init_args.temperature=-1": f"{TAU}: must be > 0 and finite, got -1",
    "--model.init_args.loss.init_args.temperature=0": f"{TAU}: must be > 0 and finite, got 0",
    "--model.init_args.loss.temperature=-0.5": f"{TAU}: must be > 0 and finite, got -0.5",
    "--model.init_args.loss.init_args.temperature=nan": f"{TAU}: must be > 0 and finite, got nan",
    "--model.init_args.loss.init_args.temperature=abc": f"{TAU}: 'abc' is not a τ; give {TAU_FORMS}, {CLASS_FORM}",
    "--model.init_args.loss.init_args.temperature=Cosin": f"{TAU}: 'Cosin' is not a τ; give {TAU_FORMS}, {CLASS_FORM}",
    "--model.init_args.loss.init_args.temperature=cosin:0.1-1": (
        f"{TAU}: 'cosin:0.1-1' is not a τ (did you mean cosine:0.1-1?); give {TAU_FORMS}, {CLASS_FORM}"
    ),
    "--trainer.gradient_clip_val=0.x": "trainer.gradient_clip_val: expected one of: int, float, null; got '0.x'",
    "--trainer.limit_train_batches=0.x": "trainer.limit_train_batches: expected one of: int, float, null; got '0.x'",
    "--trainer.fast_dev_run=maybe": "trainer.fast_dev_run: expected one of: bool, int; got 'maybe'",
    "--seed_everything=abc": "seed_everything: expected one of: bool, int; got 'abc'",
    "--trainer.precision=bogus": (
        "trainer.precision: expected one of: 16, 32, 64, '16', '16-mixed', '16-true', '32', '32-true', '64', "
        "'64-true', 'bf16', 'bf16-mixed', 'bf16-true', 'transformer-engine', 'transformer-engine-float16', null; "
        "got 'bogus'"
    ),
    "--model.init_args.optim.lr=abc": "model.init_args.optim.lr: must be > 0 and finite, got 'abc'",
    "--model.init_args.optim.optimizer=adam": (
        "model.init_args.optim.optimizer: Expected a typing.Literal['sgd', 'adamw', 'lars']. Got value: adam"
    ),
    "--model.init_args.optim.reference_batch_size=1.5": (
        "model.init_args.optim.reference_batch_size: must be an int >= 1, got 1.5"
    ),
    "--model.init_args.loss=ssl_app.losses.InfoNCe": (
        "model.init_args.loss: ssl_app.losses has no class InfoNCe; did you mean ssl_app.losses.InfoNCE?"
    ),
    "--model.init_args.loss=ssl_app.loses.InfoNCE": (
        "model.init_args.loss: no module named ssl_app.loses; did you mean ssl_app.losses.InfoNCE?"
    ),
    "--model=ssl_app.methods.SimCLr": "model: ssl_app.methods has no class SimCLr; did you mean ssl_app.methods.SimCLR?",
    "--data=datamodules.SyntheticDatamodule": (
        "data: datamodules has no class SyntheticDatamodule; did you mean datamodules.SyntheticDataModule?"
    ),
    "--model.init_args.loss.init_args.temperature=ssl_app.temperature.Cosin": (
        "model.init_args.loss.init_args.temperature: ssl_app.temperature has no class Cosin; did you mean "
        "ssl_app.temperature.Cosine?"
    ),
    "--trainer.logger.init_args.save_dirr=x": (
        "trainer.logger: Option 'save_dirr' is not accepted by lightning.pytorch.loggers.TensorBoardLogger; did you "
        "mean trainer.logger.init_args.save_dir?"
    ),
    "--trainer.logger.init_args.log_graph=maybe": (
        "trainer.logger.init_args.log_graph: Expected a <class 'bool'>. Got value: maybe"
    ),
    "--model.init_args.loss.class_path=ssl_app.losses.InfoNCe": (
        "model.init_args.loss: ssl_app.losses has no class InfoNCe; did you mean ssl_app.losses.InfoNCE?"
    ),
    "--trainer.logger.class_path=lightning.pytorch.loggers.TensorBoardLoger": (
        "trainer.logger: lightning.pytorch.loggers has no class TensorBoardLoger; did you mean "
        "lightning.pytorch.loggers.TensorBoardLogger?"
    ),
    # a class path or a class's name alone for a union with a class (issue 40, item 7): once "Expected a path"
    "--trainer.logger=lightning.pytorch.loggers.TensorBoardLoger": (
        "trainer.logger: lightning.pytorch.loggers has no class TensorBoardLoger; did you mean "
        "lightning.pytorch.loggers.TensorBoardLogger?"
    ),
    "--trainer.logger=TensorBoardLoger": BAD_LOGGER_NAME,
    "--trainer.logger=bogus": "trainer.logger: no Logger class is named bogus",
    "--trainer.logger.class_path=TensorBoardLoger": BAD_LOGGER_NAME,
    "--trainer.callbacks+=callbacks.KNNMonitorr": (
        "trainer.callbacks: callbacks has no class KNNMonitorr; did you mean callbacks.KNNMonitor?"
    ),
    "--trainer.callbacks+=KNNMonitorr": (
        "trainer.callbacks: no Callback class is named KNNMonitorr; did you mean callbacks.KNNMonitor?"
    ),
    "--trainer.callbacks+=LearningRateMonitr": (
        "trainer.callbacks: no Callback class is named LearningRateMonitr; did you mean "
        "lightning.pytorch.callbacks.LearningRateMonitor?"
    ),
}
#: Classes given by path or by name alone that the parser takes (``test_the_named_classes_are_the_parser_s``).
GOOD_CLASSES = [
    "--trainer.logger=false",
    "--trainer.logger=true",
    "--trainer.logger=null",
    "--trainer.logger=TensorBoardLogger",
    "--trainer.logger=CSVLogger",
    "--trainer.logger=DummyLogger",
    "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
    "--trainer.logger.class_path=CSVLogger",
    "--trainer.callbacks+=callbacks.KNNMonitor",
    "--trainer.callbacks+=KNNMonitor",
    "--trainer.callbacks+=LearningRateMonitor",
    "--trainer.callbacks+=lightning.pytorch.callbacks.LearningRateMonitor",
    "--trainer.callbacks=LearningRateMonitor",
    "--trainer.callbacks+=RunRecorder",
    "--trainer.callbacks=configs/callbacks/metrics_knn20.yaml",
]


def callbacks(name: str, option: str, value: object) -> str:
    """A config whose ``trainer.callbacks`` list gives callback ``name`` (after another one) ``option: value``."""
    return yaml.safe_dump(
        {
            "trainer": {
                "callbacks": [{"class_path": "callbacks.LongTailAccuracy"}, {"class_path": name, "init_args": {option: value}}]
            }
        }
    )


def method(name: str, option: str, value: object) -> str:
    """A config that makes the model ``name`` with ``option: value``."""
    return yaml.safe_dump({"model": {"class_path": name, "init_args": {option: value}}})


#: (callback, option, bad value, reason): ranges of the callbacks, once checked only in ``__init__``. The parser's
#: line names the item's class (``every_n_epochs`` is an option of two callbacks of the list): ``callback_line``.
CALLBACK_RANGES = [
    ("callbacks.KNNMonitor", "k", 0, "must be an int >= 1, got 0"),
    ("callbacks.KNNMonitor", "temperature", -1, "must be > 0 and finite, got -1"),
    ("callbacks.KNNMonitor", "max_train_samples", 0, "must be an int >= 1, got 0"),
    ("callbacks.KNNMonitor", "tail_k", 0, "must be an int >= 1, got 0"),
    ("callbacks.KNNMonitor", "every_n_epochs", 0, "must be an int >= 1, got 0"),
    ("callbacks.EmbeddingMetrics", "every_n_epochs", 0, "must be an int >= 1, got 0"),
    ("callbacks.EmbeddingMetrics", "top_k", 0, "must be an int >= 1, got 0"),
    ("callbacks.EmbeddingMetrics", "max_samples", 1, "must be an int >= 2, got 1"),
    ("callbacks.EmbeddingMetrics", "lidar_samples", 1, "must be an int >= 2, got 1"),
]


def callback_line(name: str, option: str, reason: str) -> str:
    return f"trainer.callbacks.init_args.{option} ({name}): {reason}"


#: (method, option, bad value, the parser's line): the methods' ranges (saved as hyper-parameters as plain numbers).
METHOD_RANGES = [
    ("ssl_app.methods.MoCo", "queue_size", 0, "model.init_args.queue_size: must be an int >= 1, got 0"),
    ("ssl_app.methods.MoCo", "momentum", 1, "model.init_args.momentum: must be in [0, 1), got 1"),
    ("ssl_app.methods.MoCo", "split_bn_groups", 1, "model.init_args.split_bn_groups: must be an int >= 2, got 1"),
    ("ssl_app.methods.MemoryBank", "bank_size", 0, "model.init_args.bank_size: must be an int >= 1, got 0"),
    ("ssl_app.methods.MemoryBank", "bank_momentum", -0.5, "model.init_args.bank_momentum: must be in [0, 1), got -0.5"),
    ("ssl_app.methods.MemoryBank", "num_negatives", 0, "model.init_args.num_negatives: must be an int >= 1, got 0"),
    ("ssl_app.methods.SimCLR", "proj_dim", 0, "model.init_args.proj_dim: must be an int >= 1, got 0"),
    ("ssl_app.methods.MoCo", "proj_hidden_dim", 0, "model.init_args.proj_hidden_dim: must be an int >= 1, got 0"),
    ("ssl_app.methods.MemoryBank", "proj_layers", 0, "model.init_args.proj_layers: must be an int >= 1, got 0"),
    ("ssl_app.evaluation.LinearProbe", "num_classes", 1, "model.init_args.num_classes: must be an int >= 2, got 1"),
    ("ssl_app.evaluation.LinearProbe", "many_shot_above", -1, "model.init_args.many_shot_above: must be an int >= 0, got -1"),
    ("ssl_app.evaluation.LinearProbe", "few_shot_below", -3, "model.init_args.few_shot_below: must be an int >= 0, got -3"),
]
#: The same kind of values written in a config file (a YAML mapping merged over the quickstart's).
BAD_IN_CONFIG = {
    "trainer:\n  max_epochs: abc\n": "trainer.max_epochs: Expected a <class 'int'>",
    "trainer:\n  enable_progress_bar: maybe\n": "trainer.enable_progress_bar: Expected a <class 'bool'>",
    "model:\n  init_args:\n    loss:\n      init_args:\n        temperature: -1\n": (
        "model.init_args.loss.init_args.temperature: must be > 0 and finite, got -1"
    ),
    "model:\n  init_args:\n    backbone: small_cnnn\n": BAD["--model.init_args.backbone=small_cnnn"],
    "model:\n  init_args:\n    optim:\n      lr: abc\n": BAD["--model.init_args.optim.lr=abc"],
    "data:\n  init_args:\n    batch_size: -3\n": BAD["--data.init_args.batch_size=-3"],
    **{callbacks(name, option, value): callback_line(name, option, why) for name, option, value, why in CALLBACK_RANGES},
    **{method(name, option, value): line for name, option, value, line in METHOD_RANGES},
    "model:\n  init_args:\n    loss:\n      init_args:\n        temperature: abc\n": (
        BAD["--model.init_args.loss.init_args.temperature=abc"]
    ),
}


def config_cases(folder: Path) -> list[list[str]]:
    """A config per entry of ``BAD_IN_CONFIG``, each given after the quickstart."""
    cases = []
    for number, text in enumerate(BAD_IN_CONFIG):
        path = folder / f"bad_{number}.yaml"
        path.write_text(text)
        cases.append(["fit", "--config", QUICKSTART, "--config", str(path)])
    return cases


def test_each_bad_value_or_class_path_is_refused_before_torch_is_imported(tmp_path):
    """Catches a value or class-path error waiting 5–7 s for torch and Lightning before its line (issue 40: every
    argument error within 2 s; a bare ``import torch`` alone takes 1.8 s), on the command line or in a config."""
    cases = [["fit", "--config", QUICKSTART, given] for given in BAD] + config_cases(tmp_path)
    results, imported = probe(*cases)
    assert imported == []
    expected = [*BAD.values(), *BAD_IN_CONFIG.values()]
    for case, (code, _, err), line in zip(cases, results, expected):
        assert code == 2, case
        assert err.splitlines() == [f"error: {line}", "(options: python -m ssl_app fit --help)"], case


@pytest.mark.slow
def test_the_early_lines_are_the_real_parser_s(tmp_path, capsys):
    """Catches the early line drifting from what the parser says for the same input (a jsonargparse upgrade, a new
    condensing rule), and the parser taking what the early check refuses: the real parser runs on each case."""
    from ssl_app.cli.app import main as parser_main

    cases = [["fit", "--config", QUICKSTART, given] for given in BAD] + config_cases(tmp_path)
    expected = [*BAD.values(), *BAD_IN_CONFIG.values()]
    for case, line in zip(cases, expected):
        with pytest.raises(SystemExit) as stop:
            parser_main([*case, "--print_config"])
        assert stop.value.code == 2, case
        assert capsys.readouterr().err.splitlines()[0] == f"error: {line}", case


def leaves(tree, prefix=""):
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            yield from leaves(value, f"{prefix}{key}.")
        elif not isinstance(value, (dict, list)):
            yield f"{prefix}{key}", value


def experiments() -> list[Path]:
    found = []
    for config in sorted((REPO / "configs").rglob("*.yaml")):
        tree = given_tree(["--config", str(config)])
        if "model" in tree and "trainer" in tree:
            found.append(config)
    return found


def test_no_shipped_config_nor_any_of_its_values_given_again_is_refused():
    """Catches a false refusal: every shipped experiment config as it is, and each of its values given again on the
    command line as a user would type it (a number, a bool, a string, a class path, ``1e-3``), is let through."""
    checked = 0
    for config in experiments():
        argv = ["--config", str(config)]
        check_values(argv, REPO)
        for key, value in leaves(given_tree(argv, REPO)):
            text = value if isinstance(value, str) else json.dumps(value)
            check_values([*argv, f"--{key}={text}"], REPO)
            check_class_paths([*argv, f"--{key}={text}"])
            checked += 1
    assert checked > 500


@pytest.mark.parametrize(
    "given",
    [
        "--model.init_args.loss.init_args.temperature=cosine:0.1-1.0",
        "--model.init_args.loss.init_args.temperature=cosine:0.1-1:T=3",
        "--model.init_args.loss.init_args.temperature=linear:1.0-0.1:L=10",
        "--model.init_args.loss.init_args.temperature=ssl_app.temperature.Cosine",
        "--model.init_args.loss.init_args.temperature=Cosine",
        "--model.init_args.loss.init_args.temperature=Linear",
        "--model.init_args.loss.init_args.temperature=Learnable",
        "--model.init_args.loss.init_args.temperature=Adaptive",
        "--model.init_args.loss.init_args.temperature=Constant",
        "--model.init_args.loss.init_args.temperature=learnable:0.07",
        "--model.init_args.loss.init_args.temperature=adaptive:0.1",
        '--model.init_args.loss.init_args.temperature={"class_path":"ssl_app.temperature.Cosine"}',
        "--model.init_args.loss.init_args.temperature=1e-1",
        "--model.init_args.loss.init_args.temperature=0.07",
        "--model.init_args.optim.lr=1e-3",
        "--model.init_args.optim.gamma=1",
        "--data.init_args.image_size=8",
        "--data.init_args.num_classes=2",
        "--data.init_args.num_classes=10",
        "--trainer.callbacks=[{class_path: callbacks.KNNMonitor, init_args: {k: 1, tail_k: null, temperature: 0.1}}]",
        "--trainer.callbacks=[{class_path: callbacks.EmbeddingMetrics, init_args: {max_samples: 2, top_k: 1}}]",
        "--trainer.callbacks=configs/callbacks/metrics_knn20.yaml",
        "--trainer.max_epochs=null",
        "--trainer.devices=auto",
        "--trainer.devices=1",
        "--trainer.devices=-1",
        "--trainer.devices=0,1",
        "--trainer.devices=[0, 1]",
        "--trainer.max_epochs=-1",
        "--trainer.enable_progress_bar=yes",
        "--trainer.precision=bf16-mixed",
        "--trainer.gradient_clip_val=0.5",
        "--trainer.limit_train_batches=0.25",
        "--trainer.fast_dev_run=true",
        "--trainer.val_check_interval=1:00:00",
        "--checkpoint.mode=max",
        "--model.init_args.loss=ssl_app.losses.DCLW",
        "--trainer.logger.init_args.flush_secs=5",
        "--trainer.logger.init_args.flush_secs=abc",
    ],
)
def test_what_the_parser_takes_is_not_refused(given):
    """Catches a false refusal of a τ preset or policy (expanded later, by ``ssl_app.cli.tau_presets``), a number
    written as YAML reads it (``1e-3``), ``null`` for an optional option, a union's other alternative."""
    check_values(["fit", "--config", QUICKSTART, given], REPO)


@pytest.mark.parametrize("given", GOOD_CLASSES)
def test_a_class_the_parser_takes_by_path_or_name_alone_is_not_refused(given):
    """Catches a false refusal of a class's name alone the parser resolves (``TensorBoardLogger``, one of our
    callbacks or Lightning's), of ``false`` for the logger, or of a config file named by a class's option."""
    argv = ["fit", "--config", QUICKSTART, given]
    check_class_paths(argv)
    check_values(argv, REPO)


@pytest.mark.slow
def test_the_named_classes_are_the_parser_s(capsys):
    """Catches ``GOOD_CLASSES`` holding a value the real parser refuses (then the test above proves nothing)."""
    from ssl_app.cli.app import main as parser_main

    for given in GOOD_CLASSES:
        with pytest.raises(SystemExit) as stop:
            parser_main(["fit", "--config", QUICKSTART, given, "--print_config"])
        assert stop.value.code == 0, (given, capsys.readouterr().err)
    capsys.readouterr()


def test_devices_no_accelerator_reads_is_refused_early():
    """Catches ``--trainer.devices=abc`` waiting for the imports (the parser takes any text for it)."""
    with pytest.raises(ConfigError, match=r"trainer.devices: must be auto, .*got 'abc'"):
        check_values(["fit", "--config", QUICKSTART, "--trainer.devices=abc"], REPO)


def test_a_union_s_refusal_names_its_alternatives_in_one_order_whatever_order_typing_cached():
    """Catches the line naming ``int`` in one process and ``float`` in another: ``Optional[Union[int, float]]`` is
    ``Union[float, int, None]`` in a process that made ``Union[float, int]`` first (``typing`` caches unions
    ignoring order), and jsonargparse words a union's error by its first alternative."""
    from typing import Literal

    from ssl_app.cli.early_values import union_problem

    lines = {union_problem("x", order, None, "0.x") for order in [(int, float, type(None)), (float, int, type(None))]}
    assert lines == {"x: expected one of: int, float, null; got '0.x'"}
    choices = {union_problem("x", (Literal[order], type(None)), None, "b") for order in [(2, "a", 1), ("a", 1, 2)]}
    assert choices == {"x: expected one of: 1, 2, 'a', null; got 'b'"}


def test_the_top_level_option_types_are_the_parser_s():
    """Catches ``TOP_LEVEL_TYPES`` going stale when LightningCLI changes ``seed_everything``'s type."""
    from typing import get_args

    from ssl_app.cli.app import SSLCLI
    from ssl_app.cli.early_values import TOP_LEVEL_TYPES
    from ssl_app.cli.parsing import OneLineParser

    cli = SSLCLI.__new__(SSLCLI)
    cli.seed_everything_default = True
    parser = OneLineParser(exit_on_error=False)
    cli.add_default_arguments_to_parser(parser)
    for option, alternatives in TOP_LEVEL_TYPES.items():
        action = next(action for action in parser._actions if action.dest == option)
        assert set(get_args(action._typehint)) == set(alternatives), option


def test_a_bad_value_in_a_config_overridden_on_the_command_line_is_let_through(tmp_path):
    """Catches the check reading a value the final configuration no longer has."""
    config = tmp_path / "late.yaml"
    config.write_text(yaml.safe_dump({"trainer": {"max_epochs": "abc"}}))
    check_values(["fit", "--config", QUICKSTART, "--config", str(config), "--trainer.max_epochs=3"], REPO)
    with pytest.raises(ConfigError, match="trainer.max_epochs: Expected"):
        check_values(["fit", "--config", QUICKSTART, "--config", str(config)], REPO)


def test_a_class_s_mapping_without_class_path_over_an_include_is_left_to_the_parser(tmp_path):
    """Catches the early line naming the τ where the parser says ``Option 'loss.init_args.temperature' is not accepted
    by lightning.LightningModule``: in one file, ``model: {init_args: …}`` does not merge with the ``model`` its
    ``config:`` include set (it does from a later ``--config``, checked above)."""
    config = tmp_path / "over.yaml"
    config.write_text(f"config: {QUICKSTART}\n" + next(text for text in BAD_IN_CONFIG if "temperature" in text))
    check_values(["fit", "--config", str(config)], REPO)


def test_the_tau_forms_said_before_torch_are_the_policies_own():
    """Catches the early τ line going stale when a policy gains or changes its label form (``TAU_FORMS`` is text so
    that the early check imports no torch)."""
    from ssl_app.temperature.labels import accepted_forms

    assert accepted_forms() == TAU_FORMS


@pytest.mark.parametrize(
    "text",
    [
        method("ssl_app.methods.MoCo", "momentum", 0.0),
        method("ssl_app.methods.MoCo", "split_bn_groups", 2),
        method("ssl_app.methods.MemoryBank", "bank_size", None),
        method("ssl_app.methods.MemoryBank", "proj_layers", 1),
        method("ssl_app.evaluation.LinearProbe", "num_classes", 2),
        method("ssl_app.evaluation.LinearProbe", "few_shot_below", 0),
        callbacks("callbacks.KNNMonitor", "max_train_samples", 1),
        callbacks("callbacks.EmbeddingMetrics", "max_samples", None),
    ],
)
def test_a_range_s_edge_in_a_config_is_not_refused(tmp_path, text):
    """Catches a range declared one step too narrow (``momentum: 0`` is in [0, 1); ``null`` where ``None`` is taken)."""
    path = tmp_path / "edge.yaml"
    path.write_text(text)
    check_values(["fit", "--config", QUICKSTART, "--config", str(path)], REPO)


def test_a_callback_list_written_out_on_the_command_line_is_left_to_the_parser():
    """Catches the early line naming ``k`` where the parser says ``trainer.callbacks: Expected a path but [...]``: a
    list given inline is refused as a whole (a config file's list, or a file named by the option, is checked)."""
    check_values(
        ["fit", "--config", QUICKSTART, "--trainer.callbacks=[{class_path: callbacks.KNNMonitor, init_args: {k: 0}}]"], REPO
    )
