"""The shape of the code (docs/design.md, "Repository map" and "Floors"): floors by what they serve, arrows
pointing down, no import circle.

The import graph is read from the source (``ast``), every import counted wherever it stands: at the top,
inside a function (a lazy import hides a circle from Python but not from this test) or under
``if TYPE_CHECKING:`` (it runs nothing, but a type named across a circle is a circle in the design). A module
imported by name counts too: ``importlib.import_module("a.b")`` is an edge to ``a.b``, and a module that
imports a name it computes (``import_module(self.package)``) is charged with every module its string literals
name (``"ssl_app.losses"``, ``"ssl_app.losses.base:ContrastiveLoss"``). An edge goes to the most specific module
that exists (``from ssl_app.cli import app`` is an edge to ``ssl_app.cli.app``, ``from ssl_app.runs.layout
import X`` to ``ssl_app.runs.layout``).

Every package (a subpackage of ``ssl_app``, a top-level module of it, ``datamodules``, ``callbacks``) stands on
one floor of :data:`FLOORS`; an import goes to its own floor or one below, never up.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("ssl_app", "datamodules", "callbacks")
#: The commands: they may import the library and each other; nothing below imports them.
TOP = ("ssl_app.cli", "ssl_app.sweep", "ssl_app.report", "ssl_app.__main__")
MAX_LINES = 550
#: The method base trains; its observer observes (issue 39).
MAX_METHOD_BASE_LINES = 350
#: The floors, from the ground up, and the packages on each (docs/design.md, "Floors"). A package imports
#: packages of its own floor or below; a new package has to be placed here.
FLOORS = (
    (
        "ground: plumbing that everything may use",
        ("ssl_app", "ssl_app.errors", "ssl_app.checks", "ssl_app.io", "ssl_app.registering", "ssl_app.runtime",
         "ssl_app.quiet", "ssl_app.distributed", "ssl_app.handover", "ssl_app.drawing"),
    ),
    (
        "the domain core: what trains",
        ("ssl_app.temperature", "ssl_app.losses", "ssl_app.models", "ssl_app.metrics", "ssl_app.optim",
         "ssl_app.methods", "ssl_app.health", "ssl_app.projector"),
    ),
    (
        "training's edges: data, observers, checkpoints",
        ("datamodules", "callbacks", "ssl_app.checkpointing", "ssl_app.signals", "ssl_app.workers", "ssl_app.registry"),
    ),
    (
        "the records wing: run folders, their spec, and what reads them back",
        ("ssl_app.runs", "ssl_app.trust", "ssl_app.resume", "ssl_app.normalisation", "ssl_app.evaluation"),
    ),
    ("the commands", ("ssl_app.cli", "ssl_app.sweep", "ssl_app.report", "ssl_app.__main__")),
)  # fmt: skip
#: Calls that import a module by name.
IMPORT_CALLS = ("import_module", "__import__")
#: A config key path held as data: a key a config is read by (``model.init_args.loss.class_path``, a prefix
#: ``data.init_args.``) or an override being written (``--model.init_args.optim.lr=``). A bare ``--option`` names
#: an option for a person (a registry's, a hint) and a longer text is a message: neither is the dialect.
KEY_PATH = re.compile(r"(--)?(model|data|trainer)(\.\w+)*\.(init_args|class_path)(\.\w+)*\.?(?(1)=)")
#: The modules that may hold key paths: the run spec (it alone reads a config by them, and names them for the
#: code that writes overrides and config files, which imports them from it).
SPEAKS_THE_DIALECT = ("ssl_app.runs.spec",)
MAX_DIALECT_MODULES = 3


def module_files() -> dict[str, Path]:
    """Every module of the packages by dotted name (a package by its own name, for its ``__init__``)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def type_only_imports(tree: ast.AST) -> set[int]:
    """The ``id`` of every import statement inside an ``if TYPE_CHECKING:`` block."""
    found = set()
    for node in ast.walk(tree):
        test = node.test if isinstance(node, ast.If) else None
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            found |= {id(inner) for statement in node.body for inner in ast.walk(statement)}
    return found


def named_module(text: str, modules: dict[str, Path]) -> str | None:
    """The module a string names, as an import by name takes it (``a.b``, ``a.b:Name``, ``a.b.Name``), or None."""
    name = text.partition(":")[0]
    target = name
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target if target and (target == name or name.rpartition(".")[0] == target) else None


def imports_by_name(tree: ast.AST, modules: dict[str, Path]) -> list[str]:
    """The modules a module imports by name: each literal given to ``importlib.import_module``/``__import__``, and,
    where such a call takes a computed name, every module a string literal of the module names."""
    found, computed = [], False
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        function = node.func
        called = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
        if called in IMPORT_CALLS:
            argument = node.args[0]
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                found.append(argument.value)
            else:
                computed = True
    if computed:
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and named_module(node.value, modules):
                found.append(node.value.partition(":")[0])
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path], runtime_only: bool = False) -> list[tuple[str, list[str]]]:
    """``(imported module, names taken from it)`` for each import of the module ``name``, by statement or by name
    (:func:`imports_by_name`); a private attribute read from an imported module (``sweep._why``) counts as a name
    taken from it. ``runtime_only``: leave out the imports under ``if TYPE_CHECKING:``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = type_only_imports(tree) if runtime_only else set()
    found = [(target, []) for target in imports_by_name(tree, modules)]
    aliases = {}  # local name -> module, for ``import a.b as c`` and ``from a import b`` (b a module)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
            aliases.update({alias.asname: alias.name for alias in node.names if alias.asname})
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.append((submodule, []) if submodule in modules else (base, [alias.name]))
                if submodule in modules:
                    aliases[alias.asname or alias.name] = submodule
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            found.append((aliases[node.value.id], [node.attr]))
    return found


def import_graph(runtime_only: bool = False) -> tuple[dict[str, set[str]], list[str]]:
    """Edges between the packages' own modules, and every private name imported from another module."""
    modules = module_files()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    private = []
    for name, path in modules.items():
        for target, names in imports_of(name, path, modules, runtime_only):
            while target and target not in modules:  # ``import ssl_app.x.y`` of a name inside a module
                target = target.rpartition(".")[0]
            if not target or target == name:
                continue
            graph[name].add(target)
            private += [f"{name} imports {target}.{n}" for n in names if n.startswith("_") and not n.startswith("__")]
    return graph, private


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each a circle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def is_top(name: str) -> bool:
    return any(name == top or name.startswith(top + ".") for top in TOP)


def package_of(module: str) -> str:
    """The package a module belongs to on the floors: a subpackage or top-level module of ``ssl_app``
    (``ssl_app.losses``, ``ssl_app.errors``), or ``datamodules``/``callbacks``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "ssl_app" else parts[0]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded onto packages (an import inside a package is left out)."""
    packages: dict[str, set[str]] = {package_of(name): set() for name in graph}
    for name, targets in graph.items():
        packages[package_of(name)] |= {package_of(t) for t in targets} - {package_of(name)}
    return packages


def floor_of() -> dict[str, int]:
    return {package: level for level, (_, packages) in enumerate(FLOORS) for package in packages}


def arrows_up(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a module to a package on a higher floor than its own."""
    floors = floor_of()
    return sorted(
        f"{name} -> {target}"
        for name, targets in graph.items()
        for target in targets
        if floors.get(package_of(target), -1) > floors.get(package_of(name), len(FLOORS))
    )


def test_the_import_graph_sees_lazy_imports_and_finds_a_circle():
    """The graph is not blind: the sweep's lazy import of the CLI (inside ``validate``) is an edge, and a
    circle made on purpose is found (so an empty result below means no circle, not no graph)."""
    graph, _ = import_graph()
    assert "ssl_app.cli" in graph["ssl_app.sweep.preflight"]  # ``from ssl_app.cli import main`` inside a function
    assert "ssl_app.runs.headline" in graph["ssl_app.runs.summary"]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_import_graph_sees_type_only_imports_and_imports_by_name(tmp_path):
    """Catches the two ways a circle hid from the earlier test: a class named under ``if TYPE_CHECKING:``
    (``temperature.base`` -> ``losses.base`` -> ``temperature``), and a registry that imports the packages above
    it by name (``importlib.import_module(self.package)`` with ``package="ssl_app.losses"``)."""
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nimport importlib\nif TYPE_CHECKING:\n    from a import Hidden\n"
        "importlib.import_module('b.c')\nPACKAGE = 'd.e:Name'\n\ndef load(name):\n    return importlib.import_module(name)\n",
        encoding="utf-8",
    )
    modules = {name: module for name in ("m", "a", "b.c", "d.e")}
    found = {target for target, _ in imports_of("m", module, modules)}
    assert {"a", "b.c", "d.e"} <= found
    assert "a" not in {target for target, _ in imports_of("m", module, modules, runtime_only=True)}
    module.write_text("import importlib\nimportlib.import_module('b.c')\nTEXT = 'd.e is named in a message'\n", encoding="utf-8")
    assert {target for target, _ in imports_of("m", module, modules)} == {"importlib", "b.c"}  # no computed name


def test_a_private_name_read_from_another_module_is_found(tmp_path):
    """``from ssl_app import sweep`` then ``sweep._why(...)`` (as the SLURM launcher once did) is caught."""
    module = tmp_path / "slurm.py"
    module.write_text("def f(run):\n    from ssl_app import sweep\n\n    return sweep._why(run)\n", encoding="utf-8")
    found = imports_of("ssl_app.slurm", module, {"ssl_app.slurm": module, "ssl_app.sweep": module})
    assert ("ssl_app.sweep", ["_why"]) in found


def test_no_import_circle_and_no_arrow_up_into_the_commands():
    graph, private = import_graph()
    assert circles(graph) == [], "no import circle, lazy, by name or for types only"
    upward = sorted(
        f"{name} -> {target}" for name, targets in graph.items() if not is_top(name) for target in targets if is_top(target)
    )
    assert upward == [], "the library (and datamodules, callbacks) must not import the commands (cli, sweep, report)"
    assert private == [], "a private name (``_name``) is used only in its own module"


def test_every_package_stands_on_one_floor_and_imports_only_down():
    """Catches plumbing that imports the records wing (``methods`` -> ``runs.changes``), the records wing on the
    ground floor, a package placed on two floors, and a new package nobody placed."""
    graph, _ = import_graph()
    placed = [package for _, packages in FLOORS for package in packages]
    assert len(placed) == len(set(placed)), "a package stands on one floor"
    unplaced = sorted(set(package_graph(graph)) - set(placed))
    assert unplaced == [], 'place each package on a floor in FLOORS (and in docs/design.md, "Floors")'
    assert arrows_up(graph) == [], "an import goes to its own floor or below"
    assert circles(package_graph(graph)) == [], "no two packages import each other, even through others"


def key_paths(path: Path) -> list[str]:
    """The config key paths a module holds as data (``KEY_PATH``), docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        if KEY_PATH.fullmatch(node.value)
    ]


def test_only_the_spec_speaks_the_config_dialect():
    """Catches a reader of saved runs (the report, the panel, a run's identity, the sweep) re-deriving "which loss,
    which τ" from nested dicts by key paths of its own (``model.init_args.loss.init_args.temperature``), which
    spelled one τ policy three ways; the key path in an error message or a bare ``--option`` hint is fine."""
    assert KEY_PATH.fullmatch("model.init_args.loss.init_args.temperature") and KEY_PATH.fullmatch("--data.init_args.root=")
    assert KEY_PATH.fullmatch("data.init_args.") and not KEY_PATH.fullmatch("--model.init_args.loss")
    assert not KEY_PATH.fullmatch("set model.init_args.loss.init_args.num_classes")
    holding = {name: found for name, path in module_files().items() if (found := key_paths(path))}
    assert len(holding) <= MAX_DIALECT_MODULES and set(holding) <= set(SPEAKS_THE_DIALECT), holding


def test_a_method_trains_and_reads_nothing_private_of_its_loss():
    """Catches observability growing back into the method base (what is logged and when lives in its observer,
    ``ssl_app.methods.observer``), and a method reaching into its loss (``self.loss._modules``, a loss's
    ``_tau_of_call``) instead of what the loss declares."""
    methods = {name: path for name, path in module_files().items() if name.startswith("ssl_app.methods")}
    assert len(methods["ssl_app.methods.base"].read_text(encoding="utf-8").splitlines()) <= MAX_METHOD_BASE_LINES
    reads = []
    for name, path in methods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                owner = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(node.value, "id", "")
                if owner == "loss" or owner.endswith("_loss"):
                    reads.append(f"{name}: {ast.unparse(node)}")
    assert reads == []


def type_check_chains(path: Path) -> list[str]:
    """Each ``... or ...`` of a module that joins two or more ``isinstance`` calls (``isinstance(x, bool) or not
    isinstance(x, numbers.Real) or ...``): a range checked by hand."""

    def is_isinstance(node: ast.expr) -> bool:
        node = node.operand if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) else node
        return isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance"

    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)[:90]}"
        for node in ast.walk(tree)
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and sum(map(is_isinstance, node.values)) >= 2
    ]


def test_option_ranges_are_declared_once_not_checked_by_hand():
    """Catches a range written out again (``isinstance(x, bool) or not isinstance(x, numbers.Real) or not 0 < x``)
    instead of declared once in ``ssl_app.checks`` (the one module that says what a number is) and named there."""
    found = [chain for name, path in module_files().items() if name != "ssl_app.checks" for chain in type_check_chains(path)]
    assert found == []


def test_no_module_is_over_550_lines():
    long = {
        name: n for name, path in module_files().items() if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these modules (at most {MAX_LINES} lines each)"


def describe() -> str:
    """The package graph by floors, as docs/design.md shows it: ``python tests/test_architecture.py``."""
    graph, _ = import_graph()
    packages = package_graph(graph)
    floors = floor_of()
    lines = []
    for level, (title, members) in reversed(list(enumerate(FLOORS))):
        lines.append(f"floor {level}: {title}")
        for package in members:
            if package in packages:
                below = sorted(t for t in packages[package] if t in floors)
                lines.append(f"    {package:<22} -> {', '.join(below) or '(nothing of ours)'}")
    up = arrows_up(graph)
    lines.append(f"packages: {len(packages)}, floors: {len(FLOORS)}, arrows back up: {len(up)}, "
                 f"circles: {len(circles(graph))} between modules, {len(circles(packages))} between packages")  # fmt: skip
    lines += [f"    up: {arrow}" for arrow in up]
    return "\n".join(lines)


if __name__ == "__main__":
    print(describe())
