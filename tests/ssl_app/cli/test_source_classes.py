"""Class paths and registries read from source (``ssl_app.cli.source_classes``): the same answers as importing
(``ssl_app.cli.suggest``), or unsettled (then the early check imports, as before)."""

from __future__ import annotations

import sys
import textwrap

import pytest

from ssl_app import registry
from ssl_app.cli import source_classes, suggest
from ssl_app.cli.given_config import given_tree
from tests.ssl_app.cli.test_entry import REPO


def test_the_registries_read_from_source_are_the_registries():
    """Catches a registered class missing from "did you mean" (a new module, a decorator form not read) or one the
    registry does not hold, and a registry moved to another package."""
    for name, package in source_classes.REGISTRY_PACKAGES.items():
        assert getattr(registry, name).package == package
        assert (name in source_classes.SELECTED_BY_NAME) == (getattr(registry, name).select_by == "name")
        assert sorted(source_classes.registered_values(name) or []) == sorted(suggest.registered_values(name)), name


def shipped_class_paths() -> set[str]:
    found = set()

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "class_path" and isinstance(value, str):
                    found.add(value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for config in (REPO / "configs").rglob("*.yaml"):
        walk(given_tree(["--config", str(config)], REPO))
    return found


MISSPELLED = [
    "ssl_app.losses.InfoNCe",
    "ssl_app.loses.InfoNCE",
    "ssl_app.methods.SimCLr",
    "datamodules.SyntheticDatamodule",
    "ssl_app.temperature.Cosin",
    "ssl_app.losses.info_nce",
    "torch.optim.SGDD",
    "lightning.pytorch.loggers.TensorBoardLoger",
    "lightning.pytorch.logger.TensorBoardLogger",
    "no_such_package.Thing",
]


@pytest.mark.parametrize("option", ["--model.init_args.loss", "--model", "--trainer.logger.class_path"])
def test_class_paths_told_from_source_are_told_as_importing_tells_them(option):
    """Catches the early check refusing a class path the parser takes (a shipped one: a class imported into a
    package, a logger), or wording its refusal differently from the parser's (which imports to tell)."""
    values = sorted(shipped_class_paths()) + MISSPELLED
    assert len(values) > 15
    settled = 0
    for value in values:
        problem = source_classes.class_path_problem(value)
        if problem is source_classes.UNSETTLED:
            continue
        settled += 1
        assert problem == suggest.class_path_problem(value), value
        if problem is not None:
            hint = source_classes.class_suggestion(option, value)
            if hint is not source_classes.UNSETTLED:
                assert hint == suggest.class_suggestion(option, value), value
    assert settled == len(values)


def test_what_the_source_cannot_tell_is_unsettled(tmp_path, monkeypatch):
    """A module with ``import *``, a module ``__getattr__``, a name bound by an assignment, a package that adds
    submodules itself: unsettled, never refused on a guess; a plain module's missing class is told, unimported."""
    package = tmp_path / "made_up_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .plain import Plain\nimport sys\nsys.modules['made_up_pkg.extra'] = sys\n")
    (package / "plain.py").write_text("class Plain:\n    pass\n\nAlias = Plain\n\ndef helper():\n    pass\n")
    (package / "starred.py").write_text("from made_up_pkg.plain import *\n")
    (package / "lazy.py").write_text(
        textwrap.dedent("""
        def __getattr__(name):
            raise AttributeError(name)
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    unsettled = source_classes.UNSETTLED
    assert source_classes.class_path_problem("made_up_pkg.Plain") is None
    assert source_classes.class_path_problem("made_up_pkg.plain.Plane") == "made_up_pkg.plain has no class Plane"
    assert source_classes.class_path_problem("made_up_pkg.plain.helper") == "made_up_pkg.plain has no class helper"
    assert source_classes.class_path_problem("made_up_pkg.plain.Alias") is unsettled
    assert source_classes.class_path_problem("made_up_pkg.starred.Plane") is unsettled
    assert source_classes.class_path_problem("made_up_pkg.lazy.Anything") is unsettled
    assert source_classes.class_path_problem("made_up_pkg.extra.Thing") is unsettled
    assert "made_up_pkg" not in sys.modules
