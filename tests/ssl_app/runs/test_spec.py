"""The run spec (``ssl_app.runs.spec``): one typed description of a run, one label per τ policy and per loss that parses back."""

from __future__ import annotations

import json
import sys

import pytest

from ssl_app.errors import ConfigError
from ssl_app.runs.spec import LossSpec, RunSpec
from ssl_app.temperature import TEMPERATURES, Cosine, Learnable
from ssl_app.temperature.labels import PolicySpec
from tests.registries import each
from tests.ssl_app.report.fakes import run_config


def policy_cases() -> list:
    """``pytest.param(policy class, example)`` for every registered τ policy in each of its examples."""
    return [
        pytest.param(entry.target, example, id=f"{entry.name}-{index}")
        for param in each(TEMPERATURES)
        for entry in param.values
        for index, example in enumerate(entry.target.examples)
    ]


@pytest.mark.parametrize(("policy_class", "example"), policy_cases())
def test_every_registered_policy_has_one_label_that_parses_back(policy_class, example):
    """Catches a label that loses an option (two policies under one name: ``cosine:0.1-1`` for any period), a
    number written short of exact, a form the parser does not read back, and a policy whose own ``label()``, its
    config or the policy built from its spec says something else than its spec."""
    policy = policy_class(**example)
    spec = PolicySpec.of(policy)
    label = spec.label()
    assert PolicySpec.parse(label) == spec
    assert policy.label() == label
    assert PolicySpec.from_config(spec.config()) == spec
    assert spec.build().label() == label and PolicySpec.of(spec.build()) == spec
    assert " " not in label  # one word of a loss label and of a grid value


def test_grid_spellings_read_as_the_policy_they_mean_and_the_label_is_canonical():
    """Catches two spellings of one policy read as two policies (a default written out, ``1.0`` for ``1``) and
    an option written in the label although it is the default."""
    assert PolicySpec.parse("cosine:0.1-1.0:T=400") == PolicySpec.parse("cosine:0.1-1") == PolicySpec.of(Cosine())
    assert PolicySpec.parse("cosine:0.1-1.0:unit=step:T=3").label() == "cosine:0.1-1:T=3:unit=step"
    assert PolicySpec.parse("0.30").label() == "0.3" and PolicySpec.parse("1e-5").label() == "1e-05"
    assert PolicySpec.parse("learnable:0.07:min=0.01").label() == "learnable:0.07"
    assert PolicySpec.of(Learnable(0.2, max=0.5)).label() == "learnable:0.2:max=0.5"
    with pytest.raises(ConfigError, match=r"temperature: 'cosine:0.1': HIGH is missing after 0.1; the form is cosine:LOW-HIGH"):
        PolicySpec.parse("cosine:0.1")


def test_every_registered_loss_has_one_label_that_parses_back(loss_case):
    """Catches a loss label that drops an option the example sets, a τ policy that does not survive the trip, or
    an option read back as another type (``K=3`` as text); every registered loss in each of its examples."""
    options = {key: value for key, value in loss_case.options.items()}
    for temperature in ({}, {"temperature": {"class_path": "ssl_app.temperature.Cosine", "init_args": {"period": 3}}}):
        if temperature and not loss_case.accepts("temperature"):
            continue
        config = {"class_path": loss_case.entry.value, "init_args": {**options, **temperature}}
        spec = LossSpec.from_config(config)
        assert LossSpec.parse(spec.label()) == spec, spec.label()
        assert LossSpec.from_config(spec.config()) == spec
        assert spec.label().split()[0] == loss_case.name
        for key, value in options.items():
            assert spec.option(key) == value


def test_a_loss_label_names_tau_and_what_differs_from_the_defaults():
    """Catches the label of an InfoNCE at its default τ without its τ (the paper's axis), and a label listing every
    default option of a hard loss."""
    assert LossSpec.from_config({"class_path": "ssl_app.losses.InfoNCE", "init_args": {"temperature": 0.5}}).label() == (
        "InfoNCE τ=0.5"
    )
    hard = {"class_path": "ssl_app.losses.HardContrastive", "init_args": {"temperature": 0.3, "num_negatives": 4095}}
    assert LossSpec.from_config(hard).label() == "HardContrastive τ=0.3 K=4095"
    assert LossSpec.parse("HardContrastive τ=cosine:0.1-1:T=200 K=7").option("temperature") == "cosine:0.1-1:T=200"
    stranger = LossSpec.from_config({"class_path": "no_such_module_here.Loss", "init_args": {"rate": 2}})
    assert stranger.label() == "no_such_module_here.Loss rate=2" and LossSpec.parse(stranger.label()) == stranger
    assert "no_such_module_here" not in sys.modules


def test_a_run_spec_reads_what_the_readers_ask_of_a_config():
    """Catches a field read from the wrong key (the probe's data root for the fit's, the old ``model.init_args.lr``
    ignored), and the keys that say where a run writes kept in what the run is."""
    config = run_config("HardContrastive", 3, 0.3, num_negatives=8, batch_size=64, data_args={"class_list": "x.txt"})
    config["model"]["init_args"].update(backbone="resnet18", lr=0.03)
    knn = {"class_path": "callbacks.KNNMonitor", "init_args": {"k": 20}}
    callbacks = [knn, {"class_path": "callbacks.EmbeddingMetrics"}]
    config["trainer"] = {"max_epochs": 5, "logger": {"init_args": {"save_dir": "runs"}}, "callbacks": callbacks}
    spec = RunSpec.from_config(config)
    assert (spec.method_name, spec.loss.name, spec.loss.option("num_negatives"), spec.backbone) == (
        "MemoryBank", "HardContrastive", 8, "resnet18")  # fmt: skip
    assert (spec.batch_size, spec.lr, spec.epochs, spec.seed, spec.data_option("class_list")) == (64, 0.03, 5, 3, "x.txt")
    assert spec.loss.temperature.constant == 0.3 and spec.loss.label() == "HardContrastive τ=0.3 K=8"
    assert spec.callback("KNNMonitor") == {"k": 20} and spec.callback("EmbeddingMetrics") == {}
    assert spec.callback("LongTailAccuracy") is None
    assert not any(key.startswith("trainer.logger") for key in spec.flat)
    assert "model.init_args.loss.class_path" in spec.identity() and "seed_everything" not in spec.identity()


def test_a_data_option_is_named_by_the_run_s_own_key():
    """Catches a hint that names ``data.init_args.num_workers`` for a linear probe, whose encoder's data (where the
    workers are) nests inside its own, or that drops the value the run has."""
    probe = {"data": {"init_args": {"batch_size": 32, "data": {"init_args": {"num_workers": 6, "batch_size": 64}}}}}
    spec = RunSpec.from_config(probe)
    assert spec.data_option_key("num_workers") == ("data.init_args.data.init_args.num_workers", 6)
    assert spec.data_option_key("batch_size") == ("data.init_args.batch_size", 32)
    assert RunSpec.from_config({}).data_option_key("num_workers") == ("data.init_args.num_workers", None)


@pytest.mark.parametrize(
    "config",
    [None, [], {"model": "x"}, {"model": {"init_args": {"loss": 3}}}, {"data": {"init_args": {"batch_size": "many"}}}],
)
def test_a_spec_of_a_config_from_elsewhere_leaves_out_what_it_cannot_read(config):
    """Catches a hand-edited or foreign config that stops the report (an exception) instead of a field left empty."""
    spec = RunSpec.from_config(config)
    assert spec.loss is None and spec.batch_size is None and spec.method is None


def test_a_sweep_point_s_grid_reads_as_the_same_spec_as_its_config():
    """Catches a run without a config (only its ``sweep.json`` grid) grouped under another τ than its config says."""
    loss = {"class_path": "ssl_app.losses.InfoNCE", "init_args": {"temperature": 0.3}}
    grid = {"model.init_args.loss": json.dumps(loss), "data.init_args.batch_size": "64"}
    from_grid = RunSpec.from_grid(grid)
    assert from_grid.loss == LossSpec.from_config(loss) == RunSpec.from_config(run_config("InfoNCE", 0, 0.3)).loss
    assert from_grid.loss.label() == "InfoNCE τ=0.3" and from_grid.batch_size == 64
