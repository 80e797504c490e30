"""The sweep: one run folder per grid point and seed, validated first, re-runnable, failure-tolerant."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ssl_app.report.cli import main as report_main
from ssl_app.runs.layout import evaluation_folders, read_sweep_point
from ssl_app.runs.record import finish_record, read_record, start_record, write_record
from ssl_app.sweep.command import main
from ssl_app.sweep.grid import parse_grid, point_name
from tests.ssl_app.cli.test_cli import QUICKSTART, REPO
from tests.ssl_app.report.fakes import main_table

FAST = ["--", "--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
        "--trainer.enable_progress_bar=false", "--data.init_args.train_size=128", "--data.init_args.val_size=64",
        "--data.init_args.test_size=64", "--data.init_args.batch_size=32"]  # fmt: skip
TAU = "model.init_args.loss.init_args.temperature"


def test_grid_specs_and_point_names():
    assert parse_grid([f"{TAU}=0.1,0.5", "data.init_args.batch_size=32"]) == [
        (TAU, ["0.1", "0.5"]),
        ("data.init_args.batch_size", ["32"]),
    ]
    assert point_name({TAU: "0.1", "model.init_args.loss": "ssl_app.losses.Simple"}) == "tau=0.1,loss=Simple"
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


@pytest.mark.parametrize("given", ["--trainer.fast_dev_run=true", "--trainer.fast_dev_run=2"])
def test_fast_dev_run_is_one_error_before_anything_runs(given, tmp_path, capsys):
    """Catches a sweep of smoke tests failing each run as "no run record (it failed before it started)": a
    fast_dev_run writes no run folder, and the sweep reads each run's record."""
    with pytest.raises(SystemExit) as exit_:
        main(["--config", QUICKSTART, "--grid", "tau=0.5", "--out", str(tmp_path), *FAST, given])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: point tau=0.5: trainer.fast_dev_run: a sweep reads each run's folder"), err
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_sweep_then_report_end_to_end_and_a_rerun_finishes_only_what_is_missing(tmp_path, capsys):
    args = ["--config", QUICKSTART, "--grid", f"{TAU}=0.2,0.5", "--seeds", "0,1", "--out", str(tmp_path), "--name", "tau",
            "--jobs", "2", *FAST]  # fmt: skip
    assert main(args) == 0
    sweep = tmp_path / "tau"
    for point in ("tau=0.2", "tau=0.5"):
        for seed in (0, 1):
            run = sweep / point / f"seed{seed}"
            sidecar = read_sweep_point(run)
            assert sidecar.seed == seed and sidecar.grid == {TAU: point.split("=")[1]} and "fit" in sidecar.commands
            assert read_record(run).status == "done"
            assert list(run.glob("events.out.tfevents.*")) and (run / "config.yaml").is_file()
            assert (run / "checkpoints" / "last.ckpt").is_file()
    capsys.readouterr()

    assert report_main([str(sweep)]) == 0
    table = capsys.readouterr().out
    rows = [line for line in main_table(table).splitlines() if line.startswith("| InfoNCE")]
    assert len(rows) == 2 and "τ=0.2" in rows[0] and "τ=0.5" in rows[1]
    assert all(re.search(r"\d\.\d+ ± \d\.\d+", row) for row in rows)  # finite mean ± std over 2 seeds
    pngs = list((sweep / "report").glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)

    # a run whose record says interrupted is the only one run again, from its last.ckpt
    interrupted = sweep / "tau=0.5" / "seed1"
    record = read_record(interrupted)
    record.status = "interrupted"
    write_record(interrupted, record)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "4 runs, 3 already done, 1 to run" in out and "start tau=0.5 seed 1: fit" in out
    assert "--ckpt_path=" in (interrupted / "fit.log").read_text()
    assert read_record(interrupted).status == "done" and len(read_record(interrupted).resumes) == 1


@pytest.mark.slow
def test_a_failed_run_does_not_stop_the_others_and_is_listed_with_its_log(tmp_path, capsys):
    args = ["--config", QUICKSTART, "--grid", "data.init_args.batch_size=32,1000", "--out", str(tmp_path), "--name", "b",
            *FAST[:-1]]  # fmt: skip
    assert main(args) == 1  # batch 1000 > the 128 training shapes: that run fails at its start
    err = capsys.readouterr().err
    assert "1 run(s) failed" in err and "batch_size=1000 seed 0 (fit): failed: " in err and "fit.log" in err
    assert read_record(tmp_path / "b" / "batch_size=32" / "seed0").status == "done"
    failed = tmp_path / "b" / "batch_size=1000" / "seed0"
    assert read_record(failed).status == "failed" and "batch_size" in read_record(failed).exit_reason
    assert "batch_size" in (failed / "fit.log").read_text()


@pytest.mark.slow
def test_the_linear_stage_is_filed_in_its_run_and_reaches_the_report(tmp_path, capsys):
    """The sweep's probe of each fit lands in ``<run>/evaluations/linear_<n>/`` (the CLI files it with
    the run it evaluates) and gives the report its linear top-1; a re-run does not probe again."""
    linear = tmp_path / "linear_tiny.yaml"
    linear.write_text(
        f"config: {REPO / 'configs' / 'linear.yaml'}\n"
        "trainer.max_epochs: 1\ntrainer.check_val_every_n_epoch: 1\ntrainer.enable_progress_bar: false\n"
        "model.init_args.cache_features: flips\n"
        "data.init_args.data.init_args.train_size: 100\ndata.init_args.data.init_args.test_size: 40\n"
    )
    args = ["--config", QUICKSTART, "--linear", str(linear), "--out", str(tmp_path / "out"), "--name", "p", *FAST]
    assert main(args) == 0
    run = tmp_path / "out" / "p" / "base" / "seed0"
    [probe] = [p.name for p in evaluation_folders(run)]  # beside it: evaluations/linear, its values on the fit's row
    assert probe == "linear_0" and read_record(run / "evaluations" / probe).status == "done"
    assert read_sweep_point(run).commands.keys() == {"fit", "linear"}
    capsys.readouterr()
    assert main(args) == 0 and "1 runs, 1 already done, 0 to run" in capsys.readouterr().out
    assert report_main([str(tmp_path / "out" / "p")]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| InfoNCE"))
    assert row.split("|")[3].strip() not in ("", "0.00")  # the linear top-1 column


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
        cut = argv.index("--") if "--" in argv else len(argv)  # after "--": the fits' options
        assert main([*argv[:cut], "--out", str(tmp_path), "--dry-run", *argv[cut:]]) == 0
        printed = capsys.readouterr().out.splitlines()
        assert printed and all(line.startswith("python -m ssl_app fit") for line in printed)


def fake_fit(status: str | None, exit_code: int):
    """A ``launch`` stand-in whose "fit" ends at once: it writes the run record the CLI would write
    (``status``; None: none, a start that failed before the record) and exits with ``exit_code``."""

    class Process:
        def __init__(self, directory):
            self.pid, self.returncode, self.directory = id(self), None, directory

        def poll(self):
            if self.returncode is None:
                if status is not None:
                    record = start_record(self.directory, "fit", {"seed_everything": 0})
                    finish_record(self.directory, record, status, f"{status} (fake fit)")
                self.returncode = exit_code
            return self.returncode

    return lambda args, log, device: Process(log.parent)


def planned(tmp_path, values=("0.1",)):
    from ssl_app.sweep import grid

    return grid.plan([QUICKSTART], [(TAU, list(values))], [0], tmp_path, [], None)


@dataclass
class FakeGpus:
    """What the sweep did with the GPUs it was told of: each launch's device (``None``: unpinned) and the
    most jobs that ran on each device at once."""

    launched: list = field(default_factory=list)
    most: Counter = field(default_factory=Counter)


def on_fake_gpus(monkeypatch, gpus: int) -> FakeGpus:
    """The sweep sees ``gpus`` GPUs; every launch is a fake fit that runs for a few polls."""
    from ssl_app.sweep import local

    seen = FakeGpus()
    running: list = []
    finish = fake_fit("done", 0)

    def fake_launch(args, log, device):
        seen.launched.append(device)
        running.append(device)
        seen.most[device] = max(seen.most[device], running.count(device))
        process = finish(args, log, device)
        polls = iter([None] * 3)

        def poll():
            if next(polls, "done") is None:
                return None
            running.remove(device)
            return type(process).poll(process)

        process.poll = poll
        return process

    monkeypatch.setattr(local, "_gpu_count", lambda: gpus)
    monkeypatch.setattr(local, "launch", fake_launch)
    monkeypatch.setattr(local.time, "sleep", lambda _: None)
    return seen


def test_parallel_jobs_are_pinned_to_free_gpus(tmp_path, monkeypatch):
    """With GPUs, each running job gets its own device, released when it ends (no GPU needed here)."""
    from ssl_app.sweep import local

    gpus = on_fake_gpus(monkeypatch, 2)
    runs = planned(tmp_path, ("0.1", "0.2", "0.3"))
    assert local.execute(runs, jobs=2).failed == []
    assert len(gpus.launched) == 3 and set(gpus.launched) == {0, 1}
    assert gpus.most == {0: 1, 1: 1}  # never two jobs on one GPU
    assert all(read_record(run.directory).status == "done" for run in runs)


def test_more_jobs_than_gpus_are_each_pinned_and_share_the_gpus_evenly(tmp_path, monkeypatch):
    """Catches the jobs beyond the number of GPUs starting unpinned: they see every GPU and all train on
    the first, beside the job already pinned there."""
    from ssl_app.sweep import local

    gpus = on_fake_gpus(monkeypatch, 2)
    runs = planned(tmp_path, ("0.1", "0.2", "0.3", "0.4"))
    assert local.execute(runs, jobs=4).failed == []
    assert None not in gpus.launched  # every job sees one GPU
    assert gpus.most == {0: 2, 1: 2}  # four at once on two GPUs: two each, not three on one


@pytest.mark.parametrize(
    ("status", "exit_code", "why"),
    [(None, 3, "no run record"), ("failed", 1, "failed: failed (fake fit)"), ("interrupted", 0, "interrupted")],
)
def test_a_fit_that_fails_or_lies_is_a_failure_of_the_sweep(tmp_path, monkeypatch, capsys, status, exit_code, why):
    """Catches a sweep that reads success from anything but the run's own record: a fit that exits
    non-zero before writing one, a failed record, and a process that exits 0 while its record says
    it did not finish. The sweep exits 1 and names the run, the reason and its log."""
    from ssl_app.sweep import command as sweep
    from ssl_app.sweep import local

    monkeypatch.setattr(local, "launch", fake_fit(status, exit_code))
    monkeypatch.setattr(local.time, "sleep", lambda _: None)
    monkeypatch.setattr(sweep, "validate", lambda runs: None)
    code = main(["--config", QUICKSTART, "--grid", f"{TAU}=0.1", "--out", str(tmp_path), "--name", "s"])
    err = capsys.readouterr().err
    assert code == 1 and "1 run(s) failed" in err and f"tau=0.1 seed 0 (fit): {why}" in err, err
    assert "fit.log" in err


def test_a_real_failing_process_gives_the_sweep_its_exit_code(tmp_path, monkeypatch, capsys):
    """A real child process (a tiny Python, not the CLI) that exits 2: the sweep reports the failure
    and returns 1, without waiting on anything else."""
    import subprocess

    from ssl_app.sweep import command as sweep
    from ssl_app.sweep import local

    def launch(args, log, device):
        log.parent.mkdir(parents=True, exist_ok=True)
        return subprocess.Popen([sys.executable, "-c", "import sys; print('error: bad'); sys.exit(2)"], stdout=log.open("a"))

    monkeypatch.setattr(local, "launch", launch)
    monkeypatch.setattr(sweep, "validate", lambda runs: None)
    assert main(["--config", QUICKSTART, "--grid", f"{TAU}=0.1", "--out", str(tmp_path), "--name", "s"]) == 1
    assert "tau=0.1 seed 0 (fit): no run record" in capsys.readouterr().err
    assert "error: bad" in (tmp_path / "s" / "tau=0.1" / "seed0" / "fit.log").read_text()


def test_points_whose_short_names_coincide_get_distinct_folders():
    """Catches ``mylosses.InfoNCE`` resuming ``ssl_app.losses.InfoNCE``'s run: both were ``loss=InfoNCE``."""
    from ssl_app.sweep.grid import point_names

    values = [{"model.init_args.loss": "ssl_app.losses.InfoNCE"}, {"model.init_args.loss": "mylosses.InfoNCE"},
              {"model.init_args.loss": "ssl_app.losses.Simple"}]  # fmt: skip
    names = point_names(values)
    assert len(set(names)) == 3 and names[2] == "loss=Simple"
    assert all(name.startswith("loss=InfoNCE-") for name in names[:2])
    assert point_names([{"a": "x/y"}, {"a": "x_y"}])[0] != point_names([{"a": "x/y"}, {"a": "x_y"}])[1]
    assert point_names(values) == names  # stable across re-runs: the same folders are found again


def test_a_run_goes_on_to_its_linear_stage_under_the_lock_it_holds(tmp_path, monkeypatch):
    """Catches the sweep refusing its own lock between a run's fit and its probe (it skipped every probe
    as "held by another process" and still exited 0)."""
    from ssl_app.sweep import grid, local

    stages = []

    def launch(args, log, device):
        stage = log.stem
        stages.append(stage)
        if stage == "fit":
            return fake_fit("done", 0)(args, log, device)
        probe = log.parent / "evaluations" / "linear_0"
        return fake_fit("done", 0)(args, probe / "linear.log", device)

    monkeypatch.setattr(local, "launch", launch)
    monkeypatch.setattr(local.time, "sleep", lambda _: None)
    [run] = grid.plan([QUICKSTART], [], [0], tmp_path, [], str(REPO / "configs" / "linear.yaml"))
    outcome = local.execute([run], jobs=1)
    assert stages == ["fit", "linear"] and outcome.held == [] and outcome.failed == []
    assert run.stages() == []


def test_a_run_another_sweep_holds_is_skipped_and_named(tmp_path, monkeypatch, capsys):
    """Two sweeps started into one folder: the second must not train the run the first is running."""
    from ssl_app.io.lock import SWEEP_LOCK, RunLock
    from ssl_app.sweep import local

    launched = []
    monkeypatch.setattr(local, "launch", lambda args, log, device: launched.append(log) or fake_fit("done", 0)(args, log, device))
    monkeypatch.setattr(local.time, "sleep", lambda _: None)
    held, free = planned(tmp_path, ("0.1", "0.2"))
    with RunLock(held.directory, SWEEP_LOCK) as other_sweep:
        assert other_sweep.acquire()
        outcome = local.execute([held, free], jobs=1)
    assert outcome.held == [held] and outcome.failed == [] and launched == [free.directory / "fit.log"]
    assert f"skip {held.label}: {held.directory} is held by pid {os.getpid()}" in capsys.readouterr().out
    assert read_record(held.directory) is None


def test_an_unwritable_or_wrong_out_is_one_error_before_anything(tmp_path, monkeypatch, capsys):
    from ssl_app.sweep import command as sweep

    monkeypatch.setattr(sweep, "validate", lambda runs: pytest.fail("--out is checked before the points are parsed"))
    blocker = tmp_path / "file"
    blocker.write_text("")
    for out, text in ((blocker / "sweeps", "is a file"), (Path("/sys/ssl_app_sweeps"), "cannot write in /sys")):
        with pytest.raises(SystemExit) as exit_:
            main(["--config", QUICKSTART, "--out", str(out)])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.startswith(f"error: --out {out}: ") and text in err, err
        assert err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_ctrl_c_stops_the_running_fits_and_says_how_to_resume(tmp_path, monkeypatch, capsys):
    """Catches a traceback (and orphaned fits) on Ctrl-C in the sweep: the children get SIGTERM (they
    save their last.ckpt), the sweep waits for them and exits 130 with one line."""
    import subprocess
    import threading

    from ssl_app.sweep import command as sweep
    from ssl_app.sweep import local

    children = []

    def launch(args, log, device):
        log.parent.mkdir(parents=True, exist_ok=True)
        child = subprocess.Popen([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(120)"])
        children.append(child)
        return child

    monkeypatch.setattr(local, "launch", launch)
    monkeypatch.setattr(sweep, "validate", lambda runs: None)
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        code = main(["--config", QUICKSTART, "--grid", f"{TAU}=0.1,0.2", "--jobs", "2", "--out", str(tmp_path)])
    finally:
        timer.cancel()
    captured = capsys.readouterr()
    assert code == 130 and "stopped by SIGINT; the same command resumes the unfinished runs" in captured.err
    assert "Traceback" not in captured.err
    assert len(children) == 2 and all(child.poll() == -signal.SIGTERM for child in children)


def test_a_fresh_restart_clears_what_the_failed_attempt_left(tmp_path, monkeypatch):
    """A run that failed before its first checkpoint is started afresh; its old events must not mix
    into the new attempt (and the CLI would refuse a new run into a folder with events)."""
    from ssl_app.sweep import local

    [run] = planned(tmp_path)
    run.directory.mkdir(parents=True)
    (run.directory / "events.out.tfevents.1.host").write_bytes(b"old attempt")
    record = start_record(run.directory, "fit", {})
    finish_record(run.directory, record, "failed", "crashed")
    seen = []

    def launch(args, log, device):
        seen.append(sorted(p.name for p in run.directory.iterdir() if not p.name.startswith(".")))
        return fake_fit("done", 0)(args, log, device)

    monkeypatch.setattr(local, "launch", launch)
    monkeypatch.setattr(local.time, "sleep", lambda _: None)
    assert local.execute([run], jobs=1).failed == []
    assert seen == [["sweep.json"]]


@contextlib.contextmanager
def held_by_another_process(folder: Path, name: str):
    """A real process (a tiny Python) holding ``folder``'s lock ``name`` for the block: what a
    ``fit --ckpt_path last`` started by hand, or another sweep, holds while it writes there."""
    import subprocess

    code = (
        f"import sys, time; sys.path.insert(0, {str(REPO)!r}); from ssl_app.io.lock import RunLock; "
        f"assert RunLock({str(folder)!r}, {name!r}).acquire(); print('held', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def test_a_run_whose_run_lock_another_process_holds_is_not_launched(tmp_path, monkeypatch, capsys):
    """Catches a sweep that checks only other sweeps' locks: a run folder another process is writing
    (its run lock, ``.lock``, held by a real process) must be skipped and named, the other run launched."""
    from ssl_app.io.lock import RUN_LOCK
    from ssl_app.sweep import local

    launched = []
    monkeypatch.setattr(local, "launch", lambda args, log, device: launched.append(log) or fake_fit("done", 0)(args, log, device))
    monkeypatch.setattr(local.time, "sleep", lambda _: None)
    held, free = planned(tmp_path, ("0.1", "0.2"))
    with held_by_another_process(held.directory, RUN_LOCK) as pid:
        outcome = local.execute([held, free], jobs=1)
    assert outcome.held == [held] and outcome.failed == [] and launched == [free.directory / "fit.log"]
    assert f"skip {held.label}: {held.directory} is held by pid {pid} " in capsys.readouterr().out
    assert read_record(held.directory) is None and not (held.directory / "sweep.json").exists()


def test_a_slurm_task_does_not_launch_into_a_run_another_process_writes(tmp_path, monkeypatch):
    """The same for a job-array task (``ssl_app.sweep.slurm.PointJob``): it fails naming the holder, and launches nothing."""
    from ssl_app.io.lock import RUN_LOCK
    from ssl_app.sweep import local
    from ssl_app.sweep.slurm import PointJob

    launched = []
    monkeypatch.setattr(local, "launch", lambda *args, **kwargs: launched.append(args))
    [run] = planned(tmp_path)
    with held_by_another_process(run.directory, RUN_LOCK) as pid, pytest.raises(RuntimeError, match=f"held by pid {pid} "):
        PointJob(run)()
    assert launched == []


def test_a_stage_that_exits_non_zero_after_its_record_says_done_is_failed_and_run_again(tmp_path, monkeypatch, capsys):
    """Catches the record winning over the exit status: a fit whose process exits 1 after writing
    ``done`` (it crashed after training) is a failure of the sweep, and a re-run of the same command
    runs it again instead of counting it finished; ``--status`` says so too."""
    from ssl_app.sweep import command as sweep
    from ssl_app.sweep import local

    monkeypatch.setattr(local.time, "sleep", lambda _: None)
    monkeypatch.setattr(sweep, "validate", lambda runs: None)
    args = ["--config", QUICKSTART, "--grid", f"{TAU}=0.1", "--out", str(tmp_path), "--name", "s"]
    monkeypatch.setattr(local, "launch", fake_fit("done", 1))
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "1 run(s) failed" in err and "tau=0.1 seed 0 (fit): exit status 1 (its record says done" in err, err
    run = tmp_path / "s" / "tau=0.1" / "seed0"
    assert read_record(run).status == "done"  # the run's own record is left as the run wrote it

    assert main([*args, "--status"]) == 0
    assert "exit status 1" in capsys.readouterr().out
    monkeypatch.setattr(local, "launch", fake_fit("done", 0))
    assert main(args) == 0
    assert "1 runs, 0 already done, 1 to run" in capsys.readouterr().out
    assert main(args) == 0 and "1 runs, 1 already done, 0 to run" in capsys.readouterr().out
