"""Installing into a fresh virtual environment as the Makefile does: uv, told the indexes,
find-links and constraints pip is configured with (`pip config list`), so both take
packages from the same places."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# what a wheel is built from: the package, the folders it links, what the build reads
SOURCES = ("attnviz", "app", "model", "static", "templates", "models", "pyproject.toml",
           "README.md")  # fmt: skip
OPTIONS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url",
           "find-links": "--find-links", "constraint": "--constraint"}  # fmt: skip


def uv_options() -> list[str]:
    """uv's options for what pip is configured with."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], text=True,
                            capture_output=True, check=False).stdout  # fmt: skip
    options = ["--index-strategy", "unsafe-best-match"]
    for line in listed.splitlines():
        found = re.fullmatch(r"global\.([\w-]+)='(.*)'", line.strip())
        if found and found.group(1) in OPTIONS:
            for value in found.group(2).replace("\\n", " ").split():  # (a list: a line each)
                options += [OPTIONS[found.group(1)], value]
    return options


def uv() -> str:
    """The uv the project's environment holds (the Makefile installs it)."""
    found = Path(sys.executable).parent / "uv"
    return str(found) if found.exists() else shutil.which("uv") or "uv"


def build_wheel(out: Path) -> Path:
    """The project's wheel, built from a copy of what it is made of (the build's own
    folders stay out of the checkout)."""
    source = out / "source"
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():  # (the links in attnviz/ kept as links: the build follows them)
            shutil.copytree(path, source / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))  # fmt: skip
        else:
            shutil.copy2(path, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(out), str(source)],
                   check=True)  # fmt: skip
    return next(out.glob("attnviz-*.whl"))


def fresh_venv(folder: Path, *requirements: str, no_deps: tuple[str, ...] = ()) -> Path:
    """A new virtual environment with nothing but `requirements` (and their dependencies)
    and `no_deps` (without theirs); its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    base = [uv(), "pip", "install", "--python", str(python), "--quiet", *uv_options()]
    subprocess.run([*base, *requirements], check=True)
    if no_deps:
        subprocess.run([*base, "--no-deps", *no_deps], check=True)
    return python


if __name__ == "__main__":  # the Makefile's uv options: `python harness/install.py`
    import shlex

    print(shlex.join(uv_options()))
