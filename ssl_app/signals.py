"""The signals that stop a run, and their handlers for the span of a block (in the main thread, where Python allows them)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: What stops a job: SIGINT (a terminal's Ctrl-C), SIGTERM (SLURM's scancel and pre-emption, Kubernetes,
#: torchrun, ``timeout``), SIGUSR1 and SIGUSR2 (SLURM's warning before a time limit or a pre-emption,
#: ``--signal=USR1@N``; the sweep's SLURM launcher asks submitit for USR2). Each stops a run after its
#: step with a checkpoint, never by the signal's default action.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
#: The stop signals other than SIGINT and SIGTERM (whose handlers Lightning and the CLI install).
WARNING_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)


@contextmanager
def handling(handler: Callable[[int, Any], None], signums: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """``handler`` for ``signums`` inside the block, the previous handlers back after it; a no-op outside
    the main thread (Python delivers signals to the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum in signums}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
