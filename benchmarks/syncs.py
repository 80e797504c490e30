"""Every host–device synchronisation in the training steps of a fit, listed by the line of this
application that caused it (``benchmarks/gpu_check.py``, part ``syncs``).

PyTorch reports each synchronising CUDA call as a warning when ``torch.cuda.set_sync_debug_mode("warn")``
is on (``.item()``, ``.cpu()``, a boolean mask's indexing, ``nonzero``, a non-blocking copy into pageable
memory...). :class:`SyncListing` turns that mode on from ``on_train_batch_start`` to
``on_train_batch_end`` (``training_step``, backward, the optimiser step, the hooks in between) and
records each such warning with the stack at the moment it was raised: the innermost frame in the
application's own code (``ssl_app``, ``datamodules``, ``callbacks``) is the line to look at, and
whether ``training_step`` is on the stack says if the sync is inside it. On the CPU the mode does
nothing and no warning comes; the recording is the same, so it is tested there with a warning raised
by hand (``tests/benchmarks/test_on_device.py``).
"""

from __future__ import annotations

import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

ROOT = Path(__file__).resolve().parents[1]
OWN_CODE = tuple(str(ROOT / name) + "/" for name in ("ssl_app", "datamodules", "callbacks"))
SYNC_MESSAGE = "synchronizing CUDA operation"  # torch's text: "called a synchronizing CUDA operation"


class SyncListing(Callback):
    """Records the synchronising calls of each training batch (see the module docstring).

    ``sites()`` gives one row per (line of ours, line that synchronised): how many times, in how
    many of the recorded steps, and whether inside ``training_step``.
    """

    def __init__(self, own_code: Sequence[str] = OWN_CODE, message: str = SYNC_MESSAGE) -> None:
        self.own_code, self.message = tuple(own_code), message
        self.steps = 0
        self._rows: dict[tuple[str, str], dict[str, Any]] = {}
        self._catcher: Any = None
        self._mode = 0
        self._step = -1

    # The recording, usable without a Trainer: start() ... stop() around any code.
    def start(self) -> None:
        self._catcher = warnings.catch_warnings()
        self._catcher.__enter__()
        warnings.simplefilter("always")  # every occurrence, not once per line
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if self.message in str(message):
                self._record(traceback.extract_stack()[:-1])
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        if torch.cuda.is_available():
            self._mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
        self._step += 1
        self.steps += 1

    def stop(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.set_sync_debug_mode(self._mode)
        if self._catcher is not None:
            self._catcher.__exit__(None, None, None)
            self._catcher = None

    def _record(self, stack: traceback.StackSummary) -> None:
        frames = [frame for frame in stack if Path(frame.filename).name not in ("warnings.py", "_py_warnings.py")]
        ours = [frame for frame in frames if frame.filename.startswith(self.own_code)]
        where = ours[-1] if ours else frames[-1]
        what = frames[-1]
        key = (_describe(where), _describe(what))
        new = {"ours": key[0], "synchronised_at": key[1], "code": where.line, "count": 0, "steps": set()}
        new["in_training_step"] = False
        row = self._rows.setdefault(key, new)
        row["count"] += 1
        row["steps"].add(self._step)
        row["in_training_step"] |= any(frame.name == "training_step" for frame in frames)

    def sites(self) -> list[dict[str, Any]]:
        rows = [row | {"steps": len(row["steps"])} for row in self._rows.values()]
        return sorted(rows, key=lambda row: (not row["in_training_step"], -row["count"]))

    # As a Lightning callback: around each training batch.
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.start()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.stop()


def _describe(frame: traceback.FrameSummary) -> str:
    path = Path(frame.filename)
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else Path(*path.parts[-3:])
    return f"{shown}:{frame.lineno} in {frame.name}"
