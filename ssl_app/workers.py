"""How DataLoader workers start: they leave the stop signals to the main process, and never inherit CUDA.

Every DataLoader of the application (the datamodules', the evaluation and embedding passes', ``embed``'s)
starts its workers through :func:`worker_context` (``loader_options`` gives the keyword).

- **Stop signals.** A scheduler stops a job by signalling every process of it: SLURM's ``scancel``,
  pre-emption and ``--signal`` warning, ``timeout`` and systemd signal the whole process group, data
  workers included. A worker dying of that signal ended the run as failed (``DataLoader worker … is
  killed by signal: Terminated``). A worker started here has SIGINT, SIGTERM, SIGUSR1 and SIGUSR2
  (``ssl_app.signals.STOP_SIGNALS``) blocked from its first instruction (the parent blocks them in
  the starting thread while it starts the worker, and a child inherits the mask): the main process
  handles them, stops after its step, saves, and shuts its workers down itself. Only the main process
  can still end a worker with one of them (DataLoader's shutdown of a worker that does not stop,
  multiprocessing's exit): a thread of the worker waits for them (``sigwaitinfo``) and exits when the
  sender is the main process.
- **CUDA.** A process forked from one that initialised CUDA holds CUDA state it cannot use, and a
  worker freeing an inherited pinned or device tensor (the parent's garbage, collected in the child)
  aborts with ``CUDA error: initialization error`` ("terminate called"). On a machine with a GPU the
  workers therefore start from a fork server: one clean process, started once with torch and the
  datamodules imported (``FORKSERVER_PRELOAD``), which forks each worker; the dataset and the collate
  function are pickled to it. Without a GPU they are forks of the main process, the fastest start.
  No code that runs in a worker touches CUDA (tested: tests/datamodules/test_no_cuda_in_workers.py).
"""

from __future__ import annotations

import multiprocessing.context as mp
import os
import re
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Optional

from ssl_app.errors import causes
from ssl_app.signals import STOP_SIGNALS

#: Modules the fork server imports once, so that the workers it forks start without importing them.
FORKSERVER_PRELOAD = ("torch", "torchvision", "datamodules")


@contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """The stop signals blocked in this thread inside the block: a process started in it inherits the
    mask (a fork, and the program a fork executes), so it never runs with their default action."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def leave_stop_signals_to(main_pid: int) -> None:
    """In a worker: keep the stop signals blocked, and exit when the main process (``main_pid``) sends one.

    Blocked signals are not delivered, so a signal to the whole group leaves the worker running until
    the main process shuts it down; a thread takes each one (``sigwaitinfo``) and reads its sender.
    """
    if not hasattr(signal, "sigwaitinfo"):  # macOS: no way to read the sender; the signals act as they did before
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # already, when started through this module
    threading.Thread(target=_exit_when_sent_by, args=(main_pid,), name="stop-signals", daemon=True).start()


def _exit_when_sent_by(main_pid: int) -> None:
    while True:
        if signal.sigwaitinfo(STOP_SIGNALS).si_pid == main_pid:
            # Status 0: the main process asked for it. (torch's SIGCHLD check reports a worker that exits
            # otherwise as failed, even one multiprocessing ends at the main process's exit.)
            os._exit(0)


class _Worker:
    """What a worker process of this module does first (mixed into multiprocessing's process classes)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.main_pid = os.getpid()  # who may stop it (the pid a fork server's child cannot read as its parent)

    def start(self) -> None:
        with stop_signals_blocked():
            super().start()  # type: ignore[misc]

    def run(self) -> None:
        leave_stop_signals_to(self.main_pid)
        super().run()  # type: ignore[misc]


class ForkWorker(_Worker, mp.ForkProcess):
    """A worker forked from the main process."""


class ForkServerWorker(_Worker, mp.ForkServerProcess):
    """A worker forked from the fork server."""


class _ForkContext(mp.ForkContext):
    Process = ForkWorker  # type: ignore[assignment]


class _ForkServerContext(mp.ForkServerContext):
    Process = ForkServerWorker  # type: ignore[assignment]


def worker_context() -> mp.BaseContext:
    """The multiprocessing context DataLoader workers start from (module docstring): from the fork
    server on a machine with a GPU, a fork of this process otherwise."""
    import torch

    if torch.cuda.is_available():
        start_fork_server()
        return _ForkServerContext()
    return _ForkContext()


def loader_options(num_workers: int) -> dict[str, Any]:
    """The DataLoader keyword that starts its ``num_workers`` workers through :func:`worker_context`
    (none in the main process: DataLoader refuses a context without workers)."""
    return {"multiprocessing_context": worker_context()} if num_workers > 0 else {}


def start_fork_server() -> None:
    """Start multiprocessing's fork server (and its resource tracker) unless they run, with the stop
    signals blocked: they are processes of the job too, and the fork server's children inherit its mask."""
    from multiprocessing import forkserver, resource_tracker

    forkserver.set_forkserver_preload(list(FORKSERVER_PRELOAD))
    with stop_signals_blocked():
        resource_tracker.ensure_running()  # it unblocks SIGINT and SIGTERM after starting its process: block again
    with stop_signals_blocked():
        forkserver.ensure_running()


# --- a worker that died ------------------------------------------------------------------------------
#: torch's words for a worker that died: ``DataLoader worker (pid 81) is killed by signal: Killed.``,
#: ``… (pid 81) exited unexpectedly with exit code 1. …``, ``… (pid(s) 81, 82) exited unexpectedly``.
_DIED = re.compile(
    r"DataLoader worker \(pid(?:\(s\))? (?P<pids>[\d, ]+)\) "
    r"(?:is killed by signal: (?P<signal>[^.]+)\.|exited unexpectedly(?: with exit code (?P<code>-?\d+))?)"
)
#: Signals whose likely cause is a lack of memory: the out-of-memory killer's SIGKILL, and SIGBUS when
#: the shared memory workers hand their batches over in is full.
_MEMORY = (signal.SIGKILL, signal.SIGBUS)


@dataclass(frozen=True)
class WorkerDeath:
    """A data worker that died: its pid(s), and the signal that killed it or the status it exited with."""

    pids: str
    signum: Optional[int] = None
    code: Optional[int] = None

    @property
    def fate(self) -> str:
        """``was killed by SIGKILL``, ``exited with status 1`` or ``exited unexpectedly``."""
        if self.signum is not None:
            return f"was killed by {signal.Signals(self.signum).name}"
        return f"exited with status {self.code}" if self.code is not None else "exited unexpectedly"

    @property
    def cause(self) -> str:
        """The likely cause, in words."""
        if self.signum == signal.SIGKILL:
            return "most often the out-of-memory killer (the kernel's log says so: dmesg)"
        if self.signum == signal.SIGBUS:
            return "most often full shared memory, which workers hand their batches over in (/dev/shm; a container's --shm-size)"
        if self.signum is not None:
            return "a crash in native code (an image decoder or another library)"
        return "most often a lack of memory, or a library that ended the process"

    @property
    def for_memory(self) -> bool:
        """Whether memory is the likely cause (a lack of it, or an unknown exit)."""
        return self.signum in _MEMORY or self.signum is None


def worker_death(error: BaseException) -> Optional[WorkerDeath]:
    """The data worker whose death ``error`` (or what caused it) reports, or None."""
    deaths = []
    for cause in causes(error):
        found = _DIED.search(str(cause)) if isinstance(cause, RuntimeError) else None
        if found is not None:
            signum = _SIGNALS_BY_TEXT.get(found["signal"].strip()) if found["signal"] else None
            deaths.append(WorkerDeath(found["pids"].strip(), signum, int(found["code"]) if found["code"] else None))
    # torch's SIGCHLD check says how the worker died; a wait for data that times out, that it died, raised from it
    return next((death for death in deaths if death.signum is not None or death.code is not None), deaths[0] if deaths else None)


#: ``strsignal`` text -> signal number: torch names the signal in the words of ``strsignal``.
_SIGNALS_BY_TEXT = {signal.strsignal(s): int(s) for s in signal.Signals if signal.strsignal(s)}
