"""Inside a head: the neuron view's vectors, products and sums against the model's own
hook_scores and its query projection's output (with and without RoPE), and the
query-key space's faithfulness claims (no softmax changes, the correlation it reports,
the projection, the most attended keys) on the served MiniLM and SmolLM2."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from attnviz.model.hooks import hooked
from attnviz.model.methods.geometry import dot_distance_correlation, normalize, project
from attnviz.model.pretrained import BertRunner

TEXT = "The animal didn't cross the street because it was too tired."
PROMPT = "The capital of France is Paris, and the capital of Italy is"


def post(client, path: str, status: int = 200, **body) -> dict:
    response = client.post(f"/api/v1/{path}", json=body)
    assert response.status_code == status, response.text
    return response.json()


@pytest.fixture(scope="module")
def minilm():
    return BertRunner.load()


def captured(model, ids, names):
    with torch.no_grad(), hooked(model, names) as capture:
        model(ids)
    return capture


def test_the_neuron_views_sums_are_the_heads_scores_without_rope(client, minilm):
    body = post(client, "neuron", model="minilm", text=TEXT, layer=2, head=5, query=3)
    ids = torch.tensor([minilm.tokenize(TEXT)[0]])
    name = "encoder.2.self_attn.hook_scores"
    scores = captured(minilm.model, ids, [name])[name][0, 5, 3]
    after = body["after"]
    assert not body["rotary"] and body["before"] is None and body["d_head"] == 32
    assert np.abs(np.array(after["scores"]) - scores.numpy()).max() <= 1e-5
    products = np.array(after["products"])
    assert products.shape == (ids.size(1), 32)
    assert np.abs(products.sum(1) - scores.numpy()).max() <= 1e-5
    q, k = np.array(after["query"]), np.array(after["keys"])
    assert np.allclose(products, q * k / math.sqrt(32), atol=1e-7)
    weights = np.array(body["weights"])
    assert np.allclose(weights, torch.softmax(scores, -1).numpy(), atol=1e-6)
    assert body["query_token"] == body["keys"][3] and all(body["visible"])


def test_the_neuron_view_shows_rope_before_and_after(client):
    body = post(client, "neuron", model="smollm2", text=PROMPT, layer=4, head=7, query=9)
    assert body["rotary"] and body["kv_head"] == 7 // 3 and body["d_head"] == 64
    after, before = body["after"], body["before"]
    # independently: the query projection's output (before RoPE) and hook_scores
    runner = client.app.state.inference.entry("smollm2").runner
    ids = torch.tensor([runner.tokenize(PROMPT)[0]])
    attention = runner.model.decoder.get_submodule("4.self_attn")
    projected = {}
    handles = [
        attention.wq.register_forward_hook(lambda m, i, o: projected.update(q=o)),
        attention.wk.register_forward_hook(lambda m, i, o: projected.update(k=o)),
    ]
    try:
        name = "decoder.4.self_attn.hook_scores"
        scores = captured(runner.model, ids, [name])[name][0, 7, 9].numpy()
    finally:
        for handle in handles:
            handle.remove()
    assert np.abs(np.array(after["scores"]) - scores).max() <= 1e-5
    q_raw = projected["q"][0, 9].view(9, 64)[7].numpy()
    k_raw = projected["k"][0].view(-1, 3, 64)[:, 2].numpy()
    assert np.abs(np.array(before["query"]) - q_raw).max() <= 1e-5
    assert np.abs(np.array(before["keys"]) - k_raw).max() <= 1e-5
    assert np.abs(np.array(before["scores"]) - k_raw @ q_raw / 8).max() <= 1e-4
    # the mask: the query sees itself and what came before; the softmax is of those
    assert body["visible"] == [i <= 9 for i in range(len(body["keys"]))]
    weights = np.array(body["weights"])
    soft = np.exp(scores[:10] - scores[:10].max())
    assert np.allclose(weights[10:], 0) and np.allclose(weights[:10], soft / soft.sum(), atol=1e-6)
    # RoPE rotates pairs (i, i + 32): each pair's length is kept, the score is not
    q0, q1 = np.array(before["query"]), np.array(after["query"])
    assert np.allclose(np.hypot(q0[:32], q0[32:]), np.hypot(q1[:32], q1[32:]), atol=1e-4)
    assert np.abs(np.array(before["scores"]) - scores).max() > 1e-3


def test_the_neuron_view_refuses_a_row_past_the_text(client):
    body = post(client, "neuron", 422, model="minilm", text="a cat", query=50)
    assert "query 50 out of range" in body["detail"]


def test_translating_and_scaling_the_keys_changes_no_heads_attention(minilm):
    """Every head of every layer of MiniLM: softmax(q' k'^T / sqrt(d)) with the normalized
    vectors is hook_weights, to 1e-6; their mean norms match."""
    ids = torch.tensor([minilm.tokenize(TEXT)[0]])
    names = [f"encoder.{i}.self_attn.hook_{p}" for i in range(6) for p in ("q", "k", "weights")]
    capture = captured(minilm.model, ids, names)
    for layer in range(6):
        for head in range(12):
            q = capture[f"encoder.{layer}.self_attn.hook_q"][0, head]
            k = capture[f"encoder.{layer}.self_attn.hook_k"][0, head]
            made = normalize(q, k)
            weights = torch.softmax(made.queries @ made.keys.T / math.sqrt(32), -1)
            expected = capture[f"encoder.{layer}.self_attn.hook_weights"][0, head]
            assert (weights - expected).abs().max() <= 1e-6, (layer, head)
            norms = made.queries.norm(dim=-1).mean(), made.keys.norm(dim=-1).mean()
            assert abs(norms[0] - norms[1]) <= 1e-4 * norms[0]
            # the keys' centroid is the queries' (each undone by its scale)
            centroids = made.queries.mean(0) / made.scale, made.keys.mean(0) * made.scale
            assert (centroids[0] - centroids[1]).abs().max() <= 1e-4


def test_the_query_key_space_of_a_head(client, minilm):
    more = ["A man is playing a guitar on the stage.", "The bank raised its rates."]
    body = post(client, "qk-space", model="minilm", text=TEXT, texts=more, layer=3, head=2)
    tokens = [minilm.tokenize(t)[1] for t in [TEXT, *more]]
    n = sum(len(t) for t in tokens)
    queries, keys = body["queries"], body["keys"]
    assert queries["tokens"] == keys["tokens"] == [t for ts in tokens for t in ts]
    assert queries["sentences"] == [i for i, ts in enumerate(tokens) for _ in ts]
    assert len(queries["coords"]) == len(keys["coords"]) == n and len(queries["coords"][0]) == 2
    # independently: the head's q, k and weights per sentence, normalized, PCA by numpy
    qs, ks, blocks, tops = [], [], [], []
    for sentence in [TEXT, *more]:
        ids = torch.tensor([minilm.tokenize(sentence)[0]])
        names = [f"encoder.3.self_attn.hook_{p}" for p in ("q", "k", "weights")]
        capture = captured(minilm.model, ids, names)
        q, k = capture[names[0]][0, 2], capture[names[1]][0, 2]
        qs.append(q)
        ks.append(k)
        blocks.append((q, k, None))
        offset = sum(len(x) for x in ks[:-1])
        tops += (capture[names[2]][0, 2].topk(5, dim=-1).indices + offset).tolist()
    assert body["top_keys"] == tops
    made = normalize(torch.cat(qs), torch.cat(ks))
    points = torch.cat([made.queries, made.keys]).double().numpy()
    centered = points - points.mean(0)
    _, _, vt = np.linalg.svd(centered, full_matrices=False)
    expected = centered @ vt[:2].T
    got = np.array(queries["coords"] + keys["coords"])
    for axis in range(2):  # an axis's sign is arbitrary
        sign = np.sign(expected[:, axis] @ got[:, axis])
        assert np.abs(got[:, axis] - sign * expected[:, axis]).max() <= 1e-3
    before = dot_distance_correlation(blocks)
    assert body["correlation_before"] == pytest.approx(before, abs=1e-6)
    after, at, k_at = [], 0, 0
    for q, k, _ in blocks:
        after.append((made.queries[at : at + len(q)], made.keys[k_at : k_at + len(k)], None))
        at, k_at = at + len(q), k_at + len(k)
    assert body["correlation_after"] == pytest.approx(dot_distance_correlation(after), abs=1e-6)
    assert body["correlation_after"] != pytest.approx(before, abs=1e-3)  # the shift counts
    assert len(body["explained_variance"]) == 2 and sum(body["explained_variance"]) <= 1


def test_a_grouped_query_heads_cloud_shows_the_keys_its_group_shares(client):
    body = post(client, "qk-space", model="smollm2", text=PROMPT, layer=18, head=6, dims=3)
    assert (body["kv_head"], body["shared_with"]) == (2, [6, 7, 8])
    assert len(body["queries"]["coords"][0]) == 3
    # causal: a query's most attended keys are at or before it
    for position, keys in zip(body["queries"]["positions"], body["top_keys"], strict=True):
        assert all(k <= position for k in keys[: position + 1])


@pytest.mark.parametrize("projection", ["umap", "tsne"])
def test_umap_and_tsne_are_seeded(client, projection):
    """Asked before it is warm, a projection is a 503 with Retry-After (it warms in the
    background, and is not run in the request); then the same seed, the same picture."""
    import time

    body = {"model": "minilm", "text": TEXT, "projection": projection, "seed": 3}
    deadline = time.monotonic() + 120
    while (answer := client.post("/api/v1/qk-space", json=body)).status_code == 503:
        assert "being prepared" in answer.json()["detail"] and answer.headers["retry-after"]
        assert time.monotonic() < deadline, "not warm within 120 s"
        time.sleep(1)
    assert answer.status_code == 200, answer.text
    first = answer.json()
    again = post(client, "qk-space", model="minilm", text=TEXT, projection=projection, seed=3)
    assert first["queries"]["coords"] == again["queries"]["coords"]
    assert np.isfinite(np.array(first["keys"]["coords"])).all()
    # run in a process of their own: their compiling and libraries never hold this one's
    # interpreter lock (up to 300 ms at a time, measured in-process)
    import sys

    assert not {"umap", "openTSNE", "numba"} & set(sys.modules)


def test_project_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="one of"):
        project(torch.zeros(10, 4), "mds", 2)


def test_the_correlation_is_pooled_within_rows_over_blocks_of_any_shape():
    """By loops: each row's dots and distances less their row's mean, over the keys its
    mask allows (rows of one key left out), pooled; blocks of mixed shapes and masks."""
    torch.manual_seed(0)
    blocks = []
    for n in (3, 5, 5, 8, 3):
        causal = torch.ones(n, n, dtype=torch.bool).tril() if n != 8 else None
        blocks.append((torch.randn(n, 4), torch.randn(n, 4), causal))
    xs, ys = [], []
    for q, k, allowed in blocks:
        for i in range(len(q)):
            cols = [j for j in range(len(k)) if allowed is None or allowed[i, j]]
            if len(cols) < 2:
                continue
            d = [float(q[i] @ k[j]) for j in cols]
            r = [float((q[i] - k[j]).norm()) for j in cols]
            xs += [v - sum(d) / len(d) for v in d]
            ys += [v - sum(r) / len(r) for v in r]
    expected = float(np.corrcoef(xs, ys)[0, 1])
    assert dot_distance_correlation(blocks) == pytest.approx(expected, abs=1e-6)


def test_a_projection_whose_process_dies_fails_and_the_next_starts_anew():
    """UMAP's process killed during a fit (as the kernel kills it first where memory runs
    out: its oom_score_adj is 1000) is a ProjectionFailed (the route's 503), not a hang;
    the next projection starts a new process."""
    import threading
    import time

    from attnviz.model.methods import geometry

    points = torch.randn(3000, 32, generator=torch.Generator().manual_seed(0))
    geometry.project(points[:40], "umap", 2)  # (its process started, UMAP imported)
    assert geometry._pool is not None
    (process,) = geometry._pool._processes.values()  # type: ignore[attr-defined]
    assert Path(f"/proc/{process.pid}/oom_score_adj").read_text().strip() == "1000"
    threading.Timer(1.0, process.kill).start()
    began = time.monotonic()
    with pytest.raises(geometry.ProjectionFailed, match="stopped before it ended"):
        geometry.project(points, "umap", 2)
    assert time.monotonic() - began < 30
    coords, _ = geometry.project(points[:40], "umap", 2)
    assert coords.shape == (40, 2) and np.isfinite(coords).all()
