"""The registries are the lists: complete, one entry per name, read from class attributes."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import get_args

import pytest

from datamodules import DATAMODULES, ContrastiveDataModule
from ssl_app.losses import LOSSES, ContrastiveLoss
from ssl_app.methods import METHODS
from ssl_app.models import BACKBONES, BackboneName
from ssl_app.registering import Registry
from ssl_app.temperature import TEMPERATURES
from tests.registries import each

REPO = Path(__file__).resolve().parents[2]

CLASS_REGISTRIES = [pytest.param(registry, id=registry.kind) for registry in (LOSSES, METHODS, DATAMODULES)]
ALL_REGISTRIES = [*CLASS_REGISTRIES, pytest.param(BACKBONES, id="backbones")]


def scratch(package: str = "ssl_app.losses") -> Registry:
    """An empty registry of losses (a real one must not keep what a test registers)."""
    return Registry(
        "losses",
        "--model.init_args.loss",
        package=package,
        base=ContrastiveLoss,
        capabilities=("uses_labels", "needs_anchor_features"),
    )


class Documented(ContrastiveLoss):
    """A loss for these tests."""


class AlsoDocumented(ContrastiveLoss):
    """Another loss for these tests."""


class LabelLoss(Documented):
    """A loss that declares label positives."""

    uses_labels = True


@pytest.mark.parametrize("registry", CLASS_REGISTRIES)
def test_every_exported_subclass_is_registered(registry):
    """Catches a loss, method or datamodule added to its package's ``__all__`` without its
    registration line: it would be missing from ``list`` and from every registry-driven test."""
    missing = registry.unregistered()
    assert not missing, (
        f"exported by {registry.package} but not in its registry: {', '.join(missing)}; register each with "
        f"@{registry.kind.upper()}.register above the class (ssl_app/registry.py)"
    )


def test_the_completeness_check_names_an_unregistered_export(monkeypatch):
    """Catches ``unregistered`` looking in the wrong place or matching by name instead of by
    class: an exported subclass that is not registered must be named (the base class is not)."""
    package = types.ModuleType("fake_losses")
    package.ContrastiveLoss, package.Documented, package.AlsoDocumented = ContrastiveLoss, Documented, AlsoDocumented
    package.__all__ = ["ContrastiveLoss", "Documented", "AlsoDocumented"]
    monkeypatch.setitem(sys.modules, "fake_losses", package)
    registry = scratch("fake_losses")
    registry.register(Documented)
    assert registry.unregistered() == ["fake_losses.AlsoDocumented"]


def test_a_taken_name_is_one_error_naming_both():
    """Catches a second registration silently replacing the first (the list would lose a class)."""
    registry = scratch()
    registry.register(Documented)
    with pytest.raises(ValueError) as error:
        registry.register(AlsoDocumented, name="Documented")
    message = str(error.value)
    assert f"{__name__}.AlsoDocumented" in message and f"{__name__}.Documented is already registered" in message
    assert registry["Documented"].target is Documented


def test_one_class_is_one_entry_and_registering_it_again_changes_nothing():
    """Catches a class listed twice under two names, and an error when its line appears both in the
    package's ``__init__`` and above the class (the state while a registration moves)."""
    registry = scratch()
    assert registry.register(Documented) is Documented
    assert registry.register(Documented) is Documented
    assert registry.names() == ["Documented"]
    with pytest.raises(ValueError, match="already registered as 'Documented'"):
        registry.register(Documented, name="Alias")


def test_the_decorator_returns_the_class_and_takes_the_docstring_s_first_line():
    """Catches a decorator that returns None (the module's class would be replaced by None) or a
    summary taken from anywhere but the class's own docstring."""
    registry = scratch()

    @registry.register
    class Decorated(ContrastiveLoss):
        """
        First line, after a blank one.

        More that the list does not show.
        """

    @registry.register(name="renamed", summary="Given summary.")
    class Other(ContrastiveLoss):
        """Not this."""

    assert isinstance(Decorated, type) and registry["Decorated"].summary == "First line, after a blank one."
    assert registry["renamed"].target is Other and registry["renamed"].summary == "Given summary."


def test_a_class_without_its_own_docstring_is_refused():
    """Catches a summary inherited from the base class (every undocumented loss would read as
    "Base class of the loss strategies.") or an empty line in the list."""
    registry = scratch()

    class Undocumented(ContrastiveLoss):
        pass

    with pytest.raises(ValueError, match="Undocumented: it has no docstring"):
        registry.register(Undocumented)
    assert "Undocumented" not in registry


@pytest.mark.parametrize("wrong", [METHODS["SimCLR"].target, "InfoNCE", Documented()])
def test_what_is_not_a_subclass_of_the_base_is_refused(wrong):
    """Catches a method registered as a loss, a class path string, or an instance instead of its class."""
    with pytest.raises(TypeError, match="can only register subclasses of ssl_app.losses.base.ContrastiveLoss"):
        scratch().register(wrong)


def test_an_unknown_name_is_one_error_listing_the_registered_ones():
    """Catches a bare ``KeyError('X')`` that does not say what exists."""
    with pytest.raises(KeyError, match="no losses entry named 'Nope'; registered: InfoNCE, HardContrastive, Simple"):
        LOSSES["Nope"]
    with pytest.raises(KeyError, match="no losses entry named 'Nope'"):
        scratch().unregister("Nope")


def test_capabilities_are_class_attributes_not_names():
    """Catches capabilities guessed from names, or a property (computed per instance) shown as a
    declaration."""
    assert LOSSES["SupCon"].capabilities == {"uses_labels": True, "needs_anchor_features": False, "needs_embedding_norms": False}
    assert LOSSES["PaCo"].capabilities == {"uses_labels": True, "needs_anchor_features": True, "needs_embedding_norms": False}
    assert LOSSES["Spectral"].capabilities["needs_embedding_norms"] is True
    assert LOSSES["HardSimple"].capabilities["same_as_with_every_negative"] == "Simple"  # None: not declared, left out
    registry = scratch()
    registry.register(LabelLoss, name="InfoNCE_like_name")
    assert registry["InfoNCE_like_name"].capabilities == {"uses_labels": True, "needs_anchor_features": False}
    assert METHODS["MemoryBank"].capabilities == {"train_views": 1}
    assert DATAMODULES["CIFAR100DataModule"].capabilities == {"num_classes": 100}
    assert DATAMODULES["SyntheticDataModule"].capabilities == {}  # num_classes is an option there
    by_property = Registry("data", "--data", package="datamodules", base=ContrastiveDataModule,
                           capabilities=("num_classes",))  # fmt: skip
    by_property.register(DATAMODULES["CIFAR10DataModule"].target)
    assert by_property["CIFAR10DataModule"].capabilities == {}  # a property, not a declaration


def test_a_registry_read_first_thing_in_a_fresh_process_is_complete():
    """Catches a registry read before its package was imported (``python -m ssl_app list`` in a fresh
    process, or a plug-in's ``from ssl_app.registry import LOSSES``) coming back empty or short: each
    registry's module is inside its package, so importing it registers the built-in entries first."""
    code = (
        "import json, sys\n"
        "from ssl_app.losses.registry import LOSSES\n"
        "assert 'ssl_app.methods' not in sys.modules\n"
        "from ssl_app.registry import DATAMODULES, METHODS, TEMPERATURES, BACKBONES\n"
        "print(json.dumps([r.names() for r in (LOSSES, METHODS, DATAMODULES, TEMPERATURES, BACKBONES)]))\n"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    expected = [r.names() for r in (LOSSES, METHODS, DATAMODULES, TEMPERATURES, BACKBONES)]
    assert json.loads(found.stdout) == expected and all(expected)


def test_the_plug_in_address_hands_out_the_registries_the_packages_fill():
    """Catches ``ssl_app.registry`` (docs/extending.md's import) holding registries of its own, which the
    built-in entries never reach, or a name it does not know passing silently."""
    import ssl_app.registry as plug_ins

    assert plug_ins.LOSSES is LOSSES and plug_ins.METHODS is METHODS and plug_ins.DATAMODULES is DATAMODULES
    assert plug_ins.TEMPERATURES is TEMPERATURES and plug_ins.BACKBONES is BACKBONES
    with pytest.raises(AttributeError, match="NOTHING"):
        plug_ins.NOTHING  # noqa: B018


@pytest.mark.parametrize("registry", CLASS_REGISTRIES)
def test_each_option_names_an_importable_path_to_its_class(registry):
    """Catches an option value that jsonargparse cannot import (a qualname with ``<locals>``, a
    package path the package does not export) or that leads to another class."""
    for entry in registry.values():
        module, _, name = entry.value.rpartition(".")
        assert getattr(importlib.import_module(module), name) is entry.target, entry.option
        assert entry.option == f"{registry.option}={entry.value}"
    assert LOSSES["InfoNCE"].option == "--model.init_args.loss=ssl_app.losses.InfoNCE"  # the package's path, as the docs write it


def test_backbones_are_the_choices_the_cli_accepts():
    """Catches a backbone registered without its name in ``BackboneName`` (listed, but the CLI
    refuses it) or a choice with no builder behind it."""
    assert set(BACKBONES) == set(get_args(BackboneName))
    assert BACKBONES["resnet18_cifar"].option == "--model.init_args.backbone=resnet18_cifar"


@pytest.mark.parametrize("registry", ALL_REGISTRIES)
def test_test_ids_from_a_registry_are_the_registered_names(registry):
    """Catches registry-driven cases named ``entry0``, ``entry1``: a failure must name the class."""
    params = each(registry)
    assert [param.id for param in params] == registry.names() and params
    assert [param.values[0] for param in params] == list(registry.values())


@pytest.mark.parametrize("registry", ALL_REGISTRIES)
def test_every_built_in_entry_registers_one_way_with_the_decorator_above_it(registry):
    """Catches an entry registered a second way again (``DATAMODULES.register(Class)`` lines in a
    package's ``__init__``, as the datamodules once were): each built-in class or builder carries
    ``@<REGISTRY>.register`` in the module that defines it, and no package ``__init__`` registers."""
    name = registry.kind.upper()
    for entry in registry.values():
        source = Path(inspect.getsourcefile(entry.target))
        assert source.name != "__init__.py", entry.name
        [definition] = [
            node
            for node in ast.walk(ast.parse(source.read_text(encoding="utf-8")))
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == entry.target.__name__
        ]
        decorators = [ast.unparse(decorator) for decorator in definition.decorator_list]
        assert any(d == f"{name}.register" or d.startswith(f"{name}.register(") for d in decorators), (entry.name, decorators)
    package = Path(importlib.import_module(registry.package).__file__)
    calls = [node for node in ast.walk(ast.parse(package.read_text(encoding="utf-8"))) if isinstance(node, ast.Call)]
    assert not [ast.unparse(call) for call in calls if ast.unparse(call.func).endswith(".register")], package
