"""The sweep: one run folder per grid point and seed, validated first, re-runnable, failure-tolerant."""

from __future__ import annotations

import json

import pytest

from ssl_app.sweep import main, parse_grid, point_name
from tests.ssl_app.test_cli import QUICKSTART

FAST = ["--", "--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
        "--trainer.enable_progress_bar=false", "--data.init_args.train_size=128", "--data.init_args.val_size=64",
        "--data.init_args.test_size=64", "--data.init_args.batch_size=32"]  # fmt: skip
TAU = "model.init_args.loss.init_args.temperature"


def test_grid_specs_and_point_names():
    assert parse_grid([f"{TAU}=0.1,0.5", "data.init_args.batch_size=32"]) == [(TAU, ["0.1", "0.5"]), ("data.init_args.batch_size", ["32"])]
    assert point_name({TAU: "0.1", "model.init_args.loss": "ssl_app.losses.Simple"}) == "temperature=0.1,loss=Simple"
    for bad in (["temperature"], ["=1"], [f"{TAU}="], [f"{TAU}=1", f"{TAU}=2"]):
        with pytest.raises(SystemExit):
            parse_grid(bad)


def test_dry_run_prints_every_command_and_writes_nothing(tmp_path, capsys):
    code = main(["--config", QUICKSTART, "--grid", f"{TAU}=0.1,0.5", "--seeds", "0,1", "--out", str(tmp_path), "--dry-run", *FAST])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 0 and len(lines) == 4
    assert sum(f"--{TAU}=0.1" in line for line in lines) == 2 and sum("--seed_everything=1" in line for line in lines) == 2
    assert not list(tmp_path.iterdir())


def test_a_key_that_does_not_exist_is_one_error_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--config", QUICKSTART, "--grid", "model.init_args.loss.init_args.temprature=0.1", "--out", str(tmp_path), *FAST])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: point temprature=0.1:") and "temprature" in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_a_sweep_runs_every_point_resumes_only_what_is_missing_and_survives_a_failure(tmp_path, capsys):
    args = ["--config", QUICKSTART, "--grid", "data.init_args.batch_size=32,1000", "--seeds", "0,1",
            "--out", str(tmp_path), "--name", "s", "--jobs", "2", *FAST[:-1]]  # fmt: skip
    assert main(args) == 1  # batch 1000 > 128 training shapes: those two runs fail at start
    err = capsys.readouterr().err
    assert "2 run(s) failed" in err and "batch_size=1000 seed 0 (fit):" in err and "fit.log" in err
    good = tmp_path / "s" / "batch_size=32"
    for seed in (0, 1):
        run = good / f"seed{seed}"
        status = json.loads((run / "sweep.json").read_text())
        assert status["fit"] == "done" and status["seed"] == seed and status["grid"] == {"data.init_args.batch_size": "32"}
        assert list(run.glob("events.out.tfevents.*")) and (run / "config.yaml").is_file()
        assert (run / "checkpoints" / "last.ckpt").is_file()
    failed = json.loads((tmp_path / "s" / "batch_size=1000" / "seed0" / "sweep.json").read_text())
    assert failed["fit"] == "failed" and "batch_size" in (tmp_path / "s" / "batch_size=1000" / "seed0" / "fit.log").read_text()

    # an interrupted run (status still "running") is the only good one run again
    marker = good / "seed1" / "sweep.json"
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "fit": "running"}))
    only_good = [a if a != "data.init_args.batch_size=32,1000" else "data.init_args.batch_size=32" for a in args]
    assert main(only_good) == 0
    out = capsys.readouterr().out
    assert "2 runs, 1 already done, 1 to run" in out and "start batch_size=32 seed 1: fit" in out
    assert "--ckpt_path=" in (good / "seed1" / "fit.log").read_text()  # resumed from its last.ckpt
