"""Tiny data and trainers shared by every test that trains (each suite may set its own sizes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import lightning as L
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from datamodules.augment import ViewAugmentation
from datamodules.synthetic import SYNTHETIC_MEAN, SYNTHETIC_STD, SyntheticDataModule


def tiny_data(**overrides: Any) -> SyntheticDataModule:
    """Generated shapes: 3 classes of 8×8 images (crops of 8), batches of 8, no workers."""
    options = dict(
        num_classes=3, train_size=48, val_size=16, test_size=16, image_size=8, batch_size=8, num_workers=0,
        augmentation=ViewAugmentation(crop_size=8, mean=SYNTHETIC_MEAN, std=SYNTHETIC_STD),
    )  # fmt: skip
    return SyntheticDataModule(**{**options, **overrides})


def tiny_trainer(tmp_path: Optional[Path] = None, **overrides: Any) -> L.Trainer:
    """A quiet CPU Trainer without logger, checkpoints or validation (override any of them)."""
    options: dict[str, Any] = dict(
        accelerator="cpu", devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0,
    )  # fmt: skip
    if tmp_path is not None:
        options["default_root_dir"] = str(tmp_path)
    return L.Trainer(**{**options, **overrides})


def newest_probe_folder(encoder_checkpoint: Path) -> Path:
    """The folder of the newest linear probe of ``encoder_checkpoint``'s run: the CLI files a probe
    inside the run it evaluates, as ``<run>/evaluations/linear_<n>/``."""
    from ssl_app.runs.layout import evaluation_folders, run_folder_of_checkpoint

    run = run_folder_of_checkpoint(encoder_checkpoint)
    assert run is not None, f"{encoder_checkpoint} is not inside a run folder"
    probes = evaluation_folders(run, "linear")
    assert probes, f"no linear probe under {run}"
    return probes[-1]


def probe_curves(folder: Path) -> dict[str, list[float]]:
    """Every series a probe filed in its run logged, from its ``metrics.csv`` (Lightning's CSVLogger: a row per
    logging call, a column per tag, empty where the call did not log it), in the order logged."""
    import csv

    with open(folder / "metrics.csv", newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    tags = [tag for tag in (rows[0] if rows else {}) if tag not in ("epoch", "step")]
    return {tag: [float(row[tag]) for row in rows if row[tag] != ""] for tag in tags}


def cli_in(workdir: Path, args: list[str]) -> Any:
    """``python -m ssl_app <args>`` in this process with ``workdir`` as the current folder (where
    ``runs/`` goes), the previous folder restored after."""
    import os

    from ssl_app.cli import main

    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        return main(args)
    finally:
        os.chdir(cwd)


def loss_value(loss: Any, sim: Any, pos_mask: Any, neg_mask: Any, **anchors: Any) -> Any:
    """``loss``'s value on these similarities and masks, called the one way (no diagnostics)."""
    from ssl_app.losses import MaskedSimilarities

    return loss(MaskedSimilarities(sim, pos_mask, neg_mask, **anchors)).value


def loss_stats(loss: Any, sim: Any, pos_mask: Any, neg_mask: Any, **anchors: Any) -> dict:
    """``loss``'s diagnostics on these similarities and masks (``with_stats=True``)."""
    from ssl_app.losses import MaskedSimilarities

    return loss(MaskedSimilarities(sim, pos_mask, neg_mask, **anchors), with_stats=True).stats


def loss_and_stats(loss: Any, sim: Any, pos_mask: Any, neg_mask: Any, **anchors: Any) -> tuple:
    """``(value, diagnostics)`` of one call with ``with_stats=True``."""
    from ssl_app.losses import MaskedSimilarities

    result = loss(MaskedSimilarities(sim, pos_mask, neg_mask, **anchors), with_stats=True)
    return result.value, result.stats


class HostSyncRecorder(TorchDispatchMode):
    """Records the aten ops that make a GPU step wait for the device.

    ``.item()`` / ``bool(tensor)`` / ``float(tensor)`` dispatch to ``_local_scalar_dense``;
    boolean indexing (``x[mask]``, ``x[mask] = v``), ``nonzero``, ``masked_select`` and
    ``unique`` need the data to know their output size.
    """

    SYNCING = {
        "aten._local_scalar_dense",
        "aten.nonzero",
        "aten.nonzero_static",
        "aten.masked_select",
        "aten.is_nonzero",
        "aten.equal",
        "aten._unique",
        "aten._unique2",
        "aten.unique_dim",
        "aten.unique_consecutive",
        "aten.repeat_interleave",
    }
    INDEXING = {"aten.index", "aten.index_put", "aten.index_put_", "aten._index_put_impl_"}

    def __init__(self) -> None:
        super().__init__()
        self.syncs: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        if name in self.SYNCING:
            self.syncs.append(name)
        elif name in self.INDEXING:
            indices = args[1] if len(args) > 1 else ()
            if any(isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8) for t in indices):
                self.syncs.append(f"{name} with a boolean mask")
        return func(*args, **(kwargs or {}))


def compile_cheaply(monkeypatch: Any, backend: Any = "aot_eager") -> None:
    """Make ``torch.compile`` trace with dynamo for real but build no kernels (``backend``:
    ``aot_eager`` adds AOTAutograd's forward/backward split, ``eager`` only dynamo), so tests that
    train with ``compile: true`` need no C++ build; and start from an empty dynamo cache and counters."""
    original = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model=None, **options: original(model, **{**options, "backend": backend}))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()


def dynamo_compiles() -> int:
    """Frames dynamo has compiled in this process since the counters were cleared: the first compile
    of each graph and every recompilation (a guard that failed)."""
    return int(torch._dynamo.utils.counters["frames"]["total"])
