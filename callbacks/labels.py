"""Metrics that need class labels, on data without any: skipped at setup, each saying so in one line."""

from __future__ import annotations

from typing import Any, Optional

from lightning.pytorch.utilities import rank_zero_info


def missing_labels(trainer: Any) -> Optional[str]:
    """Why the trainer's data has no labels, for the skip line; ``None`` when it has some (or cannot say).

    Reads the datamodule's ``labelled`` (``ContrastiveDataModule.labelled``: some training
    image is labelled; ``ImageFolderDataModule``: its ``labels`` setting).
    """
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is None or getattr(datamodule, "labelled", True):
        return None
    source = getattr(datamodule, "label_setting", None) or getattr(datamodule, "label_source", None)  # as configured
    return f"{type(datamodule).__name__} has no labels" + (f" (labels: {source})" if source else "")


def say_skipped(who: str, what: str, reason: str) -> None:
    """The one line (global rank 0) that says a metric is not computed this run, and why."""
    rank_zero_info(f"{who}: {what} skipped: {reason}")
