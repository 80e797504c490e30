"""How data workers start (``ssl_app.workers``): the stop signals are left to the main process, and a
worker that died is named from torch's own words for it (real workers, real deaths)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from ssl_app.checkpointing import InterruptCheckpoint
from ssl_app.cli.endings import FAILURE, command_ending, dead_worker
from ssl_app.runs.recorder import RunRecorder
from ssl_app.signals import STOP_SIGNALS
from ssl_app.workers import WorkerDeath, loader_options, worker_death


class Numbers(Dataset):
    """0 … 63; item ``fate_at`` ends its worker: ``"kill"`` (SIGKILL), ``"segv"`` or ``"exit"`` (status 3)."""

    def __init__(self, fate: str = "", fate_at: int = -1) -> None:
        self.fate, self.fate_at = fate, fate_at

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> int:
        if index == self.fate_at:
            if self.fate == "exit":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL if self.fate == "kill" else signal.SIGSEGV)
        return index


def alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.parametrize(
    "gpu_machine", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["fork", "fork_server"]
)  # the fork server is a process that imports the application: slow
def test_a_worker_leaves_the_stop_signals_to_the_main_process_which_alone_can_end_it(gpu_machine, monkeypatch):
    """Catches a worker that dies of a signal sent to every process of the job (the run then failed:
    ``DataLoader worker … is killed by signal: Terminated``), and one the main process cannot end (its
    exit would wait for it for ever). ``fork_server``: the start a machine with a GPU takes."""
    with monkeypatch.context() as patched:
        patched.setattr(torch.cuda, "is_available", lambda: gpu_machine)
        loader = DataLoader(Numbers(), batch_size=4, num_workers=2, **loader_options(2))
    batches = iter(loader)
    first = next(batches)
    workers = [worker.pid for worker in batches._workers]
    for signum in STOP_SIGNALS:  # from another process, as SLURM, timeout or a terminal sends them to the group
        subprocess.run(["kill", f"-{signal.Signals(signum).name[3:]}", *map(str, workers)], check=True)
    time.sleep(0.5)
    assert all(alive(pid) for pid in workers)
    assert torch.cat([first, *batches]).tolist() == list(range(64))  # they went on serving
    batches = iter(loader)
    next(batches)
    worker = batches._workers[0]
    os.kill(worker.pid, signal.SIGTERM)  # from the main process: as DataLoader ends a worker that does not stop
    worker.join(timeout=30)
    assert worker.exitcode == 0  # asked to: torch's check does not report it as failed
    del batches


@pytest.mark.parametrize("fate,signum,code", [("kill", signal.SIGKILL, None), ("segv", signal.SIGSEGV, None), ("exit", None, 3)])
def test_a_dead_worker_is_named_from_what_torch_says(fate, signum, code):
    """torch's own messages for a worker killed by a signal or exiting with a status, read back: catches a
    message format this no longer recognises (the run would end with a traceback again)."""
    loader = DataLoader(Numbers(fate, fate_at=5), batch_size=4, num_workers=2, **loader_options(2))
    with pytest.raises(RuntimeError) as raised:
        list(loader)
    death, text = worker_death(raised.value), str(raised.value)
    assert death is not None and death.pids.isdigit(), text
    if "exited unexpectedly" in text and death.signum is None and death.code is None:
        # torch's wait for data saw the worker gone before its SIGCHLD check said how (a loaded machine's race):
        # that message names no fate, and the line says only that the worker died
        return
    assert death.signum == signum and death.code == code, text


def test_the_line_of_a_dead_worker_says_its_fate_the_cause_what_to_change_and_where_the_state_is():
    config = {"data": {"class_path": "datamodules.SyntheticDataModule", "init_args": {"num_workers": 4, "batch_size": 64}}}
    recorder = RunRecorder()
    recorder.config = config
    interrupt = InterruptCheckpoint()
    interrupt.saved_path, interrupt.step = "runs/x/checkpoints/last.ckpt", 60
    error = RuntimeError("DataLoader worker (pid 8094) is killed by signal: Killed. ")
    ending = command_ending(error, ["fit", "--config", "c.yaml"], interrupt, recorder)
    assert ending.status == FAILURE and ending.every_rank and "\n" not in ending.message
    assert ending.message.startswith("error: a data worker (pid 8094) was killed by SIGKILL, most often the out-of-memory killer")
    assert "lower data.init_args.num_workers (now 4) or data.init_args.batch_size (now 64), or give the job more memory" in (
        ending.message
    )
    assert ending.message.endswith(
        "the state of step 60 is saved in runs/x/checkpoints/last.ckpt (resume with: "
        f"{Path(sys.executable).name} -m ssl_app fit --config c.yaml --ckpt_path=runs/x/checkpoints/last.ckpt)"
    )
    bus = dead_worker(WorkerDeath("7", signal.SIGBUS), config)
    assert "shared memory" in bus and "lower data.init_args.num_workers (now 4)" in bus
    crash = dead_worker(WorkerDeath("7", signal.SIGSEGV), config)
    assert "native code" in crash and "data.init_args.num_workers=0 reads the data in the main process" in crash
