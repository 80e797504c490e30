"""The RunRecorder callback around a real ``Trainer.fit``: the record names the data, the results and
the collapse the metric callback saw, and every checkpoint carries the run's id and config."""

from __future__ import annotations

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger

from callbacks import CollapseCriteria, EmbeddingMetrics
from ssl_app.io.lock import is_locked
from ssl_app.losses import InfoNCE
from ssl_app.resume import RECORDER_STATE_KEY, checkpoint_config, checkpoint_data, checkpoint_run_id
from ssl_app.runs.record import DONE, read_record
from ssl_app.runs.recorder import RunRecorder
from tests.callbacks.helpers import tiny_model, tiny_trainer
from tests.callbacks.test_collapse import ChanceSimCLR
from tests.helpers import tiny_data

CONFIG = {"model": {"class_path": "ssl_app.methods.SimCLR"}, "data": {"class_path": "datamodules.SyntheticDataModule"}}


def test_the_record_keeps_the_data_the_results_and_the_collapse_and_checkpoints_carry_the_run(tmp_path):
    """Catches a record that misses what the run's callbacks found (the report marks a collapsed run
    from it) and checkpoints that cannot be traced back to their run (resume checks read them)."""
    off = dict(uniformity_below=None, alignment_below=None, similarity_above=None, uniformity_drop=None)
    metrics = EmbeddingMetrics(log_histograms=False, collapse=CollapseCriteria(concentrating_evaluations=None, **off))
    recorder = RunRecorder()
    logger = TensorBoardLogger(str(tmp_path), name="r")
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    trainer = tiny_trainer(
        [metrics, recorder, checkpoint], logger=logger, max_epochs=3, log_every_n_steps=1, enable_checkpointing=True
    )
    folder = recorder.begin(trainer, "fit", CONFIG, next_name=lambda root: "version_1")
    assert folder == tmp_path / "r" / "version_0" and read_record(folder).status == "running"
    trainer.fit(tiny_model(ChanceSimCLR, loss=InfoNCE(0.5)), tiny_data())
    recorder.end(trainer, DONE, "finished")

    record = read_record(folder)
    assert record.status == DONE and (record.epoch, record.step) == (3, 6)
    assert record.collapse["mode"] == "loss_at_chance" and record.collapse["since_epoch"] == 1
    assert record.data["class_path"] == "datamodules.synthetic.SyntheticDataModule"
    assert record.data["split_sizes"]["train"] == 48  # tests/helpers.py: tiny_data
    assert record.results["metrics/collapsed"] == 1.0
    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)
    assert saved["callbacks"][RECORDER_STATE_KEY] == {"run_id": record.run_id, "config": CONFIG, "data": record.data}
    assert checkpoint_data(saved, tmp_path / "x.ckpt") == record.data and record.data["split_sizes"]
    assert checkpoint_run_id(saved) == record.run_id and checkpoint_config(saved, tmp_path / "x.ckpt") == CONFIG
    assert recorder.lock is None and not is_locked(folder)  # released at the end
