"""A client that asks for a large answer and never reads it: dropped after the send
timeout (3 s here), its connection closed; the server's memory goes back."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx2

from bench.hostile import PROMPT


def test_a_client_that_never_reads_is_dropped_after_the_send_timeout(base, server, healthz):
    host, port = base.removeprefix("http://").split(":")
    body = json.dumps(
        {
            "model": "smollm2",
            "text": PROMPT[:1500],
            "layers": [0, 1, 2],
            "kinds": ["weights"],
            "encoding": "f4",
        }
    ).encode()
    request = (
        b"POST /api/v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body) + body
    )
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.bind(("127.0.0.41", 0))
        s.connect((host, int(port)))
        s.sendall(request)
        deadline = time.monotonic() + 60
        log = server[1]
        while "read nothing for 3 s, or under 1024 kB/s; dropped" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        s.settimeout(10)
        got, closed = 0, False
        try:
            while chunk := s.recv(1 << 16):
                got += len(chunk)
            closed = True  # the server closed the connection: the answer was not all sent
        except ConnectionError:
            closed = True
    assert closed
    # what the socket buffers held when it stopped reading, not the answer (tens of MB)
    assert got < 8 * 2**20, got


def test_a_client_that_reads_too_slowly_is_dropped_and_its_answer_freed(base, server, healthz):
    """Each piece within the send timeout was not enough: a client that reads a little
    every moment held a 50 MB answer for hours. Past the send timeout's grace, the time a
    client keeps the server waiting must stay under its answer at ATTNVIZ_LEAST_READ_RATE
    (1 MiB/s here: 64 kB/s by default)."""
    host, port = base.removeprefix("http://").split(":")
    body = json.dumps(
        {"model": "smollm2", "text": PROMPT[:1500], "layers": [0, 1, 2], "encoding": "f4"}
    ).encode()
    request = (
        b"POST /api/v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body) + body
    )
    log = server[1]
    before = log.read_text().count("or under 1024 kB/s; dropped")
    got, dropped = 0, False
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.bind(("127.0.0.42", 0))
        s.connect((host, int(port)))
        s.sendall(request)
        s.settimeout(10)
        began = time.monotonic()
        while time.monotonic() - began < 60:
            got += len(s.recv(4096))  # 16 kB/s: a sixty-fourth of the least rate here
            time.sleep(0.25)
            if log.read_text().count("or under 1024 kB/s; dropped") > before:
                dropped = True  # (what the kernel's buffers hold still reaches the client)
                break
        took = time.monotonic() - began
    assert dropped, (took, got)
    # dropped once the grace (3 s) and what the socket buffers took at 1 MiB/s were spent:
    # a part of the 16 MB answer read, the rest freed
    assert took < 30 and got < 2 * 2**20, (took, got)


def test_the_work_of_clients_that_go_away_is_never_run(base, server, healthz):
    log = server[1]
    before = log.read_text().count("the client went away")
    first = threading.Thread(
        target=httpx2.post,
        args=(f"{base}/api/v1/analyze",),
        kwargs={"json": {"model": "smollm2", "text": f"first {PROMPT[:1500]}"}, "timeout": 120},
    )
    first.start()
    time.sleep(0.5)
    host, port = base.removeprefix("http://").split(":")
    for i in range(3):  # queued behind the first, then gone
        body = json.dumps({"model": "smollm2", "text": f"gone {i} {PROMPT[:1500]}"}).encode()
        with socket.create_connection((host, int(port))) as s:
            s.sendall(
                b"POST /api/v1/analyze HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body) + body
            )
            time.sleep(0.3)
    first.join()
    began = time.perf_counter()
    after = httpx2.post(f"{base}/api/v1/analyze", json={"text": "After them."}, timeout=120)
    waited = time.perf_counter() - began
    assert after.status_code == 200
    assert log.read_text().count("the client went away") - before == 3
    # each of the three would have taken as long as the first (seconds): none ran
    assert waited < 3, waited
