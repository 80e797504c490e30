"""One writer per run folder: the lock refuses a second holder, names the first, dies with its process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ssl_app.io.lock import SWEEP_LOCK, RunLock, is_locked

REPO = Path(__file__).resolve().parents[3]


def test_a_second_holder_is_refused_and_told_who_holds_it(tmp_path):
    first, second = RunLock(tmp_path), RunLock(tmp_path)
    assert first.acquire() and is_locked(tmp_path)
    assert not second.acquire()  # another open file in the same process counts as another writer
    assert second.holder().startswith(f"pid {os.getpid()} on ")
    first.release()
    assert not is_locked(tmp_path) and second.acquire()
    second.release()


def test_the_run_lock_and_the_sweep_lock_are_separate(tmp_path):
    """A sweep holds its run folder while the fit it launched holds the run lock: both must succeed."""
    with RunLock(tmp_path, SWEEP_LOCK) as sweep, RunLock(tmp_path) as fit:
        assert sweep.acquire() and fit.acquire()


def test_the_lock_dies_with_its_process_however_it_dies(tmp_path):
    """Catches a lock file that outlives a killed holder (every later run of that folder refused)."""
    code = (
        f"import sys, time; sys.path.insert(0, {str(REPO)!r}); from ssl_app.io.lock import RunLock; "
        f"assert RunLock({str(tmp_path)!r}).acquire(); print('held', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    assert is_locked(tmp_path)
    child.send_signal(signal.SIGKILL)
    child.wait()
    deadline = time.monotonic() + 5
    while is_locked(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not is_locked(tmp_path)


def test_a_holder_caught_between_taking_the_lock_and_writing_its_name_is_still_named(tmp_path):
    """Catches the waiting message saying "another process" (seen in CI) when it reads the lock file in
    the moment after the holder took the lock and before it wrote its pid there."""
    first = RunLock(tmp_path)
    assert first.acquire()
    written = first.path.read_text(encoding="utf-8")
    first.path.write_text("", encoding="utf-8")  # the holder has the lock but has not yet written its name
    writer = threading.Timer(0.2, lambda: first.path.write_text(written, encoding="utf-8"))
    writer.start()
    try:
        assert RunLock(tmp_path).holder() == written.strip()
    finally:
        writer.join()
        first.release()
