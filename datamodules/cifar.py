"""CIFAR-10/100 read without running code from the data files.

The Python versions of CIFAR are pickles, and ``pickle.load`` of a crafted file runs whatever
the file asks for. torchvision checks the official files' md5 before unpickling, but the data
under a user's ``root`` is still a file they were handed (and copies made for tests or
benchmarks skip that check), so the batches are read here by an unpickler that builds only
what a CIFAR file holds: dicts, lists, strings, bytes, numbers and numpy arrays.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
from torchvision import datasets
from torchvision.datasets import cifar as tv_cifar
from torchvision.datasets.vision import VisionDataset

from ssl_app.errors import ConfigError


def _numpy_array_builders() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """numpy's own functions that rebuild a pickled array: ``_reconstruct``, and ``_frombuffer`` (protocol 5).

    Taken from what numpy itself writes into a pickle, so they are found whichever module this
    numpy version keeps them in (``numpy.core`` became ``numpy._core`` in numpy 2).
    """
    array = np.zeros(1, np.uint8)
    return array.__reduce__()[0], array.__reduce_ex__(5)[0]


_RECONSTRUCT, _FROM_BUFFER = _numpy_array_builders()

#: Every global a CIFAR pickle may name. The official files (written by Python 2 with numpy 1)
#: name numpy.core.multiarray._reconstruct, numpy.ndarray and numpy.dtype; a copy written by
#: numpy 2 names numpy._core instead, and at protocol 5 numpy writes _frombuffer. Labels are
#: plain ints and names plain strings, which need no global.
ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy.core.numeric", "_frombuffer"): _FROM_BUFFER,
    ("numpy._core.numeric", "_frombuffer"): _FROM_BUFFER,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}


class _RefusedGlobal(pickle.UnpicklingError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class CifarUnpickler(pickle.Unpickler):
    """An unpickler that resolves only :data:`ALLOWED_GLOBALS`, so loading calls nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise _RefusedGlobal(f"{module}.{name}") from None


def read_cifar_pickle(path: str) -> dict:
    """The dict pickled in one CIFAR file, read as torchvision reads it (``latin1`` for Python 2 strings).

    Raises:
        ConfigError: naming the file, when it references anything a CIFAR file never holds
            (before it is called) or is not a pickled dict.
    """
    with open(path, "rb") as handle:
        try:
            content = CifarUnpickler(handle, encoding="latin1").load()
        except _RefusedGlobal as refused:
            raise ConfigError(
                f"refuses to load {path!r}: it references {refused.name}, which a CIFAR batch never holds "
                "(unpickling it could run code); delete the file and download the data set again"
            ) from None
        except Exception as error:  # a truncated or foreign file: any error the pickle machinery raises
            raise ConfigError(f"{path!r} is not a readable CIFAR file ({type(error).__name__}: {error})") from None
    if not isinstance(content, dict):
        raise ConfigError(f"{path!r} is not a CIFAR file: it holds a {type(content).__name__}, not a dict")
    return content


def _images_and_labels(batch: dict, path: str) -> tuple[np.ndarray, list]:
    """A batch's uint8 rows [N, 3072] and its N labels (CIFAR-10's ``labels``, CIFAR-100's ``fine_labels``)."""
    data, labels = batch.get("data"), batch.get("labels", batch.get("fine_labels"))
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise ConfigError(f"{path!r} is not a CIFAR batch: 'data' must be a uint8 array of rows of 3072 values")
    if not isinstance(labels, list) or len(labels) != len(data):
        raise ConfigError(f"{path!r} is not a CIFAR batch: it needs a list of {len(data)} labels")
    return data, labels


class _SafeCifarReading:
    """torchvision's CIFAR loading (md5 check included) with the files read by :func:`read_cifar_pickle`.

    Mixed in before ``datasets.CIFAR10``/``CIFAR100``, whose ``__init__`` calls ``pickle.load``
    directly and is therefore replaced; everything else (download, md5 lists, ``__getitem__``)
    is theirs.
    """

    def __init__(
        self, root: str, train: bool = True, transform: Any = None, target_transform: Any = None, download: bool = False
    ) -> None:
        VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)  # type: ignore[arg-type]
        self.train = train
        if download:
            self.download()
        if not self._check_integrity():
            raise RuntimeError("Dataset not found or corrupted. You can use download=True to download it")
        images, self.targets = [], []
        for name, _ in self.train_list if train else self.test_list:
            path = os.path.join(self.root, self.base_folder, name)
            data, labels = _images_and_labels(read_cifar_pickle(path), path)
            images.append(data)
            self.targets.extend(labels)
        self.data = np.vstack(images).reshape(-1, 3, 32, 32).transpose((0, 2, 3, 1))  # rows of CHW to HWC images
        self._load_meta()

    def _load_meta(self) -> None:
        path = os.path.join(self.root, self.base_folder, self.meta["filename"])
        # Through the module, as torchvision's own check does, so that both follow one setting.
        if not tv_cifar.check_integrity(path, self.meta["md5"]):
            raise RuntimeError("Dataset metadata file not found or corrupted. You can use download=True to download it")
        names = read_cifar_pickle(path).get(self.meta["key"])
        if not isinstance(names, list):
            raise ConfigError(f"{path!r} is not a CIFAR metadata file: it has no list {self.meta['key']!r}")
        self.classes = names
        self.class_to_idx = {name: index for index, name in enumerate(names)}


class SafeCIFAR10(_SafeCifarReading, datasets.CIFAR10):
    """``torchvision.datasets.CIFAR10`` that never unpickles anything but arrays, lists and strings."""


class SafeCIFAR100(_SafeCifarReading, datasets.CIFAR100):
    """``torchvision.datasets.CIFAR100`` that never unpickles anything but arrays, lists and strings."""
