"""SVGs that cost far more to draw than their size (issue 43): drawn in processes of their
own with bounded CPU and wall time, so that the run threads, the event loop and another
client's requests never wait on them."""

from __future__ import annotations

import threading
import time

from tests.app.test_figures import long_path, use_bomb

from .conftest import client

SVG = {"content-type": "image/svg+xml"}


def test_svg_bombs_are_refused_or_stopped_while_another_client_is_served(base, healthz):
    answers: list[tuple[int, str, float]] = []

    def post(svg: bytes) -> None:
        with client(base, "127.0.0.61", timeout=60) as c:
            began = time.monotonic()
            answer = c.post("/api/v1/figure/pdf", content=svg, headers=SVG)
            answers.append((answer.status_code, answer.text, time.monotonic() - began))

    bombs = [use_bomb(7), use_bomb(9, fan=8), long_path(1_500_000)]
    threads = [threading.Thread(target=post, args=(svg,)) for svg in bombs]
    for t in threads:
        t.start()
    time.sleep(0.3)
    with client(base, "127.0.0.62") as other:
        began = time.monotonic()
        theirs = other.post("/api/v1/analyze", json={"model": "smollm2", "text": "My turn."})
        waited = time.monotonic() - began
    for t in threads:
        t.join()
    assert theirs.status_code == 200 and waited < 5, (theirs.status_code, waited)
    refused = [a for a in answers if "over 20,000 elements" in a[1]]
    assert len(refused) == 2 and all(status == 422 and s < 5 for status, _, s in refused)
    # the long path is drawn (a PDF) or stopped at its CPU or wall time: within ~10 s
    (status, text, seconds) = next(a for a in answers if a not in refused)
    assert status == 200 or (status == 422 and "was stopped" in text), text[:200]
    assert seconds < 12, seconds
