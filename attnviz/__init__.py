"""attnviz: every attention head of a Transformer, live: a server, its page and its API;
in Python, `attnviz.capture(model, text)` (attnviz/captured.py).

The repository keeps the code's layers at its top, as the design names them (app/, model/,
static/, templates/, models/); this package links them (symbolic links in the repository,
the folders themselves in a wheel), so one import name holds them all and a user's own
`app` or `model` module is never shadowed: `attnviz.model`, `attnviz.app`."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("attnviz")
except PackageNotFoundError:  # (run from a checkout that was never installed)
    __version__ = "0+unknown"

from .captured import Captured, capture

__all__ = ["Captured", "__version__", "capture"]
