"""The run cache keeps a large run lean (model/lean.py): a 512-token SmolLM2 run (671 MB
captured) is kept in a fraction of the cache, so the page's block requests read it instead
of running the model again, and what they read is what the model computed."""

from __future__ import annotations

import numpy as np

from attnviz.model.lean import LeanCapture, capture_bytes

from .test_api import decode
from .test_generate import post

LONG = (
    "The animal didn't cross the street because it was too tired, and the quick brown fox "
    "jumps over the lazy dog while attention heads look back at every token they have seen. "
) * 30


def test_a_long_run_is_cached_lean_and_served_as_computed(client):
    inference = client.app.state.inference
    entry = inference.entry("smollm2")
    tokens = entry.runner.tokenizer
    # the longest prefix read by the short path: at most 512 tokens (longer: model/long/)
    text = LONG[: max(k for k in range(1500, 3990, 10) if len(tokens.encode(LONG[:k]).ids) <= 512)]
    body = {"text": text, "types": ["decoder.self"], "encoding": "f4"}
    asks = [{"layers": [3, 29], "kinds": ["weights"]}, {"layers": [29], "kinds": ["scores"]}]
    first = [post(client, "attention", **body, **ask) for ask in asks]
    cached = inference.run(entry, text)
    assert 500 <= len(cached.source_ids) <= 512 and isinstance(cached.capture, LeanCapture)
    assert capture_bytes(cached.capture) < inference.settings.cache_bytes
    assert inference.run(entry, text) is cached  # read from the cache, not run again
    # the cached run's recomputed blocks are the model's own, bit for bit: a fresh run of
    # the same text (its whole capture) gives the same bytes
    fresh = entry.runner.run(text)
    for block in (b for answer in first for b in answer["blocks"]):
        name = f"decoder.{block['layer']}.self_attn.hook_{block['kind']}"
        assert np.array_equal(decode(block["data"]), fresh.capture[name][0].numpy()), name
    assert [post(client, "attention", **body, **ask) for ask in asks] == first
