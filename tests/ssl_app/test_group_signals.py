"""Stopped the way clusters stop jobs (issue 42): a signal to every process of the run, data workers
included, and a data worker killed on its own.

Real processes (``python -m ssl_app fit``, ``num_workers: 2``, views made in the workers), started in a
session of their own so that ``os.killpg`` reaches the run and nothing else. One command, the same for
every start (``--ckpt_path last``: the first start and every resume, as a SLURM script runs it), is
stopped by SIGTERM to its whole group during a training epoch, during an evaluation pass and during
validation, then loses a data worker to SIGKILL (as the out-of-memory killer does), and each time the
same command resumes; the chain ends bit-identical to an uninterrupted run (every step's loss and
views, every final value). For SimCLR on an image folder and for the memory bank.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import lightning as L
import pytest
import torch
from PIL import Image

from ssl_app.checkpointing import InterruptCheckpoint
from ssl_app.runs.record import read_record

REPO = Path(__file__).resolve().parents[2]
SHORT = [
    "--trainer.max_epochs=3",
    "--trainer.log_every_n_steps=1",
    "--trainer.num_sanity_val_steps=0",
    "--trainer.enable_progress_bar=false",
    "--trainer.callbacks=[callbacks.KNNMonitor]",  # its pass over the train split is the evaluation pass
    "--data.init_args.batch_size=8",
    "--data.init_args.num_workers=2",
    "--data.init_args.augment_on=workers",
    "--data.init_args.eval_on=workers",  # the evaluation pass through data workers too (``auto`` keeps its images on the device)
    "--model.init_args.proj_dim=16",
]
STEPS = 3 * 4  # 3 epochs of 4 steps: 32 training images in batches of 8; 2 validation batches


def image_folder(root: Path) -> Path:
    """``train/<class>/`` and ``val/<class>/``: 16 + 8 PNGs of 16 px per class, two classes."""
    generator = torch.Generator().manual_seed(0)
    for split, count in (("train", 16), ("val", 8)):
        for label in ("a", "b"):
            folder = root / split / label
            folder.mkdir(parents=True)
            for n in range(count):
                pixels = torch.randint(0, 256, (16, 16, 3), generator=generator, dtype=torch.uint8)
                Image.fromarray(pixels.numpy()).save(folder / f"{n}.png")
    return root


def simclr_on_a_folder(tmp_path: Path) -> list[str]:
    root = image_folder(tmp_path / "images")
    small = ["--model.init_args.backbone=small_cnn", "--model.init_args.proj_hidden_dim=32"]
    return ["--config", str(REPO / "configs" / "image_folder.yaml"), f"--data.init_args.root={root}", *small]


def memory_bank(tmp_path: Path) -> list[str]:
    sizes = ["--data.init_args.train_size=32", "--data.init_args.val_size=16", "--data.init_args.test_size=16",
             "--data.init_args.image_size=16"]  # fmt: skip
    return ["--config", str(REPO / "configs" / "memory_bank.yaml"), *sizes]


class Marks(L.Callback):
    """Prints where the run is (``step <n>``, ``val <epoch> <batch>``, and ``eval <epoch> <batch>`` for each
    batch of an evaluation pass) and appends each training step's number, loss and a hash of its views to
    ``<folder>/steps.jsonl``. At the mark ``wait_at`` it waits (up to a minute) for the signal the test
    sends on reading it, so the signal lands there however busy the machine is."""

    def __init__(self, folder: str, wait_at: str = "") -> None:
        self.folder, self.wait_at = Path(folder), wait_at

    def setup(self, trainer: L.Trainer, pl_module: Any, stage: str) -> None:
        datamodule = trainer.datamodule
        passes = datamodule.embedding_dataloader

        def marked(*args: Any, **kwargs: Any) -> Iterator[Any]:
            for batch, item in enumerate(passes(*args, **kwargs)):
                self.say(trainer, f"eval {trainer.current_epoch} {batch}")
                yield item

        datamodule.embedding_dataloader = marked

    def say(self, trainer: L.Trainer, mark: str) -> None:
        if trainer.is_global_zero:  # one writer: the ranks' lines would interleave
            print(mark, flush=True)
        if mark != self.wait_at:
            return
        [interrupt] = [callback for callback in trainer.callbacks if isinstance(callback, InterruptCheckpoint)]
        deadline = time.monotonic() + 60
        while interrupt.requested is None and time.monotonic() < deadline:
            time.sleep(0.05)  # a killed worker ends this wait from torch's SIGCHLD handler

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        views = torch.stack(batch[0]).detach().cpu().contiguous()
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        record = [trainer.global_step, float(loss), hashlib.sha256(views.numpy().tobytes()).hexdigest()]
        with open(self.folder / "steps.jsonl", "a") as file:
            file.write(json.dumps(record) + "\n")
        self.say(trainer, f"step {trainer.global_step}")

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.say(trainer, f"val {trainer.current_epoch} {batch_idx}")


def workers_of(pid: int) -> list[int]:
    """The child processes of ``pid`` (its DataLoader workers, on the CPU)."""
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if parent == pid:
                children.append(int(entry.name))
    return children


def run(cwd: Path, args: list[str], mark: Optional[str] = None, act: Optional[Callable[[int], None]] = None,
        timeout: float = 240) -> tuple[int, str]:  # fmt: skip
    """``python -m ssl_app fit ARGS`` in its own session; ``act(pid)`` once ``mark`` is printed. Returns
    (exit status, stderr)."""
    marks = [
        f"--trainer.callbacks+={__name__}.Marks",
        f"--trainer.callbacks.folder={cwd}",
        f"--trainer.callbacks.wait_at={mark or ''}",
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "ssl_app", "fit", *args, *marks, "--ckpt_path=last"],
        cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    try:
        for line in process.stdout:
            if mark is not None and line.strip() == mark:
                act(process.pid)
                mark = None
            assert time.monotonic() < deadline, f"no {mark!r} in time"
        _, err = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert mark is None, f"the run ended before {mark!r}: {err[-3000:]}"
    return process.returncode, err


def group(signum: int) -> Callable[[int], None]:
    return lambda pid: os.killpg(pid, signum)


def kill_a_worker(pid: int) -> None:
    workers = workers_of(pid)
    assert workers, "no data worker to kill"
    os.kill(workers[0], signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize("setup", [simclr_on_a_folder, memory_bank], ids=["simclr_image_folder", "memory_bank"])
def test_group_signals_and_a_killed_worker_stop_cleanly_and_resume_bit_identical(tmp_path, setup):
    """Catches data workers that die of a signal meant for the whole run (the run then failed with a
    traceback: ``DataLoader worker … is killed by signal: Terminated``), a dead worker reported as a
    traceback, and any of these stops that a resume does not continue exactly."""
    args = [*setup(tmp_path), *SHORT]
    straight, chain = tmp_path / "straight", tmp_path / "chain"
    straight.mkdir()
    chain.mkdir()
    code, err = run(straight, args)
    assert code == 0, err[-3000:]

    folder = chain / "runs" / ("image_folder" if setup is simclr_on_a_folder else "memory_bank") / "version_0"
    legs = [  # (mark, what is done then, exit status, how the record ends)
        ("step 2", group(signal.SIGTERM), 143, "SIGTERM at epoch 0, step 2; saved "),  # a training epoch
        ("eval 0 1", group(signal.SIGTERM), 143, "SIGTERM at epoch 1, step 5; saved "),  # the evaluation pass after epoch 0
        ("val 1 0", group(signal.SIGINT), 130, "SIGINT at epoch 1, step 8; saved "),  # validation (a terminal's Ctrl-C)
        ("val 1 0", kill_a_worker, 1, "a data worker (pid "),  # the same validation again, resumed
    ]
    for mark, act, status, reason in legs:
        code, err = run(chain, args, mark, act)
        assert code == status, (mark, err[-3000:])
        assert "Traceback" not in err and "killed by signal" not in err, (mark, err[-3000:])
        record = read_record(folder)
        assert record.status == ("failed" if status == 1 else "interrupted"), (mark, record.exit_reason)
        assert record.exit_reason.startswith(reason), (mark, record.exit_reason)
    lines = [line for line in err.splitlines() if line.strip()]
    assert (
        lines[-1].startswith("error: a data worker (pid ") and "was killed by SIGKILL, most often the out-of-memory" in lines[-1]
    )
    assert "lower data.init_args.num_workers (now 2) or data.init_args.batch_size (now 8)" in lines[-1]
    assert f"the state of step 8 is saved in {Path('runs')}" in lines[-1] and "--ckpt_path=" in lines[-1], lines[-1]
    code, err = run(chain, args)
    assert code == 0, err[-3000:]

    steps = [(directory / "steps.jsonl").read_text().splitlines() for directory in (straight, chain)]
    assert len(steps[0]) == STEPS and steps[1] == steps[0]  # each step's number, loss and views
    records = [read_record(directory / folder.relative_to(chain)) for directory in (straight, chain)]
    assert records[1].status == "done" and len(records[1].resumes) == 4
    assert "metrics/knn_acc" in records[0].results and records[1].results == records[0].results


@pytest.mark.slow
def test_a_group_sigterm_stops_every_ddp_rank_and_one_process_resumes_the_epochs_unseen_samples(tmp_path):
    """2 gloo processes with 2 data workers each, all signalled (issue 42 items 1 and 4): every rank stops
    at the same step with the checkpoint (not a worker's death), and the run requeued on 1 process goes
    on with the samples of the interrupted epoch that neither rank had. Catches a rank or worker dying
    of the signal, and a resume on another world size that reads the saved place as its own (samples
    twice, others never)."""
    from tests.datamodules.test_resume_order import DDP_ARGS, DDP_SAMPLES, DDP_STOP

    index_log = ["--trainer.callbacks+=tests.datamodules.test_resume_order.IndexLog", f"--trainer.callbacks.folder={tmp_path}"]
    workers = ["--data.init_args.num_workers=2", "--data.init_args.augment_on=workers", *index_log]
    args = [*DDP_ARGS[1:], *workers]  # DDP_ARGS: fit, 2 ranks of 4 steps per epoch, 2 epochs
    code, err = run(tmp_path, args, f"step {DDP_STOP}", group(signal.SIGTERM))
    assert code == 143, err[-3000:]
    assert f"Interrupted by SIGTERM at epoch 1, step {DDP_STOP}" in err and "Traceback" not in err, err[-3000:]
    assert read_record(tmp_path / "runs" / "quickstart" / "version_0").status == "interrupted"
    logs = [[json.loads(line) for line in (tmp_path / f"rank{rank}.jsonl").read_text().splitlines()] for rank in (0, 1)]
    assert [len(log) for log in logs] == [DDP_STOP, DDP_STOP]  # both ranks stopped after the same step

    one = [arg for arg in args if not arg.startswith(("--trainer.devices", "--trainer.strategy"))]
    code, err = run(tmp_path, [*one, "--trainer.devices=1"])
    assert code == 0, err[-3000:]
    assert "from a checkpoint of 2: epoch 1 goes on with its 32 samples not yet seen" in err, err[-3000:]
    before = [index for log in logs for epoch, batch in log if epoch == 1 for index in batch]
    after = [json.loads(line) for line in (tmp_path / "rank0.jsonl").read_text().splitlines()][DDP_STOP:]
    resumed_epoch = [index for epoch, batch in after if epoch == 1 for index in batch]
    assert len(before) == 32 and sorted(before + resumed_epoch) == list(range(DDP_SAMPLES))


@pytest.mark.slow
def test_a_sweep_signalled_as_a_group_resumes_the_point_on_its_rerun_and_reports_it(tmp_path, capsys, monkeypatch):
    """``python -m ssl_app.sweep`` and everything it started (the fit, its 2 data workers) get SIGTERM, as
    a pre-empted job: the sweep says how to resume, the point's record says interrupted, and the same
    sweep command resumes it into the same folder; the report then has its row. Catches a point failed
    by its workers' death, which a re-run would start again from its last epoch checkpoint, if any, and
    the report would leave out."""
    from ssl_app.report.cli import main as report_main
    from ssl_app.sweep.command import main as sweep_main
    from tests.ssl_app.report.fakes import main_table

    fit = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=4", "--trainer.limit_val_batches=1",
           "--trainer.enable_progress_bar=false", "--data.init_args.train_size=64", "--data.init_args.val_size=32",
           "--data.init_args.test_size=32", "--data.init_args.batch_size=16", "--data.init_args.num_workers=2",
           "--data.init_args.augment_on=workers", f"--trainer.callbacks+={__name__}.Marks",
           f"--trainer.callbacks.folder={tmp_path}", "--trainer.callbacks.wait_at=step 2"]  # fmt: skip
    args = ["--config", str(REPO / "configs" / "quickstart.yaml"), "--out", str(tmp_path), "--name", "s", "--", *fit]
    sweep = subprocess.Popen(
        [sys.executable, "-m", "ssl_app.sweep", *args], cwd=tmp_path, start_new_session=True, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not any("step 2" in log.read_text().splitlines() for log in tmp_path.glob("s/*/seed0/fit.log")):
            assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()
            time.sleep(0.2)
        os.killpg(sweep.pid, signal.SIGTERM)
        out, err = sweep.communicate(timeout=240)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    assert sweep.returncode == 143 and "[sweep] stopped by SIGTERM; the same command resumes" in err, err[-3000:]
    [log] = tmp_path.glob("s/*/seed0/fit.log")
    run = log.parent
    assert read_record(run).status == "interrupted" and "Traceback" not in log.read_text(), log.read_text()[-3000:]

    # the re-run where the first ran: its fits import this module's Marks from the repository, whatever the cwd and
    # the environment the test process was left in by the tests before it
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    assert sweep_main(args) == 0, log.read_text()[-3000:]
    record = read_record(run)
    assert record.status == "done" and len(record.resumes) == 1 and record.resumes[0]["checkpoint"].startswith(str(run))
    capsys.readouterr()
    assert report_main([str(tmp_path / "s")]) == 0
    rows = [line for line in main_table(capsys.readouterr().out).splitlines() if line.startswith("| InfoNCE")]
    assert len(rows) == 1, rows
