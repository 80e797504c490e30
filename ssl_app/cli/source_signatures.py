"""The init options of a class, read from its source file (``ast``) without importing it or its package.

``python -m ssl_app`` checks option names before Lightning is imported (``ssl_app.cli.early``): importing it
costs seconds, reading a file's syntax tree milliseconds. A class is found as Python would find it: the file of
its module (located from the top-level package's folder, nothing imported), then, when the module only imports
the name (``from .core import LightningModule``), the module it comes from.

The options are those jsonargparse offers for a class (``ssl_app.cli.suggest.parameters_of``): the parameters
of ``__init__`` after ``self``, ``*args`` and ``**kwargs`` left out; a class without ``__init__`` takes its
bases'; ``**kwargs`` adds what it is handed to, followed as jsonargparse's resolver follows it (``super().__init__``,
a function or class of the module or imported in the function, ``kwargs.pop("x", default)``, an attribute a
member passes on: :func:`_kwargs_options`), less the keywords each call gives itself. Whatever this reading
cannot settle (a base or a name it cannot find, ``**kwargs`` used any other way, an ``if`` it cannot decide, a
decorator that replaces the class) is ``None``: then the option is left to the parser, never refused on a
guess. The tests hold the answers equal to jsonargparse's for every class the registries offer, the Trainer,
ModelCheckpoint and the TensorBoard and CSV loggers.
"""

from __future__ import annotations

import ast
import importlib.metadata
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
    return _function_options(module, cls, init, depth)


def _function_options(module: str, cls: Optional[ast.ClassDef], function: ast.FunctionDef, depth: int) -> Optional[Options]:
    """A function's (a method's, after ``self``) named parameters, then what its ``**kwargs`` take."""
    arguments = (
        _arguments(function) if cls is not None else [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]
    )
    own = {argument.arg: (module, argument.annotation) for argument in arguments}
    kwargs = function.args.kwarg
    if kwargs is None:
        return own
    passed = _kwargs_options(module, cls, function, kwargs.arg, depth)
    return None if passed is None else {**own, **{name: found for name, found in passed.items() if name not in own}}


def _kwargs_options(
    module: str, cls: Optional[ast.ClassDef], function: ast.FunctionDef, name: str, depth: int
) -> Optional[Options]:
    """What ``**name`` takes, as jsonargparse's resolver follows it (``_parameter_resolvers.ParametersVisitor``):
    each use is ``super().__init__(..., **name)`` (the next base's options), ``callee(..., **name)`` (the callee's:
    a class or function of the module or imported in the function), ``name.pop("x", default)`` / ``.get`` (the
    option ``x``) or ``self.attr = name`` (the callee a member calls with ``**self.attr``); keywords the call gives
    itself are not options. Any other use, or one under an ``if`` this reading cannot decide: None."""
    if depth > 12:
        return None
    found: Options = {}
    parents = _parents(function)
    for use in _live_names(module, function, name):
        if use is None:
            return None  # under an if whose condition is unknown here
        parent = parents.get(use)
        taken: Optional[Options] = None
        if isinstance(parent, ast.keyword) and parent.arg is None and isinstance(parents.get(parent), ast.Call):
            taken = _call_options(module, cls, function, parents[parent], depth)
        elif isinstance(parent, ast.Attribute) and parent.attr in ("pop", "get"):
            call = parents.get(parent)
            if (
                isinstance(call, ast.Call)
                and call.func is parent
                and len(call.args) == 2
                and isinstance(call.args[0], ast.Constant)
            ):
                taken = {str(call.args[0].value): (module, None)}
        elif isinstance(parent, ast.Assign) and parent.value is use and cls is not None and len(parent.targets) == 1:
            target = parent.targets[0]
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                taken = _attribute_options(module, cls, target.attr, depth)
        if taken is None:
            return None
        found.update({option: where for option, where in taken.items() if option not in found})
    return found


def _call_options(
    module: str, cls: Optional[ast.ClassDef], function: ast.FunctionDef, call: ast.Call, depth: int
) -> Optional[Options]:
    """The options of what ``call`` calls, less the keywords it gives itself."""
    given = {keyword.arg for keyword in call.keywords if keyword.arg}
    callee = call.func
    if (
        cls is not None
        and isinstance(callee, ast.Attribute)
        and callee.attr == "__init__"
        and isinstance(callee.value, ast.Call)
        and isinstance(callee.value.func, ast.Name)
        and callee.value.func.id == "super"
        and not callee.value.args
    ):
        taken = _bases_options(module, cls, depth)
    elif isinstance(callee, ast.Name):
        taken = _callee_options(module, function, callee.id, depth)
    else:
        return None
    return None if taken is None else {option: where for option, where in taken.items() if option not in given}


def _callee_options(module: str, function: ast.FunctionDef, name: str, depth: int) -> Optional[Options]:
    """The options of the class or function ``name`` stands for in ``function``: bound at the module's top level
    (not under ``if TYPE_CHECKING``), else imported in the function itself."""
    path = module_file(module)
    tree = syntax_tree(path) if path is not None else None
    if tree is None or path is None:
        return None
    source: Optional[tuple[str, str]] = None
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            continue  # never runs: jsonargparse looks in the function's own imports then
        if isinstance(node, ast.ClassDef) and node.name == name:
            return _options(module, node, depth + 1)
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return _function_options(module, None, node, depth + 1)
        if isinstance(node, (ast.ImportFrom, ast.Import)) and any((alias.asname or alias.name) == name for alias in node.names):
            source = imported_from(tree, module, path, name)
        if isinstance(node, (ast.If, ast.Try, ast.Assign)) and _binds(node, name):
            return None  # bound some other way: not read here
    if source is None:
        local = [node for node in _live_nodes(module, function) if isinstance(node, ast.ImportFrom)]
        for node in local:
            if node is None:
                return None
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
                    source = (_absolute(node, package), alias.name)
    if source is None:
        return None
    found = find_class(*source, depth=depth + 1)
    return None if found is None else _options(*found, depth=depth + 1)


def _attribute_options(module: str, cls: ast.ClassDef, attribute: str, depth: int) -> Optional[Options]:
    """``self.<attribute> = kwargs``: the options of the calls ``callee(..., **self.<attribute>)`` in the first
    method or property (by name, as ``inspect.getmembers`` lists them) of the class that makes one."""
    members = {node.name: node for node in cls.body if isinstance(node, ast.FunctionDef) and not node.name.startswith("__")}
    for _, member in sorted(members.items()):
        parents = _parents(member)
        calls = [
            parents[parents[node]]
            for node in _live_nodes(module, member)
            if node is not None
            and isinstance(node, ast.Attribute)
            and node.attr == attribute
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and isinstance(parents.get(node), ast.keyword)
            and parents[node].arg is None
            and isinstance(parents.get(parents[node]), ast.Call)
        ]
        if not calls:
            continue
        found: Options = {}
        for call in calls:
            taken = _call_options(module, None, member, call, depth + 1)
            if taken is None:
                return None
            found.update({option: where for option, where in taken.items() if option not in found})
        return found
    return None  # no member passes it on here (or a base's does): not settled


def _parents(function: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(function) for child in ast.iter_child_nodes(node)}


def _live_names(module: str, function: ast.FunctionDef, name: str) -> list[Optional[ast.Name]]:
    """The loads of ``name`` in ``function`` that run (None for one under an ``if`` that cannot be decided)."""
    return [node for node in _live_nodes(module, function) if node is None or (isinstance(node, ast.Name) and node.id == name)]


def _live_nodes(module: str, function: ast.FunctionDef) -> list[Optional[ast.AST]]:
    """The nodes of ``function``'s body, with ``if GLOBAL:`` / ``if not GLOBAL:`` decided as jsonargparse decides
    them (the module global's truth, read by :func:`_global_truth`); a None stands for nodes under one that
    cannot be decided here."""
    found: list[Optional[ast.AST]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If):
            test, negated = (
                (node.test.operand, True)
                if isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not)
                else (node.test, False)
            )
            if isinstance(test, ast.Name) and _is_global(module, test.id):
                truth = _global_truth(module, test.id)
                if truth is None:
                    found.append(None)
                    return
                for child in node.body if truth != negated else node.orelse:
                    visit(child)
                return
        found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    for statement in function.body:
        visit(statement)
    return found


def _is_global(module: str, name: str) -> bool:
    path = module_file(module)
    tree = syntax_tree(path) if path is not None else None
    return tree is not None and any(_binds(node, name) for node in tree.body)


def _binds(node: ast.stmt, name: str) -> bool:
    if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
        return node.name == name
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return any((alias.asname or alias.name).split(".")[0] == name for alias in node.names)
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(target, ast.Name) and target.id == name for target in targets)
    return any(_binds(child, name) for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt))


def _global_truth(module: str, name: str) -> Optional[bool]:
    """The truth of a module global jsonargparse decides an ``if`` by, where it is ``RequirementCache("dist")``
    (``lightning_utilities``: whether that distribution is installed); None for anything else."""
    path = module_file(module)
    tree = syntax_tree(path) if path is not None else None
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            value = node.value
            if (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and value.func.id == "RequirementCache"
                and len(value.args) == 1
                and not value.keywords
                and isinstance(value.args[0], ast.Constant)
                and isinstance(value.args[0].value, str)
                and value.args[0].value.replace("-", "_").replace(".", "_").isidentifier()
            ):
                try:
                    importlib.metadata.distribution(value.args[0].value)
                except importlib.metadata.PackageNotFoundError:
                    return False
                return True
            return None
    return None


def _harmless(decorator: ast.expr) -> bool:
    """Decorators that return the class as it is: a registry's ``@LOSSES.register`` (``ssl_app.registering``),
    ``@final``. Any other (``@dataclass`` makes an ``__init__``) leaves the class to the parser."""
    if isinstance(decorator, ast.Attribute):
        return decorator.attr == "register"
    return isinstance(decorator, ast.Name) and decorator.id in {"final", "total_ordering"}


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
        found = resolve_base(tree, module, path, base, depth)
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
        found = resolve_base(tree, module, path, base, depth)
        if found is None or _defines_init(*found, depth=depth + 1):
            return True
    return False


def resolve_base(tree: ast.Module, module: str, path: Path, base: ast.expr, depth: int) -> Optional[tuple[str, ast.ClassDef]]:
    """``(module, class node)`` of a base ``base`` of a class of ``module`` (a name, or ``alias.Name``), or None."""
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


def dataclass_fields(module: str, annotation: Optional[ast.expr]) -> Optional[dict[str, tuple[str, Optional[ast.expr]]]]:
    """The fields of the dataclass an option's ``annotation`` (declared in ``module``) names, each → ``(module,
    annotation)`` as :func:`init_annotations` gives a class's options (``optim: Optimization`` → ``lr``, ...); None
    when it names no plain ``@dataclass`` defined in source (one with bases, or not found, is left to the parser)."""
    if isinstance(annotation, ast.Name):
        found = find_class(module, annotation.id, depth=0)
    else:
        found = None
    if found is None:
        return None
    where, cls = found
    if cls.bases or not any(_is_dataclass_decorator(decorator) for decorator in cls.decorator_list):
        return None
    fields: dict[str, tuple[str, Optional[ast.expr]]] = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if "ClassVar" in ast.unparse(node.annotation) or "InitVar" in ast.unparse(node.annotation):
                return None
            fields[node.target.id] = (where, node.annotation)
    return fields


def _is_dataclass_decorator(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Name) and target.id == "dataclass") or (
        isinstance(target, ast.Attribute) and target.attr == "dataclass"
    )
