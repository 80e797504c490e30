"""LightningDataModules yielding ``(views, labels, indices)`` batches (as many training views as the method uses).

``DATAMODULES`` lists the data sources, the ``ContrastiveDataModule`` subclasses
(``python -m ssl_app list datamodules``); ``LinearEvalDataModule`` wraps one of them and is not
one itself. A new datamodule is one module with ``@DATAMODULES.register`` above its class and one import
line here (whose order is the order of ``list``); ``tests/datamodules/test_contract.py`` then asks
for a way to build it offline.
"""

from datamodules.augment import ViewAugmentation
from datamodules.base import ContrastiveDataModule
from datamodules.device_augment import BatchViewAugmentation
from datamodules.linear_eval import LinearEvalDataModule
from datamodules.multiview import MultiViewDataset

# isort: off
# The order of these imports is the order of registration, i.e. of `python -m ssl_app list datamodules`.
from datamodules.synthetic import SyntheticDataModule
from datamodules.torchvision_sets import CIFAR10DataModule, CIFAR100DataModule, SVHNDataModule, STL10DataModule
from datamodules.image_folder import ImageFolderDataModule

# isort: on
from datamodules.registry import DATAMODULES

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
