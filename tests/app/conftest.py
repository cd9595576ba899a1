from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient

from attnviz.app.main import create_app
from attnviz.app.settings import Settings


@pytest.fixture(scope="module")
def client():
    # every test's requests come from one client: its shares are for tests/app/hostile
    settings = Settings(torch_threads=1, client_cost_per_minute=0, corpus_runs_per_client=100)
    with TestClient(create_app(settings)) as c:
        yield c


@contextmanager
def with_plugin(plugin: str, registry: dict, zoo: list[str]) -> Iterator[TestClient]:
    """An app that imports `plugin` (which adds to `registry`), for one module's tests;
    then the registry as it was, and the plugin forgotten (a later import adds it anew),
    so that the other tests' apps serve what ships."""
    saved = dict(registry)
    settings = Settings(torch_threads=1, plugins=[plugin], zoo=zoo)
    try:
        with TestClient(create_app(settings)) as client:
            yield client
    finally:
        registry.clear()
        registry.update(saved)
        sys.modules.pop(plugin, None)
