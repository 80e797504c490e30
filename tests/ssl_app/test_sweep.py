"""The sweep: one run folder per grid point and seed, validated first, re-runnable, failure-tolerant."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from ssl_app.report.cli import main as report_main
from ssl_app.sweep import main, parse_grid, point_name
from tests.ssl_app.test_cli import QUICKSTART, REPO

FAST = ["--", "--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
        "--trainer.enable_progress_bar=false", "--data.init_args.train_size=128", "--data.init_args.val_size=64",
        "--data.init_args.test_size=64", "--data.init_args.batch_size=32"]  # fmt: skip
TAU = "model.init_args.loss.init_args.temperature"


def test_grid_specs_and_point_names():
    assert parse_grid([f"{TAU}=0.1,0.5", "data.init_args.batch_size=32"]) == [
        (TAU, ["0.1", "0.5"]),
        ("data.init_args.batch_size", ["32"]),
    ]
    assert point_name({TAU: "0.1", "model.init_args.loss": "ssl_app.losses.Simple"}) == "temperature=0.1,loss=Simple"
    for bad in (["temperature"], ["=1"], [f"{TAU}="], [f"{TAU}=1", f"{TAU}=2"]):
        with pytest.raises(SystemExit):
            parse_grid(bad)


def test_dry_run_prints_every_command_and_writes_nothing(tmp_path, capsys):
    code = main(
        ["--config", QUICKSTART, "--grid", f"{TAU}=0.1,0.5", "--seeds", "0,1", "--out", str(tmp_path), "--dry-run", *FAST]
    )
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
def test_sweep_then_report_end_to_end_and_a_rerun_finishes_only_what_is_missing(tmp_path, capsys):
    args = ["--config", QUICKSTART, "--grid", f"{TAU}=0.2,0.5", "--seeds", "0,1", "--out", str(tmp_path), "--name", "tau",
            "--jobs", "2", *FAST]  # fmt: skip
    assert main(args) == 0
    sweep = tmp_path / "tau"
    for point in ("temperature=0.2", "temperature=0.5"):
        for seed in (0, 1):
            run = sweep / point / f"seed{seed}"
            status = json.loads((run / "sweep.json").read_text())
            assert status["fit"] == "done" and status["seed"] == seed and status["grid"] == {TAU: point.split("=")[1]}
            assert list(run.glob("events.out.tfevents.*")) and (run / "config.yaml").is_file()
            assert (run / "checkpoints" / "last.ckpt").is_file()
    capsys.readouterr()

    assert report_main([str(sweep)]) == 0
    table = capsys.readouterr().out
    rows = [line for line in table.splitlines() if line.startswith("| InfoNCE")]
    assert len(rows) == 2 and "τ=0.2" in rows[0] and "τ=0.5" in rows[1]
    assert all(re.search(r"\d\.\d+ ± \d\.\d+", row) for row in rows)  # finite mean ± std over 2 seeds
    pngs = list((sweep / "report").glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)

    # an interrupted run (status still "running") is the only one run again, from its last.ckpt
    marker = sweep / "temperature=0.5" / "seed1" / "sweep.json"
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "fit": "running"}))
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "4 runs, 3 already done, 1 to run" in out and "start temperature=0.5 seed 1: fit" in out
    assert "--ckpt_path=" in (marker.parent / "fit.log").read_text()


@pytest.mark.slow
def test_a_failed_run_does_not_stop_the_others_and_is_listed_with_its_log(tmp_path, capsys):
    args = ["--config", QUICKSTART, "--grid", "data.init_args.batch_size=32,1000", "--out", str(tmp_path), "--name", "b",
            *FAST[:-1]]  # fmt: skip
    assert main(args) == 1  # batch 1000 > the 128 training shapes: that run fails at its start
    err = capsys.readouterr().err
    assert "1 run(s) failed" in err and "batch_size=1000 seed 0 (fit):" in err and "fit.log" in err
    assert json.loads((tmp_path / "b" / "batch_size=32" / "seed0" / "sweep.json").read_text())["fit"] == "done"
    failed = tmp_path / "b" / "batch_size=1000" / "seed0"
    assert json.loads((failed / "sweep.json").read_text())["fit"] == "failed"
    assert "batch_size" in (failed / "fit.log").read_text()


def readme_sweep_commands() -> list[list[str]]:
    """Every ``python -m ssl_app.sweep`` command of the README, backslash continuations joined."""
    text = (REPO / "README.md").read_text().replace("\\\n", " ")
    return [
        shlex.split(line.split("python -m ssl_app.sweep", 1)[1])
        for line in text.splitlines()
        if "python -m ssl_app.sweep " in line
    ]


def test_the_readmes_sweep_commands_parse(tmp_path, capsys, monkeypatch):
    commands = readme_sweep_commands()
    assert commands, "README shows no sweep command"
    monkeypatch.chdir(REPO)
    for argv in commands:
        assert main([*argv, "--out", str(tmp_path), "--dry-run"]) == 0
        printed = capsys.readouterr().out.splitlines()
        assert printed and all(line.startswith("python -m ssl_app fit") for line in printed)


def test_parallel_jobs_are_pinned_to_free_gpus(tmp_path, monkeypatch):
    """With GPUs, each running job gets its own device, released when it ends (no GPU needed here)."""
    import ssl_app.sweep as sweep

    class Finished:
        returncode = 0

        def __init__(self):
            self.pid = id(self)
            self.polls = 0

        def poll(self):
            self.polls += 1
            return 0 if self.polls > 2 else None

    seen: list[int] = []
    running: set[int] = set()

    def fake_launch(args, log, device):
        assert device is not None and device not in running  # never two jobs on one GPU
        running.add(device)
        seen.append(device)
        process = Finished()
        original_poll = process.poll

        def poll():
            done = original_poll()
            if done is not None:
                running.discard(device)
            return done

        process.poll = poll
        return process

    monkeypatch.setattr(sweep, "_gpu_count", lambda: 2)
    monkeypatch.setattr(sweep, "launch", fake_launch)
    monkeypatch.setattr(sweep.time, "sleep", lambda _: None)
    runs = sweep.plan([QUICKSTART], [(TAU, ["0.1", "0.2", "0.3"])], [0], tmp_path, [], None)
    assert sweep.execute(runs, jobs=2) == []
    assert len(seen) == 3 and set(seen) == {0, 1}
    assert all(json.loads((run.directory / "sweep.json").read_text())["fit"] == "done" for run in runs)
