"""One normalisation per encoder: evaluations feed it the crop size, mean and std it was trained with.

An image folder config may leave ``augmentation.crop_size``/``mean``/``std`` null, to be measured
from the data. Measured again on another folder, ``validate``/``test``/the linear probe would
normalise the same encoder's inputs differently from its training run (and from ``embed``, which
always used the checkpoint's). So a null value is taken from the checkpoint (its run's config,
else what the run measured: ``input_of``), a value set in the config wins, and only
a value neither gives is measured. One line says which each came from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ssl_app.runs.spec import RunSpec

KEYS = ("crop_size", "mean", "std")


def trained_input(checkpoint: dict[str, Any], path: str | Path) -> Optional[dict[str, Any]]:
    """The crop size, mean and std the checkpoint's run fed its encoder (None: the checkpoint does not say)."""
    from ssl_app.resume import checkpoint_config, checkpoint_data

    return input_of(checkpoint_config(checkpoint, path), checkpoint_data(checkpoint, path))


def input_of(config: Optional[dict[str, Any]], data: Optional[dict[str, Any]] = None) -> Optional[dict[str, Any]]:
    """What the run fed the backbone at evaluation: ``crop_size``, ``eval_crop_fraction``, ``mean``, ``std``
    (the augmentation of the data its encoder was fed, ``RunSpec.augmentation``; a value the config left null for the data to
    decide comes from what the run read from its data, ``data["read_from_data"]``; None when
    neither says)."""
    spec = RunSpec.from_config(config)
    augmentation = spec.augmentation
    if augmentation is None:
        return None
    measured = (data or {}).get("read_from_data") or {}
    resolved = {
        key: augmentation.get(key) if augmentation.get(key) is not None else measured.get(key)
        for key in ("crop_size", "mean", "std")
    }
    if resolved["mean"] is None or resolved["std"] is None:
        return None
    return {
        "data": spec.fed_data,
        "crop_size": resolved["crop_size"],
        "eval_crop_fraction": augmentation.get("eval_crop_fraction", 1.0),
        "mean": [float(value) for value in resolved["mean"]],
        "std": [float(value) for value in resolved["std"]],
    }


def settle_input(datamodule: Any, trained: Optional[dict[str, Any]], command: str) -> Optional[str]:
    """Fill the datamodule's null crop size / mean / std from ``trained``; the line saying where each came from.

    ``datamodule`` is a contrastive datamodule or a wrapper of one (``LinearEvalDataModule.data``);
    None when it has no augmentation to speak of.
    """
    inner = getattr(datamodule, "data", None)
    target = inner if _has_augmentation(inner) else datamodule
    if not _has_augmentation(target):
        return None
    unset = tuple(getattr(target, "augmentation_unset", ()))  # only an image folder leaves some null
    known = {key: trained[key] for key in KEYS if trained and trained.get(key) is not None}
    taken = {key: known[key] for key in unset if key in known}
    if taken:
        target.take_from_checkpoint(taken)
    configured = getattr(target, "augmentation_as_configured", None) or target.augmentation
    given = {key: getattr(configured, key) for key in KEYS if key not in unset}
    parts = []
    if taken:
        parts.append(f"{shown(taken)} from the checkpoint")
    if given:
        differing = {key: known[key] for key in given if key in known and not _same(given[key], known[key])}
        note = f" (the encoder was trained with {shown(differing)})" if differing else " (as in training)" if known else ""
        parts.append(f"{shown(given)} set by you{note}")
    measured = [key for key in unset if key not in taken]
    if measured:
        parts.append(f"{' and '.join(measured)} measured from this data (the checkpoint does not record them)")
    return f"{command}: the encoder's input: " + "; ".join(parts)


def _has_augmentation(datamodule: Any) -> bool:
    """Without reading the property (an image folder's would measure its data)."""
    return hasattr(datamodule, "__dict__") and ("augmentation" in vars(datamodule) or hasattr(type(datamodule), "augmentation"))


def shown(values: dict[str, Any]) -> str:
    return ", ".join(f"{key} {value if key == 'crop_size' else _rounded(value)}" for key, value in values.items())


def _rounded(values: Any) -> list[float]:
    return [round(float(v), 4) for v in values]


def _same(a: Any, b: Any) -> bool:
    if any(isinstance(value, (int, float)) for value in (a, b)):
        return a == b
    return _rounded(a) == _rounded(b)
