"""A class given by its name alone (``ssl_app.cli.short_names``): refused only when the parser cannot resolve it,
with the classes it may have meant, before Lightning is imported and in the parser's own error alike (issue 40)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ssl_app.cli.short_names import (
    SHORT_NAME_OPTIONS,
    class_path_packages,
    offered_paths,
    short_name_problem,
)
from tests.ssl_app.cli.test_early_values import GOOD_CLASSES
from tests.ssl_app.cli.test_entry import QUICKSTART, REPO

#: Run in a fresh process: the parser on each good value, then each option's subclasses jsonargparse would resolve by
#: name that no ``class`` statement of the packages read names (in the suite's process, a test's or a benchmark's
#: own subclass, ``RecordingLogger`` or ``SyncListing``, would be among them: no user's class).
RESOLVED_NOT_KNOWN = """
import contextlib, io, json, sys
from jsonargparse._typehints import get_all_subclass_paths
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger
from ssl_app.cli.app import main
from ssl_app.cli.short_names import SHORT_NAME_OPTIONS, class_names
quickstart, given = sys.argv[1], json.loads(sys.argv[2])
for value in given:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(["fit", "--config", quickstart, value, "--print_config"])
found = {}
for option, base in (("trainer.logger", Logger), ("trainer.callbacks", Callback)):
    resolved = {path.rpartition(".")[2] for path in get_all_subclass_paths(base, include_abstract=True)}
    found[option] = [len(resolved), sorted(resolved - class_names(SHORT_NAME_OPTIONS[option].scanned))]
print(json.dumps(found))
"""


@pytest.mark.slow
def test_every_class_the_parser_can_resolve_by_name_is_known_from_source():
    """Catches a false refusal: a subclass of the logger's or a callback's type the parser has imported (and so
    resolves by its name alone) whose ``class`` statement lies outside the packages read (a new package imported by
    the app, a class made by a call). The parser runs first, so that what it imports is imported."""
    result = subprocess.run(
        [sys.executable, "-c", RESOLVED_NOT_KNOWN, QUICKSTART, json.dumps(GOOD_CLASSES)],
        capture_output=True, text=True, cwd=REPO, check=True, timeout=300,
    )  # fmt: skip
    found = json.loads(result.stdout.strip().splitlines()[-1])
    for option, (resolved, unknown) in found.items():
        assert resolved > 0 and unknown == [], (option, unknown)


def test_what_is_offered_is_a_subclass_of_the_option_s_type():
    """Catches "did you mean" offering a class the parser would refuse for the option: ``LitLogger`` derives from
    Fabric's ``Logger``, not Lightning's; ``CollapseCriteria`` (exported by ``callbacks``) is no callback."""
    loggers = offered_paths(SHORT_NAME_OPTIONS["trainer.logger"])
    callbacks = offered_paths(SHORT_NAME_OPTIONS["trainer.callbacks"])
    assert "lightning.pytorch.loggers.TensorBoardLogger" in loggers and "lightning.pytorch.loggers.CSVLogger" in loggers
    assert "lightning.pytorch.loggers.LitLogger" not in loggers
    assert {"callbacks.KNNMonitor", "callbacks.EmbeddingMetrics", "lightning.pytorch.callbacks.LearningRateMonitor"} <= set(
        callbacks
    )
    assert "callbacks.CollapseCriteria" not in callbacks


@pytest.mark.parametrize("value", ["false", "True", "null", "1", "TensorBoardLogger", "Logger", "a.b", "[x]"])
def test_a_value_that_is_no_unknown_name_alone_is_let_through(value):
    """Catches ``false`` (no logger), a known name or a class path refused as a misspelled class's name."""
    assert short_name_problem("trainer.logger", value) is None


def test_a_class_of_a_package_a_config_names_is_let_through(tmp_path, monkeypatch):
    """Catches a user's callback, imported by the parser for a config's class path and then resolved by its name
    alone, refused because the packages read are only ours and Lightning's."""
    package = tmp_path / "mycallbacks"
    package.mkdir()
    (package / "__init__.py").write_text("from lightning.pytorch import Callback\n\n\nclass UserRunHook(Callback):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("mycallbacks", None)
    tree = {"trainer": {"callbacks": [{"class_path": "mycallbacks.UserRunHook"}, {"class_path": "callbacks.KNNMonitor"}]}}
    assert class_path_packages(tree) == ["mycallbacks", "callbacks"]
    assert short_name_problem("trainer.callbacks", "UserRunHook", class_path_packages(tree)) is None
    assert short_name_problem("trainer.callbacks", "UserRunHook") == "no Callback class is named UserRunHook"


def test_the_parser_s_expected_a_path_for_a_name_alone_is_said_as_the_early_check_says_it():
    """Catches the parser's own error (a config's value, or a name the early check could not settle) still saying
    ``Expected a path but TensorBoardLoger either not accessible or invalid``; a name the parser knows but refuses
    (``Logger`` is abstract) keeps its own line."""
    from ssl_app.cli.parsing import with_suggestion

    line = "trainer.logger: Expected a path but TensorBoardLoger either not accessible or invalid"
    assert with_suggestion(line, None) == (  # type: ignore[arg-type] - the parser is read only for options
        "trainer.logger: no Logger class is named TensorBoardLoger; did you mean lightning.pytorch.loggers.TensorBoardLogger?"
    )
    as_class_path = "trainer.logger: Expected a dot import path string: TensorBoardLoger"  # ``….class_path=`` given it
    assert with_suggestion(as_class_path, None) == with_suggestion(line, None)  # type: ignore[arg-type]
    known = "trainer.logger: Expected a path but Logger either not accessible or invalid"
    assert with_suggestion(known, None) == known  # type: ignore[arg-type]
