"""The app skeleton: /healthz in-process, and `attnviz serve` as a real uvicorn server."""

from __future__ import annotations

import threading
import time

import httpx2
from fastapi.testclient import TestClient

from app.main import create_app

from ..serving import start_server


def test_healthz_reports_ok_and_the_loaded_models():
    with TestClient(create_app()) as client:
        response = client.get("/healthz")
    assert response.status_code == 200
    models = ["pronounce", "pronounce-untrained", "minilm", "minilm-untrained"]
    assert response.json() == {"status": "ok", "models": models}


def test_openapi_documents_healthz():
    with TestClient(create_app()) as client:
        schema = client.get("/openapi.json").json()
    assert "/healthz" in schema["paths"]


def healthz_answers_during_long_requests(base: str) -> bool:
    """Inference runs off the event loop: with six long requests queued behind one model
    slot, /healthz still answers before the last of them ends."""
    finished: list[str] = []

    def run_long(i: int) -> None:
        text = "银行行走苹果公司发布了新款手机" * 8 + str(i)
        body = {"text": text, "kinds": ["weights", "scores", "q", "k", "v"]}
        assert httpx2.post(f"{base}/api/v1/attention", json=body, timeout=120).status_code == 200
        finished.append("long")

    workers = [threading.Thread(target=run_long, args=(i,)) for i in range(6)]
    for worker in workers:
        worker.start()
    time.sleep(0.3)  # let them start
    assert httpx2.get(f"{base}/healthz", timeout=60).status_code == 200
    finished.append("healthz")
    for worker in workers:
        worker.join()
    return finished[-1] == "long" and len(finished) == 7


def test_attnviz_serve_answers_over_http_and_stops_on_sigterm():
    env = {"ATTNVIZ_LOG_LEVEL": "info", "ATTNVIZ_MAX_CONCURRENT_RUNS": "1"}
    proc, base = start_server(env, capture_output=True)
    try:
        response = httpx2.get(f"{base}/healthz", timeout=10)
        assert response.status_code == 200
        assert response.json()["status"] == "ok"
        analyze = httpx2.post(f"{base}/api/v1/analyze", json={"text": "猫追狗"}, timeout=60)
        assert analyze.status_code == 200
        assert analyze.json()["output"] == ["mao1", "zhui1", "gou3"]
        assert healthz_answers_during_long_requests(base)
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=20)
    # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status tells it
    assert f"Uvicorn running on {base}" in output
    assert "Application shutdown complete" in output
