"""A re-run of a finished run trains nothing, keeps its record and prints its summary again; raising
``max_epochs`` continues it. An evaluation's summary names the checkpoint's epoch and step.

The CLI runs in this process on the quickstart's tiny slice (``slow``); ``finished_run``'s rule is
checked on fabricated checkpoints and records (fast).
"""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path

import pytest

from ssl_app.cli import main
from ssl_app.resume import finished_run
from ssl_app.runs.record import DONE, INTERRUPTED, RunRecord, read_record, write_record
from tests.helpers import cli_in
from tests.ssl_app.cli.test_cli import QUICKSTART, TINY

FIT = ["fit", "--config", QUICKSTART, *TINY, "--ckpt_path=last"]


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    """``python -m ssl_app <args>`` in this process: (exit status, stdout, stderr)."""
    code = 0
    try:
        main(args)
    except SystemExit as stop:
        code = int(stop.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def summary_of(out: str, kind: str) -> list[str]:
    """The console summary in ``out``: the ``<kind> done`` line and the indented lines after it."""
    lines = out.splitlines()
    starts = [n for n, line in enumerate(lines) if line.startswith(f"{kind} done")]
    assert len(starts) == 1, out[-3000:]
    block = [lines[starts[0]]]
    for line in lines[starts[0] + 1 :]:
        if not line.startswith("  "):
            break
        block.append(line)
    return block


def files_of(folder: Path) -> dict[str, int]:
    return {str(path.relative_to(folder)): path.stat().st_mtime_ns for path in folder.rglob("*") if path.is_file()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, list[str]]:
    """A finished tiny quickstart run (``FIT``) and the summary it printed (copy the folder before use)."""
    workdir = tmp_path_factory.mktemp("finished")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli_in(workdir, FIT)
    return workdir / "runs" / "quickstart" / "version_0", summary_of(out.getvalue(), "fit")


def copy_run(finished: tuple[Path, list[str]], tmp_path: Path) -> Path:
    target = tmp_path / "runs" / "quickstart" / "version_0"
    shutil.copytree(finished[0], target, ignore=shutil.ignore_patterns(".lock"))
    return target


@pytest.mark.slow
def test_a_rerun_of_a_finished_run_trains_nothing_keeps_its_record_and_prints_its_summary(
    finished, tmp_path, monkeypatch, capsys
):
    """Catches the second start of the same command line (a SLURM requeue) resuming the finished run:
    it ran the sanity validation again, rewrote ``run.json`` with no results and printed no summary."""
    run = copy_run(finished, tmp_path)
    first = finished[1]
    monkeypatch.chdir(tmp_path)
    args = FIT
    record_before = (run / "run.json").read_bytes()
    files_before = files_of(run)
    assert len(read_record(run).results) > 5

    code, out, err = run_cli(args, capsys)
    assert code == 0 and "Traceback" not in err, err[-3000:]
    assert summary_of(out, "fit") == first
    said = [line for line in err.splitlines() if "already done" in line]
    assert len(said) == 1 and said[0].startswith("fit: runs/quickstart/version_0 is already done"), err[-3000:]
    assert "max_epochs=2 reached" in said[0] and "raise --trainer.max_epochs" in said[0]
    assert "Sanity Checking" not in out + err and "resuming" not in err
    assert (run / "run.json").read_bytes() == record_before  # not a byte rewritten: no resume entry, results kept
    assert files_of(run) == files_before  # no event file, checkpoint or config written
    assert sorted(p.name for p in run.parent.iterdir()) == ["version_0"]

    more = [a for a in args if not a.startswith("--trainer.max_epochs")] + ["--trainer.max_epochs=3"]
    code, out, err = run_cli(more, capsys)
    assert code == 0, err[-3000:]
    record = read_record(run)
    assert (record.status, record.step, len(record.resumes)) == (DONE, 6, 1)
    assert record.results["metrics/knn_acc"] > 0 and record.results != {}
    assert summary_of(out, "fit")[0] == "fit done, finished at epoch 3, step 6: runs/quickstart/version_0"


@pytest.mark.slow
def test_validate_summary_names_the_checkpoints_epoch_and_step(finished, tmp_path, monkeypatch, capsys):
    """Catches ``validate`` saying "finished at epoch 0, step 0" (its own trainer's counters) for a
    checkpoint trained for epochs."""
    run = copy_run(finished, tmp_path)
    monkeypatch.chdir(tmp_path)
    ckpt = run / "checkpoints" / "last.ckpt"
    code, out, err = run_cli(["validate", "--config", QUICKSTART, *TINY, f"--ckpt_path={ckpt}"], capsys)
    assert code == 0, err[-3000:]
    line = summary_of(out, "validate")[0]
    assert line == "validate done, checkpoint of epoch 1, step 4: runs/quickstart/version_0/evaluations/validate_0", out
    assert read_record(run / "evaluations" / "validate_0").exit_reason == "checkpoint of epoch 1, step 4"


# --- the rule: when is a resume a re-run of a finished run ------------------------------------------
def finished_folder(tmp_path: Path, status: str = DONE, step: int = 40, epoch: int = 10, **trainer) -> Path:
    """A run folder whose record says ``status`` at ``epoch``/``step``, trained with ``trainer`` options."""
    folder = tmp_path / "version_0"
    (folder / "checkpoints").mkdir(parents=True)
    config = {"trainer": {"max_epochs": 10, "max_steps": -1, **trainer}}
    write_record(folder, RunRecord(kind="fit", status=status, run_id="abc", epoch=epoch, step=step, config=config))
    return folder


def checkpoint(step: int = 40, processed: int = 10) -> dict:
    loops = {"fit_loop": {"epoch_progress": {"current": {"processed": processed, "completed": processed - 1}}}}
    return {"epoch": processed - 1, "global_step": step, "loops": loops, "callbacks": {"RunRecorder": {"run_id": "abc"}}}


@pytest.mark.parametrize(
    ("trainer", "why"),
    [
        ({"max_epochs": 10, "max_steps": -1}, "max_epochs=10 reached"),
        ({"max_epochs": 5}, "max_epochs=5 reached"),
        ({"max_epochs": -1, "max_steps": 40}, "max_steps=40 reached"),
        ({"max_epochs": None, "max_steps": 30}, "max_steps=30 reached"),
    ],
)
def test_a_finished_run_at_its_limit_is_finished(tmp_path, trainer, why):
    folder = finished_folder(tmp_path)
    found = finished_run(checkpoint(), folder / "checkpoints" / "last.ckpt", trainer)
    assert found is not None and found.why == why and found.folder == folder


def test_a_run_stopped_before_its_limits_is_finished_only_with_the_same_limits(tmp_path):
    """An early stop (a callback, max_time) ends a run before max_epochs: the same command again is a
    no-op, a raised limit continues it."""
    folder = finished_folder(tmp_path, step=20, epoch=5)
    path = folder / "checkpoints" / "last.ckpt"
    found = finished_run(checkpoint(step=20, processed=5), path, {"max_epochs": 10, "max_steps": -1})
    assert found is not None and found.why == "its max_epochs and max_steps are unchanged"
    assert finished_run(checkpoint(step=20, processed=5), path, {"max_epochs": 20, "max_steps": -1}) is None


@pytest.mark.parametrize(
    ("status", "ckpt", "trainer"),
    [
        (DONE, {"step": 40, "processed": 10}, {"max_epochs": 20}),  # max_epochs raised
        (DONE, {"step": 40, "processed": 10}, {"max_epochs": -1}),  # no limit now
        (DONE, {"step": 36, "processed": 9}, {"max_epochs": 10}),  # an earlier checkpoint of the run
        (INTERRUPTED, {"step": 40, "processed": 10}, {"max_epochs": 10}),  # not finished: resume it
    ],
)
def test_a_resume_that_trains_is_not_finished(tmp_path, status, ckpt, trainer):
    folder = finished_folder(tmp_path, status=status)
    assert finished_run(checkpoint(**ckpt), folder / "checkpoints" / "last.ckpt", trainer) is None


def test_a_checkpoint_of_another_run_in_the_folder_is_not_finished(tmp_path):
    folder = finished_folder(tmp_path)
    other = checkpoint()
    other["callbacks"]["RunRecorder"]["run_id"] = "another"
    assert finished_run(other, folder / "checkpoints" / "last.ckpt", {"max_epochs": 10}) is None
