"""One vocabulary of option ranges: each declared once, for the CLI and for the Python API; each failure names the option.

A range is a jsonargparse restricted type (``jsonargparse.typing``): as a constructor's annotation
(``temperature: PositiveFinite``), the CLI refuses a value out of range while it parses, naming the option
(``model.init_args.loss.init_args.alpha: Not of type NonNegativeFinite: -1 does not conform to restriction v>=0
and v<inf``); in the constructor, :func:`check` refuses it from Python with one ``ConfigError`` that names the
option and says the range in words::

    self.alpha = check(NonNegativeFinite, alpha, "PaCo: alpha")   # ConfigError: PaCo: alpha must be >= 0 and finite, got -1

:func:`check` returns a plain ``float`` or ``int`` (never the restricted type, and never a bool: ``True`` is not a
number here), so nothing jsonargparse-typed reaches a checkpoint or a record.
"""

from __future__ import annotations

import copy
import functools
import math
import numbers
from typing import Any, Optional, TypeVar

import yaml
from jsonargparse.typing import ClosedUnitInterval, NonNegativeInt, OpenUnitInterval, PositiveInt, restricted_number_type

from ssl_app.errors import ConfigError

# A value of a range is a float or int subclass (what jsonargparse parses it into). jsonargparse dumps a class's
# options with ``yaml.safe_dump``, also options carried over to another class whose type for them is a plain one
# (``--model.init_args.loss=my.Loss`` after a config gave InfoNCE's ``temperature: 0.5``): there a range's value
# must dump as the number it is, not fail with "cannot represent an object".
yaml.SafeDumper.add_multi_representer(float, yaml.SafeDumper.represent_float)
yaml.SafeDumper.add_multi_representer(int, yaml.SafeDumper.represent_int)

T = TypeVar("T")

# jsonargparse's own (ClosedUnitInterval, OpenUnitInterval, PositiveInt, NonNegativeInt) and ours.
# isort: off
PositiveFinite = restricted_number_type("PositiveFinite", float, [(">", 0), ("<", math.inf)], docstring="> 0 and finite")
NonNegativeFinite = restricted_number_type("NonNegativeFinite", float, [(">=", 0), ("<", math.inf)], docstring=">= 0 and finite")
Finite = restricted_number_type("Finite", float, [(">", -math.inf), ("<", math.inf)], docstring="a finite number")
UnitIntervalOpenAbove = restricted_number_type("UnitIntervalOpenAbove", float, [(">=", 0), ("<", 1)], docstring="in [0, 1)")
UnitIntervalOpenBelow = restricted_number_type("UnitIntervalOpenBelow", float, [(">", 0), ("<=", 1)], docstring="in (0, 1]")
AtLeastOne = restricted_number_type("AtLeastOne", float, [(">=", 1), ("<", math.inf)], docstring="a finite number >= 1")
# isort: on
#: How a message says each range (ours say it in their docstrings).
WORDS = {
    ClosedUnitInterval: "in [0, 1]",
    OpenUnitInterval: "in (0, 1)",
    PositiveInt: "an int >= 1",
    NonNegativeInt: "an int >= 0",
}


@functools.cache
def int_at_least(minimum: int) -> type:
    """The range "an int >= ``minimum``" (``PositiveInt`` for 1, ``NonNegativeInt`` for 0)."""
    if minimum == 1:
        return PositiveInt
    if minimum == 0:
        return NonNegativeInt
    return restricted_number_type(f"IntAtLeast{minimum}", int, (">=", minimum), docstring=f"an int >= {minimum}")


# Declared here by their own names: an annotation names them (read from source by ``ssl_app.cli.source_types``) and
# the CLI's error says them in words (``in_words`` finds a range by the name in jsonargparse's "Not of type X").
IntAtLeast2 = int_at_least(2)
IntAtLeast8 = int_at_least(8)
#: The synthetic shapes' ``num_classes`` (one shape per class, ``datamodules.synthetic.SHAPES``; a test holds it equal).
ShapeCount = restricted_number_type("ShapeCount", int, [(">=", 2), ("<=", 10)], docstring="an int in [2, 10]")


__all__ = [
    "AtLeastOne", "ClosedUnitInterval", "Finite", "IntAtLeast2", "IntAtLeast8", "NonNegativeFinite", "NonNegativeInt",
    "OpenUnitInterval", "PositiveFinite", "PositiveInt", "ShapeCount", "UnitIntervalOpenAbove", "UnitIntervalOpenBelow",
    "check", "check_all", "check_int", "check_momentum", "check_optional_int", "describe", "int_at_least", "is_a",
    "plain", "plain_hyperparameters",
]  # fmt: skip


def describe(kind: type) -> str:
    """A range in words (its declaration's docstring): ``> 0 and finite``, ``an int >= 1``."""
    return WORDS.get(kind) or (kind.__doc__ or kind.__name__).strip()


def is_a(kind: type, value: Any) -> bool:
    """Whether ``value`` is in the range ``kind`` (a bool never is: it is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or (issubclass(kind, int) and not _integral(value)):
        return False
    try:
        kind(value)
    except (TypeError, ValueError):
        return False
    return True


def check(kind: type, value: Any, option: str, none: bool = False) -> Any:
    """``value`` as a plain ``float`` (``int`` for an integer range) when it is in the range ``kind``; else one
    ``ConfigError``: ``<option> must be <range> (or null), got <value>``. ``none``: ``None`` is allowed (and kept)."""
    if none and value is None:
        return None
    if not is_a(kind, value):
        raise ConfigError(f"{option} must be {describe(kind)}{' (or null)' if none else ''}, got {value!r}")
    return int(value) if issubclass(kind, int) else float(value)


def check_all(kind: type, values: Any, option: str) -> list:
    """Every item of ``values`` as :func:`check` does; one ``ConfigError`` naming the first that is not in range."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ConfigError(f"{option} must be a list, each {describe(kind)}, got {values!r}")
    items = list(values)
    for item in items:
        if not is_a(kind, item):
            raise ConfigError(f"{option} must be a list, each {describe(kind)}, got {item!r} in {items!r}")
    return [check(kind, item, option) for item in items]


def plain(value: Any) -> Any:
    """``value`` as a plain ``int`` or ``float`` when it is a range's value (jsonargparse parses ``PositiveInt`` into
    an ``int`` subclass, which a checkpoint loaded with ``weights_only=True`` cannot hold); anything else as it is."""
    if isinstance(value, bool) or type(value) in (int, float):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value


def plain_hyperparameters(module: Any) -> None:
    """Turn every range's value in the hyper-parameters ``module.save_hyperparameters()`` has just collected into a
    plain number (:func:`plain`, inside lists, tuples and mappings too), in place; call it right after that call.

    Lightning collects them from the constructors' frames, the subclass's over the base's, so a value a subclass passes
    on through ``**kwargs`` (``proj_dim``) is kept as jsonargparse parsed it, a range type, whatever the base converts;
    and a model rebuilt from a checkpoint (``load_from_checkpoint``: Lightning parses the saved config again) gets
    range types too. Such a value would make the next checkpoint unloadable with ``weights_only=True`` and
    ``hparams.yaml`` hold ``!!python/object`` tags. Both places are set here: ``hparams`` (what a checkpoint saves)
    through its public mapping, and ``hparams_initial`` (what the logger writes) as ``save_hyperparameters`` itself
    sets it last: a copy of ``hparams``."""
    hparams = module.hparams
    hparams.update({key: _plain_tree(value) for key, value in hparams.items()})
    module._hparams_initial = copy.deepcopy(hparams)


def _plain_tree(value: Any) -> Any:
    if type(value) is dict:
        return {key: _plain_tree(item) for key, item in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_plain_tree(item) for item in value)
    return plain(value)


def _integral(value: Any) -> bool:
    return isinstance(value, numbers.Integral)


def in_words(type_name: str, value: str) -> Optional[str]:
    """A range's failure as a message says it (``must be >= 0 and finite, got -1``), for the CLI's one-line errors:
    ``type_name`` names one of this module's ranges (jsonargparse's ``Not of type NonNegativeFinite``), else None."""
    kind = globals().get(type_name)
    return f"must be {describe(kind)}, got {value}" if isinstance(kind, type) and kind.__module__ else None


# --- the checks the methods, datamodules and callbacks have always called ----------------------------------------
def check_momentum(value: float, option: str) -> float:
    """Return ``value`` as a float; raise ``ConfigError`` naming ``option`` unless it is in [0, 1)."""
    return check(UnitIntervalOpenAbove, value, option)


def check_int(value: int, option: str, minimum: int = 1) -> int:
    """Return ``value`` as an int; raise ``ConfigError`` naming ``option`` unless it is an int >= minimum."""
    return check(int_at_least(minimum), value, option)


def check_optional_int(value: Optional[int], option: str, minimum: int = 1) -> Optional[int]:
    """``None`` stays ``None``; anything else as :func:`check_int` (the message says null is allowed)."""
    return check(int_at_least(minimum), value, option, none=True)
