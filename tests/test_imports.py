"""The import graph of model/, app/ and the package's own modules has no circle: every
import counts (at a module's top, inside its functions and under `if TYPE_CHECKING:`
alike, since a name a module annotates with is a layer it reads), and `from .pkg import x`
reads the package `pkg` (its __init__) as well as `pkg.x`. The graph has no strongly
connected component of more than one module. Run alone, `pytest tests/test_imports.py -s`
prints the graph's size."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("model", "app")


def modules() -> dict[str, Path]:
    """attnviz.<package>.<module> -> its file, for the packages checked and attnviz's own."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = [package, *path.relative_to(ROOT / package).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found["attnviz." + ".".join(parts)] = path
    for path in (ROOT / "attnviz").glob("*.py"):  # the package's own: __init__, captured, …
        found["attnviz" if path.stem == "__init__" else f"attnviz.{path.stem}"] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The checked modules `name` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            where = ".".join([*base, *(node.module.split(".") if node.module else [])])
            submodules = [f"{where}.{alias.name}" for alias in node.names]
            targets = [where, *(m for m in submodules if m in known)]
        else:
            continue
        for target in targets:
            while target and target not in known:  # a name inside a module: the module
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_model_and_app_import_one_way():
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    print(f"{len(graph)} modules, {sum(map(len, graph.values()))} imports between them")
    assert circles(graph) == []


def test_the_walk_finds_a_circle():
    """The check itself: a circle of three, and one through a package's __init__."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "p": {"p.x"}, "p.x": {"p"}}
    assert circles(graph) == [["a", "b", "c"], ["p", "p.x"]]


# app/'s layers, top first: a module imports only from its own layer and those after it
APP_LAYERS = (
    ("main", "cli"),
    ("edge",),
    ("head_views",),
    ("corpus",),
    ("lab",),
    ("runs",),
    ("catalog",),
    ("payloads",),
    ("budgets",),
    ("errors", "settings", "request", "images", "version"),
)


def test_app_layers_import_downward():
    rank = {name: i for i, names in enumerate(APP_LAYERS) for name in names}
    known = modules()
    upward = []
    for name, path in known.items():
        if not name.startswith("attnviz.app."):
            continue
        here = rank[name.split(".")[2]]
        for target in imports(name, path, known):
            if target.startswith("attnviz.app.") and rank[target.split(".")[2]] < here:
                upward.append(f"{name} -> {target}")
    assert upward == []
