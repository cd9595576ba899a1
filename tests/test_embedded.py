"""attnviz.show's app in the kernel's process (attnviz/notebook.py `Embedded`): a
generation's steps reach the page as they are made, through the widget's channel, and a
page that stops reading stops the generation, as a browser's closed connection does."""

from __future__ import annotations

import json
import logging
import threading
import time

from attnviz.notebook import served


class Said(logging.Handler):
    """The messages of one logger, whatever its propagation."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_generation_streams_through_the_channel_and_stops_when_aborted():
    server, model_id = served("smollm2")
    assert model_id == "smollm2" and served("smollm2")[0] is server  # (one app a process)
    parts: list[tuple[float, dict, list[bytes]]] = []
    ended = threading.Event()

    def reply(answer: dict, chunks: list[bytes]) -> None:
        parts.append((time.monotonic(), answer, chunks))
        if answer["type"] in ("end", "error"):
            ended.set()

    body = json.dumps({"model": model_id, "text": "Once upon a time", "max_new_tokens": 6})
    request = {"method": "POST", "url": "/api/v1/generate/stream",
               "headers": {"content-type": "application/json"}}  # fmt: skip
    server.submit("whole", request, body.encode(), reply)
    assert ended.wait(120)
    kinds = [answer["type"] for _, answer, _ in parts]
    assert kinds[0] == "start" and parts[0][1]["status"] == 200 and kinds[-1] == "end"
    text = b"".join(b"".join(chunks) for _, _, chunks in parts).decode()
    assert text.count("event: step") == 6
    # the steps came one by one (each its own part), not all at the end
    steps = [t for t, answer, chunks in parts if b"event: step" in b"".join(chunks)]
    assert len(steps) >= 3 and steps[-1] > steps[0]

    parts.clear()
    ended.clear()
    body = json.dumps({"model": model_id, "text": "Once upon a time", "max_new_tokens": 64})
    server.submit("aborted", request, body.encode(), reply)
    deadline = time.monotonic() + 120
    while not any(b"event: step" in b"".join(c) for _, _, c in parts):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    said = Said()
    logger = logging.getLogger("attnviz.generate")
    level = logger.level
    logger.addHandler(said)
    logger.setLevel(logging.INFO)
    try:
        server.abort("aborted")
        # the app read its client gone and stopped the generation (its log: after how many)
        while not [m for m in said.messages if "generation stopped after" in m]:
            assert time.monotonic() < deadline, "the generation did not stop"
            time.sleep(0.05)
    finally:
        logger.removeHandler(said)
        logger.setLevel(level)
    stopped = next(m for m in said.messages if "stopped after" in m)
    assert 1 <= int(stopped.split()[3]) < 64, stopped
    assert not any(answer["type"] == "end" for _, answer, _ in parts)  # (the page has gone)
