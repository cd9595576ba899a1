"""The installed package's version, as a citation names it (a checkout that was never
installed: 0+unknown)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("attnviz")
except PackageNotFoundError:  # (run from a checkout that was never installed)
    VERSION = "0+unknown"
