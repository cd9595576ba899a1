"""The clients of `make load`: each sends model requests back to back (bench/traffic.py).

bench/load.py runs this headless in its own process; run by hand:

    .venv/bin/locust -f bench/locustfile.py --headless -u 8 -r 8 -t 30s --host http://127.0.0.1:8000

A 503 with Retry-After (the run queue is full) or a 429 with Retry-After (this client's
share of the server is spent: every locust user comes from one address) is the documented
answer to overload: it counts as such, and the client waits Retry-After (plus up to half a
second of jitter, so the refused clients do not come back in one wave) before its next
request. Any other
status, or a connection error, is an error. With ATTNVIZ_LOAD_SAMPLES set, every request's
(name, start time, seconds, status, outcome) is written there as JSON when locust quits.
"""

from __future__ import annotations

import itertools
import json
import os
import time

from locust import FastHttpUser, constant, events, task
from traffic import Mix  # locust puts this file's folder on sys.path

SEED = int(os.environ.get("ATTNVIZ_LOAD_SEED", "1"))
SAMPLES: list[tuple[str, float, float, int, str]] = []
_user_seeds = itertools.count(SEED * 10_000)


class Visitor(FastHttpUser):
    wait_time = constant(0)
    connection_timeout = 30.0
    network_timeout = 120.0

    def on_start(self) -> None:
        self.mix = Mix(seed=next(_user_seeds))

    @task
    def model_request(self) -> None:
        call = self.mix.model_call()
        started = time.time()
        clock = time.perf_counter()
        with self.client.request(
            call.method, call.path, name=call.name, json=call.body, catch_response=True
        ) as response:
            seconds = time.perf_counter() - clock
            status = response.status_code or 0
            overloaded = status in (429, 503)
            retry_after = response.headers.get("Retry-After") if overloaded else None
            if status in call.expect:
                outcome = "ok"
                response.success()
            elif retry_after is not None:
                outcome = "overload"
                response.failure(f"{status} with Retry-After (overload)")
            else:
                outcome = "error"
                detail = response.error or (response.text or "")[:200]
                response.failure(f"unexpected {status}: {detail}")
        SAMPLES.append((call.name, started, seconds, status, outcome))
        if retry_after is not None:
            time.sleep(float(retry_after) + self.mix.rng.uniform(0, 0.5))


@events.quitting.add_listener
def write_samples(environment, **kwargs) -> None:
    path = os.environ.get("ATTNVIZ_LOAD_SAMPLES")
    if path:
        with open(path, "w") as f:
            json.dump(SAMPLES, f)
