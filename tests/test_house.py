"""The house's rules, checked: one meaning per name (no class defined twice in app/ and
model/, no module of theirs taking a standard library module's name, a glossary that
names each concept once and points to code that exists), and files of one idea (none
over 400 lines in app/, model/ and static/js/)."""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "model")


def python_files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_no_class_is_defined_twice():
    where = defaultdict(list)
    for path in python_files():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                where[node.name].append(str(path.relative_to(ROOT)))
    twice = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert twice == {}, f"classes defined twice (give each its own name): {twice}"


def test_no_module_takes_a_standard_library_name():
    taken = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*"):
            name = path.stem if path.suffix == ".py" else path.name if path.is_dir() else None
            if name and not name.startswith("_") and name in sys.stdlib_module_names:
                taken.append(str(path.relative_to(ROOT)))
    assert taken == [], f"these shadow the standard library's modules: {taken}"


def glossary() -> list[tuple[str, str, str]]:
    text = (ROOT / "docs" / "code.md").read_text(encoding="utf-8")
    table = text[text.index("## Glossary and data flow") :].split("\n\n")[2]
    rows = [line for line in table.splitlines() if line.startswith("| ")][2:]
    return [tuple(cell.strip() for cell in row.strip("|").split(" | ")) for row in rows]  # type: ignore[misc]


def test_the_glossary_names_each_concept_once_and_its_code_exists():
    rows = glossary()
    assert len(rows) >= 15
    names = [name for name, _, _ in rows]
    assert len(names) == len(set(names)), names
    sources = "\n".join(
        p.read_text(encoding="utf-8")
        for pattern in ("app/**/*.py", "model/**/*.py", "static/js/**/*.js")
        for p in ROOT.glob(pattern)
    )
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", sources))
    missing = []
    for name, _, where in rows:
        for span in re.findall(r"`([^`]+)`", where):
            if span.startswith("ATTNVIZ_"):  # a setting, by its environment name
                span = span.removeprefix("ATTNVIZ_").lower()
            first = re.match(r"[A-Za-z_][A-Za-z0-9_.]*", span)
            if first is None:
                continue
            for part in first.group(0).split("."):
                if part and part not in words:
                    missing.append((name, span))
    assert missing == [], f"the glossary points to names the code lacks: {missing}"


def test_no_file_is_over_400_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for pattern in ("app/**/*.py", "model/**/*.py", "static/js/**/*.js")
        for p in ROOT.glob(pattern)
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400
    }
    assert long == {}, f"split these by idea: {long}"


def test_the_code_is_imported_by_one_name_attnviz():
    """app/ and model/ are attnviz.app and attnviz.model (attnviz/ links them): a top-level
    `app` or `model` import would load a second copy of a module beside the first."""
    sources = [p for folder in ("app", "model", "tests", "harness", "bench", "deploy", "attnviz")
               for p in (ROOT / folder).glob("**/*.py") if ".venv" not in p.parts]  # fmt: skip
    sources += [ROOT / "Makefile", *(ROOT / "harness").glob("**/*.mk")]
    # (a statement, or one in a string that another interpreter runs)
    bare = re.compile(r"(^\s*|[\"';]\s*)(from|import) (app|model)[. ]", re.MULTILINE)
    found = [str(p.relative_to(ROOT)) for p in sources if bare.search(p.read_text("utf-8"))]
    assert found == [], f"import these through attnviz.app / attnviz.model: {found}"
    links = {
        p.name: p.readlink().as_posix() for p in (ROOT / "attnviz").iterdir() if p.is_symlink()
    }
    assert links == {name: f"../{name}" for name in ("app", "model", "static", "templates",
                                                     "models")}  # fmt: skip


def test_every_quoted_module_path_in_static_names_a_module():
    """The notebook widget and the saved views link the page's modules by reading every
    quoted relative .js path as an import (static/widget/widget.js): one in a comment or a
    string that names no module would break them."""
    quoted = re.compile(r"""(["'])(\.{1,2}/[\w./-]+\.js)\1""")
    imports = {
        path.resolve(): [
            (path.parent / m[1]).resolve() for m in quoted.findall(path.read_text(encoding="utf-8"))
        ]
        for path in (ROOT / "static").rglob("*.js")
    }
    wrong = [f"{p}: {i}" for p, named in imports.items() for i in named if not i.is_file()]
    assert wrong == []
    # and none imports itself through others: the widget links them dependencies first
    done: set[Path] = set()

    def visit(path: Path, stack: tuple[Path, ...]) -> None:
        assert path not in stack, f"an import cycle: {[p.name for p in (*stack, path)]}"
        if path not in done:
            for named in imports.get(path, []):
                visit(named, (*stack, path))
            done.add(path)

    for path in imports:
        visit(path, ())
