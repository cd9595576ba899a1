"""A long prompt through the API (model/long/; the numbers are checked against
transformers in tests/model/test_long.py): SmolLM2 reads it whole, up to its context;
/attention serves windows and pooled cells of what the run keeps, /analyze says it is
long and brings its head summaries as the background computes them; whatever cannot be
served says what to ask instead."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import torch

from attnviz.model.long import LongCapture

from .test_generate import post

TEXT = (
    "The animal didn't cross the street because it was too tired, and the quick brown fox "
    "jumps over the lazy dog while attention heads look back at every token they have seen. "
) * 30  # 1,000 tokens or so


@pytest.fixture(scope="module")
def long_run(client):
    analysis = post(client, "analyze", model="smollm2", text=TEXT)
    return analysis, len(analysis["source_tokens"])


def attention(client, **ask) -> dict:
    body = {"model": "smollm2", "text": TEXT, "types": ["decoder.self"], **ask}
    return post(client, "attention", **body)


def test_a_long_prompt_is_read_whole_and_its_run_keeps_no_square_matrix(client, long_run):
    analysis, n = long_run
    assert 900 <= n <= 1100 and analysis["long"] and not analysis["truncated"]
    inference = client.app.state.inference
    run = inference.run(inference.entry("smollm2"), TEXT)
    assert isinstance(run.capture, LongCapture)  # cached as it is: not made lean
    assert analysis["summaries_total"] == 270


def test_head_summaries_come_in_the_background_until_every_head_has_one(client, long_run):
    deadline = time.monotonic() + 120
    while True:
        analysis = post(client, "analyze", model="smollm2", text=TEXT)
        done = analysis["summaries_done"]
        assert done == len(analysis["summaries"]) <= 270
        if done == 270 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert done == 270
    heads = {(s["layer"], s["head"]) for s in analysis["summaries"]}
    assert heads == set(itertools.product(range(30), range(9)))
    n = len(analysis["source_tokens"])
    for s in analysis["summaries"]:
        assert 0 <= s["entropy"] <= np.log2(n) and 0 < s["max_weight"] <= 1
    assert any(s["role"] == "first-token" for s in analysis["summaries"])


def test_a_pooled_overview_and_an_exact_window_of_a_long_head(client, long_run):
    _, n = long_run
    pooled = attention(client, layers=[3], heads=[0, 4], pool=100, reduce="mean")["blocks"][0]
    edges = pooled["row_edges"]
    assert edges[0] == 0 and edges[-1] == n and edges == pooled["column_edges"]
    assert pooled["shape"] == [2, len(edges) - 1, len(edges) - 1] and pooled["reduce"] == "mean"
    assert pooled["rows"] is None and pooled["rows_from"] == "target"
    widths = np.diff(edges)
    heights = widths[:, None]
    mass = (np.array(pooled["data"]) * heights * widths[None, :]).sum(axis=2)  # per row cell
    assert np.allclose(mass, heights[:, 0], atol=1e-3)  # each row's weights sum to 1
    # a window, exact: its rows and columns are named by their tokens
    exact = attention(client, layers=[3], heads=[4], rows=[600, 664], columns=[0, 700])
    block = exact["blocks"][0]
    assert block["shape"] == [1, 64, 700] and block["row_edges"] == list(range(600, 665))
    assert block["rows"] == exact["target_tokens"][600:664]
    assert block["columns"] == exact["target_tokens"][:700]
    maxed = attention(client, layers=[3], heads=[4], rows=[600, 664], columns=[0, 700], pool=7)
    cells = np.array(maxed["blocks"][0]["data"][0])
    values = np.array(block["data"][0])
    row_edges = [e - 600 for e in maxed["blocks"][0]["row_edges"]]
    col_edges = maxed["blocks"][0]["column_edges"]
    for i, (a, b) in enumerate(itertools.pairwise(row_edges)):
        for j, (c, d) in enumerate(itertools.pairwise(col_edges)):
            assert abs(cells[i, j] - values[a:b, c:d].max()) <= 1e-6


def test_what_a_long_input_cannot_serve_says_what_to_ask_instead(client, long_run):
    _, n = long_run
    every = client.post("/api/v1/attention", json={"model": "smollm2", "text": TEXT})
    assert every.status_code == 422 and every.json()["detail"] == (
        "this asks for 270 heads' windows of a long input, each recomputed from its queries "
        "and keys: at most 32 a request (ask a layer at a time)"
    )
    layer = {"model": "smollm2", "text": TEXT, "layers": [0], "encoding": "json"}
    refused = client.post("/api/v1/attention", json=layer)
    assert refused.status_code == 422
    assert "or a window (rows, columns) or pooled cells (pool)" in refused.json()["detail"]
    # a lab experiment or a view inside a head: refused before the model runs
    lab = client.post("/api/v1/lab/scaling", json={"model": "smollm2", "text": TEXT + " more"})
    assert (
        lab.status_code == 422 and "read whole heads: at most 512 tokens" in (lab.json()["detail"])
    )
    outside = client.post(
        "/api/v1/attention",
        json={"model": "smollm2", "text": TEXT, "layers": [0], "rows": [0, n + 1]},
    )
    assert outside.status_code == 422
    assert f"is not a window of 0..{n}" in outside.json()["detail"]
    q = client.post(
        "/api/v1/attention",
        json={"model": "smollm2", "text": TEXT, "layers": [0], "kinds": ["q"], "pool": 8},
    )
    assert q.status_code == 422 and "apply to" in q.json()["detail"]


def test_a_long_heads_norms_are_served_pooled_and_by_windows(client, long_run):
    """Value-weighted norms of a long input (checked against transformers in
    tests/model/test_value_norms.py), read as the weights are: pooled, or a window."""
    _, n = long_run
    ask = {"layers": [3], "heads": [0, 4], "kinds": ["norms", "weights"]}
    pooled = attention(client, **ask, pool=50)["blocks"]
    norms, weights = (np.array(b["data"]) for b in pooled)
    assert [b["kind"] for b in pooled] == ["norms", "weights"]
    cells = len(pooled[0]["row_edges"]) - 1
    assert norms.shape == weights.shape == (2, cells, cells) and pooled[0]["row_edges"][-1] == n
    assert (norms >= 0).all() and norms.max() > 0
    assert not np.allclose(norms / norms.max(), weights / weights.max(), atol=1e-2)
    exact = attention(client, layers=[3], heads=[4], kinds=["norms"], rows=[600, 664])
    assert exact["blocks"][0]["shape"] == [1, 64, n]


def test_a_prompt_past_the_models_context_is_refused_naming_the_longest(client):
    digits = "1234567890" * 3200  # SmolLM2 reads a digit a token: 32,000 tokens
    refused = client.post("/api/v1/analyze", json={"model": "smollm2", "text": digits})
    assert refused.status_code == 422
    assert refused.json()["detail"] == (
        "text cannot be read: the prompt has 32,000 tokens; this server reads at most 8,192 "
        "of this model (its context): shorten it"
    )


def test_the_neuron_view_of_a_long_input_reads_a_window_of_keys(client, long_run):
    """The query's row over a window of keys, from the long run's queries and keys: the
    vectors before RoPE are the projections' outputs (read by forward hooks on the model's
    own wq and wk), the weights transformers' eager attention of the same GGUF file."""
    from harness.references import smollm2

    _, n = long_run
    ask = {"model": "smollm2", "text": TEXT, "layer": 4, "head": 7, "query": 700}
    body = post(client, "neuron", **ask, keys=[600, 760])
    assert body["first_key"] == 600 and len(body["keys"]) == 160 and body["rotary"]
    assert body["visible"] == [600 + j <= 700 for j in range(160)]
    runner = client.app.state.inference.entry("smollm2").runner
    ids = torch.tensor([runner.prompt(TEXT)[1]])
    attention = runner.model.decoder.get_submodule("4.self_attn")
    projected = {}
    handles = [
        attention.wq.register_forward_hook(lambda m, i, o: projected.update(q=o)),
        attention.wk.register_forward_hook(lambda m, i, o: projected.update(k=o)),
    ]
    try:
        with torch.no_grad():
            runner.model.decode(ids[:, :760])
    finally:
        for handle in handles:
            handle.remove()
    q_raw = projected["q"][0, 700].view(9, 64)[7].numpy()
    k_raw = projected["k"][0, 600:760].view(-1, 3, 64)[:, 2].numpy()
    before, after = body["before"], body["after"]
    assert np.abs(np.array(before["query"]) - q_raw).max() <= 1e-5
    assert np.abs(np.array(before["keys"]) - k_raw).max() <= 1e-5
    products = np.array(after["products"])
    assert np.allclose(products.sum(1), after["scores"], atol=1e-6)
    theirs = smollm2.model()
    del theirs.model.layers[5:]  # layer 4's attention reads layers 0-4 alone: 6x faster
    with torch.no_grad():
        expected = theirs(ids[:, :701], output_attentions=True).attentions[4][0, 7, 700]
    weights = np.array(body["weights"])
    assert np.abs(weights[:101] - expected[600:].numpy()).max() <= 1e-5
    assert np.all(weights[101:] == 0)
    # a long input names its window, of at most 512 keys
    for keys, says in ((None, "send keys [start, stop], at most 512"),
                       ([0, 513], "holds 513 keys of a long input: at most 512"),
                       ([10, n + 1], f"is not a window of 0..{n}")):  # fmt: skip
        refused = client.post("/api/v1/neuron", json={**ask, "keys": keys})
        assert refused.status_code == 422 and says in refused.json()["detail"], refused.text


def test_any_real_text_of_the_context_is_within_the_text_limit(client):
    """The bound is the tokens a model reads; the characters only bound the tokenizer's
    work, generously: 7,900 SmolLM2 tokens of English prose (4.7-5.5 characters a token) were
    refused by a cap of 4 a token. Such a text is now within the limit, and what decides
    is its tokens (the run itself, half a minute here, is tests/e2e/test_long.py's)."""
    from attnviz.app.runs.reading import read_text, text_limit

    inference = client.app.state.inference
    runner = inference.entry("smollm2").runner
    prose = (
        'Licensed under the Apache License, Version 2.0 (the "License"); you may not use '
        "this file except in compliance with the License. Unless required by applicable law "
        "or agreed to in writing, software distributed under the License is distributed on "
        'an "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or '
        "implied. See the License for the specific language governing permissions and "
        "limitations under the License. "
    )
    text = prose * 95
    _, ids, _, _ = runner.prompt(text)  # (what a run reads: refused past the context)
    assert 7_000 < len(ids) <= runner.max_tokens and len(text) > 4 * runner.max_tokens
    limit = text_limit(inference.settings, runner)
    assert limit == 16 * 8192 and read_text(text, limit) == text
    # a text of the limit's characters is refused by its tokens, not its characters
    refused = client.post("/api/v1/analyze", json={"model": "smollm2", "text": "9" * limit})
    assert refused.status_code == 422
    assert "131,072 tokens; this server reads at most 8,192" in refused.json()["detail"]
