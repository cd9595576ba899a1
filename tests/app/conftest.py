from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings


@pytest.fixture(scope="module")
def client():
    # every test's requests come from one client: its shares are for tests/app/hostile
    settings = Settings(torch_threads=1, client_cost_per_minute=0, corpus_runs_per_client=100)
    with TestClient(create_app(settings)) as c:
        yield c
