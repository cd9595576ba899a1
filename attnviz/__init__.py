"""attnviz: every attention head of a Transformer, live: a server, its page and its API;
in Python, `attnviz.capture(model, text)` (attnviz/captured.py); in a notebook cell,
`attnviz.show(model, text, view="head")` (attnviz/notebook.py).

The repository keeps the code's layers at its top, as the design names them (app/, model/,
static/, templates/, models/); this package links them (symbolic links in the repository,
the folders themselves in a wheel), so one import name holds them all and a user's own
`app` or `model` module is never shadowed: `attnviz.model`, `attnviz.app`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .app.version import VERSION as __version__
from .captured import Captured, capture

if TYPE_CHECKING:
    from .notebook import View


def show(model: Any, text: str | None = None, view: str | None = None, **options: Any) -> View:
    """The page's `view` of `model` on `text` in a notebook cell (attnviz/notebook.py's
    `show`; the widget's libraries are imported on first use)."""
    from .notebook import show as shown

    return shown(model, text, view, **options)


__all__ = ["Captured", "__version__", "capture", "show"]
