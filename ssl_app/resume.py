"""Which checkpoint ``--ckpt_path`` means, and whether it may be resumed with this config.

- ``--ckpt_path last`` looks inside one run family: ``<save_dir>/<name>/version_*`` of the
  configured logger (or only its ``version`` when one is set), or, for a linear probe, the
  probes of the encoder's run. It takes the newest ``last.ckpt`` *of the same experiment*
  (``ssl_app.runs.identity``: method, backbone, loss, data); newer runs of other experiments
  under the same logger name are passed over and named, so a run never continues on another
  run's data or loss.
- An explicit ``fit --ckpt_path`` whose saved config differs from this one in those keys is
  refused in one line naming each differing key (``--resume_anyway`` resumes it anyway).
- Every other differing option (learning rate, epochs, callbacks) is this command's; the resume
  line lists each with both values. ``ssl_app.checkpointing.ConfigWinsOnResume`` makes the
  optimiser's hyper-parameters follow.
- The final checkpoint of a finished run, with limits that would train nothing more, is no resume
  at all (``finished_run``): the CLI says so and prints the run's summary from its record.

A checkpoint carries the config of the run that wrote it (``RunRecorder``'s state); one from an
older version falls back on its run folder's record or ``config.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from ssl_app.checkpointing import LAST_CHECKPOINT
from ssl_app.errors import ConfigError
from ssl_app.runs.identity import WHERE_KEYS, describe_differences, differences, flatten, identity
from ssl_app.runs.layout import CONFIG_FILE, run_folder_of_checkpoint
from ssl_app.runs.record import DONE, RecordError, RunRecord, read_record
from ssl_app.trust import check_class_paths, parsed_again

#: ``Callback.state_key`` of ``ssl_app.runs.recorder.RunRecorder`` in a checkpoint's ``callbacks``.
RECORDER_STATE_KEY = "RunRecorder"


def checkpoint_config(checkpoint: dict[str, Any], path: str | Path) -> Optional[dict[str, Any]]:
    """The resolved config of the run that wrote ``checkpoint`` (None: not known)."""
    state = (checkpoint.get("callbacks") or {}).get(RECORDER_STATE_KEY)
    if isinstance(state, dict) and isinstance(state.get("config"), dict) and state["config"]:
        return state["config"]  # its class paths were checked when it was loaded (load_checkpoint)
    saved = folder_config(run_folder_of_checkpoint(path))
    check_class_paths(parsed_again(saved), f"{path}: the config of its run folder")
    return saved


def checkpoint_data(checkpoint: dict[str, Any], path: str | Path) -> Optional[dict[str, Any]]:
    """The run's description of its data (the datamodule's ``describe()``): saved with ``checkpoint``,
    else its run folder's record (None: neither has it)."""
    state = (checkpoint.get("callbacks") or {}).get(RECORDER_STATE_KEY)
    data = state.get("data") if isinstance(state, dict) else None
    if isinstance(data, dict):
        return data
    folder = run_folder_of_checkpoint(path)
    try:
        record = read_record(folder) if folder is not None else None
    except RecordError:
        record = None
    return record.data if record is not None and isinstance(record.data, dict) else None


def checkpoint_run_id(checkpoint: dict[str, Any]) -> Optional[str]:
    state = (checkpoint.get("callbacks") or {}).get(RECORDER_STATE_KEY)
    run_id = state.get("run_id") if isinstance(state, dict) else None
    return run_id if isinstance(run_id, str) and run_id else None


def folder_config(folder: Optional[Path]) -> Optional[dict[str, Any]]:
    """A run folder's config: its record's, else its ``config.yaml`` (None: neither is readable)."""
    if folder is None:
        return None
    try:
        record = read_record(folder)
    except RecordError:
        record = None
    if record is not None and record.config:
        return record.config
    path = folder / CONFIG_FILE
    if path.is_file():
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            return None
        return loaded if isinstance(loaded, dict) else None
    return None


def identity_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """The identity keys (method, backbone, loss, data) whose values differ."""
    return differences(identity(saved), identity(current))


def option_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """Every other differing key (what this command changes on resume), ``WHERE_KEYS`` left out."""
    keys = set(identity(saved)) | set(identity(current))

    def kept(flat: dict[str, Any]) -> dict[str, Any]:
        return {
            key: value
            for key, value in flat.items()
            if key not in keys and not any(key == w or key.startswith(w + ".") for w in WHERE_KEYS)
        }

    return differences(kept(flatten(saved)), kept(flatten(current)))


def check_same_experiment(path: str, saved: Optional[dict[str, Any]], current: dict[str, Any], anyway: bool) -> list[str]:
    """Raise a ConfigError when ``saved`` (the checkpoint's config) is another experiment, unless
    ``anyway``; return notes for the console (what could not be checked, what was overridden)."""
    if saved is None:
        return [f"--ckpt_path {path}: it does not record the config it was trained with (an older version wrote it), so "
                "it is not checked against this one"]  # fmt: skip
    found = identity_differences(saved, current)
    if not found:
        return []
    text = describe_differences(found, "checkpoint", "now")
    if anyway:
        return [f"--ckpt_path {path}: resuming another experiment's checkpoint (--resume_anyway): {text}"]
    raise ConfigError(
        f"--ckpt_path {path} was trained with other settings: {text}; it is not resumed with this config "
        "(pass the config it was trained with, start a new run without --ckpt_path, or --resume_anyway=true to resume it anyway)"
    )


def describe_changes(saved: Optional[dict[str, Any]], current: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{key: {"checkpoint": old, "now": new}}`` for the options this command changes on resume."""
    if saved is None:
        return {}
    return {key: {"checkpoint": old, "now": new} for key, old, new in option_differences(saved, current)}


@dataclass
class LastCheckpoint:
    """The outcome of ``--ckpt_path last``: the checkpoint (None: none of this experiment) and the
    newer runs passed over because they are other experiments (folder, differences)."""

    path: Optional[Path]
    passed_over: list[tuple[Path, str]] = field(default_factory=list)


def find_last(root: Path, pattern: str, current: Optional[dict[str, Any]]) -> LastCheckpoint:
    """The newest ``last.ckpt`` under ``root/<pattern>/checkpoints/`` whose run is this experiment.

    Runs are ordered by their ``last.ckpt``'s modification time, newest first. ``current``
    ``None`` skips the identity check (``validate``/``test``, whose model comes from the checkpoint).
    A run folder whose config cannot be read is passed over too (it cannot be checked).
    """
    candidates = [path for path in root.glob(f"{pattern}/checkpoints/*.ckpt") if LAST_CHECKPOINT.fullmatch(path.name)]
    candidates.sort(key=lambda path: path.stat().st_mtime, reverse=True)
    result = LastCheckpoint(path=None)
    for path in candidates:
        folder = path.parent.parent
        if current is None:
            result.path = path
            return result
        saved = folder_config(folder)
        if saved is None:
            result.passed_over.append((folder, "its config is not recorded"))
            continue
        found = identity_differences(saved, current)
        if found:
            result.passed_over.append((folder, describe_differences(found, "there", "now", limit=3)))
            continue
        result.path = path
        return result
    return result


@dataclass
class Finished:
    """A checkpoint that is the final state of a finished run: resuming it would train nothing.

    ``folder``: the run's folder; ``record``: its record (status ``done``); ``why``: which limit
    it reached (``max_epochs=10 reached``) or that its limits are as it finished with them.
    """

    folder: Path
    record: RunRecord
    why: str


def finished_run(checkpoint: dict[str, Any], path: str | Path, trainer: dict[str, Any]) -> Optional[Finished]:
    """Whether resuming ``checkpoint`` with the trainer options ``trainer`` would train nothing.

    It would when the checkpoint's run folder records the run ``done`` at the checkpoint's step (the
    checkpoint is its final state) and either a limit of this command is reached by the checkpoint
    (Lightning's rule: ``global_step >= max_steps``, epochs processed ``>= max_epochs``; ``max_epochs``
    unset means 1000 without ``max_steps``, -1 no limit) or the limits are those the run finished
    with (a callback or ``max_time`` ended it: the same command again must not start it over).
    Raising ``max_epochs`` or ``max_steps`` continues the run as a normal resume.
    """
    folder = run_folder_of_checkpoint(path)
    try:
        record = read_record(folder) if folder is not None else None
    except RecordError:
        return None
    if record is None or record.status != DONE or record.kind not in ("fit", "linear"):
        return None
    step = checkpoint.get("global_step")
    run_id = checkpoint_run_id(checkpoint)
    if step is None or step != record.step or (run_id is not None and run_id != record.run_id):
        return None
    max_epochs, max_steps = _limits(trainer)
    epochs = max(_epochs_processed(checkpoint) or 0, record.epoch or 0)
    if max_steps != -1 and step >= max_steps:
        return Finished(folder, record, f"max_steps={max_steps} reached")
    if max_epochs != -1 and epochs >= max_epochs:
        return Finished(folder, record, f"max_epochs={max_epochs} reached")
    if _limits(_nested_trainer(record.config)) == (max_epochs, max_steps):
        return Finished(folder, record, "its max_epochs and max_steps are unchanged")
    return None


def _nested_trainer(config: dict[str, Any]) -> dict[str, Any]:
    trainer = config.get("trainer") if isinstance(config, dict) else None
    return trainer if isinstance(trainer, dict) else {}


def _limits(trainer: Any) -> tuple[int, int]:
    """``(max_epochs, max_steps)`` as Lightning's fit loop applies them (-1: no limit)."""
    trainer = trainer if isinstance(trainer, dict) else {}
    max_steps = trainer.get("max_steps")
    max_steps = -1 if max_steps is None else int(max_steps)
    max_epochs = trainer.get("max_epochs")
    if max_epochs is None:
        max_epochs = 1000 if max_steps == -1 and trainer.get("max_time") is None else -1
    return int(max_epochs), max_steps


def _epochs_processed(checkpoint: dict[str, Any]) -> Optional[int]:
    """Epochs the checkpoint's fit loop processed, as Lightning's own stopping test counts them (a
    checkpoint written after the last validation counts one fewer: the record's epoch covers it)."""
    try:
        return int(checkpoint["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"])
    except (KeyError, TypeError, ValueError):
        return None
