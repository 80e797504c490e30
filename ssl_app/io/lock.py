"""One writer per run folder: an exclusive ``flock`` on a small file inside it.

Two processes writing into one run folder (two sweeps started into one ``--out``, a second
``fit --ckpt_path last`` while the first still runs, two starts racing for ``version_3``) would
interleave checkpoints and event files and make one run out of two. A process that writes into a
run folder holds :class:`RunLock` for as long as it writes; the kernel drops the lock when the
process ends, however it ends (a ``kill -9`` included), so a lock never outlives its holder and a
``running`` record whose folder is not locked was left by a process that is gone.

The lock file also says who holds it (pid, host, start time) for the message of the process that
is refused. ``flock`` is advisory and per open file: it is shared with processes forked from the
holder, and works on local filesystems and NFSv4 (where Linux maps it to a byte-range lock).
Where ``fcntl`` does not exist (Windows) locking is a no-op.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

#: The lock of a process writing a run (fit, validate, test, a probe).
RUN_LOCK = ".lock"
#: The lock of a sweep that owns a run folder while it runs its stages there.
SWEEP_LOCK = ".sweep.lock"
#: The lock of a process downloading a data set into its root folder.
DOWNLOAD_LOCK = ".ssl_app-download.lock"


class RunLock:
    """An exclusive, non-blocking claim on ``folder`` (the file ``folder/name``)."""

    def __init__(self, folder: str | os.PathLike[str], name: str = RUN_LOCK) -> None:
        self.path = Path(folder) / name
        self._descriptor: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._descriptor is not None

    def acquire(self, wait: bool = False) -> bool:
        """Take the lock if no other process (or other ``RunLock``) holds it; create the folder if needed.
        ``wait``: block until the holder lets go instead of returning False."""
        if self._descriptor is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is not None:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(descriptor)
                return False
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
        self._descriptor = descriptor
        return True

    def release(self) -> None:
        """Give the lock back (closing the file releases it)."""
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None

    def holder(self, patience: float = 1.0) -> str:
        """Who holds (or last held) the lock, as written in the lock file. A holder writes its name
        just after taking the lock, so an empty file is read again for up to ``patience`` seconds."""
        deadline = time.monotonic() + patience
        while True:
            try:
                text = self.path.read_text(encoding="utf-8").strip()
            except OSError:
                return "another process"
            if text or time.monotonic() >= deadline:
                return text or "another process"
            time.sleep(0.02)

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def is_locked(folder: str | os.PathLike[str], name: str = RUN_LOCK) -> bool:
    """Whether a live process holds ``folder``'s lock (False where locking is unavailable)."""
    path = Path(folder) / name
    if fcntl is None or not path.is_file():
        return False
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(descriptor)  # also releases the probe's own lock, if it got one
    return False


@contextlib.contextmanager
def one_at_a_time(folder: str | os.PathLike[str], name: str, doing: str) -> Iterator[None]:
    """Hold ``folder/name`` for the block, waiting (with one line on stderr naming the holder and
    ``doing``) while another process holds it: for work that many processes may start at once
    (a sweep's jobs, an array's tasks) but one must do, such as downloading a data set into a
    shared folder. A folder where no lock file can be made (read-only) is used without one."""
    lock = RunLock(folder, name)
    try:
        got = lock.acquire()
    except OSError:  # read-only data folder: nothing will be written there either
        yield
        return
    try:
        if not got:
            print(f"waiting for {lock.holder()} ({doing} in {folder})", file=sys.stderr, flush=True)
            lock.acquire(wait=True)
        yield
    finally:
        lock.release()
