"""Every host–device synchronisation in the training steps of a fit, listed by the line of this
application that caused it (``benchmarks/gpu_check.py``, part ``syncs``), split into the steps that
log (every ``trainer.log_every_n_steps``: reading values for the loggers is a sync by nature) and
those that do not, where there should be none.

PyTorch reports each synchronising CUDA call as a warning when ``torch.cuda.set_sync_debug_mode("warn")``
is on (``.item()``, ``.cpu()``, a boolean mask's indexing, ``nonzero``, a copy from pageable host
memory...). :class:`SyncListing` turns that mode on for the whole of each training iteration, from one
``on_train_batch_start`` to the next (``training_step``, backward, the optimiser step, the hooks, the
logging, and the next batch's transfer and device augmentation), and records each such warning with the
stack at the moment it was raised: the innermost frame in the application's own code (``ssl_app``,
``datamodules``, ``callbacks``) is the line to look at, and whether ``training_step`` is on the stack
says if the sync is inside it. PyTorch's one-time notice that the mode "is a prototype feature" is
absorbed, not counted.

On the CPU the mode does nothing, so the listing records the host reads instead: the aten ops that
need a tensor's data (``.item()``, ``bool()``, ``float()``, boolean indexing, ``nonzero``...:
:class:`HostReads`), ``tolist``, ``cpu``, ``numpy``, and ``torch.tensor(number, device=...)``
(Lightning's ``self.log`` of a Python number): on a GPU each would wait for the device. Reads while
the DataLoader fetches a batch are left out (host data by design). The recording and the table are
the same either way.
"""

from __future__ import annotations

import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from torch.utils._python_dispatch import TorchDispatchMode

from ssl_app.io.changes import logs_this_step

ROOT = Path(__file__).resolve().parents[1]
OWN_CODE = tuple(str(ROOT / name) + "/" for name in ("ssl_app", "datamodules", "callbacks"))
SYNC_MESSAGE = "synchronizing CUDA operation"  # torch's text: "called a synchronizing CUDA operation"
# torch's notice when the mode is turned on (TORCH_WARN_ONCE in torch/csrc/cuda/Module.cpp): not a sync
PROTOTYPE_MESSAGE = "Synchronization debug mode is a prototype feature"
#: The Tensor methods that read a CPU tensor's data without an aten op (on a GPU tensor: a copy and a wait).
HOST_METHODS = ("tolist", "cpu", "numpy")
DATA_LOADING = str(Path("torch", "utils", "data")) + "/"
# Frames of the recording itself, never the line to look at: the warnings module, this file, dispatch wrappers.
MACHINERY = (
    "/warnings.py", "/_py_warnings.py", "/syncs.py", "/torch/_dynamo/eval_frame.py", "/torch/_compile.py",
    "/torch/utils/_python_dispatch.py",
)  # fmt: skip


class HostReads(TorchDispatchMode):
    """Calls ``record(stack, op)`` for each aten op that makes a GPU step wait for the device, on any
    device: ``.item()``, ``bool()``, ``float()``, ``int()`` (``_local_scalar_dense``), boolean indexing,
    ``nonzero``, ``masked_select``, ``unique``... (the list of ``tests/helpers.py``'s HostSyncRecorder)."""

    SYNCING = {
        "aten._local_scalar_dense", "aten.nonzero", "aten.nonzero_static", "aten.masked_select", "aten.is_nonzero",
        "aten.equal", "aten._unique", "aten._unique2", "aten.unique_dim", "aten.unique_consecutive", "aten.repeat_interleave",
    }  # fmt: skip
    INDEXING = {"aten.index", "aten.index_put", "aten.index_put_", "aten._index_put_impl_"}

    def __init__(self, record: Any) -> None:
        super().__init__()
        self.record = record

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        indices = args[1] if name in self.INDEXING and len(args) > 1 else ()
        if name in self.SYNCING or any(isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8) for t in indices):
            self.record(traceback.extract_stack()[:-1], name)
        return func(*args, **(kwargs or {}))


class SyncListing(Callback):
    """Records the synchronising calls of each training iteration (see the module docstring).

    ``sites()`` gives one row per (line of ours, line that synchronised): how many times, in how
    many of the recorded steps, how many of them after the first ``warm_up`` steps in steps that do
    not log (``unlogged``), and whether inside ``training_step``. ``steps``, ``logged`` and
    ``unlogged_steps`` count the recorded steps. The first steps are apart because a fit's first
    step does one-off work (the optimiser creates its state, a queue learns it is empty).
    ``host_reads``: record host reads instead of CUDA's warnings (default: where there is no CUDA).
    Put it first among the Trainer's callbacks, so that a step's window opens before the other
    callbacks' ``on_train_batch_start`` (``LearningRateMonitor`` reads the rates there on logged steps).
    """

    def __init__(
        self, own_code: Sequence[str] = OWN_CODE, message: str = SYNC_MESSAGE, warm_up: int = 1, host_reads: bool | None = None
    ) -> None:
        self.own_code, self.message, self.warm_up = tuple(own_code), message, warm_up
        self.host_reads = (not torch.cuda.is_available()) if host_reads is None else host_reads
        self.steps = 0
        self.logged: list[int] = []  # the recorded steps that log
        self._rows: dict[tuple[str, str], dict[str, Any]] = {}
        self._catcher: Any = None
        self._patched: dict[str, Any] = {}
        self._mode = 0
        self._step = -1

    @property
    def unlogged_steps(self) -> int:
        """Recorded steps after the warm-up that do not log."""
        return sum(step >= self.warm_up and step not in self.logged for step in range(self.steps))

    # The recording, usable without a Trainer: start() ... stop() around any code.
    def start(self, logged: bool = False) -> None:
        self._step += 1
        self.steps += 1
        if logged:
            self.logged.append(self._step)
        self._catcher = warnings.catch_warnings()
        self._catcher.__enter__()
        warnings.simplefilter("always")  # every occurrence, not once per line
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if self.message in str(message):
                self._record(traceback.extract_stack()[:-1])
            elif PROTOTYPE_MESSAGE not in str(message):
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        if self.host_reads:
            self._patch()
        elif torch.cuda.is_available():
            self._mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")

    def stop(self) -> None:
        if self._catcher is None:
            return
        if self._patched:
            self._unpatch()
        elif torch.cuda.is_available():
            torch.cuda.set_sync_debug_mode(self._mode)
        self._catcher.__exit__(None, None, None)
        self._catcher = None

    def _patch(self) -> None:
        """Record host reads from now on: the aten ops that need the data (:class:`HostReads`), the
        Tensor methods that read it without one on the CPU, and ``torch.tensor(number, device=...)``."""

        def watched(name: str, method: Any) -> Any:
            def read(*args: Any, **kwargs: Any) -> Any:
                if name != "torch.tensor" or kwargs.get("device") is not None:
                    self._record(traceback.extract_stack()[:-1], name)
                return method(*args, **kwargs)

            return read

        self._patched = {name: getattr(torch.Tensor, name) for name in HOST_METHODS}
        for name, method in self._patched.items():
            setattr(torch.Tensor, name, watched(f"Tensor.{name}", method))
        self._patched_tensor = torch.tensor
        torch.tensor = watched("torch.tensor", torch.tensor)
        self._reads = HostReads(self._record)
        self._reads.__enter__()

    def _unpatch(self) -> None:
        self._reads.__exit__(None, None, None)
        for name, method in self._patched.items():
            setattr(torch.Tensor, name, method)
        torch.tensor = self._patched_tensor
        self._patched = {}

    def _record(self, stack: traceback.StackSummary, what: str | None = None) -> None:
        if what is not None and any(DATA_LOADING in frame.filename for frame in stack):
            return  # a host read while the DataLoader fetches a batch: host data by design (in the workers, usually)
        frames = [frame for frame in stack if not frame.filename.endswith(MACHINERY)]
        ours = [frame for frame in frames if frame.filename.startswith(self.own_code)]
        where = ours[-1] if ours else frames[-1]
        key = (_describe(where), what or _describe(frames[-1]))
        new = {"ours": key[0], "synchronised_at": key[1], "code": where.line, "count": 0, "steps": set()}
        new |= {"unlogged": 0, "in_training_step": False}
        row = self._rows.setdefault(key, new)
        row["count"] += 1
        row["steps"].add(self._step)
        row["unlogged"] += self._step >= self.warm_up and self._step not in self.logged
        row["in_training_step"] |= any(frame.name == "training_step" for frame in frames)

    def sites(self) -> list[dict[str, Any]]:
        rows = []
        for row in self._rows.values():
            unlogged_steps = sum(step >= self.warm_up and step not in self.logged for step in row["steps"])
            rows.append(row | {"steps": len(row["steps"]), "unlogged_steps": unlogged_steps})
        return sorted(rows, key=lambda row: (-row["unlogged"], not row["in_training_step"], -row["count"]))

    # As a Lightning callback: from one training batch to the next (the epoch's last one: to its end).
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.stop()
        self.start(logged=logs_this_step(trainer))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        last = batch_idx + 1 >= trainer.num_training_batches or 0 <= trainer.max_steps <= trainer.global_step
        if last:  # what follows is the epoch's end (its hooks, validation), not this step
            self.stop()

    def on_validation_start(self, trainer, pl_module) -> None:
        self.stop()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.stop()

    def on_train_end(self, trainer, pl_module) -> None:
        self.stop()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.stop()


def summary(sites: list[dict[str, Any]], steps: int, unlogged_steps: int) -> str:
    """One line: the syncs per step outside the logged steps, and where they are."""
    unlogged = sum(row["unlogged"] for row in sites)
    where = "; ".join(f"{row['ours']} ({row['unlogged']}× in {row['unlogged_steps']})" for row in sites if row["unlogged"])
    verdict = f"{unlogged / max(unlogged_steps, 1):.1f} per step: {where}" if unlogged else "none"
    return f"syncs in the {unlogged_steps} steps that do not log (of {steps}, after the first): {verdict}"


def _describe(frame: traceback.FrameSummary) -> str:
    path = Path(frame.filename)
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else Path(*path.parts[-3:])
    return f"{shown}:{frame.lineno} in {frame.name}"
