"""docs/extending.md is real: each of its code blocks runs as written, in a module of its own, and
what it registers is picked up by every generic test (tests/generic.py) without another line.

The loss, the method and the metric of the doc are run through the generic test files in-process
(``pytest.main`` with ``-k <name> -m "not slow"``): every generic test that takes a loss (a method,
a metric) must have a case for the new one, and every such case must pass. The datamodule runs through the
contract test with the builder the doc says to add. A registered class with required constructor
arguments and no ``examples`` fails the generic tests with a message saying to declare them.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest
import torch

from ssl_app.losses import ContrastiveLoss
from ssl_app.metrics import EMBEDDING_METRICS, EmbeddingInputs, evaluate_metrics
from ssl_app.registry import DATAMODULES, LOSSES, METHODS
from tests.generic import GENERIC_ARGUMENTS, LossCase, generic_test_files

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "extending.md"
SECTIONS = {"A loss": "MarginNCE", "A method": "OneWaySimCLR", "A metric": "centroid_norm", "A datamodule": "StripesDataModule"}


def python_blocks() -> dict[str, str]:
    """The ```python block of each ``## `` section of the doc, by section title."""
    text = DOC.read_text(encoding="utf-8")
    found = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        title = section.splitlines()[0].strip()
        blocks = re.findall(r"```python\n(.*?)```", section, re.S)
        if blocks:
            assert len(blocks) == 1, f"docs/extending.md, {title}: one code block per section"
            found[title] = blocks[0]
    return found


@pytest.fixture
def doc_module(tmp_path, monkeypatch):
    """``load(section, module)``: the doc's block of ``section`` saved as ``<module>.py`` and imported
    (registering what it defines); every entry it registered, embedding metrics included, is removed
    afterwards."""
    registries = (LOSSES, METHODS, DATAMODULES)
    before = [set(registry) for registry in registries]
    metrics_before = set(EMBEDDING_METRICS)
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded = []

    def load(section: str, module: str):
        (tmp_path / f"{module}.py").write_text(python_blocks()[section], encoding="utf-8")
        loaded.append(module)
        return importlib.import_module(module)

    yield load
    for registry, names in zip(registries, before):
        for name in set(registry) - names:
            registry.unregister(name)
    for name in set(EMBEDDING_METRICS) - metrics_before:
        del EMBEDDING_METRICS[name]
    for module in loaded:
        sys.modules.pop(module, None)


class Recorder:
    """A plugin for a nested ``pytest.main``: every collected item (before ``-k``/``-m`` deselect) and
    every report."""

    def __init__(self) -> None:
        self.items: list = []
        self.reports: list = []

    def pytest_itemcollected(self, item) -> None:
        self.items.append(item)

    def pytest_runtest_logreport(self, report) -> None:
        self.reports.append(report)


def run_generic_tests(name: str, tmp_path: Path, files: list[Path] | None = None) -> Recorder:
    """The generic test files (tests/generic.py) in this process, ``-k name``, without the slow tests."""
    recorder = Recorder()
    paths = [str(path) for path in (files or generic_test_files())]
    # `-o addopts=-ra`: in this process, not in the test processes pyproject.toml's addopts would start
    args = [
        *paths,
        "-k",
        name,
        "-m",
        "not slow",
        "-q",
        "-o",
        "addopts=-ra",
        "-p",
        "no:cacheprovider",
        f"--basetemp={tmp_path / 'inner'}",
    ]
    pytest.main(args, plugins=[recorder])
    return recorder


def function(item) -> str:
    """A test function's node id without its parameters."""
    return item.nodeid.split("[")[0]


def missing_cases(recorder: Recorder, arguments: tuple[str, ...], name: str) -> list[str]:
    """The generic test functions taking one of ``arguments`` that have no case of ``name``."""
    taking = {function(item) for item in recorder.items if set(arguments) & set(getattr(item, "fixturenames", ()))}
    covered = {
        function(item)
        for item in recorder.items
        if hasattr(item, "callspec")
        and any(getattr(item.callspec.params.get(argument), "name", None) == name for argument in arguments)
    }
    return sorted(taking - covered)


def assert_every_case_passed(recorder: Recorder, name: str) -> None:
    ran = [report for report in recorder.reports if report.when == "call"]
    failed = [f"{report.nodeid}: {report.longreprtext[-1500:]}" for report in recorder.reports if report.failed]
    assert not failed, "\n\n".join(failed)
    assert ran and all(name in report.nodeid for report in ran)


def test_the_doc_has_a_block_for_each_kind_and_each_block_is_run_here():
    """Catches a code block added to the doc that no test runs (it could rot unseen)."""
    assert set(python_blocks()) == set(SECTIONS)
    for section, name in SECTIONS.items():
        assert name in python_blocks()[section], section


def test_the_doc_s_loss_is_one_file_and_runs_through_every_generic_test(doc_module, tmp_path):
    """Catches a generic test that a new loss escapes (its cases fixed when its module was imported,
    not read from the registry at collection) and a generic test that cannot run a loss it has never
    seen (MarginNCE: InfoNCE with an additive margin on the positives; the package has no such loss)."""
    module = doc_module("A loss", "margin_nce_loss")
    assert LOSSES["MarginNCE"].target is module.MarginNCE
    recorder = run_generic_tests("MarginNCE", tmp_path)
    assert not missing_cases(recorder, ("loss_case", "loss_first_case"), "MarginNCE")
    assert_every_case_passed(recorder, "MarginNCE")
    names = {function(item).rsplit("::", 1)[1] for item in recorder.items if "MarginNCE" in item.nodeid}
    assert {
        "test_fp16_autocast_with_a_gradient_scaler_stays_finite_at_small_temperature",
        "test_each_loss_trains_through_the_cli",
    } <= names


def test_the_doc_s_method_is_one_file_and_runs_through_every_generic_test(doc_module, tmp_path):
    """Catches a generic test that a new method escapes, or cannot run."""
    module = doc_module("A method", "one_way_methods")
    assert METHODS["OneWaySimCLR"].target is module.OneWaySimCLR
    recorder = run_generic_tests("OneWaySimCLR", tmp_path)
    assert not missing_cases(recorder, ("method_case",), "OneWaySimCLR")
    assert_every_case_passed(recorder, "OneWaySimCLR")


def test_the_doc_s_datamodule_meets_the_contract_with_the_builder_the_doc_names(doc_module, tmp_path, monkeypatch):
    """Catches a datamodule example that breaks the loaders' contract, and a contract test that
    does not pick up a newly registered datamodule."""
    from tests.datamodules import test_contract

    module = doc_module("A datamodule", "stripes_data")
    assert DATAMODULES["StripesDataModule"].capabilities == {"num_classes": 2}
    builder = '"StripesDataModule": lambda root, monkeypatch: StripesDataModule(size=12, batch_size=BATCH, num_workers=0)'
    assert builder in DOC.read_text(encoding="utf-8")
    namespace = {"StripesDataModule": module.StripesDataModule, "BATCH": test_contract.BATCH}
    monkeypatch.setitem(test_contract.OFFLINE, "StripesDataModule", eval("{" + builder + "}", namespace)["StripesDataModule"])
    recorder = run_generic_tests("StripesDataModule", tmp_path)
    assert not missing_cases(recorder, ("datamodule_entry",), "StripesDataModule")
    assert_every_case_passed(recorder, "StripesDataModule")


def test_the_doc_s_metric_is_one_file_and_runs_through_every_generic_metric_test(doc_module, tmp_path):
    """Catches a generic metric test that a new metric escapes (its cases read from the registry at
    collection) or cannot run, and a metric example that does not register or computes something
    else than its formula (the norm of the mean unit row: 1 for rows of one direction)."""
    module = doc_module("A metric", "centroid_metric")
    metric = EMBEDDING_METRICS["centroid_norm"]
    assert metric.compute is module._centroid_norm and metric.reads == ("clean",)
    recorder = run_generic_tests("centroid_norm", tmp_path)
    assert not missing_cases(recorder, ("metric_case",), "centroid_norm")
    assert_every_case_passed(recorder, "centroid_norm")
    names = {function(item).rsplit("::", 1)[1] for item in recorder.items if "centroid_norm" in item.nodeid}
    assert {"test_it_reads_only_the_inputs_it_declares", "test_too_few_rows_of_any_input_it_reads_leave_every_field_nan"} <= names
    g = torch.Generator().manual_seed(0)
    clean = 3 * torch.randn(12, 4, generator=g)
    inputs = EmbeddingInputs(clean=clean, labels=torch.arange(12) % 3, view_a=clean, view_b=clean, top_k=3)
    unit = clean.double() / clean.double().norm(dim=1, keepdim=True)
    assert evaluate_metrics(inputs).scalars()["centroid_norm"] == pytest.approx(unit.mean(dim=0).norm().item(), rel=1e-6)
    one_way = clean[:1] * torch.arange(1.0, 6.0).view(5, 1)  # five rows of one direction, different norms
    one_way = EmbeddingInputs(clean=one_way, labels=torch.zeros(5, dtype=torch.long), view_a=one_way, view_b=one_way)
    assert evaluate_metrics(one_way).value("centroid_norm") == pytest.approx(1.0)


class NeedsK(ContrastiveLoss):
    """A loss with a required constructor argument and no examples."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k


def test_a_loss_with_required_arguments_and_no_examples_fails_saying_to_declare_them(tmp_path):
    """Catches a registered loss that the generic tests silently skip, or fail with a bare
    ``TypeError``, because they cannot build it."""
    with pytest.raises(
        pytest.fail.Exception, match=r"NeedsK has required constructor arguments \(k\) but it declares no examples"
    ):
        LossCase(LOSSES.register(NeedsK) and LOSSES["NeedsK"], {}).build()
    try:
        recorder = run_generic_tests("NeedsK", tmp_path, [REPO / "tests" / "ssl_app" / "losses" / "test_loss_contracts.py"])
    finally:
        LOSSES.unregister("NeedsK")
    failed = [report for report in recorder.reports if report.failed]
    assert failed and len(failed) == len([report for report in recorder.reports if report.when == "call"])
    for report in failed:
        assert "declare `examples = ({'k': ...},)` on the class" in report.longreprtext, report.longreprtext[-800:]


def test_the_generic_arguments_are_taken_by_the_generic_test_files():
    """Catches a generic argument no test takes any more (its cases would run nowhere)."""
    sources = "".join(path.read_text(encoding="utf-8") for path in generic_test_files())
    for argument in GENERIC_ARGUMENTS:
        assert re.search(rf"\b{argument}\b", sources), argument
