"""The app skeleton: /healthz in-process, and `attnviz serve` as a real uvicorn server."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import platform
import threading
import time
from pathlib import Path

import httpx2
from fastapi.testclient import TestClient

from attnviz.app.edge.logs import JsonFormatter
from attnviz.app.edge.loop_watch import LoopWatch
from attnviz.app.main import create_app
from attnviz.app.settings import Settings
from attnviz.model.runtime import cgroup_cpu_limit, release_free_memory, usable_cpus
from harness.serving import start_server


def test_healthz_reports_ok_and_the_loaded_models():
    with TestClient(create_app()) as client:
        response = client.get("/healthz")
    assert response.status_code == 200
    models = ["pronounce", "pronounce-untrained", "minilm", "minilm-untrained"]
    models += ["smollm2", "smollm2-untrained"]
    assert response.json() == {"status": "ok", "models": models}


def test_readyz_fails_while_the_tensor_threads_are_stuck_with_requests_waiting():
    """/readyz (the readiness probe's) is /healthz, and a 503 while requests wait for
    tensor threads that have started or ended nothing for longer than a request's
    deadline and a minute: the replica leaves its Service until they move again."""
    settings = Settings(torch_threads=1, max_concurrent_runs=1, zoo=["pronounce"])
    with TestClient(create_app(settings)) as client:
        inference = client.app.state.inference
        assert client.get("/readyz").json()["status"] == "ok"
        release = threading.Event()
        inference.threads.submit(release.wait)  # the one tensor thread taken
        answers: list[int] = []
        waiting = threading.Thread(
            target=lambda: answers.append(
                client.post("/api/v1/analyze", json={"text": "猫"}).status_code
            )
        )
        waiting.start()
        time.sleep(0.5)
        assert client.get("/readyz").status_code == 200  # (waiting, but not for long)
        inference.moved -= settings.run_deadline_s + 61  # (as if that long had passed)
        stuck = client.get("/readyz")
        assert stuck.status_code == 503
        assert stuck.json()["detail"].startswith(
            "the tensor threads have started or ended no work for"
        )
        assert "with 1 requests waiting for them" in stuck.json()["detail"]
        assert client.get("/healthz").status_code == 200  # (alive: the loop answers)
        release.set()
        waiting.join()
        assert answers == [200] and client.get("/readyz").status_code == 200


def test_a_held_event_loop_is_logged_with_how_long(caplog):
    """The server watches its own event loop (ATTNVIZ_LOOP_STALL_WARN_MS): a coroutine that
    holds it 200 ms is logged as a stall of about that long; a loop that is not held, not."""

    from attnviz.app.edge.logs import IN_FLIGHT

    # two requests being answered meanwhile (as AccessLog files them), one not yet routed
    routed = type("Route", (), {"path": "/api/v1/lab/graph"})
    scopes = [
        {"method": "POST", "path": "/api/v1/lab/graph", "route": routed},
        {"method": "POST", "path": "/api/v1/lab/graph", "route": routed},
        {"method": "GET", "path": "/x" * 80},
    ]

    async def held() -> LoopWatch:
        watch = LoopWatch(warn_ms=100)
        watch.start()
        await asyncio.sleep(0.1)  # (not held: its wakes are on time)
        quiet = watch.stalls
        IN_FLIGHT.update({id(scope): scope for scope in scopes})
        time.sleep(0.2)  # (the fault it watches for)
        await asyncio.sleep(0.05)
        for scope in scopes:
            del IN_FLIGHT[id(scope)]
        watch.stop()
        assert quiet == 0
        return watch

    with caplog.at_level(logging.WARNING, logger="attnviz.loop"):
        watch = asyncio.run(held())
    assert watch.stalls == 1 and 190 <= watch.worst_ms < 400, watch.worst_ms
    (record,) = [r for r in caplog.records if r.name == "attnviz.loop"]
    said = record.getMessage()
    assert said.startswith("the event loop was held ")
    named = ["POST /api/v1/lab/graph x2", "GET " + ("/x" * 80)[:100]]
    assert said.endswith("requests in flight: " + ", ".join(named)), said
    assert record.in_flight == named  # type: ignore[attr-defined]
    assert record.stall_ms == round(watch.worst_ms, 1)  # type: ignore[attr-defined]


def test_openapi_documents_healthz():
    with TestClient(create_app()) as client:
        schema = client.get("/openapi.json").json()
        answer = client.get("/healthz").json()
    responses = schema["paths"]["/healthz"]["get"]["responses"]
    ok = responses["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/Health"}
    health = schema["components"]["schemas"]["Health"]
    assert health["required"] == ["status", "models"]
    assert health["properties"]["status"]["const"] == "ok"
    assert health["properties"]["models"]["items"] == {"type": "string"}
    assert set(answer) == set(health["properties"])  # the answer is what the schema says
    assert responses["413"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorMessage"
    }


def healthz_answers_during_long_requests(base: str) -> bool:
    """Inference runs off the event loop: with four long requests queued behind one model
    slot (one client's share of the queue), /healthz still answers before the last of
    them ends."""
    finished: list[str] = []

    def run_long(i: int) -> None:
        text = "银行行走苹果公司发布了新款手机" * 8 + str(i)
        body = {"text": text, "kinds": ["weights", "scores", "q", "k", "v"]}
        assert httpx2.post(f"{base}/api/v1/attention", json=body, timeout=120).status_code == 200
        finished.append("long")

    workers = [threading.Thread(target=run_long, args=(i,)) for i in range(4)]
    for worker in workers:
        worker.start()
    time.sleep(0.3)  # let them start
    assert httpx2.get(f"{base}/healthz", timeout=60).status_code == 200
    finished.append("healthz")
    for worker in workers:
        worker.join()
    return finished[-1] == "long" and len(finished) == 5


def test_attnviz_serve_answers_over_http_and_stops_on_sigterm():
    env = {"ATTNVIZ_LOG_LEVEL": "info", "ATTNVIZ_MAX_CONCURRENT_RUNS": "1"}
    proc, base = start_server(env, capture_output=True)
    try:
        response = httpx2.get(f"{base}/healthz", timeout=10)
        assert response.status_code == 200
        assert response.json()["status"] == "ok"
        headers = {"X-Request-ID": "trace-42"}
        analyze = httpx2.post(
            f"{base}/api/v1/analyze", json={"text": "猫追狗"}, headers=headers, timeout=60
        )
        assert analyze.status_code == 200
        assert analyze.headers["x-request-id"] == "trace-42"
        assert analyze.json()["output"] == ["mao1", "zhui1", "gou3"]
        assert healthz_answers_during_long_requests(base)

        # the threads that compute (the tensor threads and their OpenMP teams) ask for
        # less CPU than the main thread's event loop: Linux keeps a nice value per thread
        # (the 19th field of its stat)
        def nice(task: Path) -> int:
            return int((task / "stat").read_text().rsplit(") ", 1)[1].split()[16])

        tasks = {int(t.name): nice(t) for t in Path(f"/proc/{proc.pid}/task").iterdir()}
        loop = tasks.pop(proc.pid)
        assert loop + 5 in tasks.values(), tasks
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=20)
    # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status tells it
    lines = [json.loads(line) for line in output.splitlines()]  # every line is JSON
    messages = [line["message"] for line in lines]
    assert any(m.startswith(f"Uvicorn running on {base}") for m in messages)
    assert "Application shutdown complete." in messages
    access = [line for line in lines if line["logger"] == "attnviz.access"]
    analyze_line = next(line for line in access if line["request_id"] == "trace-42")
    assert analyze_line["route"] == "/api/v1/analyze"
    assert analyze_line["method"] == "POST" and analyze_line["status"] == 200
    assert analyze_line["duration_ms"] > 0
    health = [line for line in access if line["route"] == "/healthz"]
    assert len(health) >= 3 and all(len(line["request_id"]) == 32 for line in health)


def test_request_ids_are_echoed_or_made_and_413s_are_logged(caplog):
    with TestClient(create_app(Settings(torch_threads=1, max_body_bytes=1024))) as client:
        caplog.set_level(logging.INFO, logger="attnviz.access")
        made = client.get("/api/v1/models")
        hostile = client.get("/healthz", headers={"X-Request-ID": 'a b"<script>'})
        refused = client.post("/api/v1/analyze", content=b"x" * 5000)
    assert len(made.headers["x-request-id"]) == 32
    assert hostile.headers["x-request-id"] != 'a b"<script>'  # not a plain token: replaced
    assert refused.status_code == 413
    records = {r.route: r for r in caplog.records if r.name == "attnviz.access"}
    assert records["/api/v1/models"].status == 200
    assert records["/api/v1/analyze"].status == 413
    assert records["/api/v1/analyze"].request_id == refused.headers["x-request-id"]


def test_a_json_log_record_stays_one_line_whatever_its_path_holds():
    """A request path holding U+2028 (the fuzz sent one) split its access line in two for
    readers that end lines there too (Python's splitlines, some log shippers)."""
    message = "GET /api/v1/models/a\u2028b\u2029c\x85d\x0be 404"
    record = logging.makeLogRecord({"msg": message, "levelname": "INFO", "name": "t"})
    line = JsonFormatter().format(record)
    assert len(line.splitlines()) == 1
    assert json.loads(line)["message"] == message


def test_cgroup_cpu_quota_caps_the_threads(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("200000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(tmp_path) == 2.0
    assert 1 <= usable_cpus() <= (os.cpu_count() or 1)


def test_the_heap_is_trimmed_where_the_c_library_is_glibc():
    assert release_free_memory() is (platform.libc_ver()[0] == "glibc")
