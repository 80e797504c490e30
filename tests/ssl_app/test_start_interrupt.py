"""Ctrl-C while ``python -m ssl_app`` (or the ``ssl-app`` script) is still importing (before the CLI handles signals) is one line,
exit status 130 and nothing written, not a KeyboardInterrupt traceback through the imports.

To hit the import deterministically, the child's ``sitecustomize`` (test-only, first on its
``PYTHONPATH``) holds the first import of torch: it writes a marker file and sleeps until the
test's SIGINT interrupts it, inside the application's own import of torch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.ssl_app.cli.test_cli import QUICKSTART, REPO

HOLD_TORCH = """
import sys, time
from pathlib import Path

class HoldTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            Path({marker!r}).write_text("importing torch")
            time.sleep(120)  # interrupted by the test's SIGINT
        return None

sys.meta_path.insert(0, HoldTorch())
"""


def default_sigint() -> None:
    """In the child: SIGINT as in a terminal, even when this test runs with SIGINT ignored (a background
    job without job control), where Python would install no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


#: How a user starts the application: the module, and the console script pip installs beside Python.
ENTRY_POINTS = {
    "python -m ssl_app": [sys.executable, "-m", "ssl_app"],
    "ssl-app": [os.path.join(os.path.dirname(sys.executable), "ssl-app")],
}


@pytest.mark.slow
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_ctrl_c_while_importing_is_one_line_status_130_and_writes_nothing(tmp_path, entry):
    hook, work = tmp_path / "hook", tmp_path / "work"
    hook.mkdir()
    work.mkdir()
    marker = tmp_path / "importing"
    (hook / "sitecustomize.py").write_text(HOLD_TORCH.format(marker=str(marker)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), str(REPO)])}
    command = [*ENTRY_POINTS[entry], "fit", "--config", QUICKSTART, "--trainer.max_epochs=1"]
    child = subprocess.Popen(
        command, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the child never started importing torch"
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 130, err[-3000:]
    assert err == "Interrupted by SIGINT while starting; nothing written\n" and out == ""
    assert list(work.iterdir()) == []
