"""τ as a grid axis (``ssl_app.sweep.tau_axis``): presets expand to the policies' class-path configs, each in its own folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ssl_app.sweep.command import main
from ssl_app.sweep.grid import plan
from ssl_app.sweep.tau_axis import TAU_KEY
from tests.ssl_app.cli.test_cli import REPO

POLICY = "ssl_app.temperature."


def test_tau_presets_expand_to_the_policy_configs_each_in_a_folder_of_its_own(tmp_path):
    """Catches a preset that reaches the fit as text (jsonargparse would refuse it, or read another class),
    an option dropped or given to the wrong init arg (T as the low end), a number no longer passed as written,
    and folder names that hold ``:``, ``/`` or a space, or that two different policies share (``T=200`` and
    ``T=400``; ``unit=step``)."""
    values = ["0.3", "cosine:0.1-1.0", "cosine:0.1-1.0:T=200", "cosine:0.1-1:T=400", "cosine:0.1-1:unit=step:T=1e3"]
    values += ["linear:0.1-0.5:L=100", "learnable:0.07:max=0.5", "adaptive:0.1:alpha=0.5:a0=0.2"]
    runs = plan(["c.yaml"], [("tau", values)], [0], tmp_path / "sweep", [], None)
    set_to = {run.point: json.loads(run.grid[TAU_KEY]) for run in runs}
    assert [arg for arg in runs[0].fit_args if arg.startswith("--model.")] == [f"--{TAU_KEY}=0.3"]
    assert set_to == {
        "tau=0.3": 0.3,
        "tau=cosine_0.1-1": {"class_path": POLICY + "Cosine", "init_args": {"low": 0.1, "high": 1.0}},
        "tau=cosine_0.1-1_T=200": {
            "class_path": POLICY + "Cosine",
            "init_args": {"low": 0.1, "high": 1.0, "period": 200},
        },
        "tau=cosine_0.1-1_T=400": {
            "class_path": POLICY + "Cosine",
            "init_args": {"low": 0.1, "high": 1.0, "period": 400},
        },
        "tau=cosine_0.1-1_T=1000_unit=step": {
            "class_path": POLICY + "Cosine",
            "init_args": {"low": 0.1, "high": 1.0, "period": 1000, "unit": "step"},
        },
        "tau=linear_0.1-0.5_L=100": {
            "class_path": POLICY + "Linear",
            "init_args": {"start": 0.1, "end": 0.5, "length": 100},
        },
        "tau=learnable_0.07_max=0.5": {"class_path": POLICY + "Learnable", "init_args": {"init": 0.07, "max": 0.5}},
        "tau=adaptive_0.1_alpha=0.5_a0=0.2": {
            "class_path": POLICY + "Adaptive",
            "init_args": {"base": 0.1, "alpha": 0.5, "a0": 0.2},
        },
    }
    for run in runs:  # the fit gets what sweep.json records, and writes into the point's folder
        assert f"--{TAU_KEY}={run.grid[TAU_KEY]}" in run.fit_args
        assert run.directory == tmp_path / "sweep" / run.point / "seed0"
        assert not set(run.point) & set(":/ \\")


def test_a_bad_tau_preset_is_one_error_line_naming_it_and_the_accepted_forms(tmp_path, capsys, monkeypatch):
    """Catches a mistyped preset passed on to the fit as a string (a traceback or a run per typo), an incomplete
    preset refused without saying what it lacks (a linear ramp without its length, a cosine without its high
    end, an option without its value), an empty value between commas dropped silently, an option a policy
    does not have, and one policy written twice (one folder, two runs in it), and numbers the policy refuses
    (low > high: found only when each run started); each refused before anything is parsed or written."""
    cases = {
        "cosine:0.1": "'cosine:0.1': HIGH is missing after 0.1; the form is cosine:LOW-HIGH[:T=PERIOD][:unit=epoch|step]",
        "cosine:": "'cosine:': LOW-HIGH is missing; the form is cosine:LOW-HIGH",
        "cosine:0.1-1.0:T=": "'cosine:0.1-1.0:T=': T= has no value (T=PERIOD)",
        "cosine:0.1-1:T=inf": "T=inf: not a finite number",
        "cosine:0.1-1:unit=hour": "unit=hour: unit is epoch or step",
        "linear:0.1-0.5": "'linear:0.1-0.5': L=LENGTH is missing; the form is linear:START-END:L=LENGTH[:unit=epoch|step]",
        "linear:0.1:L=9": "'linear:0.1:L=9': END is missing after 0.1",
        "learnable:0.07:alpha=1": "learnable takes no option 'alpha' (its options: min, max)",
        "learnable:": "'learnable:': INIT is missing; the form is learnable:INIT[:min=MIN][:max=MAX]",
        "adaptive:0.1:alpha": "alpha= has no value (alpha=ALPHA); the form is adaptive:BASE[:alpha=ALPHA][:a0=A0]",
        "warm:0.1": "'warm:0.1' is not a τ",
        "cosin:0.1-1": "'cosin:0.1-1' is not a τ (did you mean cosine:0.1-1?)",
        "0.5,,0.2": "value 2 of '0.5,,0.2' is empty",
        "0.5,0.2,": "value 3 of '0.5,0.2,' is empty",
        "cosine:0.1-1.0,cosine:0.1-1": "cosine:0.1-1 given twice",
        # numbers the policy itself refuses (its own check, which --print_config would not run)
        "cosine:1.0-0.1": "'cosine:1.0-0.1': Cosine: low must be <= high",
        "learnable:0.07:min=0.5:max=0.2": "Learnable: min must be < max",
        "adaptive:0": "Adaptive: base must be > 0",
        "0.5,-0.1": "'-0.1': Constant:",
    }
    monkeypatch.chdir(REPO)
    for values, says in cases.items():
        with pytest.raises(SystemExit) as exit_:
            main(["--config", "configs/quickstart.yaml", "--grid", f"tau={values}", "--out", str(tmp_path), "--dry-run"])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("error: --grid tau: "), err
        assert says in err, err
        if "is not a τ" in says:
            assert "cosine:LOW-HIGH[:T=PERIOD][:unit=epoch|step]" in err and "linear:START-END:L=LENGTH" in err
    assert not list(Path(tmp_path).iterdir())
