"""The sweep on SLURM (``--launcher slurm``, ``ssl_app.sweep.slurm``) and the linear stage's own options.

Nothing here needs a real SLURM: the job array runs through submitit's local executor (the same
code path, processes on this machine), and the sbatch header is read from submitit's SLURM
executor with a stand-in ``srun`` on the PATH.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from ssl_app.runs.layout import JobRecord, read_job_record, write_job_record
from ssl_app.runs.record import finish_record, read_record, start_record
from ssl_app.sweep.command import main
from ssl_app.sweep.grid import plan
from ssl_app.sweep.slurm import SlurmOptions, executor, status_lines
from tests.ssl_app.cli.test_cli import QUICKSTART, REPO
from tests.ssl_app.sweep.test_sweep import FAST, TAU

LINEAR = str(REPO / "configs" / "linear.yaml")


def test_linear_args_reach_the_linear_commands_only(tmp_path, capsys):
    """Catches ``--linear-args`` landing on the fits (or nowhere): the printed commands and the plan."""
    linear_args = "--model.init_args.cache_features=flips --trainer.max_epochs=3"
    code = main(["--config", QUICKSTART, "--grid", f"{TAU}=0.1,0.5", "--linear", LINEAR, "--out", str(tmp_path),
                 "--linear-args", linear_args, "--dry-run", *FAST])  # fmt: skip
    lines = capsys.readouterr().out.strip().splitlines()  # one line per run: its fit && its linear evaluation
    assert code == 0 and len(lines) == 2 and all(line.count(" && ") == 1 for line in lines)
    fits, linear = zip(*(line.split(" && ") for line in lines))
    assert all(f"--config {LINEAR}" in line for line in linear) and not any(f"--config {LINEAR}" in line for line in fits)
    assert all(line.endswith("--model.init_args.cache_features=flips --trainer.max_epochs=3") for line in linear)
    assert not any("cache_features" in line for line in fits)
    [run] = plan([QUICKSTART], [], [0], tmp_path, ["--trainer.max_epochs=1"], LINEAR, ["--model.init_args.cache_features=flips"])
    assert run.linear_args[-1] == "--model.init_args.cache_features=flips" and "--trainer.max_epochs=1" not in run.linear_args
    assert run.fit_args[-1] == "--trainer.max_epochs=1"


def test_linear_args_without_a_linear_stage_is_one_error(tmp_path, capsys):
    """Catches options for a linear stage that will never run being dropped silently."""
    with pytest.raises(SystemExit) as exit_:
        main(["--config", QUICKSTART, "--out", str(tmp_path), "--linear-args", "--model.init_args.cache_features=flips"])
    assert exit_.value.code == 2 and capsys.readouterr().err.startswith("error: --linear-args needs --linear")


def test_slurm_options_become_the_sbatch_header(tmp_path, monkeypatch):
    """Catches an option that does not reach sbatch (partition, time, GPUs, account, extra options, array limit)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("srun", "sbatch"):
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    options = SlurmOptions(partition="gpu", time_min=90, gpus_per_run=2, account="lab", sbatch={"qos": "high"}, parallel=3)
    header = executor(tmp_path / ".slurm", options, "ssl_app-tau")._executor._make_submission_file_text("CMD", "uid")
    for line in ("--partition=gpu", "--time=90", "--gpus-per-node=2", "--account=lab", "--qos=high", "--ntasks-per-node=1",
                 "--job-name=ssl_app-tau", "--signal=USR2@"):  # fmt: skip
        assert f"#SBATCH {line}" in header, line


def test_without_slurm_the_launcher_is_one_error(tmp_path, monkeypatch, capsys):
    """Catches a traceback from submitit where SLURM is missing: one line, naming the way to run it here."""
    from ssl_app.sweep import command as sweep

    monkeypatch.setenv("PATH", str(tmp_path))  # no srun
    monkeypatch.setattr(sweep, "validate", lambda runs: None)
    with pytest.raises(SystemExit) as exit_:
        main(["--config", QUICKSTART, "--out", str(tmp_path / "out"), "--launcher", "slurm"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error: --launcher slurm: ") and "--slurm.cluster local" in err
    assert err.count("\n") == 1


def test_status_shows_each_runs_state_and_job(tmp_path, capsys):
    """Catches ``--status`` reading a state from anywhere but the run record, or losing the job id."""
    done, waiting = plan([QUICKSTART], [(TAU, ["0.1", "0.2"])], [0], tmp_path / "s", [], None)
    done.directory.mkdir(parents=True)
    finish_record(done.directory, start_record(done.directory, "fit", {}), "done", "finished")
    write_job_record(done.directory, JobRecord(cluster="local", job_id="4242_0", folder="x", submitted="now"))
    assert main(["--config", QUICKSTART, "--grid", f"{TAU}=0.1,0.2", "--out", str(tmp_path), "--name", "s", "--status"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("tau=0.1 seed 0") and " done " in lines[0] and lines[0].endswith("job 4242_0")
    assert " unknown " in lines[1] and lines[1].endswith("no job")
    assert status_lines([waiting]) == [f"{waiting.label}  unknown  no job"]


def test_lightnings_slurm_requeue_is_off_so_sigterm_is_the_one_path(tmp_path, monkeypatch):
    """Catches Lightning's SIGUSR1 auto-requeue (its own hpc checkpoint and ``scontrol requeue``) being
    armed beside the project's SIGTERM checkpoint in a fit under SLURM."""
    from lightning.fabric.plugins.environments import SLURMEnvironment
    from lightning.pytorch.callbacks import Callback

    from ssl_app.checkpointing import InterruptCheckpoint
    from ssl_app.losses import InfoNCE
    from ssl_app.methods import SimCLR
    from tests.helpers import tiny_data, tiny_trainer

    for key, value in {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "train", "SLURM_JOB_ID": "7", "SLURM_PROCID": "0",
                       "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NODELIST": "node1"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    seen = {}

    class Look(Callback):
        def on_train_start(self, trainer, pl_module):
            seen["usr1"] = signal.getsignal(signal.SIGUSR1)
            seen["environment"] = trainer._accelerator_connector.cluster_environment

    trainer = tiny_trainer(tmp_path, max_steps=1, callbacks=[InterruptCheckpoint(), Look()])
    trainer.fit(SimCLR(loss=InfoNCE(), backbone="small_cnn", proj_hidden_dim=16, proj_dim=8), tiny_data())
    assert isinstance(seen["environment"], SLURMEnvironment) and seen["environment"].auto_requeue is False
    # SIGUSR1 is the project's stop (a checkpoint after the step), not Lightning's hpc checkpoint and requeue
    assert getattr(seen["usr1"], "__func__", None) is InterruptCheckpoint._on_signal


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (its children, theirs, ...)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = parent_of(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    found, todo = [], [pid]
    while todo:
        below = todo.pop()
        children = [child for child, parent in parents.items() if parent == below]
        found += children
        todo += children
    return found


def _wait(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def _status(folder: Path) -> str | None:
    try:
        record = read_record(folder)
    except ValueError:
        return None
    return record.status if record else None


@pytest.mark.slow
def test_a_grid_on_the_slurm_launcher_runs_and_a_requeued_job_resumes_in_place(tmp_path, capsys, monkeypatch):
    """A 2-point grid through submitit's local executor: both runs end ``done``, each folder has its job
    id; one job gets submitit's pre-emption signal mid-fit, as SLURM sends it, to every process of the
    step (the task, the fit, its 2 data workers): the fit stops on it with ``last.ckpt``, submitit
    requeues the task, and the requeued task resumes that checkpoint in the same run folder (one resume
    in its record) and finishes. Catches a fit (or its workers) killed by the signal's default action,
    a requeue that starts the run afresh, in another folder, or that never comes."""
    # The jobs' fits import the test's Pace callback: the repository on their path (the installed
    # package does not include tests/).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    pace = ["--trainer.callbacks+=tests.ssl_app.test_interrupt.Pace", "--trainer.callbacks.pause=0.4",
            "--trainer.limit_train_batches=4", "--data.init_args.num_workers=2",
            "--data.init_args.augment_on=workers"]  # fmt: skip
    args = ["--config", QUICKSTART, "--grid", f"{TAU}=0.2,0.5", "--out", str(tmp_path), "--name", "tau",
            "--launcher", "slurm", "--slurm.cluster", "local", "--slurm.time", "10"]  # fmt: skip
    assert main([*args, *FAST, *pace]) == 0
    out = capsys.readouterr().out
    assert out.count("[sweep] submitted ") == 2
    sweep = tmp_path / "tau"
    first, second = sweep / "tau=0.2" / "seed0", sweep / "tau=0.5" / "seed0"
    jobs = [read_job_record(folder) for folder in (first, second)]
    assert all(job is not None and job.cluster == "local" and job.job_id for job in jobs)

    log = first / "fit.log"
    _wait(lambda: log.is_file() and "step 2" in log.read_text(), 120, "the first fit's second step")
    fit_pid = read_record(first).pid
    task_pid = parent_of(fit_pid)
    # SLURM's --signal=USR2@90 reaches every process of the step at once. The fit keeps the first stop signal
    # it sees, and the task passes SIGTERM on to it: the fit and its workers first, so that on a loaded machine
    # the task's SIGTERM cannot reach the fit before the signal SLURM sent it.
    for pid in [*descendants(task_pid), task_pid]:
        os.kill(pid, signal.SIGUSR2)

    _wait(lambda: _status(first) == "done" and _status(second) == "done", 180, "both runs to finish")
    record = read_record(first)
    assert len(record.resumes) == 1 and record.resumes[0]["checkpoint"].startswith(str(first / "checkpoints"))
    text = log.read_text()
    assert "Interrupted by SIGUSR2" in text and "--ckpt_path=" in text and "Traceback" not in text
    expected = [".inputs_tables", ".slurm", "sweep_plan.json", "tau=0.2", "tau=0.5"]
    assert sorted(p.name for p in sweep.iterdir()) == expected
    assert read_record(second).resumes == []
    task_log = Path(jobs[0].stdout).read_text()
    assert "saving and requeueing" in task_log and "Requeued job" in task_log

    assert main([*args, "--status", *FAST, *pace]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    lines = out[: len(jobs)]  # each run's state, then the comparison table of the finished runs
    assert [line.split()[3] for line in lines] == ["done", "done"]
    assert any(line.startswith("| ") for line in out[len(jobs) :])
    assert [line.rsplit(" ", 1)[1] for line in lines] == [job.job_id for job in jobs]


def test_status_from_the_sweeps_folder_alone(tmp_path, monkeypatch, capsys):
    """Catches ``--status`` needing the whole original command: ``--status DIR`` reads what the sweep
    wrote into its folder at launch, lists every run (the one never started too), from another folder."""
    from ssl_app.sweep import command as sweep
    from ssl_app.sweep import grid, local
    from tests.ssl_app.sweep.test_sweep import fake_fit

    monkeypatch.setattr(local.time, "sleep", lambda _: None)
    monkeypatch.setattr(sweep, "validate", lambda runs: None)

    def launch(args, log, device):  # the fit's record in the run, the probe's in evaluations/linear_0
        where = log if log.stem == "fit" else log.parent / "evaluations" / "linear_0" / log.name
        return fake_fit("done", 0)(args, where, device)

    monkeypatch.setattr(local, "launch", launch)
    args = ["--config", QUICKSTART, "--grid", f"{TAU}=0.2,0.1", "--seeds", "0,1", "--linear", LINEAR, "--out", str(tmp_path)]
    execute = sweep.execute
    monkeypatch.setattr(sweep, "execute", lambda runs, jobs: execute([run for run in runs if run.seed == 0], jobs))
    assert main([*args, "--name", "s"]) == 0  # seed 1 of each point never starts
    capsys.readouterr()
    expected = grid.planned_runs(sweep.parse_args([*args, "--name", "s"]))[1]
    monkeypatch.chdir(tmp_path / "s" / "tau=0.1")  # anywhere
    assert main(["--status", str(tmp_path / "s")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == status_lines(expected)
    assert [line.split()[:4] for line in lines] == [  # in the grid's order
        ["tau=0.2", "seed", "0", "done,"], ["tau=0.2", "seed", "1", "unknown"],
        ["tau=0.1", "seed", "0", "done,"], ["tau=0.1", "seed", "1", "unknown"],
    ]  # fmt: skip
    (tmp_path / "s" / "sweep_plan.json").unlink()  # a sweep written before the plan file: its started runs' sweep.json
    assert main(["--status", str(tmp_path / "s")]) == 0
    assert sorted(capsys.readouterr().out.strip().splitlines()) == [lines[2], lines[0]]
    for bad, why in ((tmp_path / "nothing", "no such folder"), (tmp_path, "not a sweep's folder")):
        with pytest.raises(SystemExit) as exit_:
            main(["--status", str(bad)])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.startswith(f"error: --status {bad}: ") and why in err and err.count("\n") == 1


def stand_in_slurm(tmp_path: Path, monkeypatch, sbatch: str) -> None:
    """``srun`` and ``sbatch`` on the PATH as tiny shell scripts (``sbatch``: its body)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\n{sbatch}\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_a_dry_run_or_a_refused_submission_leaves_nothing(tmp_path, monkeypatch, capsys):
    """Catches folders left behind by the SLURM launcher when nothing was submitted: a dry run writes
    nothing, and an ``sbatch`` that refuses the array is one ``error:`` line naming its message (not
    submitit's traceback), with no ``.slurm`` folder, pickles or submission script left."""
    from ssl_app.sweep import command as sweep

    monkeypatch.setattr(sweep, "validate", lambda runs: None)
    out = tmp_path / "out"
    args = ["--config", QUICKSTART, "--grid", f"{TAU}=0.1,0.2", "--out", str(out), "--launcher", "slurm"]
    assert main([*args, "--slurm.cluster", "local", "--dry-run"]) == 0
    assert not out.exists()
    capsys.readouterr()
    stand_in_slurm(tmp_path, monkeypatch, 'echo "sbatch: error: invalid partition specified: gpu" >&2; exit 1')
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--slurm.partition", "gpu"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err == "error: --launcher slurm: sbatch: error: invalid partition specified: gpu\n", err
    assert not out.exists()


@pytest.mark.slow
def test_a_submission_leaves_no_empty_folder(tmp_path):
    """Catches submitit's log folder template left behind as a literal, empty ``.slurm/%j`` folder: after a
    local array task ran, every folder of the sweep holds something and none is named by a template."""
    from ssl_app.sweep.slurm import submit

    [run] = plan([QUICKSTART], [], [0], tmp_path / "s", [], None)
    run.directory.mkdir(parents=True)
    finish_record(run.directory, start_record(run.directory, "fit", {}), "done", "finished")  # the task has nothing to run
    [(_, job_id)] = submit([run], SlurmOptions(cluster="local"), tmp_path / "s")
    stdout = Path(read_job_record(run.directory).stdout)
    _wait(lambda: stdout.is_file() and "Exiting after successful completion" in stdout.read_text(), 60, "the task to end")
    time.sleep(1)  # the task's controller process ends after its task
    folders = [path for path in (tmp_path / "s").rglob("*") if path.is_dir()]
    assert folders and all(any(folder.iterdir()) for folder in folders), [str(f) for f in folders if not any(f.iterdir())]
    assert not [path for path in (tmp_path / "s").rglob("*%*")]


def test_a_job_warned_with_usr1_is_checkpointed_and_requeued_like_with_submitits_signal(tmp_path, monkeypatch):
    """``--signal=USR1@N`` (a cluster's own warning) in a task whose submitit waits for USR2: catches the
    task dying of USR1's default action instead of checkpointing and requeueing (issue 42 item 3)."""
    from ssl_app.sweep import slurm
    from tests.ssl_app.sweep.test_sweep import fake_fit, planned

    requeued = []
    warned = fake_fit("done", 0)

    def launch(args, log, device, env=None):
        process = warned(args, log, device)
        os.kill(os.getpid(), signal.SIGUSR1)  # SLURM's warning, while the fit runs
        return process

    monkeypatch.setattr(slurm, "launch", launch)
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: requeued.append(signum))  # submitit's handler
    try:
        [run] = planned(tmp_path)
        assert slurm.PointJob(run)() == "done"
        assert requeued == [signal.SIGUSR1]
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL  # the task's own handlers are back afterwards
    finally:
        signal.signal(signal.SIGUSR2, previous)
