"""The drawing process: ``python -m ssl_app.drawing.worker``, started by ``callbacks.figure_process``.

It reads jobs from its standard input and writes what it drew to its standard output, each a pickle:
a job is ``(job_id, drawings)`` (``ssl_app.drawing.figures.draw``'s input), an answer ``(job_id,
[(tag, Rendered)], seconds, error)`` with ``error`` the text of an exception (``None`` when every figure
was drawn). It imports NumPy and matplotlib only, and ends when its input ends: when the training
process closes it, or dies. The stop signals stay blocked as its parent started it
(``ssl_app.workers.stop_signals_blocked``): a signal to the whole process group stops the training
process, which then collects the figures still being drawn and closes this one.
"""

from __future__ import annotations

import os
import pickle
import sys
import time
import traceback


def serve(jobs, answers) -> None:
    """Answer every job of the binary stream ``jobs`` on the binary stream ``answers`` until ``jobs`` ends."""
    from ssl_app.drawing.figures import PlanePathFigure, draw

    draw([("warm-up", PlanePathFigure(((0, 1.0, 0.5),), "warm-up"))])  # fonts and the Agg renderer, before the first job
    while True:
        try:
            job_id, drawings = pickle.load(jobs)
        except EOFError:
            return
        start = time.perf_counter()
        try:
            rendered, error = draw(drawings), None
        except Exception:  # noqa: BLE001 - the training process draws this job itself and shows the error
            rendered, error = [], traceback.format_exc()
        pickle.dump((job_id, rendered, time.perf_counter() - start, error), answers)
        answers.flush()


def main() -> None:
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print goes to stderr, not into the answers
    serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    main()
