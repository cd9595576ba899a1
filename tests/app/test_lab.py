"""The attention lab: each of the seed tutorial's claims, checked numerically on the real
models through the lab's routes."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.app.lab.compare import matched


def lab(client, path: str, **body) -> dict:
    response = client.post(f"/api/v1/lab/{path}", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_without_the_scaling_softmax_saturates(client):
    text = "苹果公司发布了新款手机，它采用了最新的芯片"
    body = lab(client, "scaling", text=text, layer=1, head=3)
    assert body["head_dim"] == 32 and len(body["head_stats"]) == 3 * 8
    assert "heads" not in body  # the removed copy of head_stats
    # the seed: without 1/sqrt(d_k) the scores grow with d_k and softmax turns one-hot
    assert body["mean_entropy_unscaled"] < 0.5 * body["mean_entropy_scaled"]
    lower = [h["entropy_unscaled"] < h["entropy_scaled"] for h in body["head_stats"]]
    assert sum(lower) >= 0.8 * len(lower)
    peaks = [h["max_weight_unscaled"] - h["max_weight_scaled"] for h in body["head_stats"]]
    assert np.mean(peaks) > 0.05
    scaled, unscaled = np.array(body["matrices"]["first"]), np.array(body["matrices"]["second"])
    assert scaled.shape == unscaled.shape == (21, 21)
    assert np.allclose(scaled.sum(1), 1, atol=1e-5) and np.allclose(unscaled.sum(1), 1, atol=1e-5)


@pytest.mark.parametrize(
    "model, text",
    [("pronounce", "猫追狗"), ("minilm", "The cat chased the dog across the garden.")],
)
def test_without_positional_encoding_attention_ignores_order(client, model, text):
    body = lab(client, "positions", model=model, text=text, layer=1, head=2)
    if model == "pronounce":
        assert body["permuted_tokens"] == ["狗", "追", "猫"]  # the seed's example
    else:
        assert body["permuted_tokens"][0] == "[CLS]" and body["permuted_tokens"][-1] == "[SEP]"
    # without it: the permuted input's weights are the permuted weights, in every layer
    assert body["without_positions"]["max_abs_diff"] <= 1e-5
    assert body["with_positions"]["max_abs_diff"] > 0.05
    order = body["order"]
    original = np.array(body["without_positions"]["original"])
    shuffled = np.array(body["without_positions"]["permuted"])
    assert np.allclose(shuffled, original[np.ix_(order, order)], atol=1e-5)


def test_a_given_order_must_be_a_permutation(client):
    body = lab(client, "positions", text="猫追狗", order=[1, 0, 2])
    assert body["permuted_tokens"] == ["追", "猫", "狗"]
    bad = client.post("/api/v1/lab/positions", json={"text": "猫追狗", "order": [0, 0, 1]})
    assert bad.status_code == 422 and "permutation of 0..2" in bad.json()["detail"]


def test_the_causal_mask_hides_the_future_and_padding_changes_nothing(client):
    body = lab(client, "masks", text="苹果公司发布了新款手机", second="猫追狗", layer=2, head=5)
    causal = body["causal"]
    assert causal["future_weight_with"] == 0
    assert causal["future_weight_without"] > 0.01  # what the decoder would read ahead
    w = np.array(causal["with_mask"])
    assert np.all(np.triu(w, 1) == 0)
    padding = body["padding"]
    assert padding["tokens"][1] == ["猫", "追", "狗"] and padding["shorter"] == 1
    assert padding["length"] == 11 and padding["mask"][1] == [True] * 3 + [False] * 8
    assert padding["pad_weight"] == 0  # padded keys get exactly nothing
    assert padding["max_abs_diff_alone"] <= 1e-5  # the same as run on its own
    minilm = lab(client, "masks", model="minilm", text="The cat sat on the mat.")
    assert minilm["causal"] is None and minilm["padding"]["pad_weight"] == 0
    short = lab(client, "masks", text="猫")  # too short to halve: padded against itself twice
    assert short["padding"]["tokens"] == [["猫"], ["猫", "猫"]] and short["padding"]["shorter"] == 0
    same = client.post("/api/v1/lab/masks", json={"text": "猫追狗", "second": "狗追猫"})
    assert same.status_code == 422 and "same length" in same.json()["detail"]


def test_the_kv_cache_gives_the_uncached_logits_step_by_step(client):
    body = lab(client, "kv-cache", text="银行 行走")
    steps = body["steps"]
    assert [s["token"] for s in steps] == ["<bos>", "yin2", "hang2", "|", "xing2", "zou3"]
    assert [s["predicted"] for s in steps] == ["yin2", "hang2", "|", "xing2", "zou3", "<eos>"]
    assert all(s["max_abs_diff"] <= 1e-4 for s in steps)
    for step in steps:
        assert step["keys"] == [s["token"] for s in steps[: step["step"] + 1]]
        assert all(np.array(row).shape == (8, step["step"] + 1) for row in step["rows"])
        assert all(np.allclose(np.array(row).sum(1), 1, atol=1e-5) for row in step["rows"])
    # each step adds one key and one value per head to each layer: 2 x 256 float32
    growth = np.diff([s["cache_bytes"] for s in steps], axis=0)
    assert np.all(growth == 2 * 256 * 4)
    assert body["pieces"] == 1 and body["ended"] and body["piece"] == "银行 行走"
    # a long text is decoded in pieces, as transcribe does: the steps are its first piece's,
    # and each step's prediction is the token fed next
    long = lab(client, "kv-cache", text="我们今天去银行取钱然后回家吃饭，" * 3)
    assert long["pieces"] == 2 and long["ended"]
    fed = [*(s["token"] for s in long["steps"][1:]), "<eos>"]
    assert [s["predicted"] for s in long["steps"]] == fed
    refused = client.post("/api/v1/lab/kv-cache", json={"text": "hi", "model": "minilm"})
    assert refused.status_code == 422 and "does not decode" in refused.json()["detail"]


def test_head_metrics_find_the_alignment_head(client):
    body = lab(client, "metrics", text="他在银行工作，每天步行上班")
    rows = body["rows"]
    assert len(rows) == 3 * 3 * 8 and set(body["explain"]) >= {"entropy", "alignment"}
    for row in rows:
        assert 0 <= row["first"] <= 1 and 0 <= row["special"] <= 1 + 1e-6
        if row["type"] == "decoder.cross":
            assert row["distance"] is None and 0 <= row["alignment"] <= 1
        else:
            assert row["alignment"] is None and 0 <= row["previous"] <= 1
    # the model card's alignment head reads the character of each syllable
    best = max((r for r in rows if r["type"] == "decoder.cross"), key=lambda r: r["alignment"])
    assert best["alignment"] >= 0.9
    card = next(r for r in rows if (r["type"], r["layer"], r["head"]) == ("decoder.cross", 2, 1))
    assert card["alignment"] >= 0.9
    # decoder self-attention looks only back: its mean distance is that of a causal pattern
    special = [r["special"] for r in rows if r["type"] == "decoder.self"]
    assert max(special) > 0  # <bos> is a special key there


def test_rollout_rows_are_distributions(client):
    body = lab(client, "rollout", model="minilm", text="The cat sat on the mat.")
    matrix = np.array(body["matrix"])
    assert matrix.shape == (9, 9) and body["tokens"][0] == "[CLS]"
    assert np.all(matrix >= 0) and np.allclose(matrix.sum(1), 1, atol=1e-5)
    identity = lab(client, "rollout", text="猫追狗", residual=1.0)
    assert np.allclose(identity["matrix"], np.eye(3), atol=1e-6)
    refused = client.post("/api/v1/lab/rollout", json={"text": "猫", "type": "decoder.cross"})
    assert refused.status_code == 422


def test_ablating_heads_changes_the_output_and_ablating_none_changes_nothing(client):
    text = "银行 行走"
    none = lab(client, "ablation", text=text, ablate=[])
    assert not none["changed"] and none["ablated_output"] == none["output"]
    assert none["ablated_probabilities"] == none["probabilities"]
    layer = [{"type": "decoder.cross", "layer": 2, "head": h} for h in range(8)]
    body = lab(client, "ablation", text=text, ablate=layer)
    assert body["ablated"] == layer and "heads" not in body
    assert body["changed"]
    assert np.mean(body["ablated_probabilities"]) < np.mean(body["probabilities"])
    old_name = client.post("/api/v1/lab/ablation", json={"text": text, "heads": layer[:1]})
    assert old_name.status_code == 422  # `heads`, the removed name of `ablate`
    one = lab(client, "ablation", text=text, ablate=layer[:1])
    assert one["ablated"] == layer[:1]
    assert one["probability_tokens"] == [*one["output"], "<eos>"]
    assert len(one["probabilities"]) == len(one["ablated_probabilities"]) == len(one["output"]) + 1
    # piece by piece on a long text: every token was the greedy choice, so it is likely
    long = lab(client, "ablation", text="我们今天去银行取钱然后回家吃饭，" * 3, ablate=[])
    assert long["probability_tokens"].count("<eos>") == 2 and min(long["probabilities"]) > 0.5
    minilm = [{"type": "encoder.self", "layer": 0, "head": h} for h in range(12)]
    embedding = lab(client, "ablation", model="minilm", text="The cat sat.", ablate=minilm)
    assert embedding["changed"] and embedding["cosine"] < 0.99
    bad = {"text": text, "ablate": [{"type": "decoder.cross", "layer": 9, "head": 0}]}
    response = client.post("/api/v1/lab/ablation", json=bad)
    assert response.status_code == 422 and "layer 9 out of range" in response.json()["detail"]


def test_compare_aligns_tokens_and_differences(client):
    same = lab(client, "compare", text="猫追狗", type="encoder.self", layer=1, head=4)
    assert np.all(np.array(same["difference"]) == 0)
    swapped = lab(client, "compare", text="猫追狗", other_text="狗追猫", type="encoder.self")
    assert swapped["aligned_rows"] == ["猫", "追", "狗"]  # every token found in both
    first, second = np.array(swapped["first"]), np.array(swapped["second"])
    order = [2, 1, 0]
    assert np.allclose(swapped["difference"], first - second[np.ix_(order, order)], atol=1e-6)
    models = lab(
        client,
        "compare",
        text="猫追狗",
        other_model="pronounce-untrained",
        type="decoder.cross",
        layer=2,
        head=1,
    )
    assert models["models"] == ["pronounce", "pronounce-untrained"]
    assert models["aligned_columns"] == ["猫", "追", "狗"]
    assert np.abs(np.array(models["difference"])).max() > 0.1


def test_tokens_align_in_order_then_by_occurrence():
    first, second = (
        ["the", "cat", "saw", "the", "dog"],
        ["the", "big", "the", "cat", "saw", "the", "dog"],
    )
    inserted = matched(first, second)
    assert inserted == ([0, 1, 2, 3, 4], [2, 3, 4, 5, 6])  # the inserted words are skipped
    assert matched(list("猫追狗"), list("狗追猫")) == ([0, 1, 2], [2, 1, 0])  # a permutation
    assert matched(list("猫狗猫"), list("猫猫狗猫")) == ([0, 1, 2], [1, 2, 3])


def test_the_lab_reads_the_tokens_the_run_read(client):
    # MiniLM's tokenizer drops a form feed that Python's split() would read as a space
    body = lab(client, "positions", model="minilm", text="0\f0")
    assert body["tokens"] == ["[CLS]", "00", "[SEP]"] and len(body["order"]) == 3


def test_lab_rows_that_are_decoder_steps_carry_what_each_predicts(client):
    text = "他在银行工作"
    predicted = client.post("/api/v1/analyze", json={"text": text}).json()["predicted_tokens"]
    assert predicted == ["ta1", "zai4", "yin2", "hang2", "gong1", "zuo4", "<eos>"]
    cross = lab(client, "scaling", text=text, type="decoder.cross", layer=2, head=1)
    assert cross["matrices"]["rows"][:2] == ["<bos>", "ta1"]  # fed in
    assert cross["matrices"]["predicted"] == predicted
    encoder = lab(client, "scaling", text=text, type="encoder.self")
    assert encoder["matrices"]["predicted"] is None  # an encoder's rows are no steps
    causal = lab(client, "masks", text=text)["causal"]
    assert causal["predicted"] == predicted
    both = lab(
        client, "compare", text=text, type="decoder.cross", other_model="pronounce-untrained"
    )
    assert both["first_predicted"] == predicted
    assert len(both["second_predicted"]) == len(both["second_rows"])
    aligned = [predicted[both["first_rows"].index(r)] for r in both["aligned_rows"]]
    assert both["aligned_predicted"] == aligned
