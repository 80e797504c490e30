"""The paper's Table 1 in code equals the one in docs/science.md, and configurations find their cell."""

from __future__ import annotations

import re

import pytest

from ssl_app.report.reference import DATA_SETS, TABLE1, column_of, data_set_of, reference_cell
from ssl_app.runs.spec import RunSpec
from tests.ssl_app.cli.test_cli import REPO
from tests.ssl_app.report.fakes import run_config

DOC_DATA_SETS = {"C10": "cifar10", "C100": "cifar100", "SVHN": "svhn", "IN-100": "imagenet100"}
DOC_METRICS = {"acc": "linear_top1", "unif": "uniformity", "tol": "tolerance"}
DOC_LOSSES = {"InfoNCE": "InfoNCE", "Hard": "HardContrastive", "Simple": "Simple", "HardSimple": "HardSimple"}


def docs_table1() -> dict:
    """docs/science.md's "Their Table 1", parsed into TABLE1's shape."""
    text = (REPO / "docs" / "science.md").read_text(encoding="utf-8")
    section = text.split("## Their Table 1", 1)[1].split("\n## ", 1)[0]  # to the next section: its tables are others
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    fields = [(DOC_DATA_SETS[h.split()[0]], DOC_METRICS[h.split()[1]]) for h in header[1:]]
    table: dict = {name: {} for name in DATA_SETS}
    for line in lines[1:]:
        label, *numbers = (cell.strip() for cell in line.strip("|").split("|"))
        found = re.fullmatch(r"(\w+)(?: τ = ([\d.]+))?", label)
        column = (DOC_LOSSES[found.group(1)], float(found.group(2)) if found.group(2) else None)
        for (data_set, metric), number in zip(fields, numbers, strict=True):
            table[data_set].setdefault(column, {})[metric] = float(number)
    return table


def test_the_code_table_equals_the_docs_table():
    """Catches a number edited in docs/science.md or in reference.py but not in the other."""
    parsed = docs_table1()
    assert sum(len(columns) for columns in parsed.values()) == 40  # 10 columns × 4 data sets
    assert parsed == TABLE1


def settings(data: str, **data_args) -> RunSpec:
    return RunSpec.from_config(run_config("InfoNCE", 0, 0.3, data=f"datamodules.{data}", data_args=data_args))


@pytest.mark.parametrize(
    ("data", "data_args", "expected"),
    [
        ("CIFAR10DataModule", {}, "cifar10"),
        ("CIFAR100DataModule", {}, "cifar100"),
        ("SVHNDataModule", {}, "svhn"),
        ("ImageFolderDataModule", {"class_list": "configs/imagenet/imagenet100.txt"}, "imagenet100"),
        ("ImageFolderDataModule", {"class_list": "/data/ImageNet-100_classes.txt"}, "imagenet100"),
        ("ImageFolderDataModule", {"class_list": "my_classes.txt"}, None),
        ("ImageFolderDataModule", {}, None),
        ("STL10DataModule", {}, None),
        ("SyntheticDataModule", {}, None),
    ],
)
def test_the_data_set_comes_from_the_data_class_and_the_class_list(data, data_args, expected):
    """Catches a data set detected from something else (an image folder without the ImageNet-100 list
    compared with the paper's ImageNet-100, or STL-10 taken for CIFAR)."""
    assert data_set_of(settings(data, **data_args)) == expected


def test_a_column_is_the_loss_class_and_its_temperature():
    """Catches τ ignored (every InfoNCE run compared with τ=0.07) or Simple required to have a τ."""
    assert column_of("InfoNCE", 0.3) == ("InfoNCE", 0.3)
    assert column_of("HardContrastive", 1.0) == ("HardContrastive", 1.0)
    assert column_of("InfoNCE", 0.5) is None
    assert column_of("Simple", None) == ("Simple", None)
    assert column_of("HardSimple", None) == ("HardSimple", None)
    assert column_of("PaCo", 0.07) is None


def test_reference_cell_names_what_did_not_match():
    """Catches a run with no cell compared with some other cell, or left without a reason."""
    cell = reference_cell(settings("CIFAR100DataModule"), "InfoNCE", 0.3)
    assert cell.name == "cifar100 / InfoNCE τ=0.3" and cell.value("linear_top1") == 56.44
    svhn = reference_cell(settings("SVHNDataModule"), "Simple", None)
    assert svhn.value("linear_top1") == 70.83 and svhn.value("uniformity") is None
    off_grid = reference_cell(settings("CIFAR10DataModule"), "InfoNCE", 0.5)
    assert off_grid.values is None and off_grid.name == "—" and "InfoNCE τ=0.5" in off_grid.why_not
    synthetic = reference_cell(settings("SyntheticDataModule"), "InfoNCE", 0.3)
    assert synthetic.values is None and "SyntheticDataModule" in synthetic.why_not
