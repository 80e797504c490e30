"""AtomicCheckpointIO: the order of the durable save (write, flush, fsync, rename, fsync the folder)."""

from __future__ import annotations

import io
import os
import stat

import torch

from ssl_app.checkpointing import AtomicCheckpointIO


class RecordingFile:
    """Wraps the temporary file ``os.fdopen`` opens, recording writes and flushes."""

    def __init__(self, file, calls: list[str]) -> None:
        self._file, self._calls = file, calls

    def write(self, data):
        if not self._calls or self._calls[-1] != "write":  # one entry per run of writes
            self._calls.append("write")
        return self._file.write(data)

    def flush(self):
        self._calls.append("flush")
        return self._file.flush()

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.__exit__(*exc)


def test_save_writes_flushes_and_fsyncs_the_temporary_file_before_the_rename_then_fsyncs_the_folder(tmp_path, monkeypatch):
    """Catches each way the save stops being durable: the flush dropped (Python's buffer never
    reaches the OS before the fsync; torch.save happens to flush at its end, so the test's save
    does not), the file's fsync dropped or moved after ``os.replace`` (a
    crash can leave the new name pointing at unwritten blocks), or the folder's fsync dropped
    (the rename itself can be lost)."""
    calls: list[str] = []
    real_fdopen, real_fsync, real_replace, real_save = os.fdopen, os.fsync, os.replace, torch.save

    def save(obj, file):  # torch.save, but without its own final flush: the save must flush itself
        buffer = io.BytesIO()
        real_save(obj, buffer)
        file.write(buffer.getvalue())

    def fdopen(fd, *args, **kwargs):
        return RecordingFile(real_fdopen(fd, *args, **kwargs), calls)

    def fsync(fd):
        calls.append("fsync folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else f"fsync file {os.fstat(fd).st_ino}")
        real_fsync(fd)

    def replace(source, target):
        calls.append(f"replace {os.stat(source).st_ino}")
        real_replace(source, target)

    monkeypatch.setattr(os, "fdopen", fdopen)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(torch, "save", save)
    target = tmp_path / "checkpoints" / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"weights": torch.arange(5)}, target)
    monkeypatch.undo()
    inode = os.stat(target).st_ino  # the temporary file, renamed: the one fsynced and replaced
    assert calls == ["write", "flush", f"fsync file {inode}", f"replace {inode}", "fsync folder"]
    assert torch.equal(torch.load(target, weights_only=True)["weights"], torch.arange(5))


def test_a_non_finite_state_is_never_written_and_the_previous_checkpoint_stays(tmp_path):
    """Catches the "last good state" holding ``running_var = inf`` (written by the epoch checkpoint of a
    run whose forward pass had overflowed while its loss was still finite)."""
    import pytest

    from ssl_app.errors import NonFiniteError

    target = tmp_path / "last.ckpt"
    good = {"state_dict": {"bn.running_var": torch.ones(3)}, "epoch": 0, "global_step": 2}
    AtomicCheckpointIO().save_checkpoint(good, target)
    bad_states = {
        "buffer": {"state_dict": {"bn.running_var": torch.tensor([1.0, float("inf"), 1.0])}},
        "parameter": {"state_dict": {"w": torch.tensor([float("nan")])}},
        "optimizer": {
            "state_dict": {"w": torch.ones(1)},
            "optimizer_states": [{"state": {0: {"momentum_buffer": torch.tensor([float("inf")])}}}],
        },
        "prior NaN": {"state_dict": {"loss.log_prior": torch.tensor([0.0, float("nan")])}},
    }
    names = {"buffer": "bn.running_var", "parameter": "'w'", "optimizer": "momentum_buffer", "prior NaN": "log_prior"}
    for case, state in bad_states.items():
        with pytest.raises(NonFiniteError, match=names[case]) as error:
            AtomicCheckpointIO().save_checkpoint({**state, "epoch": 1, "global_step": 4}, target)
        assert not error.value.state_is_good
        assert torch.equal(torch.load(target, weights_only=True)["state_dict"]["bn.running_var"], torch.ones(3)), case
    # PaCo's log prior is -inf for a class without training images: a legitimate value
    AtomicCheckpointIO().save_checkpoint({"state_dict": {"loss.log_prior": torch.tensor([0.0, float("-inf")])}}, target)
    assert torch.load(target, weights_only=True)["state_dict"]["loss.log_prior"][1] == float("-inf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def _fit_only_trainer(tmp_path, callback, **overrides):
    from ssl_app.checkpointing import FitOnlyCheckpointState
    from tests.helpers import tiny_trainer

    return tiny_trainer(tmp_path, callbacks=[callback, FitOnlyCheckpointState()], enable_checkpointing=True, **overrides)


def _dirpath_warnings(action, *args, **kwargs) -> list[str]:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        action(*args, **kwargs)
    return [str(w.message) for w in caught if "dirpath has changed" in str(w.message)]


def test_validate_and_test_leave_the_checkpoint_s_model_checkpoint_state_unread_and_a_fit_reads_it(tmp_path):
    """Catches ModelCheckpoint's "The dirpath has changed" back in an evaluation (its folder is the
    evaluation's, so the checkpoint's best-k state never matches it), and a resumed fit no longer
    restoring that state (it still warns when its folder is another)."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from tests.callbacks.helpers import tiny_model
    from tests.helpers import tiny_data

    data = tiny_data()
    _fit_only_trainer(tmp_path, ModelCheckpoint(dirpath=tmp_path / "run", save_last=True), max_steps=2).fit(tiny_model(), data)
    last = str(tmp_path / "run" / "last.ckpt")
    for stage in ("validate", "test"):
        evaluation = ModelCheckpoint(dirpath=tmp_path / "evaluation")
        trainer = _fit_only_trainer(tmp_path, evaluation, limit_val_batches=1, limit_test_batches=1)
        assert _dirpath_warnings(getattr(trainer, stage), tiny_model(), data, ckpt_path=last, weights_only=True) == []
        assert evaluation.best_model_path == "" and not (tmp_path / "evaluation").exists()
    resumed = _fit_only_trainer(tmp_path, ModelCheckpoint(dirpath=tmp_path / "moved"), max_steps=3)
    assert _dirpath_warnings(resumed.fit, tiny_model(), data, ckpt_path=last, weights_only=True)
