"""A class given by its name alone (``--trainer.logger=TensorBoardLogger``, ``--trainer.callbacks+=KNNMonitor``),
told from source before Lightning is imported (``ssl_app.cli.early``), and the words both the early check and the
parser's own error (``ssl_app.cli.parsing``) say for a name no class has, in place of jsonargparse's misleading
``Expected a path but X either not accessible or invalid`` (issue 40, item 7).

jsonargparse resolves a name without a dot against the names of the subclasses of the option's type *imported when
it parses* (``resolve_class_path_by_name``): Lightning's loggers for ``trainer.logger``; Lightning's callbacks,
ours and ``ssl_app``'s for ``trainer.callbacks``. Which are imported then depends on the configs read before, so
a name is refused only when no ``class`` statement of any file of the packages that may be imported by then
(:data:`SHORT_NAME_OPTIONS`' ``scanned``, and every package a class path of the configs names) has it: a
superset of what the parser takes (the tests hold it so). "Did you mean" offers the class paths of the public
subclasses of ``offered``, read from source (``ssl_app.cli.source_classes``)."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ssl_app.cli.source_classes import CLASS, UNSETTLED, public_classes
from ssl_app.cli.source_signatures import find_class, module_file, resolve_base, syntax_tree


@dataclass(frozen=True)
class ShortNames:
    """The class a bare name of an option is resolved against (its path in its defining module), the packages
    whose files define every subclass of it the parser can have imported, and the modules whose public subclasses
    are offered for a misspelled one."""

    base: str
    scanned: tuple[str, ...]
    offered: tuple[str, ...]


SHORT_NAME_OPTIONS = {
    "trainer.logger": ShortNames("lightning.pytorch.loggers.logger.Logger", ("lightning",), ("lightning.pytorch.loggers",)),
    "trainer.callbacks": ShortNames(
        "lightning.pytorch.callbacks.callback.Callback",
        ("lightning", "ssl_app", "callbacks"),
        ("lightning.pytorch.callbacks", "callbacks"),
    ),
}
_CLASS_STATEMENT = re.compile(r"^[ \t]*class[ \t]+(\w+)", re.MULTILINE)


def is_short_name(value: Any) -> bool:
    """Whether ``value`` is text the parser reads as a class's name alone (not ``true``, ``null``, a number)."""
    if not isinstance(value, str) or not value.isidentifier():
        return False
    import yaml

    return isinstance(yaml.safe_load(value), str)


def short_name_problem(option: str, value: str, packages: Iterable[str] = ()) -> Any:
    """The line's reason when no class of ``option``'s type can be named ``value`` (``no Logger class is named
    TensorBoardLoger; did you mean lightning.pytorch.loggers.TensorBoardLogger?``), None when one may be (or the
    option takes no class by name), :data:`UNSETTLED` when the source cannot tell. ``packages``: those the configs'
    class paths name, whose classes the parser may have imported too."""
    names = SHORT_NAME_OPTIONS.get(option.lstrip("-").rstrip("+").replace(".init_args.", "."))
    if names is None or not is_short_name(value):
        return None
    known = class_names([*names.scanned, *packages])
    if known is UNSETTLED:
        return UNSETTLED
    if value in known:
        return None
    offered = offered_paths(names)
    if offered is UNSETTLED:
        return UNSETTLED
    from ssl_app.cli.suggest import closest

    by_name = {path.rpartition(".")[2]: path for path in offered}
    found = [by_name[name] for name in closest(value, by_name)]
    hint = f"; did you mean {' or '.join(found)}?" if found else ""
    return f"no {names.base.rpartition('.')[2]} class is named {value}{hint}"


def class_names(packages: Iterable[str]) -> Any:
    """Every name a ``class`` statement of a file of ``packages`` (top-level names) binds, or :data:`UNSETTLED`
    when one cannot be found or read."""
    names: set[str] = set()
    for package in dict.fromkeys(packages):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            return UNSETTLED
        if spec is None:
            continue  # no such package: the parser imports nothing of it
        folders = list(spec.submodule_search_locations or [])
        files = [path for folder in folders for path in Path(folder).rglob("*.py")]
        if not folders:
            if spec.origin is None or not spec.origin.endswith(".py"):
                return UNSETTLED  # an extension module: not read here
            files = [Path(spec.origin)]
        for path in files:
            try:
                names.update(_CLASS_STATEMENT.findall(path.read_text(encoding="utf-8")))
            except (OSError, UnicodeDecodeError):
                return UNSETTLED
    return names


def offered_paths(names: ShortNames) -> Any:
    """The class paths of the public subclasses of ``names.base`` of the modules ``names.offered``."""
    paths = []
    for module in names.offered:
        public = public_classes(module)
        if public is None:
            return UNSETTLED
        paths += [f"{module}.{name}" for name, kind in public.items() if kind == CLASS and _derives(module, name, names.base)]
    return paths


def _derives(module: str, name: str, base: str) -> bool:
    """Whether class ``module.name`` derives from the class ``base`` (its defining module's path), its bases
    followed through their modules' imports (``lightning.pytorch.loggers.LitLogger`` is a Fabric logger: no)."""
    start = find_class(module, name, depth=0)
    pending = [start] if start is not None else []
    seen: set[str] = set()
    while pending and len(seen) < 64:
        where, node = pending.pop()
        if f"{where}.{node.name}" == base:
            return True
        if f"{where}.{node.name}" in seen:
            continue
        seen.add(f"{where}.{node.name}")
        path = module_file(where)
        tree = syntax_tree(path) if path is not None else None
        if tree is None or path is None:
            continue
        for parent in node.bases:
            resolved = resolve_base(tree, where, path, parent, depth=0)
            if resolved is not None:
                pending.append(resolved)
    return False


def class_path_packages(tree: Any) -> list[str]:
    """The top-level packages the ``class_path`` values of a configs' tree name (their classes are imported)."""
    found: list[str] = []
    if isinstance(tree, dict):
        value = tree.get("class_path")
        if isinstance(value, str) and "." in value:
            found.append(value.split(".", 1)[0])
        for child in tree.values():
            found += class_path_packages(child)
    elif isinstance(tree, list):
        for child in tree:
            found += class_path_packages(child)
    return found
