"""The README's table of logged tags against the code, both ways: every scalar tag the code can log
is in the table, and every tag in the table can be logged.

What the code can log is worked out from the code itself, not listed here: every ``self.log`` /
``pl_module.log`` / ``log_dict`` call in ``ssl_app/`` and ``callbacks/`` is found by parsing the
source. A call with a literal tag gives that tag; a call whose tag is computed must be one of
``computed_tags``' call sites, whose tags come from where the code gets them: the metric registry
(at the default ``top_k``), the ``stats`` of every registered loss after a call with ``with_stats``, the
long-tail groups. A new call site the test cannot read fails, naming its file and line.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ssl_app.methods.observer import LOGGED_ON_CHANGE
from ssl_app.metrics import DEFAULT_TOP_K, registered_fields
from ssl_app.metrics.long_tail import GROUPS, group_accuracies
from ssl_app.runs.tags import HEADLINE_SERIES, describe
from tests.generic import handover, loss_cases

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("ssl_app", "callbacks")
README = REPO / "README.md"
TABLE_SECTION = "## What you see in TensorBoard"
# The objects whose ``log``/``log_dict`` is Lightning's: a module logging itself, a callback logging through it.
LOGGERS = {"self", "pl_module"}

N, FEATURES = 8, 16


def loss_stat_keys() -> set[str]:
    """Every diagnostic key of every registered loss, in each of its ``examples`` (tests/generic.py),
    after a call with ``with_stats`` (two views of N/2 samples)."""
    torch.manual_seed(0)
    z = F.normalize(torch.randn(N, 16), dim=1)
    features = torch.randn(N, FEATURES)
    keys = set()
    for case in loss_cases():
        loss = case.ready(FEATURES)
        stats = loss(handover(loss, z @ z.T, torch.arange(N // 2) % 3, features=features), with_stats=True).stats
        assert stats, f"{case.id} logged no statistics"
        keys |= set(stats)
    return keys


def long_tail_names() -> set[str]:
    """The names ``LongTailAccuracy`` logs under ``lt/``: what ``group_accuracies`` returns when every group has a class."""
    ones = torch.ones(len(GROUPS))
    return set(group_accuracies(ones, ones, {group: [index] for index, group in enumerate(GROUPS)}))


def computed_tags() -> dict[tuple[str, str], set[str]]:
    """The tags of each call site whose tag is computed: ``(file, source of the tag argument) -> tags``."""
    loss_keys = loss_stat_keys()
    registry = {f"metrics/{metric.tag(name, DEFAULT_TOP_K)}" for metric, name in registered_fields()}
    return {
        # The method's observer logs train/loss_step and train/loss_epoch (literal tags) on training steps, these on
        # validation and test batches: the loss and what the loss measures of itself (PaCo's classifier top-1).
        ("ssl_app/methods/observer.py", "f'{stage}/loss'"): {f"{stage}/loss" for stage in ("val", "test")},
        ("ssl_app/methods/observer.py", "f'{stage}/{name}'"): {f"{stage}/classifier_top1" for stage in ("val", "test")},
        ("ssl_app/methods/observer.py", "stats"): {f"loss/{key}" for key in loss_keys} | {"loss/temperature"},
        ("ssl_app/methods/observer.py", "steady"): set(LOGGED_ON_CHANGE),
        ("callbacks/embedding_metrics.py", "name"): registry | {"metrics/nonfinite", "metrics/collapsed"},
        ("callbacks/long_tail.py", "f'lt/{name}'"): {f"lt/{name}" for name in long_tail_names()},
        # The kNN monitor and the probe log the groups only (their pooled top-1 is knn_acc, linear/top1).
        ("callbacks/knn.py", "f'metrics/knn_{name}'"): {f"metrics/knn_{name}" for name in GROUPS},
        ("ssl_app/evaluation/linear.py", "f'linear/{name}'"): {f"linear/{name}" for name in GROUPS},
    }


def log_calls() -> list[tuple[str, int, ast.expr]]:
    """``(file, line, tag argument)`` of every Lightning ``log``/``log_dict`` call in the app's code."""
    found = []
    for package in SOURCES:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("log", "log_dict")
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in LOGGERS
                    and node.args
                ):
                    found.append((path.relative_to(REPO).as_posix(), node.lineno, node.args[0]))
    return found


def loggable_tags() -> tuple[set[str], list[str]]:
    """``(every tag the code can log, the call sites whose tag could not be worked out)``."""
    computed = computed_tags()
    tags, unread = set(), []
    for path, line, argument in log_calls():
        if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
            tags.add(argument.value)
        elif (path, ast.unparse(argument)) in computed:
            tags |= computed[(path, ast.unparse(argument))]
        else:
            unread.append(f"{path}:{line}: {ast.unparse(argument)}")
    # The TensorBoard logger repeats the headline tags under the group Time Series opens first (ssl_app.runs.panel).
    tags |= {copy for source, copy in HEADLINE_SERIES.items() if source in tags}
    return tags, unread


def readme_tags() -> set[str]:
    """The tags in the first column of the README's table under "What you see in TensorBoard"."""
    text = README.read_text(encoding="utf-8")
    assert TABLE_SECTION in text, f"README.md has no section {TABLE_SECTION!r}"
    lines = text.split(TABLE_SECTION, 1)[1].splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("| tag |"))
    tags = set()
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        tags |= set(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return tags


@pytest.fixture(scope="module")
def code_tags() -> set[str]:
    tags, _ = loggable_tags()
    return tags


def test_every_log_call_has_a_tag_the_test_can_work_out():
    """Catches a new ``log`` call with a computed tag that would escape the README check."""
    calls = log_calls()
    assert len(calls) >= 10  # the walk sees the calls (they exist in methods, callbacks, health, the probe)
    _, unread = loggable_tags()
    assert not unread, "teach tests/test_tags.py:computed_tags what these log: " + "; ".join(unread)
    sites = {(path, ast.unparse(argument)) for path, _, argument in calls}
    stale = set(computed_tags()) - sites
    assert not stale, f"computed_tags names call sites that no longer exist: {sorted(stale)}"


def test_every_tag_the_code_can_log_is_in_the_readme_table(code_tags):
    """Catches a metric, loss diagnostic or callback tag that is logged but documented nowhere
    (as ``loss/used_neg_sim`` was)."""
    assert {"metrics/top10_neg_sim", "metrics/knn_acc", "loss/effective_negatives", "health/nonfinite_skips"} <= code_tags
    missing = code_tags - readme_tags()
    assert not missing, f"logged but not in README.md's table ({TABLE_SECTION}): {sorted(missing)}"


def test_every_tag_in_the_readme_table_can_be_logged(code_tags):
    """Catches a tag the README still lists after the code renamed or dropped it (``loss/neg_sim``)."""
    documented = readme_tags()
    assert len(documented) >= 20  # the parser found the table
    stale = documented - code_tags
    assert not stale, f"in README.md's table but logged by nothing: {sorted(stale)}"


def test_every_loggable_scalar_has_a_description(code_tags):
    """Catches a new tag (a loss's new diagnostic, a new callback scalar) that TensorBoard would show
    without the one-line description ``ssl_app.runs.tags`` gives every other."""
    missing = sorted(tag for tag in code_tags if not describe(tag))
    assert not missing, f"add these to ssl_app/runs/tags.py DESCRIPTIONS: {missing}"
