"""Optional API keys (issue 43): a known key is its own client with its own share, an
unknown one a 401, none the address as before; clients without a key may be given
shorter prompts; a key is kept as its hash and never logged."""

from __future__ import annotations

import hashlib
import logging

import pytest
from fastapi.testclient import TestClient

from attnviz.app.cli import main as cli
from attnviz.app.main import create_app
from attnviz.app.settings import Settings

KEY, BIG = "k-lab-a-0123456789", "k-big-9876543210"
LONG = "The quick brown fox jumps over the lazy dog. " * 12  # ~120 SmolLM2 tokens


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture(scope="module")
def keyed():
    settings = Settings(
        torch_threads=1,
        zoo=["pronounce", "smollm2"],
        client_cost_per_minute=12,
        anonymous_max_tokens=64,
        api_keys={
            "lab-a": sha(KEY),
            "big": {"sha256": sha(BIG), "cost_per_minute": 100_000, "requests": 16},
        },
    )
    with TestClient(create_app(settings)) as c:
        yield c


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_a_client_without_a_key_gets_the_shorter_prompts_and_a_key_the_longer(keyed, caplog):
    caplog.set_level(logging.DEBUG)
    anonymous = keyed.post("/api/v1/analyze", json={"model": "smollm2", "text": LONG})
    assert anonymous.status_code == 422
    assert "at most 64 for a client without an API key" in anonymous.json()["detail"]
    with_key = keyed.post(
        "/api/v1/analyze", json={"model": "smollm2", "text": LONG}, headers={"X-API-Key": BIG}
    )
    assert with_key.status_code == 200, with_key.text
    assert BIG not in caplog.text and KEY not in caplog.text  # (never logged)


def test_an_unknown_key_is_a_401_whatever_the_route(keyed):
    for path in ("/api/v1/models", "/"):
        refused = keyed.get(path, headers=bearer("not-a-key"))
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith(
            "Bearer"
        )
        assert (
            refused.json()["detail"]
            == "this API key is not one of this server's (ATTNVIZ_API_KEYS)"
        )


def test_each_key_has_its_own_share_apart_from_its_address(keyed):
    """The address's budget (12 a minute, a POST 2) spent, the same address with a key is
    another client; a key with a budget of its own outlasts the others."""

    def spent(headers: dict[str, str]) -> int:
        for i in range(20):
            answer = keyed.post("/api/v1/analyze", json={"text": "猫"}, headers=headers)
            if answer.status_code == 429:
                return i
            assert answer.status_code == 200, answer.text
        return 20

    assert spent({}) <= 6
    assert keyed.post("/api/v1/analyze", json={"text": "猫"}).status_code == 429
    assert 3 <= spent(bearer(KEY)) <= 6  # (lab-a: the client's budget, its own)
    assert spent(bearer(BIG)) == 20


def test_attnviz_key_prints_a_key_and_the_hash_the_server_keeps(capsys, monkeypatch):
    cli(["key", "lab-b"])
    said = capsys.readouterr().out.splitlines()
    key, kept = said[1].strip(), said[3].strip()
    assert kept == f'{{"lab-b": "{sha(key)}"}}' and len(key) >= 40
    monkeypatch.setenv("ATTNVIZ_API_KEYS", kept)  # (as the server reads it)
    assert Settings().api_keys["lab-b"].sha256 == sha(key)
