"""LightningDataModules yielding ``(views, labels, indices)`` batches (as many training views as the method uses).

``DATAMODULES`` lists the data sources, the ``ContrastiveDataModule`` subclasses
(``python -m ssl_app list datamodules``); ``LinearEvalDataModule`` wraps one of them and is not
one itself. A new datamodule is registered with ``@DATAMODULES.register`` above its class (or
one line here), and ``tests/datamodules/test_contract.py`` then asks for a way to build it offline.
"""

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
from ssl_app.registry import DATAMODULES

DATAMODULES.register(SyntheticDataModule)
DATAMODULES.register(CIFAR10DataModule)
DATAMODULES.register(CIFAR100DataModule)
DATAMODULES.register(SVHNDataModule)
DATAMODULES.register(STL10DataModule)
DATAMODULES.register(ImageFolderDataModule)

__all__ = [
    "BatchViewAugmentation",
    "CIFAR10DataModule",
    "CIFAR100DataModule",
    "ContrastiveDataModule",
    "DATAMODULES",
    "ImageFolderDataModule",
    "LinearEvalDataModule",
    "MultiViewDataset",
    "STL10DataModule",
    "SVHNDataModule",
    "SyntheticDataModule",
    "ViewAugmentation",
]
