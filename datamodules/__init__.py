"""LightningDataModules yielding ``(views, labels, indices)`` batches (as many training views as the method uses)."""

from datamodules.augment import ViewAugmentation
from datamodules.base import ContrastiveDataModule
from datamodules.device_augment import BatchViewAugmentation
from datamodules.image_folder import ImageFolderDataModule
from datamodules.linear_eval import LinearEvalDataModule
from datamodules.multiview import MultiViewDataset
from datamodules.synthetic import SyntheticDataModule
from datamodules.torchvision_sets import (
    CIFAR10DataModule,
    CIFAR100DataModule,
    STL10DataModule,
    SVHNDataModule,
)

__all__ = [
    "BatchViewAugmentation",
    "CIFAR10DataModule",
    "CIFAR100DataModule",
    "ContrastiveDataModule",
    "ImageFolderDataModule",
    "LinearEvalDataModule",
    "MultiViewDataset",
    "STL10DataModule",
    "SVHNDataModule",
    "SyntheticDataModule",
    "ViewAugmentation",
]
