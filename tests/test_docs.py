"""The docs against the code: the README is a front page; every setting, `ModelConfig`
field and route has its line, with the code's defaults and allowed values; the generated
tables are what the code makes now; and the site builds strictly (`make docs`)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnviz.app.settings import Settings
from attnviz.model import config as model_config
from attnviz.model.config import ModelConfig

from .docs_tables import DOCS, TABLES, section

ROOT = DOCS.parent
README_MOST_LINES = 150


def table(page: str, after: str) -> dict[str, list[str]]:
    """The rows of the first table after the line `after` on a page: first cell's code
    span -> the cells (code spans unwrapped)."""
    text = (DOCS / page).read_text(encoding="utf-8")
    lines = text[text.index(after) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        key = re.fullmatch(r"`([^`]+)`", cells[0])
        assert key, f"{page}: a row whose first cell is not one name: {line}"
        rows[key.group(1)] = cells
    return rows


def unquoted(cell: str) -> str:
    return cell[1:-1] if cell.startswith("`") and cell.endswith("`") else cell


def shown(value: object) -> str:
    """A default as the docs write it: JSON for lists, objects, booleans and null; a float
    in its shortest form; a path of the project relative to it."""
    if isinstance(value, (list, dict, bool)) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        return format(value, "g")
    if isinstance(value, Path) and value.is_relative_to(ROOT):
        return str(value.relative_to(ROOT))
    return str(value)


def test_the_readme_is_a_front_page_with_the_two_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = readme.splitlines()
    assert len(lines) <= README_MOST_LINES, len(lines)
    head = "\n".join(lines[:12])
    assert "make serve" in head and "make test" in head
    for page in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / page).is_file(), page


def test_every_setting_has_its_line_with_the_codes_default():
    rows = table("settings.md", "# Settings")
    fields = {f"ATTNVIZ_{name.upper()}": f for name, f in Settings.model_fields.items()}
    assert set(rows) == set(fields), (
        f"undocumented: {sorted(set(fields) - set(rows))}; "
        f"no such setting: {sorted(set(rows) - set(fields))}"
    )
    for name, field in fields.items():
        default = field.get_default(call_default_factory=True)
        assert unquoted(rows[name][1]) == shown(default), (name, rows[name][1], default)


def test_the_compose_file_lists_every_setting():
    compose = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\s+(ATTNVIZ_[A-Z_]+):", compose, re.M))
    assert listed == {f"ATTNVIZ_{name.upper()}" for name in Settings.model_fields}


def test_every_model_config_field_has_its_line_with_its_default_and_allowed_values():
    rows = table("code.md", "| field | default | allowed | meaning |")
    fields = {f.name: f for f in dataclasses.fields(ModelConfig)}
    assert list(rows) == list(fields), "the table lists every field, in the dataclass's order"
    allowed = {"architecture": model_config.ARCHITECTURES, "positional": model_config.POSITIONALS,
               "norm_placement": model_config.NORM_PLACEMENTS,
               "activation": model_config.ACTIVATIONS, "norm": model_config.NORMS,
               "rope_type": model_config.ROPE_TYPES}  # fmt: skip
    for name, field in fields.items():
        _, default, values, meaning = rows[name]
        assert unquoted(default) == shown(field.default), (name, default, field.default)
        listed = tuple(re.findall(r"`([^`]+)`", values))
        assert listed == allowed.get(name, ()), (name, listed)
        assert meaning, name
    for name, values in allowed.items():  # what the code accepts is what its type says
        literal = ModelConfig.__annotations__[name]
        assert set(getattr(model_config, literal).__args__) == set(values), name


@pytest.mark.parametrize("name", sorted(TABLES))
def test_each_generated_table_is_what_the_code_makes_now(name):
    page, make = TABLES[name]
    text = (DOCS / page).read_text(encoding="utf-8")
    assert section(text, name) == make(), (
        f"docs/{page}'s {name} table differs from the code: run "
        ".venv/bin/python -m tests.docs_tables"
    )


def test_the_site_builds_strictly(tmp_path):
    """`mkdocs build --strict`: a broken link, anchor or page left out of the nav fails."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "index.html").is_file() and (tmp_path / "api" / "index.html").is_file()
