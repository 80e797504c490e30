"""One vocabulary of option ranges (``ssl_app.checks``): each range declared once, for the CLI and the Python API."""

from __future__ import annotations

import math

import pytest
from jsonargparse import ArgumentParser

from ssl_app.checks import (
    AtLeastOne,
    ClosedUnitInterval,
    IntAtLeast2,
    IntAtLeast8,
    NonNegativeFinite,
    OpenUnitInterval,
    PositiveFinite,
    PositiveInt,
    ShapeCount,
    UnitIntervalOpenAbove,
    UnitIntervalOpenBelow,
    check,
    check_all,
    int_at_least,
    is_a,
    plain_hyperparameters,
)
from ssl_app.cli.parsing import condense_parser_error
from ssl_app.errors import ConfigError

CASES = [  # (range, inside, outside)
    (PositiveFinite, [1e-9, 0.5, 3], [0, -1, math.inf, math.nan]),
    (NonNegativeFinite, [0, 2.5], [-1e-9, math.inf, math.nan]),
    (ClosedUnitInterval, [0, 1, 0.5], [-0.1, 1.1, math.nan]),
    (OpenUnitInterval, [0.5], [0, 1]),
    (UnitIntervalOpenAbove, [0, 0.99], [1, -0.1]),
    (AtLeastOne, [1, 100], [0.5, math.inf]),
    (PositiveInt, [1, 7], [0, -2, 1.5, 2.0]),
    (int_at_least(3), [3, 10], [2, 3.0]),
    (UnitIntervalOpenBelow, [1, 0.1], [0, 1.01, math.nan]),
    (IntAtLeast2, [2, 100], [1, 0]),
    (IntAtLeast8, [8, 32], [7, 8.0]),
    (ShapeCount, [2, 10], [1, 11]),
]


@pytest.mark.parametrize(("kind", "inside", "outside"), CASES, ids=lambda value: getattr(value, "__name__", ""))
def test_each_range_takes_what_it_says_as_a_plain_number_and_names_the_option_otherwise(kind, inside, outside):
    """Catches a bool or a string taken as a number (``True`` is 1 to Python, ``"0.5"`` converts), a restricted type
    that leaks into what a constructor stores (it would reach checkpoints and records), and a message that does not
    name the option and the range in one line."""
    for value in inside:
        got = check(kind, value, "Owner: option")
        assert got == value and type(got) in (float, int) and type(got) is not bool
    for value in [*outside, True, False, "0.5", None, [1]]:
        with pytest.raises(ConfigError) as error:
            check(kind, value, "Owner: option")
        message = str(error.value)
        assert message.startswith("Owner: option must be ") and "\n" not in message and repr(value) in message
    assert check(kind, None, "Owner: option", none=True) is None


def test_a_list_is_checked_item_by_item_naming_the_first_outside():
    assert check_all(PositiveInt, (3, 1), "PaCo: class_counts") == [3, 1]
    with pytest.raises(ConfigError, match=r"PaCo: class_counts must be a list, each an int >= 1, got 0 in \[3, 0\]"):
        check_all(PositiveInt, [3, 0], "PaCo: class_counts")


def test_the_cli_says_a_range_it_refuses_in_words_naming_the_option():
    """Catches jsonargparse's ``Not of type PositiveFinite: -1 does not conform to restriction v>0 and v<inf``
    reaching the user instead of the range in words (the same words as the Python API's)."""

    class Owner:
        def __init__(self, rate: PositiveFinite = 1.0) -> None:
            self.rate = rate

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(Owner, "owner")
    with pytest.raises(Exception) as error:
        parser.parse_args(["--owner.rate=-1"])
    assert condense_parser_error(str(error.value)) == "owner.rate: must be > 0 and finite, got -1"


def test_a_value_of_a_range_dumps_as_its_number():
    """Catches ``--model.init_args.loss=my.Loss`` after a config set InfoNCE's ``temperature`` (a ``PositiveFinite``
    since the option declares its range) failing in jsonargparse's ``yaml.safe_dump``: "cannot represent an object"."""
    import yaml

    from ssl_app.checks import PositiveFinite, PositiveInt

    assert yaml.safe_load(yaml.safe_dump({"temperature": PositiveFinite(0.5), "k": PositiveInt(3)})) == {
        "temperature": 0.5,
        "k": 3,
    }


@pytest.mark.parametrize(
    ("kind", "given", "line"),
    [
        (UnitIntervalOpenBelow, "0", "owner.rate: must be in (0, 1], got 0"),
        (IntAtLeast8, "4", "owner.rate: must be an int >= 8, got 4"),
        (IntAtLeast2, "abc", "owner.rate: must be an int >= 2, got 'abc'"),
        (ShapeCount, "11", "owner.rate: must be an int in [2, 10], got 11"),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_the_ranges_made_for_one_option_are_said_in_words_too(kind, given, line):
    """Catches a range made by ``int_at_least`` (``IntAtLeast8``) or declared later whose refusal reaches the user as
    jsonargparse's ``Not of type IntAtLeast8: 4 does not conform to restriction v>=8``: the CLI finds a range's words
    by the name jsonargparse gives, so each must be declared in ``ssl_app.checks`` by that name."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--owner.rate", type=kind)
    with pytest.raises(Exception) as error:
        parser.parse_args([f"--owner.rate={given}"])
    assert condense_parser_error(str(error.value)) == line


def test_the_shape_count_range_is_the_number_of_shapes():
    """Catches a shape added to (or removed from) the synthetic data while ``num_classes``' range keeps the old count."""
    from datamodules.synthetic import SHAPES

    assert is_a(ShapeCount, len(SHAPES)) and not is_a(ShapeCount, len(SHAPES) + 1) and not is_a(ShapeCount, 1)


def test_plain_hyperparameters_reaches_a_subclass_s_kwargs_and_nested_values():
    """Catches the conversion missing what Lightning collected from a subclass's frame (``**kwargs`` as parsed, over
    the base's converted value) or a range's value inside a list or a mapping, in ``hparams`` or ``hparams_initial``."""
    from lightning.pytorch.core.mixins import HyperparametersMixin

    class Base(HyperparametersMixin):
        def __init__(self, width: int = 1, sizes: tuple = (), extra: dict | None = None) -> None:
            super().__init__()
            width = int(width)  # converted here: Lightning still keeps the subclass's value
            self.save_hyperparameters()
            plain_hyperparameters(self)

    class Child(Base):
        def __init__(self, rate: float = 0.5, **kwargs) -> None:
            super().__init__(**kwargs)

    given = dict(rate=UnitIntervalOpenAbove(0.5), width=PositiveInt(3), sizes=(PositiveInt(2),), extra={"k": [IntAtLeast8(8)]})
    child = Child(**given)
    for saved in (child.hparams, child.hparams_initial):
        assert dict(saved) == {"rate": 0.5, "width": 3, "sizes": (2,), "extra": {"k": [8]}}
        kinds = [type(saved["rate"]), type(saved["width"]), type(saved["sizes"][0]), type(saved["extra"]["k"][0])]
        assert kinds == [float, int, int, int]
