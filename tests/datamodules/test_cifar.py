"""CIFAR's pickled files are read without running anything they name."""

import io
import os
import pickle

import numpy as np
import pytest
import torchvision.datasets.cifar as tv_cifar

from datamodules import CIFAR10DataModule, CIFAR100DataModule
from datamodules.cifar import ALLOWED_GLOBALS, CifarUnpickler, read_cifar_pickle
from ssl_app.errors import ConfigError
from tests.datamodules.test_torchvision_sets import write_fake_cifar


class RunsCode:
    """What an attacker pickles: unpickling calls ``os.system``, which creates ``marker``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def named_globals(path):
    """The (module, name) pairs a pickle file asks for, recorded while our own file is loaded."""
    found = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module, name):
            found.add((module, name))
            return super().find_class(module, name)

    with open(path, "rb") as handle:
        Recording(handle, encoding="latin1").load()
    return found


@pytest.mark.parametrize(
    "module,file",
    [
        (CIFAR10DataModule, "cifar-10-batches-py/data_batch_1"),
        (CIFAR10DataModule, "cifar-10-batches-py/batches.meta"),
        (CIFAR100DataModule, "cifar-100-python/train"),
    ],
)
def test_a_crafted_pickle_is_refused_before_it_runs(module, file, tmp_path, monkeypatch):
    # Catches pickle.load on the user's files (torchvision's reading): the payload ran while the
    # split was built, creating the marker. The md5 check is skipped as in the other fake-data
    # tests (and the benchmarks); it is the reading after it that must not execute anything.
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *args, **kwargs: True)
    write_fake_cifar(tmp_path / "data", hundred=module is CIFAR100DataModule)
    marker = tmp_path / "ran"
    with open(tmp_path / "data" / file, "wb") as handle:
        pickle.dump(RunsCode(marker), handle)
    dm = module(root=str(tmp_path / "data"), num_workers=0)
    with pytest.raises(ConfigError) as raised:
        dm.setup("fit")
    assert not marker.exists()
    expected = (
        f"{module.__name__}: refuses to load '{tmp_path / 'data' / file}': it references {os.system.__module__}.system, "
        "which a CIFAR batch never holds"
    )
    assert str(raised.value).startswith(expected)


@pytest.mark.parametrize("protocol", [3, 4, 5])
def test_every_global_of_a_numpy_written_batch_is_allowed(protocol, tmp_path):
    # Catches an allow-list that misses a name numpy writes (numpy 2 moved numpy.core to
    # numpy._core; protocol 5 rebuilds arrays with _frombuffer), which would refuse good copies.
    path = tmp_path / "batch"
    batch = {"data": np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072), "labels": [3, 7], "batch_label": "b"}
    with open(path, "wb") as handle:
        pickle.dump(batch, handle, protocol=protocol)
    assert named_globals(path) <= set(ALLOWED_GLOBALS), named_globals(path) - set(ALLOWED_GLOBALS)
    read = read_cifar_pickle(str(path))
    assert read["labels"] == [3, 7] and read["batch_label"] == "b" and np.array_equal(read["data"], batch["data"])


def test_the_official_files_names_resolve_to_numpy():
    # The official files were written by Python 2 with numpy 1 (numpy.core.multiarray), which
    # this numpy no longer writes; catches a typo in those names, which would refuse real data.
    unpickler = CifarUnpickler(io.BytesIO())
    rebuilt = unpickler.find_class("numpy.core.multiarray", "_reconstruct")(np.ndarray, (0,), b"b")
    assert isinstance(rebuilt, np.ndarray)
    assert unpickler.find_class("numpy", "dtype") is np.dtype and unpickler.find_class("numpy", "ndarray") is np.ndarray
    with pytest.raises(pickle.UnpicklingError, match="builtins.eval"):
        unpickler.find_class("builtins", "eval")


def test_a_file_that_is_not_a_batch_is_named(tmp_path, monkeypatch):
    # Catches a truncated file surfacing as a bare EOFError/KeyError from deep inside the reader.
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *args, **kwargs: True)
    write_fake_cifar(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    batch.write_bytes(batch.read_bytes()[:100])
    with pytest.raises(ConfigError, match=f"CIFAR10DataModule: '{batch}' is not a readable CIFAR file"):
        CIFAR10DataModule(root=str(tmp_path), num_workers=0).setup("fit")
