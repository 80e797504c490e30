"""The init options of a class, read from its source file (``ast``) without importing it or its package.

``python -m ssl_app`` checks option names before Lightning is imported (``ssl_app.cli.early``): importing it
costs seconds, reading a file's syntax tree milliseconds. A class is found as Python would find it: the file of
its module (located from the top-level package's folder, nothing imported), then, when the module only imports
the name (``from .core import LightningModule``), the module it comes from.

The options are those jsonargparse offers for a class (``ssl_app.cli.suggest.parameters_of``): the parameters
of ``__init__`` after ``self``, ``*args`` and ``**kwargs`` left out; a class without ``__init__`` takes its
bases'; ``**kwargs`` handed on by ``super().__init__(**kwargs)`` adds the bases' options. Whatever this reading
cannot settle (a base or a name it cannot find, ``**kwargs`` passed anywhere else, a decorator that replaces the
class) is ``None``: then the option is left to the parser, never refused on a guess. The tests hold the answers
equal to jsonargparse's for every class the registries offer.
"""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from pathlib import Path
from typing import Optional

#: Bases that add no options (their ``__init__`` takes none jsonargparse reads).
NO_OPTIONS = {"object", "ABC", "Generic", "Protocol"}


def init_parameters(class_path: str) -> Optional[tuple[str, ...]]:
    """The init options of ``class_path`` (``package.module.Class``), or None when its source cannot settle them."""
    module, _, name = class_path.rpartition(".")
    if not module:
        return None
    found = init_annotations(class_path)
    return None if found is None else tuple(found)


def init_annotations(class_path: str) -> Optional[dict[str, tuple[str, Optional[ast.expr]]]]:
    """Each init option of ``class_path`` → ``(module, annotation)``: the module whose source declares it (to read
    the annotation's names in) and the annotation's syntax tree (None: none declared); None when unsettled."""
    module, _, name = class_path.rpartition(".")
    if not module:
        return None
    found = find_class(module, name, depth=0)
    return None if found is None else _options(*found, depth=0)


def method_parameters(class_path: str, method: str) -> Optional[tuple[str, ...]]:
    """The parameters of ``class_path``'s ``method`` defined in the class itself (``Trainer.fit``), after ``self``."""
    module, _, name = class_path.rpartition(".")
    found = find_class(module, name, depth=0) if module else None
    if found is None:
        return None
    function = _function(found[1], method)
    return None if function is None else _named_parameters(function)


def module_file(module: str) -> Optional[Path]:
    """The source file of ``module`` (``a.b.c`` → ``…/a/b/c.py`` or ``…/a/b/c/__init__.py``), importing nothing."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: found on sys.path, not imported
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None
    for folder in spec.submodule_search_locations or []:
        base = Path(folder).joinpath(*rest)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


@cache
def syntax_tree(path: Path) -> Optional[ast.Module]:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def find_class(module: str, name: str, depth: int) -> Optional[tuple[str, ast.ClassDef]]:
    """``(module, class node)`` where ``module.name`` is defined, following the module's ``from … import``."""
    path = module_file(module)
    tree = syntax_tree(path) if path is not None and depth < 12 else None
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return module, node
    source = imported_from(tree, module, path, name)
    return None if source is None else find_class(*source, depth=depth + 1)


def imported_from(tree: ast.Module, module: str, path: Path, name: str) -> Optional[tuple[str, str]]:
    """``(module, name)`` a top-level ``from X import Y as name`` (or ``import X as name``'s module) refers to."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _absolute(node, package), alias.name
    return None


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def module_alias(tree: ast.Module, module: str, path: Path, alias_name: str) -> Optional[str]:
    """The module a top-level ``import a.b as L`` or ``from a import b as L`` names ``L`` for."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname == alias_name or (alias.asname is None and alias.name == alias_name):
                    return alias.name
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == alias_name:
                    return f"{_absolute(node, package)}.{alias.name}"
    return None


def _function(cls: ast.ClassDef, name: str) -> Optional[ast.FunctionDef]:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _named_parameters(function: ast.FunctionDef) -> tuple[str, ...]:
    return tuple(argument.arg for argument in _arguments(function))


def _arguments(function: ast.FunctionDef) -> list[ast.arg]:
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args][1:]  # after self
    return [*positional, *arguments.kwonlyargs]


Options = dict[str, tuple[str, Optional[ast.expr]]]


def _options(module: str, cls: ast.ClassDef, depth: int) -> Optional[Options]:
    if depth > 12 or any(not _harmless(decorator) for decorator in cls.decorator_list):
        return None
    init = _function(cls, "__init__")
    if init is None:
        return _bases_options(module, cls, depth)
    own = {argument.arg: (module, argument.annotation) for argument in _arguments(init)}
    kwargs = init.args.kwarg
    if kwargs is None:
        return own
    if not _kwargs_only_to_super(init, kwargs.arg):
        return None
    inherited = _bases_options(module, cls, depth)
    return None if inherited is None else {**own, **{name: found for name, found in inherited.items() if name not in own}}


def _harmless(decorator: ast.expr) -> bool:
    """Decorators that return the class as it is: a registry's ``@LOSSES.register`` (``ssl_app.registering``),
    ``@final``. Any other (``@dataclass`` makes an ``__init__``) leaves the class to the parser."""
    if isinstance(decorator, ast.Attribute):
        return decorator.attr == "register"
    return isinstance(decorator, ast.Name) and decorator.id in {"final", "total_ordering"}


def _kwargs_only_to_super(init: ast.FunctionDef, name: str) -> bool:
    """Whether every use of ``**name`` in ``__init__`` is ``super().__init__(..., **name)``."""
    uses = [node for node in ast.walk(init) if isinstance(node, ast.Name) and node.id == name]
    passed_up = 0
    for node in ast.walk(init):
        if not isinstance(node, ast.Call):
            continue
        starred = [kw for kw in node.keywords if kw.arg is None and isinstance(kw.value, ast.Name) and kw.value.id == name]
        if not starred:
            continue
        callee = node.func
        is_super_init = (
            isinstance(callee, ast.Attribute)
            and callee.attr == "__init__"
            and isinstance(callee.value, ast.Call)
            and isinstance(callee.value.func, ast.Name)
            and callee.value.func.id == "super"
        )
        if not is_super_init:
            return False
        passed_up += len(starred)
    return passed_up > 0 and passed_up == len(uses)


def _bases_options(module: str, cls: ast.ClassDef, depth: int) -> Optional[Options]:
    """The options of the first base (in order) that defines ``__init__``, as the method resolution order finds it
    for single inheritance and mixins without one."""
    path = module_file(module)
    tree = syntax_tree(path) if path is not None else None
    if tree is None:
        return None
    for base in cls.bases:
        if isinstance(base, ast.Subscript):  # Generic[T], Base[T]
            base = base.value
        if isinstance(base, ast.Name) and base.id in NO_OPTIONS:
            continue
        found = _resolve_base(tree, module, path, base, depth)
        if found is None:
            return None
        if _defines_init(*found, depth=depth + 1):
            return _options(*found, depth=depth + 1)
    return {}


def _defines_init(module: str, cls: ast.ClassDef, depth: int) -> bool:
    """Whether ``cls`` or a base of it (as far as can be read) defines ``__init__``; an unreadable base counts as one
    (so its class's options stay unsettled)."""
    if _function(cls, "__init__") is not None or depth > 12:
        return True
    path = module_file(module)
    tree = syntax_tree(path) if path is not None else None
    if tree is None:
        return True
    for base in cls.bases:
        base = base.value if isinstance(base, ast.Subscript) else base
        if isinstance(base, ast.Name) and base.id in NO_OPTIONS:
            continue
        found = _resolve_base(tree, module, path, base, depth)
        if found is None or _defines_init(*found, depth=depth + 1):
            return True
    return False


def _resolve_base(tree: ast.Module, module: str, path: Path, base: ast.expr, depth: int) -> Optional[tuple[str, ast.ClassDef]]:
    if isinstance(base, ast.Name):
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == base.id:
                return module, node
        source = imported_from(tree, module, path, base.id)
        return None if source is None else find_class(*source, depth=depth + 1)
    if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
        aliased = module_alias(tree, module, path, base.value.id)
        return None if aliased is None else find_class(aliased, base.attr, depth=depth + 1)
    return None
