"""An option's type read from its annotation's syntax tree (``ssl_app.cli.source_signatures``), importing nothing
heavy, so a value the parser would refuse is refused before Lightning is imported (``ssl_app.cli.early_values``).

Only what jsonargparse checks the same way with or without the class at hand is built: ``int``, ``float``,
``bool``, ``str``, ``None``, ``Literal[...]`` of constants, ``Optional``/``Union``/``X | Y`` of these, type aliases
(``_PRECISION_INPUT = Union[...]``, followed through imports) and the restricted number types of
``ssl_app.checks`` and ``jsonargparse.typing`` (imported: they import only jsonargparse). A class among a union's
alternatives is marked (``SourceType.has_class``): the check then only refuses a number, which no class path
takes. Anything else (a container, an Enum, a protocol, a name not found) is None: the value is left to the parser.
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from typing import Any, Literal, Optional

from ssl_app.cli.source_signatures import find_class, imported_from, module_alias, module_file, syntax_tree

#: Modules whose types are imported to build the check (each imports no more than jsonargparse).
IMPORTED_TYPES = {"ssl_app.checks", "jsonargparse.typing"}
TYPING = {"typing", "typing_extensions"}
BUILTINS: dict[str, Any] = {"int": int, "float": float, "bool": bool, "str": str}
_CLASS = object()  # a class alternative: no value but a class path or a mapping gives it


@dataclass(frozen=True)
class SourceType:
    """The alternatives a value is checked against (a union's, in the source's order; one for a plain type), and
    whether the declared type also admits a class (then only a number they refuse is refused)."""

    alternatives: tuple[Any, ...]
    has_class: bool


def source_type(module: str, annotation: Optional[ast.expr]) -> Optional[SourceType]:
    """The checkable type of ``annotation`` as declared in ``module``; None when it cannot be settled."""
    if annotation is None:
        return None
    parts = _alternatives(module, annotation, depth=0)
    if parts is None:
        return None
    simple = [part for part in parts if part is not _CLASS]
    if not simple:
        return None
    return SourceType(tuple(dict.fromkeys(simple)), has_class=len(simple) < len(parts))


def _alternatives(module: str, node: ast.expr, depth: int) -> Optional[list[Any]]:
    """The alternatives ``node`` admits (a union's, flattened), each a type or ``_CLASS``; None if any is unknown."""
    if depth > 12:
        return None
    if isinstance(node, ast.Constant):
        if node.value is None:
            return [type(None)]
        if isinstance(node.value, str):  # a quoted annotation
            try:
                return _alternatives(module, ast.parse(node.value, mode="eval").body, depth + 1)
            except SyntaxError:
                return None
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _alternatives(module, node.left, depth + 1), _alternatives(module, node.right, depth + 1)
        return None if left is None or right is None else [*left, *right]
    if isinstance(node, ast.Subscript):
        return _subscript(module, node, depth)
    found = _named(module, node, depth)
    if found is None or isinstance(found, str):  # unknown, or a typing form used bare (``Optional``)
        return None
    return found


def _subscript(module: str, node: ast.Subscript, depth: int) -> Optional[list[Any]]:
    form = _named(module, node.value, depth)
    items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    if form == "Literal":
        if not all(isinstance(item, ast.Constant) and isinstance(item.value, (str, int, bool)) for item in items):
            return None
        return [Literal[tuple(item.value for item in items)]]  # type: ignore[misc]
    if form in ("Optional", "Union"):
        found: list[Any] = []
        for item in items:
            alternatives = _alternatives(module, item, depth + 1)
            if alternatives is None:
                return None
            found += alternatives
        return found + ([type(None)] if form == "Optional" else [])
    return None  # list[...], dict[...], Iterable[...], a generic class: left to the parser


def _named(module: str, node: ast.expr, depth: int) -> Any:
    """What a name or ``module.name`` stands for: a typing form's name (``"Union"``), a list of alternatives, or
    None when unknown."""
    if isinstance(node, ast.Name):
        if node.id in BUILTINS:
            return [BUILTINS[node.id]]
        return _defined(module, node.id, depth)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        path = module_file(module)
        tree = syntax_tree(path) if path is not None else None
        aliased = module_alias(tree, module, path, node.value.id) if tree is not None and path is not None else None
        if aliased is None:
            return None
        return _in_module(aliased, node.attr, depth + 1)
    return None


def _defined(module: str, name: str, depth: int) -> Any:
    """What ``name`` is at the top level of ``module``: a class, an alias assignment or an import."""
    path = module_file(module)
    tree = syntax_tree(path) if path is not None else None
    if tree is None or path is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return [_CLASS]
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(target, ast.Name) and target.id == name for target in targets) and node.value is not None:
            return _alternatives(module, node.value, depth + 1)
    source = imported_from(tree, module, path, name)
    return None if source is None else _in_module(*source, depth + 1)


def _in_module(module: str, name: str, depth: int) -> Any:
    if module in TYPING:
        return name if name in ("Optional", "Union", "Literal") else None
    if module in IMPORTED_TYPES:
        found = getattr(importlib.import_module(module), name, None)
        return [found] if isinstance(found, type) else None
    if depth > 12:
        return None
    if find_class(module, name, depth=0) is not None:
        return [_CLASS]
    return _defined(module, name, depth)
