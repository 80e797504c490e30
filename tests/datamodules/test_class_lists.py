"""Class lists: the shipped ImageNet-100 list, and ImageFolderDataModule(class_list=...) on a fake ImageNet tree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PIL import Image

from datamodules import ImageFolderDataModule
from datamodules.augment import ViewAugmentation
from datamodules.class_lists import read_class_list
from ssl_app.errors import ConfigError

#: Three ids of the ImageNet-100 list, and one ImageNet class that is not in it.
LISTED = ["n02869837", "n01749939", "n04517823"]
NOT_LISTED = "n01440764"


def fake_imagenet(root: Path, classes: list[str], images: int = 2) -> Path:
    """``root/{train,val}/<wnid>/*.png``: a few tiny PNGs per class, each class its own colour."""
    for split in ("train", "val"):
        for index, wnid in enumerate(classes):
            folder = root / split / wnid
            folder.mkdir(parents=True)
            for k in range(images):
                Image.new("RGB", (12, 12), (40 * index, 10 * k, 0)).save(folder / f"{wnid}_{k}.png")
    return root


def data(root: Path, **options) -> ImageFolderDataModule:
    return ImageFolderDataModule(str(root), batch_size=2, num_workers=0, augmentation=ViewAugmentation(crop_size=8), **options)


def test_the_shipped_imagenet100_list_is_cmcs_100_wordnet_ids():
    """Catches a truncated, duplicated or mangled copy of CMC's list (header comments must not count)."""
    ids = read_class_list("imagenet100")
    assert len(ids) == 100 == len(set(ids)) and all(re.fullmatch(r"n\d{8}", i) for i in ids)
    assert set(LISTED) <= set(ids) and NOT_LISTED not in ids
    assert ids == sorted(ids)  # labels follow the sorted ids, as ImageFolder gives a tree of only these


def test_only_the_listed_classes_are_read_from_train_and_val_with_sorted_labels(tmp_path):
    """Catches a class_list that still reads every class folder (the other 900 ImageNet classes) or labels
    the classes in a different order in the two splits."""
    root = fake_imagenet(tmp_path / "imagenet", [*LISTED, NOT_LISTED])
    list_file = tmp_path / "three.txt"
    list_file.write_text("# three of ImageNet-100, in the list's own (unsorted) order\n" + "\n".join(LISTED) + "\n")
    module = data(root, class_list=str(list_file))
    assert module.classes == sorted(LISTED) and module.num_classes == 3 and module.labelled
    module.setup("fit")
    for split in ("train", "val"):
        samples = module.dataset(split).samples
        assert len(samples) == 6 and not any(NOT_LISTED in path for path, _ in samples), split
        assert {Path(path).parent.name: label for path, label in samples} == {w: sorted(LISTED).index(w) for w in LISTED}
    assert module.describe()["class_list"] == sorted(LISTED)  # the run record says which classes


def test_a_listed_class_missing_from_a_split_is_one_error_naming_it_and_the_folder(tmp_path):
    """Catches a missing class that silently shrinks the task (99 classes) or fails later, mid-epoch."""
    root = fake_imagenet(tmp_path / "imagenet", LISTED)
    for path in (root / "val" / LISTED[1]).iterdir():
        path.unlink()
    (root / "val" / LISTED[1]).rmdir()
    with pytest.raises(ConfigError, match=rf"class {LISTED[1]} of the class_list has no folder in '.*val'"):
        data(root, class_list=LISTED)
    with pytest.raises(ConfigError, match="labels cannot be 'none'"):
        data(root, class_list=LISTED, labels="none")
    list_file = tmp_path / "mine.txt"
    list_file.write_text(f"# my classes\n{LISTED[0]}\n\n{LISTED[0]}\n")
    with pytest.raises(ConfigError, match="more than once"):
        data(root, class_list=str(list_file))
