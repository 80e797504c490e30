"""What Lightning's loop reads from the device around a training step that logs nothing.

``test_mask_cache.py`` checks the step itself (contrast, loss, backward, store update); this checks
the rest of the loop's iteration too (the batch's transfer and device views, the hooks, the
logger connector, the progress bar), where a metric logged to the progress bar is read with
``.item()`` after every step (Lightning converts the bar's values each batch): on a GPU each read
waits for the step, so the host can no longer queue the next one while the device computes.
"""

from __future__ import annotations

import lightning as L

from tests.helpers import HostSyncRecorder, tiny_data, tiny_trainer

STEPS = 5


class LoopSyncs(L.Callback):
    """The host reads of each loop iteration: from one ``on_train_batch_start`` to the next."""

    def __init__(self) -> None:
        self.iterations: list[list[str]] = []
        self._recorder: HostSyncRecorder | None = None

    def _close(self) -> None:
        if self._recorder is not None:
            self._recorder.__exit__(None, None, None)
            self.iterations.append(self._recorder.syncs)
            self._recorder = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._close()
        self._recorder = HostSyncRecorder()
        self._recorder.__enter__()

    def on_train_end(self, trainer, pl_module) -> None:
        self._close()


def test_a_step_that_logs_nothing_reads_nothing_in_the_whole_loop_iteration(method_case):
    """Catches a per-step value in the progress bar (``self.log(..., prog_bar=True, on_step=True)``:
    SimCLR's loss was one, two reads a step, one with the bar off), and any other read from the
    device between steps that are not logged (every registered method, views made on the device)."""
    model = method_case.build()
    spy = LoopSyncs()
    trainer = tiny_trainer(max_steps=STEPS, log_every_n_steps=50, enable_progress_bar=True, callbacks=[spy])
    trainer.fit(model, datamodule=tiny_data(augment_on="device"))
    assert len(spy.iterations) == STEPS
    # The first iteration builds what the run reuses; the last one may log (Lightning logs when it stops).
    for step, reads in enumerate(spy.iterations[1:-1], start=1):
        assert reads == [], f"step {step}: {reads}"
