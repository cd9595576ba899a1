"""The lab's experiments for a model that generates (SmolLM2): the KV cache step by step
from the prompt's one pass, and induction heads found, ranked and shown to copy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnviz.model.hooks import hooked
from attnviz.model.methods.analysis import ablate_heads
from harness.references import smollm2
from tests.app.test_generate import PROMPT, post


def test_the_kv_cache_reads_the_prompt_in_one_pass_then_a_token_per_step(client):
    body = post(client, "lab/kv-cache", text=PROMPT, layer=17)
    steps = body["steps"]
    prompt = body["prompt_tokens"]
    assert (
        prompt == 5 and body["layers"] == [17] and (body["query_heads"], body["kv_heads"]) == (9, 3)
    )
    assert steps[0]["fed_tokens"] == prompt and steps[0]["token"] == "␣is"
    assert steps[0]["keys"] == ["The", "␣capital", "␣of", "␣France", "␣is"]
    assert all(s["fed_tokens"] == 1 for s in steps[1:])
    # greedy: each step feeds what the one before predicted; 16 steps after the prompt
    assert [s["token"] for s in steps[1:]] == [s["predicted"] for s in steps[:-1]]
    assert body["output"] == [s["token"] for s in steps[1:]] and len(body["output"]) == 16
    assert body["output_text"].startswith(" Paris.") and not body["ended"]
    assert all(s["max_abs_diff"] <= 1e-4 for s in steps)
    for s in steps:
        (rows,) = s["rows"]
        assert np.array(rows).shape == (9, prompt + s["step"])
        assert np.allclose(np.array(rows).sum(1), 1, atol=1e-5)
    # grouped-query attention: each token adds a key and a value per key/value head, 3 x 64
    # float32, to each of the 30 layers
    sizes = np.array([s["cache_bytes"] for s in steps])
    assert sizes.shape == (17, 30) and np.all(sizes[0] == 2 * 3 * 64 * 4 * prompt)
    assert np.all(np.diff(sizes, axis=0) == 2 * 3 * 64 * 4)
    # the cached rows are the full pass's rows: the whole sequence run at once, captured
    sent = {"text": PROMPT, "continuation": post(client, "generate", text=PROMPT,
            max_new_tokens=16)["continuation"]}  # fmt: skip
    whole = post(client, "attention", **sent, types=["decoder.self"], layers=[17])
    weights = np.array(whole["blocks"][0]["data"])  # (9, T, T)
    for s in steps:
        query = prompt - 1 + s["step"]
        row = np.array(s["rows"][0])
        assert np.abs(row - weights[:, query, : query + 1]).max() <= 1e-5


def test_the_kv_cache_follows_the_continuation_sent_and_refuses_a_wrong_layer(client):
    made = post(client, "generate", text=PROMPT, max_new_tokens=3, temperature=1.0, seed=3)
    body = post(client, "lab/kv-cache", text=PROMPT, continuation=made["continuation"])
    assert body["output"] == made["tokens"] and body["layers"] == list(range(30))
    assert len(body["steps"]) == 4 and len(body["steps"][0]["rows"]) == 30
    assert [s["token"] for s in body["steps"][1:]] == made["tokens"]
    # a continuation that ends its turn ended; a character split between tokens is named
    # the same in the step's label and in its keys
    stop = runner_of(client).stop_ids
    ends = post(client, "lab/kv-cache", text="他说", continuation=[7042, min(stop)], layer=0)
    assert ends["ended"] and not body["ended"]
    assert all(s["token"] == s["keys"][-1] for s in [*ends["steps"], *body["steps"]])
    wrong = client.post(
        "/api/v1/lab/kv-cache", json={"model": "smollm2", "text": "hi", "layer": 30}
    )
    assert wrong.status_code == 422 and "layer 30 out of range" in wrong.json()["detail"]


def runner_of(client):
    return client.app.state.inference.entry("smollm2").runner


@pytest.fixture(scope="module")
def induction(client):
    return post(client, "lab/induction", text="unused", length=50, seed=0, ablate=5)


def test_induction_heads_copy_the_second_copy_and_switching_them_off_breaks_it(induction):
    r = induction
    n = r["length"]
    assert len(r["tokens"]) == 2 * n and r["tokens"][:n] == r["tokens"][n:]
    assert len(r["heads"]) == 30 * 9
    scores = [h["induction"] for h in r["heads"]]
    assert scores == sorted(scores, reverse=True)
    top = r["heads"][0]
    assert top["induction"] > 0.5 and top["previous"] < 0.1  # it copies, not looks back
    # random tokens cannot be predicted; their repeat can (a measured claim, nats)
    assert r["loss_first"] > r["chance_loss"] - 1 and r["loss_second"] < r["loss_first"] - 8
    # switching the top 5 off raises the second copy's loss by several nats, far more than
    # switching off 5 random other heads
    raised = r["loss_second_ablated"] - r["loss_second"]
    control = r["loss_second_control"] - r["loss_second"]
    assert raised > 5 and raised > 2 * control and r["copying_is_theirs"]
    ablated = {(h["layer"], h["head"]) for h in r["ablated"]}
    assert ablated == {(h["layer"], h["head"]) for h in r["heads"][:5]}
    assert not ablated & {(h["layer"], h["head"]) for h in r["control"]}
    # a score is the mean weight from each second-copy token on the token after its
    # earlier occurrence, read off the pattern itself
    pattern = np.array(r["patterns"][0])
    assert pattern.shape == (2 * n, 2 * n)
    assert np.isclose(
        pattern[n + np.arange(n), np.arange(n) + 1].mean(), top["induction"], atol=1e-5
    )


def test_induction_is_seeded_and_its_loss_is_the_models_own(client, induction):
    again = post(client, "lab/induction", text="other", length=50, seed=0, ablate=5)
    assert again == induction
    other = post(client, "lab/induction", text="unused", length=20, seed=1, ablate=2)
    assert other["tokens"][:20] != induction["tokens"][:20] and len(other["ablated"]) == 2
    # the losses: the mean cross-entropy of the model's logits over the ids, each copy
    # (its first token follows nothing) and with the top heads' outputs zeroed
    model = runner_of(client).model
    ids = torch.tensor([induction["ids"]])
    n = induction["length"]

    def losses(logits):
        per = F.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="none")
        return float(per[: n - 1].mean()), float(per[n:].mean())

    with torch.no_grad():
        first, second = losses(model(ids))
        off = {}
        for h in induction["ablated"]:
            off.setdefault(h["layer"], []).append(h["head"])
        hooks = [(f"decoder.{layer}.self_attn.hook_context", ablate_heads(heads))
                 for layer, heads in off.items()]  # fmt: skip
        with hooked(model, fwd_hooks=hooks, capture=False):
            _, ablated = losses(model(ids))
    assert abs(first - induction["loss_first"]) < 1e-4
    assert abs(second - induction["loss_second"]) < 1e-4
    assert abs(ablated - induction["loss_second_ablated"]) < 1e-4
    refused = client.post("/api/v1/lab/induction", json={"model": "minilm", "text": "hi"})
    assert (
        refused.status_code == 422 and "does not predict the next token" in refused.json()["detail"]
    )
    for bad in ({"length": 4}, {"length": 257}, {"ablate": 0}, {"seed": -1}):
        answer = client.post(
            "/api/v1/lab/induction", json={"model": "smollm2", "text": "hi", **bad}
        )
        assert answer.status_code == 422


@pytest.fixture(scope="module")
def needle(client):
    return post(client, "lab/needle", text="unused", length=384, depth=0.4, seed=0, ablate=5)


@pytest.fixture(scope="module")
def hf_smollm2():
    """transformers' own Llama code on the same GGUF file, eager attention: the reference."""
    return smollm2.model()


def test_a_needle_is_found_by_retrieval_heads_as_transformers_attention_says(needle, hf_smollm2):
    r = needle
    ids, (k0, k1), (n0, n1) = r["ids"], r["key_positions"], r["needle"]
    assert r["length"] == len(ids) == 384 and n0 < k0 < k1 < n1 < len(ids)
    # the key sits 40 % into the filler, and the prompt reads as the pass-key task
    assert 0.3 < n0 / len(ids) < 0.5 and r["question"] == "What is the pass key? The pass key is"
    assert len(r["key"]) == 5 and r["key"].isdigit()
    written = r["answer"]["tokens"]
    assert r["answer"]["recalled"] and r["answer"]["text"].strip().startswith(r["key"])
    assert r["retrieval_is_theirs"] and not r["answer_ablated"]["recalled"]
    assert r["answer_control"]["recalled"]
    key_tokens = k1 - k0
    heads = r["heads"]
    assert len(heads) == 30 * 9 and heads[0]["retrieval"] >= 0.8
    assert [h["retrieval"] for h in heads] == sorted((h["retrieval"] for h in heads), reverse=True)
    assert [(h["layer"], h["head"]) for h in heads[:5]] == [
        (a["layer"], a["head"]) for a in r["ablated"]
    ]
    assert not {(c["layer"], c["head"]) for c in r["control"]} & {
        (a["layer"], a["head"]) for a in r["ablated"]
    }
    # the reference: transformers' eager attention over the prompt and the answer at once
    # (the answer's tokens teacher-forced: what cached greedy decoding computes)
    answer = r["ids"] + runner_tokens(hf_smollm2, ids, len(written))
    with torch.no_grad():
        out = hf_smollm2(torch.tensor([answer]), output_attentions=True)
    # greedy: each step wrote the reference's most likely token
    steps = range(len(ids) - 1, len(answer) - 1)
    assert out.logits[0, list(steps)].argmax(-1).tolist() == answer[len(ids) :]
    ours = {(h["layer"], h["head"]): set(h["copied"]) for h in heads}
    for layer, weights in enumerate(out.attentions):
        for head in range(9):
            expected = set()
            for q in steps:
                row = weights[0, head, q]
                j = int(row.argmax())
                if k0 <= j < k1 and answer[j] == answer[q + 1]:
                    expected.add(j - k0)
            got = ours[(layer, head)]
            for i in expected ^ got:  # only where two keys tie within float error
                q = next(q for q in steps if answer[q + 1] == answer[k0 + i])
                row = weights[0, head, q]
                assert float(row.max() - row[k0 + i]) < 1e-5, (layer, head, i)
            h = next(x for x in heads if (x["layer"], x["head"]) == (layer, head))
            assert abs(h["retrieval"] - len(got) / key_tokens) < 1e-6
    # the answer with the top heads' outputs zeroed, by transformers: each head's slice of
    # o_proj's input set to 0 (the control's the same way)
    for refs, said in ((r["ablated"], r["answer_ablated"]), (r["control"], r["answer_control"])):
        assert hf_answer_without(hf_smollm2, ids, len(written), refs) == said["text"]


def runner_tokens(hf, ids: list[int], steps: int, hooks=()) -> list[int]:
    """transformers' greedy continuation of `ids`, `steps` tokens, through its own cache."""
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), max_new_tokens=steps, min_new_tokens=steps,
                          do_sample=False, pad_token_id=0)  # fmt: skip
    return out[0, len(ids) :].tolist()


def hf_answer_without(hf, ids: list[int], steps: int, refs: list[dict]) -> str:
    from attnviz.model.pretrained.causal import CausalLM

    d = hf.config.hidden_size // hf.config.num_attention_heads
    handles = []
    for ref in refs:
        o_proj = hf.model.layers[ref["layer"]].self_attn.o_proj

        def zero(module, args, head=ref["head"]):
            x = args[0].clone()
            x[..., head * d : (head + 1) * d] = 0
            return (x,)

        handles.append(o_proj.register_forward_pre_hook(zero))
    try:
        tokens = runner_tokens(hf, ids, steps)
    finally:
        for handle in handles:
            handle.remove()
    return CausalLM.load().decode(tokens)


def test_the_needle_is_seeded_and_refuses_what_it_cannot_run(client, needle):
    # seeded: the same answer twice (a short prompt), another seed another key
    ask = {"text": "other", "length": 160, "depth": 0.5, "digits": 3, "ablate": 1}
    once, twice = (post(client, "lab/needle", **ask, seed=4) for _ in range(2))
    assert once == twice and once["key"] != needle["key"] and len(once["key"]) == 3
    infos = client.get("/api/v1/models").json()
    most = next(m for m in infos if m["id"] == "smollm2")["max_tokens"]
    for bad, says in (
        ({"length": most + 1}, f"at most {min(most, 8192 - 8):,}"),
        ({"length": 100}, "greater than or equal to 128"),
        ({"digits": 2}, "greater than or equal to 3"),
        ({"depth": 1.5}, "less than or equal to 1"),
        ({"ablate": 0}, "greater than or equal to 1"),
    ):
        answer = client.post("/api/v1/lab/needle", json={"model": "smollm2", "text": "hi", **bad})
        assert answer.status_code == 422 and says in answer.text, (bad, answer.text)
    refused = client.post("/api/v1/lab/needle", json={"model": "minilm", "text": "hi"})
    assert refused.status_code == 422 and "does not predict the next token" in refused.text
