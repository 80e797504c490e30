"""What a Trainer command's ``--config`` files and options set, composed roughly as jsonargparse composes them, to
know which class each option configures before the parser (and Lightning) is imported (``ssl_app.cli.early``).

In order: each ``--config`` file (its own ``config:`` includes first), then each ``--key=value``; a key may be
dotted (``trainer.logger.init_args.name: x``); a value that names a YAML file is that file's content (a fragment,
``model: model/simclr_small.yaml``, relative to the file that names it). Kept exact: the ``class_path`` set last
at each place, and each option's last value (read by jsonargparse's YAML loader, as the parser reads it:
``ssl_app.cli.early_values`` checks them). Anything this cannot read is simply absent, so the checks built on it
leave that option to the parser.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import yaml

#: Options whose value is no config key (``--config`` is read here; the rest take no part in the tree).
NOT_KEYS = {"config", "print_config", "help"}


def given_tree(argv: list[str], cwd: Optional[Path] = None) -> dict[str, Any]:
    """The nested mapping ``argv``'s config files and options set (see the module docstring)."""
    cwd = Path.cwd() if cwd is None else cwd
    tree: dict[str, Any] = {}
    for option, value in options_and_values(argv):
        key = option.lstrip("-")
        if key in ("config", "c"):
            if value is not None:
                merge(tree, read_file(cwd / value, set()))
        elif value is not None and key.rstrip("+") not in NOT_KEYS:
            place(tree, key.rstrip("+"), fragment(value, cwd, set()))
    return tree


def options_and_values(argv: list[str]) -> list[tuple[str, Optional[str]]]:
    """``(option, value)`` for each ``--option=value``, ``--option value`` and ``-c value`` of ``argv`` (value None
    for an option followed by another option or nothing)."""
    found: list[tuple[str, Optional[str]]] = []
    for i, arg in enumerate(argv):
        if not (arg.startswith("--") or arg == "-c"):
            continue
        option, sep, value = arg.partition("=")
        if sep:
            found.append((option, value))
        elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            found.append((option, argv[i + 1]))
        else:
            found.append((option, None))
    return found


def read_file(path: Path, seen: set[Path]) -> dict[str, Any]:
    """A config file's options as a nested mapping, its ``config:`` includes merged first; {} when unreadable."""
    try:
        resolved = path.resolve()
        if resolved in seen or not path.is_file():
            return {}
        loaded = load_yaml(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    if not isinstance(loaded, dict):
        return {}
    seen = seen | {resolved}
    tree: dict[str, Any] = {}
    included = loaded.pop("config", None)
    for name in included if isinstance(included, list) else [included]:
        if isinstance(name, str):
            merge(tree, read_file(path.parent / name, seen))
    for key, value in loaded.items():
        if isinstance(key, str):
            place(tree, key, expand(value, path.parent, seen), over_included=True)
    return tree


def expand(value: Any, folder: Path, seen: set[Path]) -> Any:
    """``value`` with each string that names a YAML file replaced by that file's content (relative to ``folder``)."""
    if isinstance(value, dict):
        nested: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(key, str):
                place(nested, key, expand(item, folder, seen))
        return nested
    if isinstance(value, list):
        return [expand(item, folder, seen) for item in value]
    return fragment(value, folder, seen)


def fragment(value: Any, folder: Path, seen: set[Path]) -> Any:
    """The content of the YAML file ``value`` names (relative to ``folder``), else ``value`` as YAML reads it."""
    if isinstance(value, str) and value.endswith((".yaml", ".yml")) and (folder / value).is_file():
        return read_file(folder / value, seen)
    if isinstance(value, str):
        try:
            return load_yaml(value)
        except yaml.YAMLError:
            return value
    return value


def load_yaml(text: str) -> Any:
    """``text`` read as the parser reads a config file and a command line's value: jsonargparse's YAML loader, which
    takes ``1e-3`` for a number (PyYAML's ``safe_load`` keeps it a string) and no timestamps."""
    from jsonargparse._loaders_dumpers import get_yaml_default_loader

    return yaml.load(text, Loader=get_yaml_default_loader())  # noqa: S506 - a SafeLoader subclass


def place(tree: dict[str, Any], dotted: str, value: Any, over_included: bool = False) -> None:
    """Set ``dotted`` (``a.b.c``) in ``tree`` to ``value``, merged into a mapping already there.

    ``over_included``: ``value`` is a key of a config file set over what its own ``config:`` includes set. There a
    mapping without ``class_path`` replaces a class's mapping (``model: {init_args: …}`` over an included
    ``model: {class_path: …}``): the parser does not merge them (it then looks for the options in the base class),
    so neither does this reading, and the checks built on it leave that class to the parser."""
    *parents, last = dotted.split(".")
    node = tree
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    existing = node.get(last)
    if isinstance(value, dict) and isinstance(existing, dict):
        if over_included and "class_path" in existing and "class_path" not in value:
            node[last] = value
        else:
            for key, item in value.items():
                place(existing, key, item, over_included)
    else:
        node[last] = value


def merge(into: dict[str, Any], other: dict[str, Any]) -> None:
    """``other``'s keys into ``into``, mappings merged key by key, anything else replaced."""
    for key, value in other.items():
        place(into, key, value)
