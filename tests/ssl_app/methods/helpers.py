"""Tiny data and trainers shared by the method tests."""

from __future__ import annotations

import lightning as L

from datamodules.augment import ViewAugmentation
from datamodules.synthetic import SYNTHETIC_MEAN, SYNTHETIC_STD, SyntheticDataModule


def tiny_data(batch_size=8, train_size=48):
    return SyntheticDataModule(
        num_classes=3,
        train_size=train_size,
        val_size=16,
        test_size=16,
        image_size=8,
        batch_size=batch_size,
        num_workers=0,
        augmentation=ViewAugmentation(crop_size=8, mean=SYNTHETIC_MEAN, std=SYNTHETIC_STD),
    )


def tiny_trainer(tmp_path, **kwargs) -> L.Trainer:
    options = dict(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        default_root_dir=str(tmp_path),
    )
    options.update(kwargs)
    return L.Trainer(**options)
