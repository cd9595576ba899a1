"""A long prompt's generation read once, timed: Enter generates and draws the
whole sequence within 10 % and a second and a half of the API's /generate of a prompt as
long. A bound on time: it runs alone (tests/conftest.py's ALONE), where a neighbour's work
does not slow one side of the comparison (9.4 s against 4.6 with a test beside it; 3.9
against 3.0 alone)."""

from __future__ import annotations

import os
import re
import time

import httpx2
from playwright.sync_api import expect

from .test_long import PATIENCE_MS, long_text
from .test_page import READY, ready, url_state

# the prompt a generation reads once (the 3,000 tokens under `make test-long`)
ONCE = int(os.environ.get("LONG_TOKENS", "1100"))
READ = re.compile(r"smollm2 read (\d+) tokens in ([\d.]+) s")


def test_a_long_prompt_and_its_generation_are_read_once(browser, tmp_path):
    """Enter on a long prompt generates 24 tokens and draws the whole sequence: the server
    reads the prompt once (its log has the generation's kept run and no model run of the
    prompt and continuation), and the page is drawn within 10 % (plus a second and a half
    for the page's own requests and drawing) of what the API's /generate of a prompt as
    long takes: one reading and the generation."""
    from harness.serving import start_server

    from .conftest import page_of

    log = tmp_path / "server.log"
    with log.open("w") as out:
        proc, base = start_server(
            {"ATTNVIZ_LOG_LEVEL": "info", "ATTNVIZ_CLIENT_COST_PER_MINUTE": "0"}, stdout=out
        )
    try:
        # the reference: a prompt as long (other words), through /generate alone
        other = " ".join(reversed(long_text(ONCE).split()))
        began = time.perf_counter()
        asked = {"model": "smollm2", "text": other, "max_new_tokens": 24}
        made = httpx2.post(f"{base}/api/v1/generate", json=asked, timeout=600)
        reference = time.perf_counter() - began
        assert made.status_code == 200 and len(made.json()["steps"]) == 24, made.text
        context, page, errors = page_of(browser, base, [])
        page.goto("/?model=smollm2&view=head&text=hi")
        ready(page)
        lines = len(log.read_text().splitlines())
        text = long_text(ONCE)
        page.fill("#text", text)
        began = time.perf_counter()
        page.press("#text", "Enter")
        expect(page.locator("#status")).to_have_text(READY, timeout=PATIENCE_MS)
        took = time.perf_counter() - began
        assert len(url_state(page)["cont"].split(",")) == 24
        after = log.read_text().splitlines()[lines:]
        kept = [line for line in after if "generation kept its run" in line]
        reads = [m for line in after if (m := READ.search(line))]
        assert len(kept) == 1, after  # the generation's pass is the view's run
        assert reads == [], after  # and no model run read the prompt again
        print(f"Enter to drawn {took:.2f} s; /generate of a prompt as long {reference:.2f} s")
        assert took <= 1.1 * reference + 1.5, (took, reference)
        assert errors == []
        context.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
