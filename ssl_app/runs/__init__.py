"""The records wing: run folders, what they record, and the spec every reader of a run reads.

The CLI (``fit``, ``validate``, ``test``, the linear probe), the sweep and the report meet here and
nowhere else: :mod:`ssl_app.runs.record` (``run.json``: status, times, exit reason, config hash,
data, version, parent run), :mod:`ssl_app.runs.layout` (where evaluations and sweep points live),
:mod:`ssl_app.runs.spec` (a run's typed description, the one reader of its config's key paths),
:mod:`ssl_app.runs.identity` (which config keys make a run the same run), and what a run shows
(headline columns, the TensorBoard panel, tag descriptions, the console summary). The plumbing it
shares with training (files replaced whole, the folder lock) is :mod:`ssl_app.io`, a floor below.
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
