"""τ as the sweep spells it, given to ``fit`` on the command line and in a config file (issue 40, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ssl_app.cli import main
from ssl_app.cli.tau_presets import expand_in_argv, expand_in_config
from ssl_app.errors import ConfigError
from ssl_app.runs.spec import TAU_KEY, RunSpec
from ssl_app.sweep.tau_axis import tau_value

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = str(REPO / "configs" / "quickstart.yaml")


def test_a_preset_after_the_option_or_its_equals_sign_becomes_the_sweep_s_policy_config():
    expected = tau_value("cosine:0.1-1:T=3").value
    assert expand_in_argv(["fit", f"--{TAU_KEY}=cosine:0.1-1:T=3"]) == ["fit", f"--{TAU_KEY}={expected}"]
    assert expand_in_argv(["fit", f"--{TAU_KEY}", "cosine:0.1-1:T=3"]) == ["fit", f"--{TAU_KEY}", expected]
    assert json.loads(expected) == {"class_path": "ssl_app.temperature.Cosine",
                                    "init_args": {"low": 0.1, "high": 1.0, "period": 3.0}}  # fmt: skip


@pytest.mark.parametrize(
    "argv",
    [
        [f"--{TAU_KEY}=0.2"],  # a number
        [f"--{TAU_KEY}=ssl_app.temperature.Cosine"],  # a class path
        [f"--{TAU_KEY}", '{"class_path": "ssl_app.temperature.Learnable"}'],  # a config
        ["--model.init_args.loss.init_args.reduction=cosine:0.1-1"],  # not a temperature
        ["--config", "cosine:0.1-1"],  # a value of another option
    ],
)
def test_what_is_not_a_preset_for_a_temperature_passes_as_written(argv):
    assert expand_in_argv(argv) == argv


def test_a_preset_that_is_not_one_of_its_forms_names_the_option_and_the_forms():
    with pytest.raises(ConfigError, match=rf"--{TAU_KEY}: 'linear:1.0-0.1'"):
        expand_in_argv([f"--{TAU_KEY}", "linear:1.0-0.1"])
    with pytest.raises(ConfigError, match="low"):  # the policy's own check (low <= high)
        expand_in_argv([f"--{TAU_KEY}=cosine:1-0.1"])


def test_a_preset_in_a_config_is_expanded_wherever_a_loss_sits():
    config = {
        "model": {
            "init_args": {"loss": {"class_path": "ssl_app.losses.InfoNCE", "init_args": {"temperature": "learnable:0.07"}}}
        },
        "probe": [{"loss": {"init_args": {"temperature": "adaptive:0.1"}}}],
        "other": {"temperature": "cosine:0.1-1"},  # not a loss's: left alone
    }
    assert expand_in_config(config)
    assert config["model"]["init_args"]["loss"]["init_args"]["temperature"]["class_path"] == "ssl_app.temperature.Learnable"
    assert config["probe"][0]["loss"]["init_args"]["temperature"]["class_path"] == "ssl_app.temperature.Adaptive"
    assert config["other"] == {"temperature": "cosine:0.1-1"}
    assert not expand_in_config({"model": {"init_args": {"loss": {"init_args": {"temperature": 0.5}}}}})


def printed_config(args: list[str], capsys) -> dict:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", QUICKSTART, *args, "--print_config"])
    assert exit_info.value.code == 0
    captured = capsys.readouterr()
    assert "args parameter is intended" not in captured.err
    return yaml.safe_load(captured.out)


def test_fit_takes_the_sweep_s_spelling_on_the_command_line_and_its_run_spells_it_back(capsys):
    config = printed_config([f"--{TAU_KEY}=cosine:0.1-1.0:T=3"], capsys)
    assert RunSpec.from_config(config).loss.temperature.label() == "cosine:0.1-1:T=3"


def test_fit_takes_the_sweep_s_spelling_in_a_config_file(tmp_path, capsys):
    extra = tmp_path / "tau.yaml"
    extra.write_text("model:\n  init_args:\n    loss:\n      init_args:\n        temperature: learnable:0.07:max=0.5\n")
    config = printed_config(["--config", str(extra)], capsys)
    assert RunSpec.from_config(config).loss.temperature.label() == "learnable:0.07:max=0.5"


def test_fit_refuses_a_broken_preset_in_one_line_before_anything_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", QUICKSTART, f"--{TAU_KEY}", "cosine:0.1"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --{TAU_KEY}: 'cosine:0.1'"), err
    assert not (tmp_path / "runs").exists()
