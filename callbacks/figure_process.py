"""The evaluation figures drawn beside training, in a process of their own (``ssl_app.drawing.worker``).

Drawing the three figures of an evaluation with matplotlib takes 0.3–0.7 s of one CPU core, all of it
in Python, which an evaluation on a GPU otherwise waits for (most of ``EmbeddingMetrics``' time there:
benchmarks/README.md, "Evaluation"). A thread would not help: it would hold the interpreter's lock
while the training loop, which releases it in every tensor operation, waits up to the switch interval
to get it back after each one. A process of its own draws on another core.

:class:`FigureDrawer` takes an evaluation's figures as plain data (``ssl_app.drawing.figures``: a few
kilobytes) with the function that writes them (at the evaluation's step and time), sends them to the
process and returns; :meth:`FigureDrawer.collect` writes the figures that are ready (called between
epochs, never waiting), and :meth:`FigureDrawer.finish` waits for the rest and ends the process (at the
end of ``fit``, also after an interruption or a failure). Figures the process cannot draw (it could not
start, ended, failed on a figure or does not answer in ``finish``'s time) are drawn in this process,
with one warning: no figure is lost, and an error in drawing one shows as it would here. At most
:data:`MAX_PENDING` jobs are in the process's hands: a process that stopped answering makes the next
job wait for it (``FINISH_TIMEOUT_S``) and then draws here, never blocks ``fit`` on a full pipe.

The process starts at the start of training (:meth:`FigureDrawer.start`, ``EmbeddingMetrics.on_train_start``:
matplotlib's imports and fonts load beside the first epoch) with the stop signals blocked
(``ssl_app.workers``): a signal to the whole process group stops the training process, which collects
the figures and closes the process's input, upon which it ends; it ends as well when the training
process dies (its input ends with it), so no run leaves it behind.
"""

from __future__ import annotations

import os
import pickle
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Optional

from lightning.pytorch.utilities import rank_zero_warn

import ssl_app
from ssl_app.drawing.figures import Drawing, Rendered, draw
from ssl_app.workers import stop_signals_blocked

#: ``write(images)``: what to do with a job's figures once drawn (``[(tag, Rendered)]``).
Writer = Callable[[list[tuple[str, Rendered]]], None]
#: Seconds ``finish`` waits for the process's figures by default before drawing the rest here.
FINISH_TIMEOUT_S = 60.0
#: Jobs in the process's hands at most (a few kilobytes each: far below a pipe's 64 KiB).
MAX_PENDING = 4


class FigureDrawer:
    """Draws jobs of figures in a process of its own (``process=True``) or at once (``False``).

    ``drawn`` holds ``(seconds, where)`` of every job drawn so far, ``where`` ``"process"`` or ``"here"``
    (for benchmarks: the drawing time an evaluation no longer waits for).
    """

    def __init__(self, process: bool = True) -> None:
        self.process = bool(process)
        self.drawn: list[tuple[float, str]] = []
        self._worker: Optional[subprocess.Popen] = None
        self._answers: queue.Queue = queue.Queue()
        self._pending: dict[int, tuple[list[Drawing], Writer]] = {}
        self._next_job = 0
        self._stopped_because: Optional[str] = None  # the process failed: drawn here from then on

    def __getstate__(self) -> dict[str, Any]:
        """A copy (a pickled callback: ``ddp_spawn``, a deep copy) starts without the process or its jobs."""
        return {"process": self.process, "drawn": list(self.drawn)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["process"])
        self.drawn = state["drawn"]

    @property
    def pending(self) -> int:
        """Jobs sent to the process and not yet written."""
        return len(self._pending)

    def submit(self, drawings: list[Drawing], write: Writer, here: bool = False) -> None:
        """Draw ``drawings`` and hand them to ``write``: in the process (returns at once; ``collect`` and
        ``finish`` write them) or, with ``here`` or without a process, now."""
        if not drawings:
            return
        if here or not self.process or self._stopped_because is not None:
            self._draw_here(drawings, write)
            return
        self.collect()
        if len(self._pending) >= MAX_PENDING:  # the process fell behind or stopped answering
            self.collect(FINISH_TIMEOUT_S)
            if len(self._pending) >= MAX_PENDING:
                self._stop(f"the drawing process did not answer within {FINISH_TIMEOUT_S:g} s")
        if self._stopped_because is not None:  # collecting found the process ended: no new one
            self._draw_here(drawings, write)
            return
        job = self._next_job
        self._next_job += 1
        self._pending[job] = (drawings, write)
        try:
            worker = self._started()
            pickle.dump((job, drawings), worker.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            worker.stdin.flush()
        except (OSError, ValueError, pickle.PicklingError) as error:  # could not start, or it ended
            self._stop(f"the drawing process could not take the figures ({type(error).__name__}: {error})")

    def collect(self, timeout: float = 0.0) -> None:
        """Write the jobs the process has drawn, waiting up to ``timeout`` seconds for the rest."""
        deadline = time.monotonic() + timeout
        while self._pending:
            remaining = deadline - time.monotonic()
            try:
                answer = self._answers.get(timeout=remaining) if remaining > 0 else self._answers.get_nowait()
            except queue.Empty:
                return
            if answer is None:  # the process's output ended
                self._stop("the drawing process ended")
                return
            job, rendered, seconds, error = answer
            drawings, write = self._pending.pop(job)
            if error is not None:
                rank_zero_warn(f"EmbeddingMetrics: the drawing process failed on a figure, drawn here instead:\n{error}")
                self._draw_here(drawings, write)
                continue
            self.drawn.append((seconds, "process"))
            write(rendered)

    def finish(self, timeout: float = FINISH_TIMEOUT_S) -> None:
        """Write every job (waiting up to ``timeout`` s for the process, then drawing the rest here) and
        end the process; a later ``submit`` starts a new one (unless the process failed before: then
        this drawer draws here)."""
        try:
            self.collect(timeout)
            if self._pending:
                self._stop(f"the drawing process did not finish its figures within {timeout:g} s")
        finally:
            self._close()

    def start(self) -> None:
        """Start the process now (it loads matplotlib and its fonts, about a second of its own CPU), so
        that the first evaluation's figures do not wait for that; nothing without a process."""
        if self.process and self._stopped_because is None:
            try:
                self._started()
            except OSError as error:
                self._stop(f"the drawing process could not start ({error})")

    # --- the process ----------------------------------------------------------------------
    def _started(self) -> subprocess.Popen:
        if self._worker is None:
            root = str(Path(ssl_app.__file__).resolve().parent.parent)  # where this ssl_app is imported from
            path = os.environ.get("PYTHONPATH")
            env = {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}
            with stop_signals_blocked():  # the process inherits the mask (ssl_app.workers)
                self._worker = subprocess.Popen(
                    [sys.executable, "-m", "ssl_app.drawing.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
                )
            self._answers = queue.Queue()
            reader = threading.Thread(target=_read, args=(self._worker.stdout, self._answers), daemon=True)
            reader.name = "figure-answers"
            reader.start()
        return self._worker

    def _stop(self, reason: str) -> None:
        """Draw every pending job here, in order, and every later one too (one warning, naming ``reason``)."""
        if self._stopped_because is None:
            rank_zero_warn(f"EmbeddingMetrics: {reason}; the figures are drawn in the training process from now on")
        self._stopped_because = reason
        self._close(kill=True)
        pending, self._pending = self._pending, {}
        for job in sorted(pending):
            self._draw_here(*pending[job])

    def _close(self, kill: bool = False) -> None:
        worker, self._worker = self._worker, None
        if worker is None:
            return
        try:
            worker.stdin.close()  # the process ends when its input does
        except OSError:
            pass
        if kill:
            worker.kill()
        try:
            worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()

    def _draw_here(self, drawings: list[Drawing], write: Writer) -> None:
        start = time.perf_counter()
        rendered = draw(drawings)
        self.drawn.append((time.perf_counter() - start, "here"))
        write(rendered)


def _read(answers: IO[bytes], into: queue.Queue) -> None:
    """Put every answer of the process into ``into``, then ``None`` when its output ends."""
    try:
        while True:
            into.put(pickle.load(answers))
    except Exception:  # noqa: BLE001 - EOF, or a process killed mid-answer: the end either way
        into.put(None)
