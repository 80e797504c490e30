"""A value the parser would refuse, refused before Lightning is imported (``ssl_app.cli.early``).

``--trainer.max_epochs=abc``, ``--model.init_args.loss.init_args.temperature=-1``, a bool given ``maybe``, a
``Literal`` option given a value outside it, on the command line or in a ``--config`` file. The option's class is
found as ``check_option_names`` finds it (``ssl_app.cli.given_config``), its type read from the annotation in the
class's source (``ssl_app.cli.source_types``), and the value checked by jsonargparse itself against that type in a
parser of one option, its error condensed as the real parser's (``ssl_app.cli.parser_errors``): same check, same
words. Only the final value of each option is checked (a config's value overridden later is the parser's
business), and whatever cannot be settled from source is left to the parser.
"""

from __future__ import annotations

import itertools
import numbers
from pathlib import Path
from typing import Any, Optional, Union

from ssl_app.errors import ConfigError

#: The type LightningCLI gives a top-level option of its own (``LightningCLI.add_core_arguments_to_parser``; the
#: tests hold it equal to the parser's).
TOP_LEVEL_TYPES: dict[str, tuple[Any, ...]] = {"seed_everything": (bool, int)}
#: Keys of a class's node that are no init option.
NOT_OPTIONS = {"class_path", "init_args", "dict_kwargs", "__path__"}


def check_values(argv: list[str], cwd: Optional[Path] = None) -> None:
    """Raise a ``ConfigError`` with the parser's line for the first option value of ``argv`` (and its configs)
    the parser would refuse for its type."""
    from ssl_app.cli.early import GROUPS, SUBCLASS_GROUPS
    from ssl_app.cli.given_config import NOT_KEYS, given_tree, options_and_values
    from ssl_app.cli.source_signatures import init_annotations
    from ssl_app.cli.trainer_values import trainer_problem

    raw: dict[str, str] = {}
    for option, value in options_and_values(argv):
        key = option.lstrip("-")
        if option.startswith("--") and value is not None and key not in NOT_KEYS and not key.endswith("+"):
            raw[key.replace(".init_args.", ".")] = value
    tree = given_tree(argv, cwd)
    for group, class_path in GROUPS.items():
        subtree = tree.get(group)
        options = init_annotations(class_path) if class_path and isinstance(subtree, dict) else None
        if options:
            _check_options(group, options, subtree, raw)
    for group in SUBCLASS_GROUPS:
        _check_class_node(group, tree.get(group), raw)
    problem = trainer_problem(tree.get("trainer"))  # a type the parser takes, a value Lightning cannot use
    if problem is not None:
        raise ConfigError(problem)
    for option, alternatives in TOP_LEVEL_TYPES.items():
        if option in tree and not isinstance(tree[option], (dict, list)):
            problem = union_problem(option, alternatives, tree[option], raw.get(option))
            if problem is not None:
                raise ConfigError(problem)


def _check_class_node(key: str, node: Any, raw: dict[str, str], item_class: str = "") -> None:
    """``item_class``: the class of the list item ``node`` is in (``trainer.callbacks``), named in the line."""
    from ssl_app.cli.source_signatures import init_annotations

    class_path = node.get("class_path") if isinstance(node, dict) else None
    if not isinstance(class_path, str):
        return
    options = init_annotations(class_path)
    if not options:
        return
    given = {name: value for name, value in node.items() if name not in NOT_OPTIONS}
    init_args = node.get("init_args")
    if isinstance(init_args, dict):
        given.update(init_args)
    _check_options(f"{key}.init_args", options, given, raw, item_class)


def _check_options(prefix: str, options: dict, given: dict, raw: dict[str, str], item_class: str = "") -> None:
    from ssl_app.cli.parser_errors import list_item_option
    from ssl_app.cli.source_signatures import dataclass_fields
    from ssl_app.cli.source_types import source_type
    from ssl_app.cli.tau_words import is_tau_option, tau_problem

    for name, value in given.items():
        if name not in options:
            continue  # an option the class does not take: check_option_names' business
        option = f"{prefix}.{name}"
        if isinstance(value, dict):
            fields = None if "class_path" in value else dataclass_fields(*options[name])
            if fields is not None:  # a dataclass's fields (``optim.lr``), read from its source as a class's options
                _check_options(option, fields, value, raw, item_class)
            else:
                _check_class_node(option, value, raw, item_class)
            continue
        if isinstance(value, list):
            _check_class_list(option, value, raw)
            continue
        if is_tau_option(option):
            line = tau_problem(option, value)
            if line is not None:
                raise ConfigError(line)  # the sweep's words for what a τ is, not "Expected a path" (issue 40)
        kind = source_type(*options[name])
        if kind is None:
            continue
        problem = union_problem(option, kind.alternatives, value, raw.get(option.replace(".init_args.", ".")))
        if problem is None:
            continue
        if kind.has_class and not (_is_number(value) and problem.split(": ", 1)[-1].startswith("must be ")):
            continue  # a class path may be what was meant: the parser's words are not known here
        if item_class and problem.startswith(f"{option}: "):
            problem = f"{list_item_option(option, item_class)}: {problem.removeprefix(f'{option}: ')}"
        raise ConfigError(problem)


def _check_class_list(option: str, items: list, raw: dict[str, str]) -> None:
    """``trainer.callbacks: [{class_path: …}, …]`` in a config file: the parser names an item's option by the list's
    key and the item's class, ``trainer.callbacks.init_args.k (callbacks.KNNMonitor)`` (``parser_errors``). A list
    given on the command line is left to the parser: written out there, any bad item makes it say ``Expected a path
    but [...]``."""
    if option.replace(".init_args.", ".") in raw:
        return
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("class_path"), str):
            _check_class_node(option, item, raw, item["class_path"])


def _is_number(value: Any) -> bool:
    """A number, or text only a number reads as (``nan``, ``inf``): no class path or config file is meant by it."""
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return False
        return True
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def union_problem(option: str, alternatives: tuple[Any, ...], value: Any, given: Optional[str]) -> Optional[str]:
    """:func:`value_problem` for a value of a union of ``alternatives``, when its words do not depend on their order.

    jsonargparse tries a union's alternatives in their order and words its error by the first, and ``typing``
    caches unions ignoring order: ``Optional[Union[int, float]]`` is ``Union[float, int, None]`` in a process that
    made ``Union[float, int]`` first (the parser's, after Lightning's imports), ``Union[int, float, None]`` here. So
    every order is tried; a line that differs between orders is left to the parser."""
    none = [kind for kind in alternatives if kind is type(None)]
    others = [kind for kind in alternatives if kind is not type(None)]
    found: set[Optional[str]] = set()
    for order in itertools.islice(itertools.permutations(others), 24):
        kinds = [*order, *none]
        hint = kinds[0] if len(kinds) == 1 else Union[tuple(kinds)]  # noqa: UP007 - a union made at run time
        found.add(value_problem(option, hint, value, given))
        if len(found) > 1:
            return None
    return found.pop() if found else None


def value_problem(option: str, hint: Any, value: Any, given: Optional[str]) -> Optional[str]:
    """The parser's one line for ``value`` of ``option`` (typed ``hint``) when it refuses it, else None. ``given``:
    the command line's text of it (read as the parser reads it), else ``value`` as a config file gave it."""
    from jsonargparse import ArgumentParser

    from ssl_app.cli.parser_errors import condense_parser_error

    parser = ArgumentParser(exit_on_error=False, default_env=False)
    parser.add_argument(f"--{option}", type=hint)
    try:
        if given is not None:
            parser.parse_args([f"--{option}={given}"])
        else:
            nested: Any = value
            for part in reversed(option.split(".")):
                nested = {part: nested}
            parser.parse_object(nested)
    except Exception as error:  # noqa: BLE001 - jsonargparse's ArgumentError (and what it wraps) is the refusal
        return condense_parser_error(str(error))
    return None
