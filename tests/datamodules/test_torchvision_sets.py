import dataclasses
import inspect
import os
import pickle
import threading
import time
import urllib.error
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.datasets.cifar as tv_cifar
import yaml
from jsonargparse import ArgumentParser
from lightning import LightningDataModule

from datamodules import (
    CIFAR10DataModule,
    CIFAR100DataModule,
    ContrastiveDataModule,
    STL10DataModule,
    SVHNDataModule,
    ViewAugmentation,
)
from datamodules.augment import CIFAR100_MEAN
from ssl_app.cli import main
from ssl_app.errors import ConfigError
from ssl_app.io.lock import DOWNLOAD_LOCK

MODULES = [
    CIFAR10DataModule,
    CIFAR100DataModule,
    SVHNDataModule,
    STL10DataModule,
]


@pytest.mark.parametrize("module", MODULES)
def test_missing_data_without_download_fails_at_construction_naming_the_root(module, tmp_path):
    nowhere = tmp_path / "nowhere"
    with pytest.raises(ConfigError, match=f"{module.__name__}: no .* data under '{nowhere}'.*download=true"):
        module(root=str(nowhere), num_workers=0)


def write_fake_cifar(root, hundred=False, per_batch=4, labels=None):
    """A tiny copy of torchvision's CIFAR layout: pickled dicts of uint8 rows and labels
    (``labels``: every batch's labels, ``per_batch`` of them; default ``0 … per_batch − 1``)."""
    rng = np.random.default_rng(0)
    if hundred:
        folder, names, label_key, meta = root / "cifar-100-python", ["train", "test"], "fine_labels", "meta"
        meta_content = {"fine_label_names": [f"class{i}" for i in range(100)]}
    else:
        folder, label_key, meta = root / "cifar-10-batches-py", "labels", "batches.meta"
        names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
        meta_content = {"label_names": [f"class{i}" for i in range(10)]}
    folder.mkdir(parents=True)
    for name in names:
        batch = {"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8), label_key: list(labels or range(per_batch))}
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f)
    with open(folder / meta, "wb") as f:
        pickle.dump(meta_content, f)


@pytest.mark.parametrize("module,train_size", [(CIFAR10DataModule, 20), (CIFAR100DataModule, 4)])
def test_cifar_loads_torchvision_layout(module, train_size, tmp_path, monkeypatch):
    # The real files are 170 MB behind a download; a tiny copy in the same layout checks our
    # wiring. Only torchvision's md5 check of the real files is bypassed.
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *args, **kwargs: True)
    write_fake_cifar(tmp_path, hundred=module is CIFAR100DataModule)
    dm = module(root=str(tmp_path), batch_size=4, num_workers=0)
    dm.setup("fit")
    assert dm.num_samples("train") == train_size and dm.num_samples("val") == 4 and dm.num_samples("test") == 4
    views, labels, index = next(iter(dm.train_dataloader()))
    assert views[0].shape == (4, 3, 32, 32) and views[0].dtype == torch.float32
    assert labels.max() < dm.num_classes and index.max() < train_size
    val_views, val_labels, val_index = next(iter(dm.val_dataloader()))
    assert val_labels.tolist() == [0, 1, 2, 3] and val_index.tolist() == [0, 1, 2, 3]


def test_corrupted_cifar_is_named_at_setup(tmp_path):
    write_fake_cifar(tmp_path)  # present, but torchvision's md5 check fails on the fake files
    dm = CIFAR10DataModule(root=str(tmp_path), num_workers=0)
    with pytest.raises(ConfigError, match=f"CIFAR-10 data under '{tmp_path}' is incomplete or corrupted"):
        dm.setup("fit")


def test_failed_download_is_one_readable_error(tmp_path, monkeypatch):
    def no_network(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(tv_cifar, "download_and_extract_archive", no_network)
    dm = CIFAR10DataModule(root=str(tmp_path), download=True, num_workers=0)  # nothing there: fine
    with pytest.raises(ConfigError, match=f"downloading CIFAR-10 under '{tmp_path}' failed: .*no network"):
        dm.prepare_data()


def test_parallel_downloads_into_one_root_take_turns_and_the_later_one_finds_the_files(tmp_path, monkeypatch, capsys):
    """Catches two jobs of a sweep (separate programs, which Lightning's one-process-per-machine
    prepare_data does not order) downloading CIFAR-10 into one folder at once, each writing over the
    other's archive: the second must wait for the first, then find the files and download nothing."""
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda path, md5=None: os.path.exists(path))
    events = []

    def slow_download(url, download_root, filename=None, md5=None, **kwargs):
        events.append("start")
        time.sleep(0.5)
        write_fake_cifar(Path(download_root))
        events.append("end")

    monkeypatch.setattr(tv_cifar, "download_and_extract_archive", slow_download)
    modules = [CIFAR10DataModule(root=str(tmp_path), download=True, num_workers=0) for _ in range(2)]
    errors = []

    def prepare(module):
        try:
            module.prepare_data()
        except Exception as error:  # noqa: BLE001 - reported below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=prepare, args=(module,)) for module in modules]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors and events == ["start", "end"]  # one download, not two overlapping
    assert "waiting for pid" in capsys.readouterr().err
    modules[1].setup("fit")  # the files the first one wrote are the data of the second
    assert modules[1].num_samples("train") == 20


def test_a_read_only_data_folder_is_read_without_a_download_lock(tmp_path, monkeypatch):
    """Catches download=true failing on a shared, read-only copy that is already complete (a cluster's
    data set folder), only because no lock file can be made there."""
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda path, md5=None: os.path.exists(path))
    write_fake_cifar(tmp_path)
    real_open = os.open

    def read_only(path, *args, **kwargs):
        if str(path).endswith(DOWNLOAD_LOCK):
            raise PermissionError(13, "Read-only file system", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    dm = CIFAR10DataModule(root=str(tmp_path), download=True, num_workers=0)
    dm.prepare_data()
    dm.setup("fit")
    assert dm.num_samples("train") == 20 and not (tmp_path / DOWNLOAD_LOCK).exists()


def test_stl10_train_split_is_checked():
    with pytest.raises(ConfigError, match="train_split"):
        STL10DataModule(train_split="everything", download=True)


@pytest.mark.parametrize("module,crop,mean0", [("STL10DataModule", 96, 0.4467), ("CIFAR100DataModule", 32, 0.5071)])
def test_overriding_one_augmentation_field_keeps_the_data_sets_defaults(module, crop, mean0):
    # What the CLI does with --data.init_args.augmentation.min_scale=0.5 (parsing only, no data).
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--data", type=LightningDataModule)
    config = parser.parse_args([f"--data=datamodules.{module}", "--data.augmentation.min_scale=0.5"])
    augmentation = config.data.init_args.augmentation
    assert augmentation.min_scale == 0.5 and augmentation.crop_size == crop and augmentation.mean[0] == mean0


# --- constructors state their own options; jsonargparse follows **kwargs to the rest ------------


def declared_defaults(module: type) -> dict:
    """Every constructor option that the class or a base class declares with a default (the most
    derived declaration wins): what ``--print_config`` must show for it."""
    found = {}
    for klass in reversed(module.__mro__):
        init = vars(klass).get("__init__")
        if init is None or klass is object:
            continue
        for parameter in inspect.signature(init).parameters.values():
            named = parameter.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
            if named and parameter.name != "self" and parameter.default is not inspect.Parameter.empty:
                found[parameter.name] = parameter.default
    return found


def own_augmentation(module: type) -> dict:
    """The fields of the class's default augmentation (lists where the dataclass holds tuples)."""
    fields = dataclasses.asdict(declared_defaults(module)["augmentation"])
    return {name: list(value) if isinstance(value, tuple) else value for name, value in fields.items()}


def base_defaults() -> dict:
    """Every option of ContrastiveDataModule but the augmentation, with its default."""
    parameters = inspect.signature(ContrastiveDataModule.__init__).parameters.values()
    defaults = {p.name: p.default for p in parameters if p.name not in ("self", "augmentation")}
    assert {"batch_size", "num_workers", "val_seed", "pin_memory"} <= set(defaults)
    return defaults


def printed_data_config(capsys, path: str, *extra: str) -> dict:
    """The ``data`` init args ``--print_config`` shows for the datamodule at import path ``path``."""
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--model=ssl_app.methods.SimCLR", f"--data={path}", *extra, "--print_config"])
    assert exit_info.value.code == 0
    data = yaml.safe_load(capsys.readouterr().out)["data"]
    assert data["class_path"] == path
    return data["init_args"]


def test_print_config_shows_every_option_with_its_default(datamodule_entry, capsys):
    """Catches an option of a registered datamodule (or of its base class, through ``**kwargs``) that
    the CLI does not show, or shows with another default than the constructor's (every entry of
    ``DATAMODULES``: tests/generic.py)."""
    entry = datamodule_entry
    options = printed_data_config(capsys, entry.value)
    for option, default in declared_defaults(entry.target).items():
        assert option in options, f"{entry.name}: --print_config lost {option}"
        if option != "augmentation":
            assert options[option] == default, (entry.name, option)
    augmentation = options["augmentation"]
    assert set(augmentation) == {f.name for f in dataclasses.fields(ViewAugmentation)}
    for field, value in own_augmentation(entry.target).items():
        assert augmentation[field] == pytest.approx(value), (entry.name, field)


def test_data_help_lists_every_option(datamodule_entry, capsys):
    entry = datamodule_entry
    with pytest.raises(SystemExit):
        main(["fit", "--data.help", entry.value])
    out = capsys.readouterr().out
    options = [option for option in declared_defaults(entry.target) if option != "augmentation"]  # shown field by field
    for option in [*options, "augmentation.min_scale"]:
        assert f"--data.{option} " in out, f"{entry.name}: --data.help lost {option}"


def test_a_partial_override_keeps_the_other_defaults(datamodule_entry, capsys):
    entry = datamodule_entry
    overrides = ["--data.init_args.augmentation.min_scale=0.5", "--data.init_args.batch_size=7"]
    options = printed_data_config(capsys, entry.value, *overrides)
    assert options["augmentation"]["min_scale"] == 0.5 and options["batch_size"] == 7
    for field, value in own_augmentation(entry.target).items():
        if field != "min_scale":
            assert options["augmentation"][field] == pytest.approx(value), (entry.name, field)
    assert options["num_workers"] == base_defaults()["num_workers"]


def test_keyword_arguments_reach_the_base_class(tmp_path):
    write_fake_cifar(tmp_path, hundred=True)
    dm = CIFAR100DataModule(root=str(tmp_path), batch_size=3, num_workers=0, val_seed=5, pin_memory=False)
    assert (dm.batch_size, dm.num_workers, dm.val_seed, dm.pin_memory) == (3, 0, 5, False)
    assert dm.augmentation.mean == CIFAR100_MEAN and dm.root == str(tmp_path)
    with pytest.raises(ConfigError, match="batch_size must be an int >= 1"):
        STL10DataModule(download=True, batch_size=0)
    with pytest.raises(TypeError):  # a typo is not swallowed by **kwargs
        CIFAR10DataModule(download=True, batchsize=3)
