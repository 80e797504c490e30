"""The shape of the code (docs/design.md, "Repository map"): commands on top, the library below, no import circle.

The import graph is read from the source (``ast``), every ``import`` counted wherever it stands: at the
top or inside a function (a lazy import hides a circle from Python but not from this test). An import
under ``if TYPE_CHECKING:`` runs nothing, so it makes no circle; it still may not point up into a
command. An edge goes to the most specific module that exists (``from ssl_app.cli import app`` is an
edge to ``ssl_app.cli.app``, ``from ssl_app.runs.layout import X`` to ``ssl_app.runs.layout``).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("ssl_app", "datamodules", "callbacks")
#: The commands: they may import the library and each other; nothing below imports them.
TOP = ("ssl_app.cli", "ssl_app.sweep", "ssl_app.report", "ssl_app.__main__")
MAX_LINES = 550


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


def imports_of(name: str, path: Path, modules: dict[str, Path], runtime_only: bool = False) -> list[tuple[str, list[str]]]:
    """``(imported module, names taken from it)`` for each import statement of the module ``name``; a private
    attribute read from an imported module (``sweep._why``) counts as a name taken from it. ``runtime_only``:
    leave out the imports under ``if TYPE_CHECKING:``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = type_only_imports(tree) if runtime_only else set()
    found = []
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


def test_the_import_graph_sees_lazy_imports_and_finds_a_circle():
    """The graph is not blind: the sweep's lazy import of the CLI (inside ``validate``) is an edge, and a
    circle made on purpose is found (so an empty result below means no circle, not no graph)."""
    graph, _ = import_graph()
    assert "ssl_app.cli" in graph["ssl_app.sweep.preflight"]  # ``from ssl_app.cli import main`` inside a function
    assert "ssl_app.runs.headline" in graph["ssl_app.runs.summary"]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_a_private_name_read_from_another_module_is_found(tmp_path):
    """``from ssl_app import sweep`` then ``sweep._why(...)`` (as the SLURM launcher once did) is caught."""
    module = tmp_path / "slurm.py"
    module.write_text("def f(run):\n    from ssl_app import sweep\n\n    return sweep._why(run)\n", encoding="utf-8")
    found = imports_of("ssl_app.slurm", module, {"ssl_app.slurm": module, "ssl_app.sweep": module})
    assert ("ssl_app.sweep", ["_why"]) in found


def test_no_import_circle_and_no_arrow_up_into_the_commands():
    graph, private = import_graph()
    assert circles(import_graph(runtime_only=True)[0]) == []
    upward = sorted(
        f"{name} -> {target}" for name, targets in graph.items() if not is_top(name) for target in targets if is_top(target)
    )
    assert upward == [], "the library (and datamodules, callbacks) must not import the commands (cli, sweep, report)"
    assert private == [], "a private name (``_name``) is used only in its own module"


def test_no_module_is_over_550_lines():
    long = {
        name: n for name, path in module_files().items() if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these modules (at most {MAX_LINES} lines each)"
