"""Signal handlers for the span of a block, in the main thread (where Python allows them)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: What SLURM, Kubernetes, torchrun and a terminal send to stop a job.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


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
