import dataclasses
import inspect
import pickle
import urllib.error

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
from datamodules.augment import CIFAR10_MEAN, CIFAR100_MEAN, STL10_MEAN, SVHN_MEAN
from ssl_app.cli import main
from ssl_app.errors import ConfigError

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


def write_fake_cifar(root, hundred=False, per_batch=4):
    """A tiny copy of torchvision's CIFAR layout: pickled dicts of uint8 rows and labels."""
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
        batch = {"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8), label_key: list(range(per_batch))}
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

ALL_MODULES = {
    "CIFAR10DataModule": {"root": "data", "download": False},
    "CIFAR100DataModule": {"root": "data", "download": False},
    "SVHNDataModule": {"root": "data", "download": False},
    "STL10DataModule": {"root": "data", "download": False, "train_split": "train+unlabeled"},
    "SyntheticDataModule": {"num_classes": 10, "train_size": 2000, "seed": 0},
    "ImageFolderDataModule": {"train_dir": "train", "val_dir": "val", "test_dir": "test"},
}
# The augmentation each data set defaults to (only what differs from ViewAugmentation()).
OWN_AUGMENTATION = {
    "CIFAR10DataModule": {"crop_size": 32, "mean": list(CIFAR10_MEAN)},
    "CIFAR100DataModule": {"crop_size": 32, "mean": list(CIFAR100_MEAN)},
    "SVHNDataModule": {"hflip_prob": 0.0, "mean": list(SVHN_MEAN)},
    "STL10DataModule": {"crop_size": 96, "mean": list(STL10_MEAN)},
    "SyntheticDataModule": {"min_scale": 0.4, "hue": 0.5},
    "ImageFolderDataModule": {"crop_size": 224, "eval_crop_fraction": 0.875},
}


def base_defaults() -> dict:
    """Every option of ContrastiveDataModule but the augmentation, with its default."""
    parameters = inspect.signature(ContrastiveDataModule.__init__).parameters.values()
    defaults = {p.name: p.default for p in parameters if p.name not in ("self", "augmentation")}
    assert {"batch_size", "num_workers", "val_seed", "pin_memory"} <= set(defaults)
    return defaults


def printed_data_config(capsys, name: str, *extra: str) -> dict:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--model=ssl_app.methods.SimCLR", f"--data=datamodules.{name}", *extra, "--print_config"])
    assert exit_info.value.code == 0
    data = yaml.safe_load(capsys.readouterr().out)["data"]
    assert data["class_path"] == f"datamodules.{name}"
    return data["init_args"]


@pytest.mark.parametrize("name", ALL_MODULES)
def test_print_config_shows_every_option_with_its_default(name, capsys):
    options = printed_data_config(capsys, name)
    for option, default in {**base_defaults(), **ALL_MODULES[name]}.items():
        assert option in options, f"{name}: --print_config lost {option}"
        assert options[option] == default, (name, option)
    augmentation = options["augmentation"]
    assert set(augmentation) == {f.name for f in dataclasses.fields(ViewAugmentation)}
    for field, value in OWN_AUGMENTATION[name].items():
        assert augmentation[field] == pytest.approx(value), (name, field)


@pytest.mark.parametrize("name", ALL_MODULES)
def test_data_help_lists_every_option(name, capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--data.help", f"datamodules.{name}"])
    out = capsys.readouterr().out
    for option in [*base_defaults(), *ALL_MODULES[name], "augmentation.min_scale"]:
        assert f"--data.{option} " in out, f"{name}: --data.help lost {option}"


@pytest.mark.parametrize("name", ALL_MODULES)
def test_a_partial_override_keeps_the_other_defaults(name, capsys):
    options = printed_data_config(capsys, name, "--data.init_args.augmentation.min_scale=0.5", "--data.init_args.batch_size=7")
    assert options["augmentation"]["min_scale"] == 0.5 and options["batch_size"] == 7
    for field, value in OWN_AUGMENTATION[name].items():
        if field != "min_scale":
            assert options["augmentation"][field] == pytest.approx(value), (name, field)
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
