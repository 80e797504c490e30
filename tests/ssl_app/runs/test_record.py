"""The run record: written atomically, continued on resume, read tolerantly, believed only when alive."""

from __future__ import annotations

import json
import os
import stat

import pytest

from ssl_app.io.atomic import write_json
from ssl_app.io.lock import RunLock
from ssl_app.runs.identity import config_hash, identity
from ssl_app.runs.record import (
    DONE,
    INTERRUPTED,
    RecordError,
    effective_status,
    finish_record,
    read_record,
    start_record,
)

CONFIG = {
    "seed_everything": 0,
    "ckpt_path": None,
    "trainer": {"max_epochs": 2, "logger": {"init_args": {"save_dir": "runs", "version": None}}},
    "model": {"class_path": "ssl_app.methods.SimCLR", "init_args": {"backbone": "small_cnn", "optim": {"lr": 0.06}}},
    "data": {"class_path": "datamodules.SyntheticDataModule", "init_args": {"num_classes": 10, "num_workers": 2}},
}


def test_a_record_round_trips_and_names_what_ran(tmp_path):
    record = start_record(tmp_path, "fit", CONFIG)
    read = read_record(tmp_path)
    assert read == record and read.status == "running" and read.kind == "fit"
    assert read.config_hash == config_hash(CONFIG) and read.identity == identity(CONFIG)
    assert read.pid == os.getpid() and read.host and read.started and read.version
    finish_record(tmp_path, record, DONE, "finished", epoch=2, step=8, results={"metrics/knn_acc": 0.5, "x": float("nan")})
    read = read_record(tmp_path)
    assert (read.status, read.exit_reason, read.epoch, read.step) == (DONE, "finished", 2, 8) and read.ended
    assert read.results == {"metrics/knn_acc": 0.5, "x": None}  # JSON has no NaN: not measured


def test_a_resume_continues_the_record_and_a_new_start_does_not(tmp_path):
    first = start_record(tmp_path, "fit", CONFIG)
    finish_record(tmp_path, first, INTERRUPTED, "SIGTERM at epoch 0, step 3")
    changed = {"model.init_args.optim.lr": {"checkpoint": 0.06, "now": 0.01}}
    resumed = start_record(tmp_path, "fit", CONFIG, checkpoint="last.ckpt", resume_changes=changed)
    assert resumed.run_id == first.run_id and resumed.started == first.started
    assert resumed.resumes == [{"at": resumed.resumes[0]["at"], "checkpoint": "last.ckpt", "changed": changed}]
    assert resumed.status == "running" and resumed.exit_reason is None
    fresh = start_record(tmp_path, "fit", CONFIG)
    assert fresh.run_id != first.run_id and fresh.resumes == []


def test_the_hash_ignores_where_a_run_writes_and_what_it_resumed(tmp_path):
    moved = {
        **CONFIG,
        "ckpt_path": "x.ckpt",
        "trainer": {**CONFIG["trainer"], "logger": {"init_args": {"save_dir": "elsewhere"}}},
    }
    assert config_hash(moved) == config_hash(CONFIG)
    other_lr = {**CONFIG, "model": {**CONFIG["model"], "init_args": {"backbone": "small_cnn", "optim": {"lr": 0.1}}}}
    assert config_hash(other_lr) != config_hash(CONFIG)
    # identity: method, backbone, loss and data, but not how data is loaded
    assert "data.init_args.num_classes" in identity(CONFIG) and "data.init_args.num_workers" not in identity(CONFIG)
    assert identity(other_lr) == identity(CONFIG)


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"kind": "fit"}', ""])
def test_an_unreadable_record_is_one_record_error_naming_the_file(tmp_path, content):
    (tmp_path / "run.json").write_text(content)
    with pytest.raises(RecordError, match="run.json"):
        read_record(tmp_path)


def test_a_newer_versions_record_with_unknown_keys_still_reads(tmp_path):
    start_record(tmp_path, "fit", CONFIG)
    data = json.loads((tmp_path / "run.json").read_text())
    data["from_the_future"] = 1
    (tmp_path / "run.json").write_text(json.dumps(data))
    assert read_record(tmp_path).status == "running"


def test_running_is_believed_only_while_its_writer_holds_the_folder(tmp_path):
    """Catches a killed run (``kill -9``: no final status) shown as still running forever."""
    record = start_record(tmp_path, "fit", CONFIG)
    assert effective_status(tmp_path, record) == "vanished"
    with RunLock(tmp_path) as lock:
        assert lock.acquire()
        assert effective_status(tmp_path, record) == "running"
    assert effective_status(tmp_path, None) == "unknown"


def test_records_are_written_whole_a_failed_write_leaves_the_old_one(tmp_path, monkeypatch):
    """Catches a record half-written by a crash (a reader would see broken JSON: status unknown)."""
    record = start_record(tmp_path, "fit", CONFIG)
    before = (tmp_path / "run.json").read_bytes()

    def crash(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        finish_record(tmp_path, record, DONE, "finished")
    assert (tmp_path / "run.json").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temporary file left behind


def test_write_json_fsyncs_the_file_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    """Catches a rename made durable before the data it names (after a power cut: an empty record)."""
    calls = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        calls.append("fsync folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(source, target):
        calls.append("replace")
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_json(tmp_path / "x.json", {"a": 1})
    assert calls == ["fsync file", "replace", "fsync folder"]
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": 1}


def test_a_checkpoint_of_another_run_never_continues_this_folders_record(tmp_path):
    """Catches two runs' histories merged into one record when a checkpoint is resumed into a folder
    another run wrote (``--trainer.logger.init_args.version`` of another run)."""
    first = start_record(tmp_path, "fit", CONFIG)
    other = start_record(tmp_path, "fit", CONFIG, checkpoint="elsewhere/last.ckpt", run_id="another-run")
    assert other.run_id == "another-run" and other.resumes == [] and other.run_id != first.run_id
