"""The CLI keeps one identified, honest run per folder: records, evaluations filed with their run,
resumes of the same experiment only, one writer per folder, one line for every refused input.

In-process CLI runs of the quickstart on a few generated shapes; the fits are ``slow`` (the CLI end
to end), the refusals that stop before training are not.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.tensorboard import SummaryWriter

from ssl_app.cli import main
from ssl_app.io.lock import RunLock
from ssl_app.runs.layout import evaluation_folders
from ssl_app.runs.record import read_record, start_record
from tests.helpers import cli_in
from tests.ssl_app.cli.test_cli import QUICKSTART, REPO, TINY

LINEAR = str(REPO / "configs" / "linear.yaml")


def run_cli(args: list[str], capsys) -> tuple[int, str]:
    """``python -m ssl_app <args>`` in this process: (exit status, stderr)."""
    try:
        main(args)
    except SystemExit as stop:
        return int(stop.code or 0), capsys.readouterr().err
    return 0, capsys.readouterr().err


def error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished tiny quickstart run folder (copy it before changing it)."""
    workdir = tmp_path_factory.mktemp("trained")
    cli_in(workdir, ["fit", "--config", QUICKSTART, *TINY])
    return workdir / "runs" / "quickstart" / "version_0"


def copy_run(trained: Path, tmp_path: Path) -> Path:
    target = tmp_path / "runs" / "quickstart" / "version_0"
    shutil.copytree(trained, target, ignore=shutil.ignore_patterns(".lock"))
    return target


# --- the record ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_finished_fit_writes_a_done_record_naming_what_ran(trained):
    record = read_record(trained)
    assert (record.kind, record.status) == ("fit", "done") and record.exit_reason == "finished at epoch 2, step 4"
    assert record.config["model"]["class_path"] == "ssl_app.methods.SimCLR" and len(record.config_hash) == 16
    assert record.identity["data.init_args.train_size"] == 128 and record.started <= record.ended
    assert record.data["class_path"] == "datamodules.synthetic.SyntheticDataModule"
    assert record.data["split_sizes"] == {"train": 128, "val": 64} and record.data["num_classes"] == 10
    assert 0.0 <= record.results["metrics/knn_acc"] <= 1.0 and record.version and record.parent is None
    assert (record.epoch, record.step) == (2, 4)


@pytest.mark.slow
@pytest.mark.parametrize("subcommand", ["validate", "test"])
def test_validate_and_test_are_filed_inside_the_run_they_evaluate(trained, tmp_path, monkeypatch, capsys, subcommand):
    """Catches an evaluation written as a new ``version_<n>``, which the report grouped with the
    training run as another seed (a quickstart row became n = 2)."""
    run = copy_run(trained, tmp_path)
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        ckpt = f"--ckpt_path={run / 'checkpoints' / 'last.ckpt'}"
        code, err = run_cli([subcommand, "--config", QUICKSTART, *TINY, ckpt], capsys)
        assert code == 0, err[-3000:]
    assert sorted(p.name for p in run.parent.iterdir()) == ["version_0"]
    folders = evaluation_folders(run, subcommand)
    assert [f.name for f in folders] == [f"{subcommand}_0", f"{subcommand}_1"]
    record = read_record(folders[0])
    assert (record.kind, record.status, record.parent) == (subcommand, "done", "../..")
    assert f"{'val' if subcommand == 'validate' else 'test'}/loss" in record.results
    assert read_record(run).status == "done"  # the training run's record is untouched


# --- resume: the same experiment only, with this command's options ------------------------------
@pytest.mark.slow
def test_last_passes_over_another_experiment_and_a_resume_keeps_the_first_config(trained, tmp_path, monkeypatch, capsys):
    """Catches ``--ckpt_path last`` picking the newest run under the logger name though it was trained
    on other data, and a resume overwriting the run's config.yaml; the new learning rate is used."""
    run = copy_run(trained, tmp_path)
    other = run.parent / "version_1"
    shutil.copytree(run, other)
    record = read_record(other)
    record.config["data"]["init_args"]["num_classes"] = 5  # trained on other data (its record says)
    start_record(other, "fit", record.config)
    os.utime(other / "checkpoints" / "last.ckpt")  # the newest checkpoint
    config_before = (run / "config.yaml").read_text()
    monkeypatch.chdir(tmp_path)
    more = [a for a in TINY if not a.startswith("--trainer.max_epochs")]
    args = ["fit", "--config", QUICKSTART, *more, "--trainer.max_epochs=3", "--model.init_args.optim.lr=0.01", "--ckpt_path=last"]
    code, err = run_cli(args, capsys)
    assert code == 0, err[-3000:]
    assert "passing over" in err and "version_1" in err and "data.init_args.num_classes = 5 (there) / 10 (now)" in err
    assert "resuming runs/quickstart/version_0/checkpoints/last.ckpt (epoch 1, step 4)" in err
    assert "model.init_args.optim.lr = 0.06 (checkpoint) / 0.01 (now)" in err and "trainer.max_epochs = 2 (checkpoint) / 3" in err
    record = read_record(run)
    assert record.status == "done" and record.step == 6 and len(record.resumes) == 1
    assert record.resumes[0]["changed"]["model.init_args.optim.lr"] == {"checkpoint": 0.06, "now": 0.01}
    assert (run / "config.yaml").read_text() == config_before
    saved = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert saved["lr_schedulers"][0]["base_lrs"] == [pytest.approx(0.01)]
    assert read_record(other).status == "running"  # untouched


@pytest.mark.slow
def test_an_explicit_checkpoint_of_another_experiment_is_refused_before_anything(trained, tmp_path, monkeypatch, capsys):
    run = copy_run(trained, tmp_path)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    monkeypatch.chdir(tmp_path)
    ckpt = f"--ckpt_path={run / 'checkpoints' / 'last.ckpt'}"
    code, err = run_cli(["fit", "--config", QUICKSTART, *TINY, "--model.init_args.loss=ssl_app.losses.Simple", ckpt], capsys)
    line = error_line(err)
    assert code == 2 and "was trained with other settings: model.init_args.loss.class_path = " in line
    assert "'ssl_app.losses.InfoNCE' (checkpoint) / 'ssl_app.losses.Simple' (now)" in line and "--resume_anyway" in line
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before


# --- refused checkpoints: one line, nothing written ---------------------------------------------
def lightning_checkpoint(path: Path, weights_only: bool = False) -> Path:
    """An untrained quickstart-shaped SimCLR saved by Lightning's own ``Trainer.save_checkpoint``."""
    from ssl_app.methods import SimCLR

    model = SimCLR(backbone="small_cnn", proj_dim=128, proj_hidden_dim=256, proj_layers=2)
    model.hparams["_class_path"] = "ssl_app.methods.SimCLR"
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.strategy.connect(model)
    trainer.save_checkpoint(path, weights_only=weights_only)
    return path


def test_a_weights_only_checkpoint_cannot_resume_and_leaves_no_bogus_run(tmp_path, monkeypatch, capsys):
    """Catches the traceback followed by a fresh ``last.ckpt`` with the schedule reset (and a hint to
    resume from it) that a weights-only checkpoint gave."""
    weights = lightning_checkpoint(tmp_path / "weights.ckpt", weights_only=True)
    monkeypatch.chdir(tmp_path)
    code, err = run_cli(["fit", "--config", QUICKSTART, *TINY, f"--ckpt_path={weights}"], capsys)
    line = error_line(err)
    assert code == 2 and "holds only weights" in line and "weights.ckpt" in line
    assert not (tmp_path / "runs").exists()


def test_a_checkpoint_lightning_cannot_upgrade_is_one_line(tmp_path, monkeypatch, capsys):
    path = lightning_checkpoint(tmp_path / "old.ckpt")
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["pytorch-lightning_version"] = "0.6.0"  # claims a Lightning whose loops had another layout
    torch.save(checkpoint, path)
    monkeypatch.chdir(tmp_path)
    code, err = run_cli(["fit", "--config", QUICKSTART, *TINY, f"--ckpt_path={path}"], capsys)
    line = error_line(err)
    assert code == 2 and "written by Lightning 0.6.0 and cannot be upgraded" in line and "old.ckpt" in line


class Payload:
    """Unpickling this runs ``Path(marker).touch()``: what a crafted checkpoint would do instead."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def malicious_checkpoint(path: Path, marker: Path) -> Path:
    """A file that looks like a checkpoint and runs code when unpickled without ``weights_only``."""
    with open(path, "wb") as file:
        torch.save({"state_dict": {}, "pytorch-lightning_version": "2.6.6", "hyper_parameters": Payload(marker)}, file)
    with pytest.raises(Exception):  # noqa: B017 - the guard itself: weights_only refuses it
        torch.load(path, weights_only=True)
    torch.load(path, weights_only=False)  # the file really is armed: loading it unsafely runs the payload
    assert marker.exists()
    marker.unlink()
    return path


@pytest.mark.parametrize(
    "command",
    [
        lambda evil: ["fit", "--config", QUICKSTART, *TINY, f"--ckpt_path={evil}"],
        lambda evil: ["validate", "--config", QUICKSTART, *TINY, f"--ckpt_path={evil}"],
        lambda evil: ["test", "--config", QUICKSTART, *TINY, f"--ckpt_path={evil}"],
        lambda evil: ["fit", "--config", LINEAR, f"--model.init_args.checkpoint={evil}"],
    ],
    ids=["fit", "validate", "test", "probe"],
)
def test_no_checkpoint_path_runs_code(tmp_path, monkeypatch, capsys, command):
    """Catches ``torch.load(..., weights_only=False)`` on a file the user is handed (the probe's
    checkpoint ran a command for real). Each path refuses the file in one line; nothing runs."""
    marker = tmp_path / "pwned"
    evil = malicious_checkpoint(tmp_path / "evil.ckpt", marker)
    monkeypatch.chdir(tmp_path)
    code, err = run_cli(command(evil), capsys)
    assert code == 2 and "evil.ckpt" in error_line(err) and "not a readable checkpoint" in error_line(err)
    assert not marker.exists()


@pytest.mark.slow
def test_a_probe_checkpoint_never_makes_its_saved_encoder_path_win_or_run_code(tmp_path, monkeypatch, capsys):
    """Catches the second path to code execution: a probe checkpoint (which passes the safe check)
    whose saved ``checkpoint`` hyper-parameter names a crafted file; LightningCLI copied it over the
    user's option. The user's path is kept and said so; without one the probe does not start."""
    from ssl_app.evaluation import LinearProbe

    marker = tmp_path / "pwned"
    evil = malicious_checkpoint(tmp_path / "evil.ckpt", marker)
    encoder = lightning_checkpoint(tmp_path / "encoder.ckpt")
    probe = LinearProbe(str(encoder), num_classes=10)
    probe.hparams["checkpoint"] = str(evil)  # what a stranger's probe checkpoint could carry
    probe.hparams["_class_path"] = "ssl_app.evaluation.LinearProbe"
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.strategy.connect(probe)
    trainer.save_checkpoint(tmp_path / "probe.ckpt")
    monkeypatch.chdir(tmp_path)
    small = ["--data.init_args.data.init_args.train_size=40", "--data.init_args.data.init_args.test_size=20",
             "--trainer.enable_progress_bar=false", f"--ckpt_path={tmp_path / 'probe.ckpt'}"]  # fmt: skip
    code, err = run_cli(["validate", "--config", LINEAR, f"--model.init_args.checkpoint={encoder}", *small], capsys)
    assert code == 0, err[-3000:]
    assert f"model.init_args.checkpoint: kept {encoder} (the checkpoint names {evil})" in err
    code, err = run_cli(["validate", "--config", LINEAR, *small], capsys)  # the encoder is the user's to name
    assert code == 2 and "required: checkpoint" in error_line(err)
    assert not marker.exists()


def test_nothing_in_the_package_loads_a_file_with_weights_only_false():
    """The rule behind the tests above, for every loader in the code (tests may load their own files).
    A save's ``weights_only=False`` (Trainer.save_checkpoint: the full state, not only the weights) loads nothing."""
    found = [
        f"{path.relative_to(REPO)}:{number}"
        for package in ("ssl_app", "datamodules", "callbacks")
        for path in (REPO / package).rglob("*.py")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if ("weights_only=False" in line.replace(" ", "") and "save_checkpoint(" not in line)
        or ("pickle.load(" in line and str(path.relative_to(REPO)) not in OWN_PIPES)
    ]
    assert found == []


#: The modules that unpickle, and from what: only the pipes between a process and the drawing process it
#: started itself (no file, nothing a user or another process hands in).
OWN_PIPES = {
    "ssl_app/drawing/worker.py": "the jobs its parent, the training process, writes to its stdin",
    "callbacks/figure_process.py": "the answers of the drawing process it started, on that process's stdout",
}


# --- one writer per folder ---------------------------------------------------------------------
def test_a_folder_another_process_writes_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "runs" / "quickstart" / "mine"
    monkeypatch.chdir(tmp_path)
    with RunLock(folder) as other:
        assert other.acquire()
        code, err = run_cli(["fit", "--config", QUICKSTART, *TINY, "--trainer.logger.init_args.version=mine"], capsys)
    line = error_line(err)
    assert code == 2 and "runs/quickstart/mine is in use by pid" in line
    assert sorted(p.name for p in folder.iterdir()) == [".lock"]


def test_a_new_run_into_a_folder_that_holds_a_run_is_refused(tmp_path, monkeypatch, capsys):
    """Catches two runs with one explicit version writing one folder (their curves would interleave)."""
    folder = tmp_path / "runs" / "quickstart" / "exp1"
    start_record(folder, "fit", {})
    writer = SummaryWriter(str(folder))
    writer.add_scalar("train/loss_step", 1.0, 0)
    writer.close()
    monkeypatch.chdir(tmp_path)
    code, err = run_cli(["fit", "--config", QUICKSTART, *TINY, "--trainer.logger.init_args.version=exp1"], capsys)
    line = error_line(err)
    assert code == 2 and "already holds a running run" in line and "--ckpt_path last" in line


def test_an_unwritable_output_folder_is_one_line(tmp_path, monkeypatch, capsys):
    """A read-only output folder (sysfs refuses new folders even to root): no traceback."""
    monkeypatch.chdir(tmp_path)
    code, err = run_cli(["fit", "--config", QUICKSTART, *TINY, "--trainer.logger.init_args.save_dir=/sys/ssl_app_runs"], capsys)
    line = error_line(err)
    assert code == 1 and line.startswith("error: cannot write /sys/ssl_app_runs")
    assert "not permitted" in line or "denied" in line


def test_a_checkpoint_resumed_into_another_runs_folder_is_refused(tmp_path, monkeypatch, capsys):
    """Catches a resume that writes into a folder holding another run (its events and record would mix)."""
    theirs = tmp_path / "runs" / "quickstart" / "theirs"
    start_record(theirs, "fit", {})
    writer = SummaryWriter(str(theirs))
    writer.add_scalar("train/loss_step", 1.0, 0)
    writer.close()
    mine = lightning_checkpoint(tmp_path / "mine.ckpt")
    monkeypatch.chdir(tmp_path)
    args = ["fit", "--config", QUICKSTART, *TINY, "--trainer.logger.init_args.version=theirs", f"--ckpt_path={mine}"]
    code, err = run_cli(args, capsys)
    assert code == 2 and "theirs already holds a running run" in error_line(err)
