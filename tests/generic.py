"""The cases of the generic tests, read from the registries: no test names a loss, a method, a datamodule or a metric.

A test that takes one of these arguments runs once per case (``GENERIC_ARGUMENTS``):

- ``loss_case``: every loss registered in ``LOSSES``, in each of its ``examples``
  (``ContrastiveLoss.examples``), id ``InfoNCE``, ``HardContrastive-num_negatives=3``;
- ``loss_first_case``: every loss once, in its first example (for what costs too much per example),
  id the registered name;
- ``loss_group``: one loss case per set of declarations (``uses_labels``, ``needs_anchor_features``,
  ``same_as_with_every_negative``), for method tests whose path depends only on those;
- ``method_case``: every method in ``METHODS``, in each of its ``examples``
  (``ContrastiveMethod.examples``), id ``SimCLR``, ``MoCo-queue_size=16-split_bn_groups=2``;
- ``datamodule_entry``: every entry of ``DATAMODULES``, id the registered name;
- ``metric_case``: every embedding metric registered with ``ssl_app.metrics.register``
  (an ``EmbeddingMetric``), id its registered name.

A test taking two of them runs every pair. ``tests/conftest.py`` parametrises them when the tests
are collected, from the registries as they are then, so a class registered by any imported module
is picked up without a line here. ``pytest -k HardSimple`` selects every generic case of
HardSimple (and its own unit tests, whose file names carry the class's name).

A case builds fresh instances: :meth:`LossCase.build` (the loss as the example constructs it),
:meth:`LossCase.ready` (and, as a method's ``setup`` would, ``prepare``'d for tiny data: the loss's
data-sized state, e.g. PaCo's centres and prior), :meth:`MethodCase.build` (the method on a tiny
backbone and head, with any loss) and :func:`set_up` (what ``Trainer.fit`` prepares before its first
step, for the tests that then drive the method by hand). A registered class whose constructor has
required arguments that its examples do not give fails every generic test with a message saying
to declare ``examples`` (docs/extending.md).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest
import torch

from ssl_app.metrics import registered_metrics
from ssl_app.registry import DATAMODULES, LOSSES, METHODS, Entry, Registry

#: The tiny backbone and head every method case is built with (``ContrastiveMethod`` options).
TINY_MODEL: dict[str, Any] = {"backbone": "small_cnn", "proj_hidden_dim": 16, "proj_dim": 8}
#: What ``tests.helpers.tiny_data`` holds: 3 classes of 16 training images each.
NUM_CLASSES = 3
CLASS_COUNTS = (16, 16, 16)
#: The temperature at which the mixed-precision tests run every loss that has one (where s/τ in
#: half precision would lose every digit).
SMALL_TEMPERATURE = 0.01


def option_id(options: Mapping[str, Any]) -> str:
    """``-key=value`` for each option, in the order the example gives them ('' for none)."""
    return "".join(f"-{key}={value}" for key, value in options.items())


@dataclass(frozen=True)
class Case:
    """One registered class in one of its examples (constructor keyword arguments)."""

    entry: Entry
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def target(self) -> type:
        return self.entry.target

    @property
    def id(self) -> str:
        return self.name + option_id(self.options)

    def accepts(self, option: str) -> bool:
        """Whether the constructor takes a keyword argument ``option`` (e.g. ``temperature``)."""
        return option in inspect.signature(self.target).parameters

    def missing(self, given: Mapping[str, Any] = ()) -> list[str]:
        """The constructor's required arguments that neither the example nor ``given`` sets."""
        required = [
            name
            for name, parameter in inspect.signature(self.target).parameters.items()
            if parameter.default is inspect.Parameter.empty
            and parameter.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        ]
        return [name for name in required if name not in self.options and name not in given]

    def kwargs(self, **overrides: Any) -> dict[str, Any]:
        """The example's options with ``overrides``; fails the test, naming what to declare, if a
        required constructor argument is missing."""
        missing = self.missing(overrides)
        if missing:
            declared = getattr(self.target, "examples", None) is not getattr(self.entry.registry.base_class, "examples", None)
            where = (
                f"its example {dict(self.options)!r} does not give {', '.join(missing)}"
                if declared
                else "it declares no examples"
            )
            pytest.fail(
                f"{self.name} has required constructor arguments ({', '.join(missing)}) but {where}: declare "
                f"`examples = ({{{', '.join(f'{name!r}: ...' for name in missing)}}},)` on the class, the constructor "
                "arguments the generic tests build it with (docs/extending.md)",
                pytrace=False,
            )
        return {**self.options, **overrides}


@dataclass(frozen=True)
class LossCase(Case):
    """A registered loss in one of its examples."""

    def build(self, **overrides: Any):
        """A new instance of the loss as the example constructs it (``overrides`` on top)."""
        return self.target(**self.kwargs(**overrides))

    def at_small_temperature(self) -> dict[str, Any]:
        """``{"temperature": SMALL_TEMPERATURE}`` for a loss whose constructor takes one, else ``{}``."""
        return {"temperature": SMALL_TEMPERATURE} if self.accepts("temperature") else {}

    def ready(self, feature_dim: int, **overrides: Any):
        """:meth:`build`, then ``prepare`` as a method's ``setup`` calls it on ``tiny_data`` at ``fit``
        (a test without a Trainer must do it itself)."""
        loss = self.build(**overrides)
        loss.prepare(feature_dim, NUM_CLASSES, list(CLASS_COUNTS), fitting=True)
        return loss


@dataclass(frozen=True)
class MethodCase(Case):
    """A registered method in one of its examples, on the tiny backbone and head."""

    def missing(self, given: Mapping[str, Any] = ()) -> list[str]:
        return super().missing({**TINY_MODEL, **dict(given)})

    def build(self, loss: Any = None, seed: Optional[int] = 0, **overrides: Any):
        """A new instance (weights drawn after ``torch.manual_seed(seed)``) with ``loss`` (``None``:
        the method's default loss) and ``overrides`` on top of the example and the tiny model."""
        if seed is not None:
            torch.manual_seed(seed)
        options = {**TINY_MODEL, **self.kwargs(**overrides)}
        if loss is not None:
            options["loss"] = loss
        return self.target(**options)


def set_up(model, data=None):
    """What ``Trainer.fit`` prepares before the first step, and no step: the method's and the loss's
    ``setup`` with the datamodule (a memory bank sized by the training split, a loss's ``prepare``),
    the Trainer detached afterwards, for tests that then call ``contrast`` and the hooks by hand.
    Returns ``model``."""
    from tests.helpers import tiny_data, tiny_trainer

    tiny_trainer(max_steps=0).fit(model, datamodule=data if data is not None else tiny_data())
    model.trainer = None
    return model


def cases(registry: Registry, kind: type[Case]) -> list[Case]:
    """One case per registered entry and example, in registration order."""
    found = []
    for entry in registry.values():
        examples = getattr(entry.target, "examples", ({},))
        found += [kind(entry, dict(options)) for options in examples]
    return found


def loss_cases() -> list[LossCase]:
    return cases(LOSSES, LossCase)


def method_cases() -> list[MethodCase]:
    return cases(METHODS, MethodCase)


def capability_groups(found: list[LossCase]) -> list[LossCase]:
    """The first loss case of each distinct set of declarations (``LOSSES``' capabilities): what a
    method does differs only by them (label positives, anchor features), so a method test that must
    see every path of the method, not every loss, runs one loss of each."""
    seen: dict[tuple, LossCase] = {}
    for case in found:
        seen.setdefault(tuple(sorted(case.entry.capabilities.items())), case)
    return list(seen.values())


def first_examples(found: list[Case]) -> list[Case]:
    """Each registered class once, in its first example (for what costs too much to run per example)."""
    seen: dict[str, Case] = {}
    for case in found:
        seen.setdefault(case.name, case)
    return list(seen.values())


def by_id(found: list[Case]) -> list:
    return [pytest.param(case, id=case.id) for case in found]


def by_name(found: list[Case]) -> list:
    return [pytest.param(case, id=case.name) for case in found]


#: The arguments a generic test may take, and their cases as ``pytest.param``s (tests/conftest.py):
#: every loss in each of its examples, each loss once (its first example), one loss per set of
#: declarations, every method in each of its examples, every datamodule's registry entry, and every
#: registered embedding metric.
GENERIC_ARGUMENTS = {
    "loss_case": lambda: by_id(loss_cases()),
    "loss_first_case": lambda: by_name(first_examples(loss_cases())),
    "loss_group": lambda: by_id(capability_groups(loss_cases())),
    "method_case": lambda: by_id(method_cases()),
    "datamodule_entry": lambda: [pytest.param(entry, id=entry.name) for entry in DATAMODULES.values()],
    "metric_case": lambda: [pytest.param(metric, id=metric.name) for metric in registered_metrics()],
}


def parametrize(metafunc: pytest.Metafunc) -> None:
    """The ``pytest_generate_tests`` hook of ``tests/conftest.py``: parametrise each argument of
    ``GENERIC_ARGUMENTS`` a test takes from the registries as they are at collection."""
    for argument, found in GENERIC_ARGUMENTS.items():
        if argument in metafunc.fixturenames:
            metafunc.parametrize(argument, found())


# --- the hand-over of the loss-level tests -----------------------------------------------------
def pair_masks(batch: int, labels: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """SimCLR's masks over 2B views (positive: the other view), or label masks when ``labels`` [B]
    are given (positives: every other view with the anchor's label); the anchor itself in neither."""
    n = 2 * batch
    is_self = torch.eye(n, dtype=torch.bool)
    if labels is None:
        idx = torch.arange(n)
        pos = torch.zeros(n, n, dtype=torch.bool)
        pos[idx, (idx + batch) % n] = True
    else:
        both = labels.repeat(2)
        pos = (both[:, None] == both[None, :]) & ~is_self
    return pos, ~pos & ~is_self


def handover(loss, sim: torch.Tensor, labels: torch.Tensor, features: Optional[torch.Tensor] = None):
    """``MaskedSimilarities`` of 2B views as SimCLR hands them over: ``sim`` [2B, 2B], the masks the
    loss's declarations ask for (``uses_labels``: label masks from ``labels`` [B]) and, for a loss that
    ``needs_anchor_features``, ``features`` [2B, feature_dim] and the views' labels."""
    from ssl_app.losses import MaskedSimilarities

    batch = sim.shape[0] // 2
    pos, neg = pair_masks(batch, labels if loss.uses_labels else None)
    if not loss.needs_anchor_features:
        return MaskedSimilarities(sim, pos, neg)
    assert features is not None, f"{type(loss).__name__} needs anchor features: pass features"
    return MaskedSimilarities(sim, pos, neg, anchor_features=features, anchor_labels=labels.repeat(2))


def generic_test_files() -> list[Path]:
    """The test files with a test or fixture that takes one of ``GENERIC_ARGUMENTS`` (read from their source)."""
    takes = re.compile(r"def \w+\((?:[^)]*\W)?(?:" + "|".join(GENERIC_ARGUMENTS) + r")\b")
    tests = Path(__file__).resolve().parent
    return [path for path in sorted(tests.rglob("test_*.py")) if takes.search(path.read_text(encoding="utf-8"))]
