"""A smoke of `make bench-page` (the whole run takes minutes): the marks its breakdown
reads are on our page, and BertViz's page it compares with draws from local scripts."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import bench_page


def wait(page, expression: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"not true within {timeout} s: {expression}"
        time.sleep(0.05)


def test_our_page_marks_every_step_the_breakdown_reads(browser, server):
    page = browser.new_page()
    page.goto(f"{server}/?model=minilm&text=the+cat+sat+on+the+mat&type=encoder.self")
    wait(page, bench_page.DRAWN)
    drawn, _, steps = page.evaluate(bench_page.READ)
    assert set(steps) == set(bench_page.STEPS) and all(v is not None for v in steps.values())
    assert steps["analyze_sent"] < steps["analyzed"] <= steps["drawn"]
    assert steps["attention_sent"] < steps["block"] <= steps["drawn"]
    # the head's block is asked for with the summary, not after it: one round trip
    assert steps["attention_sent"] < steps["analyzed"]
    assert steps["plotly_ready"] <= steps["react"] < steps["drawn"] == drawn
    page.close()


@pytest.fixture(scope="module")
def bertviz():
    made = bench_page.BertViz()
    yield made
    made.close()


def test_bertvizs_page_draws_from_the_pinned_local_scripts(browser, bertviz):
    url, python_s = bertviz.page("the cat sat on the mat")
    assert url.startswith("http://127.0.0.1:") and python_s > 0
    page = browser.new_page()
    outside = []
    page.on("request", lambda r: None if r.url.startswith(bertviz.base) else outside.append(r.url))
    page.goto(url)
    wait(page, bench_page.BERTVIZ_DRAWN)
    texts = page.locator("#vis svg text").all_text_contents()
    assert texts.count("cat") == 2 and texts.count("[CLS]") == 2  # the tokens, on both sides
    assert page.locator("#vis svg line").count() > 0
    assert page.evaluate("typeof d3 === 'undefined' ? 'no global' : 'global'") in (
        "no global",
        "global",
    )
    assert outside == [], outside  # d3, jquery and require.js came from node_modules
    page.close()


def test_the_generate_timings_read_the_pages_marks(browser, server):
    from page_generation import generated

    got = generated(
        browser, server, "smollm2", "The capital of France is", 2, bench_page.wait_until
    )
    assert got["tokens"] == 2 and 0 < got["first"] <= got["last"] < got["drawn"]
    assert got["longest"] >= 0
