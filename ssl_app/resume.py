"""Which checkpoint ``--ckpt_path`` means, loading it, and whether it may be resumed with this config.

- :func:`load_checkpoint` reads a checkpoint on the CPU with ``weights_only`` and checks it before
  anything is built: a file, a Lightning checkpoint of a version this one can read, class paths
  ``ssl_app.trust`` allows; :func:`check_state_dict` names the first tensor it and the model disagree on.

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

import torch
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


def load_checkpoint(path: str, option: str = "--ckpt_path") -> dict[str, Any]:
    """Load ``path`` on the CPU (memory-mapped), raising a ConfigError that says what is wrong."""
    file = Path(path)
    if not file.exists():
        raise ConfigError(f"{option}: no such file: {path}")
    if file.is_dir():
        raise ConfigError(f"{option}: {path} is a folder, not a checkpoint file")
    if not file.is_file():  # a named pipe or a device: torch.load would wait on it for ever
        raise ConfigError(f"{option}: {path} is not a regular file (a pipe, socket or device), not a checkpoint file")
    try:
        try:
            checkpoint = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as error:
            if "mmap" not in str(error) and "zip" not in str(error):
                raise
            checkpoint = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - whatever torch.load raises, the file is not a checkpoint
        raise ConfigError(f"{option}: {path} is not a readable checkpoint ({_load_failure(error)})") from None
    if not isinstance((checkpoint if isinstance(checkpoint, dict) else {}).get("state_dict"), dict):
        raise ConfigError(f"{option}: {path} is not a Lightning checkpoint (it has no state_dict)")
    _check_lightning_version(checkpoint, path, option)
    check_saved_class_paths(checkpoint, path, option)
    return checkpoint


def check_saved_class_paths(checkpoint: dict[str, Any], path: str, option: str) -> None:
    """Refuse a checkpoint whose saved run config (the parts a command builds again: the model, the
    data) or hyper-parameters name a class that is not known already (``ssl_app.trust``): every
    command that reads a checkpoint reads it here, before any of those names can reach jsonargparse
    or ``importlib``. A class named elsewhere in it (a callback) is only ever compared as text."""

    state = (checkpoint.get("callbacks") or {}).get(RECORDER_STATE_KEY)
    saved = parsed_again(state.get("config") if isinstance(state, dict) else None)
    check_class_paths(saved, f"{option}: {path}: its saved config")
    check_class_paths(checkpoint.get("hyper_parameters"), f"{option}: {path}: its saved hyper-parameters", bare=True)


def _check_lightning_version(checkpoint: dict[str, Any], path: str, option: str) -> None:
    """A checkpoint from an older Lightning must upgrade the way Lightning will upgrade it when the run
    loads it; one that cannot is refused here, in one line, instead of a traceback mid-start."""
    from lightning.pytorch.utilities.migration.utils import migrate_checkpoint

    written_by = checkpoint.get("pytorch-lightning_version")
    if written_by is None:
        raise ConfigError(f"{option}: {path} is not a Lightning checkpoint (it names no Lightning version)")
    try:
        migrate_checkpoint(checkpoint)  # in place: what is read from it afterwards is the upgraded form
    except Exception as error:  # noqa: BLE001 - whatever the migration raises, the file cannot be resumed
        raise ConfigError(
            f"{option}: {path} was written by Lightning {written_by} and cannot be upgraded to this Lightning "
            f"({type(error).__name__}: {error})"
        ) from None


def is_weights_only(checkpoint: dict[str, Any]) -> bool:
    """Whether ``checkpoint`` holds only weights (``save_weights_only``): no optimiser or loop state to resume."""
    return "optimizer_states" not in checkpoint or "loops" not in checkpoint


def _load_failure(error: BaseException) -> str:
    text = str(error)
    marker = "WeightsUnpickler error:"
    if marker in text:
        text = text.split(marker, 1)[1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else type(error).__name__)[:160]


def checkpoint_method(checkpoint: dict[str, Any]) -> str | None:
    """The class path of the method that wrote ``checkpoint`` (``None``: not recorded)."""
    hparams = checkpoint.get("hyper_parameters") or {}
    return hparams.get("_class_path") if isinstance(hparams, dict) else None


def check_state_dict(checkpoint: dict[str, Any], model: torch.nn.Module, path: str, option: str = "--ckpt_path") -> None:
    """Raise a ConfigError naming the first tensor that ``model`` and the checkpoint disagree on.

    Buffers that the model sizes from the data later (an empty memory bank) are not compared, nor
    the submodules it builds in ``setup`` (their key prefixes in ``model.state_built_in_setup``,
    e.g. a linear probe's classifier, whose width comes from the datamodule).
    """
    saved = checkpoint["state_dict"]
    upgrade = getattr(model, "upgrade_state_dict", None)
    if callable(upgrade):
        saved = upgrade(dict(saved))  # keys an older version kept elsewhere, where this model has them
    expected = model.state_dict()
    method = checkpoint_method(checkpoint) or "another model"
    built_later = tuple(getattr(model, "state_built_in_setup", ()))
    unexpected = [key for key in saved if key not in expected and not (built_later and key.startswith(built_later))]
    missing = [key for key in expected if key not in saved]
    if missing or unexpected:
        detail = []
        if missing:
            detail.append(f"missing {', '.join(missing[:3])}" + (f" and {len(missing) - 3} more" if len(missing) > 3 else ""))
        if unexpected:
            detail.append(
                f"unexpected {', '.join(unexpected[:3])}" + (f" and {len(unexpected) - 3} more" if len(unexpected) > 3 else "")
            )
        raise ConfigError(
            f"{option}: {path} does not fit {type(model).__name__} (it was written by {method}): {'; '.join(detail)}"
        )
    for key, tensor in expected.items():
        other = saved[key]
        if tuple(other.shape) != tuple(tensor.shape):
            if tensor.dim() >= 1 and tensor.shape[0] == 0:
                continue  # sized from the data in setup (memory bank)
            raise ConfigError(
                f"{option}: {path} does not fit this {type(model).__name__}: {key} has shape "
                f"{list(other.shape)} in the checkpoint but {list(tensor.shape)} in the model "
                "(check model.init_args such as proj_dim, proj_hidden_dim, backbone, queue_size)"
            )
