"""Run folders: the record every run writes, the lock that keeps one writer per folder, the layout.

The CLI (``fit``, ``validate``, ``test``, the linear probe), the sweep and the report meet here and
nowhere else: :mod:`ssl_app.runs.record` (``run.json``: status, times, exit reason, config hash,
data, version, parent run), :mod:`ssl_app.io.lock`, :mod:`ssl_app.runs.layout` (where
evaluations and sweep points live), :mod:`ssl_app.runs.identity` (which config keys make a run
the same run) and :mod:`ssl_app.io.atomic` (files replaced whole or not at all).
"""

from ssl_app.io.lock import RunLock, is_locked
from ssl_app.runs.layout import (
    EVALUATIONS_DIR,
    SWEEP_FILE,
    SweepPoint,
    evaluation_folders,
    next_evaluation_name,
    read_sweep_point,
    run_folder_of_checkpoint,
    write_sweep_point,
)
from ssl_app.runs.record import (
    DIVERGED,
    DONE,
    FAILED,
    FINAL_STATUSES,
    INTERRUPTED,
    RECORD_FILE,
    RUNNING,
    UNKNOWN,
    VANISHED,
    RecordError,
    RunRecord,
    effective_status,
    finish_record,
    read_record,
    start_record,
)

__all__ = [
    "DIVERGED",
    "DONE",
    "EVALUATIONS_DIR",
    "FAILED",
    "FINAL_STATUSES",
    "INTERRUPTED",
    "RECORD_FILE",
    "RUNNING",
    "SWEEP_FILE",
    "UNKNOWN",
    "VANISHED",
    "RecordError",
    "RunLock",
    "RunRecord",
    "SweepPoint",
    "effective_status",
    "evaluation_folders",
    "finish_record",
    "is_locked",
    "next_evaluation_name",
    "read_record",
    "read_sweep_point",
    "run_folder_of_checkpoint",
    "start_record",
    "write_sweep_point",
]
