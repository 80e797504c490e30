import pytest
import torch
from PIL import Image

from datamodules import ImageFolderDataModule
from datamodules.augment import ViewAugmentation
from datamodules.image_folder import CorruptImageError
from ssl_app.errors import ConfigError


def make_tree(root, splits=("train", "val"), classes=("cat", "dog"), per_class=3):
    for split in splits:
        for k, name in enumerate(classes):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(per_class):
                colour = (40 * k + 10 * i, 100, 200)
                Image.new("RGB", (20 + i, 18), colour).save(folder / f"{i}.png")
    return root


def small(root, **kwargs):
    return ImageFolderDataModule(str(root), batch_size=2, num_workers=0, augmentation=ViewAugmentation(crop_size=16), **kwargs)


def test_loads_an_image_tree(tmp_path):
    dm = small(make_tree(tmp_path))
    dm.setup("fit")
    assert dm.num_classes == 2 and dm.num_samples("train") == 6 and dm.num_samples("test") == 6  # test falls back to val
    views, labels, index = next(iter(dm.val_dataloader()))
    assert views[0].shape == (2, 3, 16, 16)
    assert labels.tolist() == [0, 0] and index.tolist() == [0, 1]


def test_missing_root_is_named(tmp_path):
    missing = tmp_path / "imagenet100"
    with pytest.raises(ConfigError, match=f"root '{missing}' does not exist"):
        small(missing)


def test_missing_val_folder_is_named(tmp_path):
    make_tree(tmp_path, splits=("train",))
    with pytest.raises(ConfigError, match="no class folders in .*val"):
        small(tmp_path)


def test_corrupted_image_names_the_file(tmp_path):
    make_tree(tmp_path)
    broken = tmp_path / "train" / "dog" / "broken.png"
    broken.write_bytes(b"this is not a png")
    dm = small(tmp_path)
    dm.setup("fit")
    data = dm.dataset("train")
    position = [path for path, _ in data.samples].index(str(broken))
    with pytest.raises(CorruptImageError, match=f"corrupted or unreadable image: {broken}"):
        data[position]
    # Also from a DataLoader worker, and as a ConfigError (which the CLI prints as an error line).
    with_worker = ImageFolderDataModule(str(tmp_path), batch_size=7, num_workers=1, augmentation=ViewAugmentation(crop_size=16))
    with pytest.raises(ConfigError, match=f"corrupted or unreadable image: {broken}"):
        list(with_worker.embedding_dataloader("train"))


def test_val_labels_follow_the_train_classes(tmp_path):
    make_tree(tmp_path, splits=("train",), classes=("a", "b", "c"))
    make_tree(tmp_path, splits=("val",), classes=("b", "c"))
    dm = small(tmp_path)
    labels = sorted({label for _, label in dm.dataset("val").samples})
    assert labels == [1, 2]
    assert torch.tensor(labels).max() < dm.num_classes


def test_device_views_need_one_image_size_and_say_so_before_training(tmp_path):
    dm = small(make_tree(tmp_path), augment_on="device")  # widths 20, 21, 22
    dm.setup("fit")
    with pytest.raises(ConfigError, match=r"ImageFolderDataModule: augment_on=device needs training images of one size"):
        dm.train_dataloader()


def test_device_views_of_an_image_folder_of_one_size(tmp_path):
    for k, name in enumerate(("cat", "dog")):
        for split in ("train", "val"):
            (tmp_path / split / name).mkdir(parents=True)
            for i in range(3):
                Image.new("RGB", (20, 18), (40 * k + 10 * i, 100, 200)).save(tmp_path / split / name / f"{i}.png")
    dm = small(tmp_path, augment_on="device")
    dm.setup("fit")
    images, labels, _ = next(iter(dm.train_dataloader()))
    assert images.shape == (2, 3, 18, 20) and images.dtype == torch.uint8
    views = dm.device_augmentation(images, 2)
    assert [v.shape for v in views] == [(2, 3, 16, 16)] * 2
