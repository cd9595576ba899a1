from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(Settings(torch_threads=1))) as c:
        yield c
