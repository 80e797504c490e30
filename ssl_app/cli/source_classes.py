"""Whether a class path names a class, and what the registries list, read from source files without importing
them (``ssl_app.cli.early``), so a misspelled class path is refused before torch and Lightning are imported.

It answers what ``ssl_app.cli.suggest`` answers after importing (``class_path_problem``, ``class_candidates``):
a module is found from its top-level package's folder (``importlib.util.find_spec`` of the top-level name only,
``ssl_app.cli.source_signatures.module_file``); a module's names are those its top-level statements bind (inside
``if``/``try`` blocks too), a name imported from elsewhere followed to its ``class``; a registry's entries are the
``@REGISTRY.register`` decorators in its package's files. Whatever is unsure (``import *``, a module
``__getattr__``, a name bound by an assignment that is no plain alias, a name that occurs in the module only as
text, an extension module, a package that changes its ``__path__``) is :data:`UNSETTLED`, and the check falls back
to importing, as the parser would.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from typing import Any, Optional

from ssl_app.cli.source_signatures import find_class, imported_from, module_file, syntax_tree

#: A registry of ``ssl_app.registry`` → the package whose modules register its entries (the tests hold it equal
#: to each registry's own ``package``), and those selected by name rather than class path.
REGISTRY_PACKAGES = {
    "METHODS": "ssl_app.methods",
    "DATAMODULES": "datamodules",
    "LOSSES": "ssl_app.losses",
    "TEMPERATURES": "ssl_app.temperature",
    "BACKBONES": "ssl_app.models",
}
SELECTED_BY_NAME = {"BACKBONES"}
UNSETTLED = object()
#: What a name is in a module: a class, something else, or unknown.
CLASS, OTHER, UNSURE = "class", "other", "unsure"


def module_problem(module: str) -> Any:
    """``"no module named X"`` when ``module`` (``a.b.c``) does not exist, None when it is a readable source
    module, :data:`UNSETTLED` when it cannot be told without importing."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return UNSETTLED
    if spec is None:
        return f"no module named {module}"
    folders = [Path(folder) for folder in spec.submodule_search_locations or []]
    if not rest:
        return None if module_file(module) is not None else UNSETTLED
    if not folders:
        return f"no module named {module}"  # a parent that is no package
    for depth, part in enumerate(rest):
        found = []
        for folder in folders:
            if (folder / part).is_dir():
                found.append(folder / part)
            elif (folder / f"{part}.py").is_file():
                return None if depth == len(rest) - 1 else f"no module named {module}"
            elif any(folder.glob(f"{part}.*.so")) or any(folder.glob(f"{part}.*.pyd")) or (folder / f"{part}.pyc").exists():
                return UNSETTLED  # an extension module: not read here
        if not found:
            inits = [syntax_tree(folder / "__init__.py") for folder in folders if (folder / "__init__.py").is_file()]
            if any(tree is None or _mentions(tree, ("__path__", "sys.modules[", "extend_path")) for tree in inits):
                return UNSETTLED  # a package that adds submodules its own way (torch's device modules)
            return f"no module named {module}"
        folders = found
    return None if module_file(module) is not None else UNSETTLED


def class_path_problem(value: str) -> Any:
    """``ssl_app.cli.suggest.class_path_problem`` from source: why ``value`` names no class, None when it names
    one (or is no dotted path), :data:`UNSETTLED` when the source cannot tell."""
    module, _, name = value.rpartition(".")
    if not module or not name.isidentifier() or not all(part.isidentifier() for part in module.split(".")):
        return None
    problem = module_problem(module)
    if problem is not None:
        return problem
    kind = name_kind(module, name)
    if kind == CLASS:
        return None
    if kind == OTHER:
        return f"{module} has no class {name}"
    return UNSETTLED


def name_kind(module: str, name: str) -> str:
    """Whether ``module.name`` is a class, something else (or nothing), or unsure."""
    path = module_file(module)
    tree = syntax_tree(path) if path is not None else None
    if tree is None or path is None or _star_or_getattr(tree):
        return UNSURE
    bound = _bound(tree)
    if name not in bound:
        if path.name == "__init__.py" and any((path.parent / candidate).exists() for candidate in (f"{name}.py", name)):
            return OTHER  # a submodule: a module, no class
        return UNSURE if _mentions_word(tree, name) else OTHER
    return _kind(module, tree, path, bound[name], name)


def public_classes(module: str) -> Optional[dict[str, str]]:
    """Each public name of ``module`` (its ``__all__``, else every name without ``_``) → its kind; None when unsure."""
    path = module_file(module)
    tree = syntax_tree(path) if path is not None else None
    if tree is None or path is None or _star_or_getattr(tree):
        return None
    bound = _bound(tree)
    exported = _all(tree)
    if exported is None and "__all__" in bound:
        return None
    names = exported if exported is not None else [name for name in bound if not name.startswith("_")]
    return {name: _kind(module, tree, path, bound[name], name) if name in bound else UNSURE for name in names}


def registered_values(registry: Optional[str]) -> Optional[list[str]]:
    """What the options of one registry take (``ssl_app.losses.InfoNCE``), or of all of them (``None``), from the
    ``@REGISTRY.register`` decorators of their packages; None when unsure."""
    values: list[str] = []
    for name in [registry] if registry else list(REGISTRY_PACKAGES):
        found = _registered(name)
        if found is None:
            return None
        values += found
    return values


def _registered(registry: str) -> Optional[list[str]]:
    package = REGISTRY_PACKAGES[registry]
    init = module_file(package)
    init_tree = syntax_tree(init) if init is not None else None
    if init is None or init_tree is None or init.name != "__init__.py":
        return None
    exported = _bound(init_tree)
    values = []
    for path in sorted(init.parent.rglob("*.py")):
        try:
            if f"{registry}.register" not in path.read_text(encoding="utf-8"):
                continue  # registers nothing here (read as text: parsing every file costs more)
        except (OSError, UnicodeDecodeError):
            return None
        tree = syntax_tree(path)
        if tree is None:
            return None
        decorators = {
            id(decorator)
            for node in ast.walk(tree)
            if isinstance(node, (ast.ClassDef, ast.FunctionDef))
            for decorator in node.decorator_list
        }
        parts = path.relative_to(init.parent).with_suffix("").parts
        module = ".".join([package, *(parts[:-1] if parts[-1] == "__init__" else parts)])
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _is_register(node.func, registry) and id(node) not in decorators:
                return None  # REGISTRY.register(Class) as a statement: not read here
            if not isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                continue
            for decorator in node.decorator_list:
                call = decorator if isinstance(decorator, ast.Call) else None
                if not _is_register(call.func if call else decorator, registry):
                    continue
                named = [
                    kw.value.value
                    for kw in (call.keywords if call else [])
                    if kw.arg == "name" and isinstance(kw.value, ast.Constant)
                ]
                if registry in SELECTED_BY_NAME:
                    values.append(named[0] if named else node.name)
                else:
                    values.append(f"{package}.{node.name}" if node.name in exported else f"{module}.{node.name}")
    return values


def _is_register(node: ast.expr, registry: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "register"
        and isinstance(node.value, ast.Name)
        and node.value.id == registry
    )


def _kind(module: str, tree: ast.Module, path: Path, binding: ast.AST, name: str) -> str:
    if isinstance(binding, ast.ClassDef):
        return CLASS
    if isinstance(binding, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Import)):
        return OTHER  # a function, or a module
    if isinstance(binding, ast.ImportFrom):
        source = imported_from(tree, module, path, name)
        if source is None:
            return UNSURE
        if module_file(f"{source[0]}.{source[1]}") is not None:
            return OTHER  # a submodule imported by name
        return CLASS if find_class(*source, depth=0) is not None else UNSURE
    return UNSURE  # an assignment: an alias, a factory's class, a constant


def _bound(tree: ast.Module) -> dict[str, ast.AST]:
    """The names the module's top-level statements bind (the last binding of each), ``if``/``try`` blocks included."""
    bound: dict[str, ast.AST] = {}
    for node in _top_level(tree.body):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            bound[node.name] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        bound[leaf.id] = node
    return bound


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    found = []
    for node in body:
        found.append(node)
        if isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            for block in ("body", "orelse", "finalbody"):
                found += _top_level(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                found += _top_level(handler.body)
    return found


def _all(tree: ast.Module) -> Optional[list[str]]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            if isinstance(node.value, (ast.List, ast.Tuple)) and all(
                isinstance(item, ast.Constant) and isinstance(item.value, str) for item in node.value.elts
            ):
                return [item.value for item in node.value.elts]
    return None


def _star_or_getattr(tree: ast.Module) -> bool:
    for node in _top_level(tree.body):
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            return True
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            return True
    return _mentions(tree, ("globals()", "setattr(", "lazy_loader", "_LazyModule", "attach_stub"))


def _mentions_word(tree: ast.Module, name: str) -> bool:
    """Whether ``name`` occurs as a whole word anywhere in the module (a string, an attribute, a call)."""
    return re.search(rf"\b{re.escape(name)}\b", ast.unparse(tree)) is not None


def _mentions(tree: ast.Module, words: tuple[str, ...]) -> bool:
    text = ast.unparse(tree)
    return any(word in text for word in words)


def class_suggestion(option: str, value: str) -> Any:
    """``ssl_app.cli.suggest.class_suggestion`` from source (``"; did you mean ssl_app.losses.InfoNCE?"``), or
    :data:`UNSETTLED` when a name it would offer (or the registries) cannot be told from source."""
    from ssl_app.cli.suggest import REGISTRY_OF_OPTION, closest, did_you_mean

    option = "--" + option.lstrip("-").removesuffix(".class_path")
    registered = registered_values(REGISTRY_OF_OPTION.get(option))
    if registered is None:
        return UNSETTLED
    candidates, unsure = list(registered), set()
    module = value.rpartition(".")[0]
    exists = module_problem(module)
    if exists is UNSETTLED:
        return UNSETTLED
    if exists is None:
        public = public_classes(module)
        if public is None:
            return UNSETTLED
        for name, kind in public.items():
            if kind != OTHER:
                candidates.append(f"{module}.{name}")
            if kind == UNSURE:
                unsure.add(f"{module}.{name}")
    candidates = list(dict.fromkeys(candidates))
    hint = did_you_mean(value, candidates)
    if not hint:
        by_name = {path.rpartition(".")[2]: path for path in candidates}
        found = [by_name[name] for name in closest(value.rpartition(".")[2], by_name)]
        hint = f"; did you mean {' or '.join(found)}?" if found else ""
    offered = set(hint.removeprefix("; did you mean ").removesuffix("?").split(" or ")) if hint else set()
    return UNSETTLED if offered & unsure else hint
