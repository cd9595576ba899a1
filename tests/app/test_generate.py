"""Generation through the API: /generate and its server-sent-events stream on SmolLM2,
the continuation sent back to see the whole sequence's attention, what is refused, and a
client that goes away mid-stream (a real uvicorn server)."""

from __future__ import annotations

import json
import time

import httpx2
import numpy as np
import pytest

from harness.serving import start_server

PROMPT = "The capital of France is"


def post(client, path: str, **body) -> dict:
    response = client.post(f"/api/v1/{path}", json={"model": "smollm2", **body})
    assert response.status_code == 200, response.text
    return response.json()


def events(lines) -> list[tuple[str, dict]]:
    """(event, data) of a text/event-stream body, in order."""
    out, kind = [], None
    for line in lines:
        if line.startswith("event: "):
            kind = line[len("event: ") :]
        elif line.startswith("data: "):
            out.append((kind, json.loads(line[len("data: ") :])))
    return out


def test_a_greedy_continuation_with_each_steps_distribution(client):
    body = post(client, "generate", text=PROMPT, max_new_tokens=6)
    assert body["prompt_tokens"] == ["The", "␣capital", "␣of", "␣France", "␣is"]
    assert body["tokens"][0] == "␣Paris" and body["text"].startswith(" Paris")
    assert len(body["continuation"]) == len(body["steps"]) == 6 and body["stop"] == "max_new_tokens"
    for i, step in enumerate(body["steps"]):
        assert step["index"] == 5 + i and step["id"] == body["continuation"][i]
        probabilities = [a["probability"] for a in step["top"]]
        assert len(step["top"]) == 10 and probabilities == sorted(probabilities, reverse=True)
        assert step["top"][0]["id"] == step["id"]  # greedy: the likeliest
        assert step["probability"] == probabilities[0] and 0 < sum(probabilities) <= 1 + 1e-6
    assert body["steps"][-1]["text"] == body["text"]


def test_the_continuation_sent_back_gives_the_whole_sequences_attention(client):
    made = post(client, "generate", text=PROMPT, max_new_tokens=4)
    sent = {"text": PROMPT, "continuation": made["continuation"]}
    analyzed = post(client, "analyze", **sent)
    assert analyzed["source_tokens"] == made["prompt_tokens"] + made["tokens"]
    assert analyzed["output"] == made["tokens"]
    # each generated token was the likeliest at its step: the pass predicts it there
    assert analyzed["predicted_tokens"][4:8] == made["tokens"]
    blocks = post(client, "attention", **sent, types=["decoder.self"], layers=[29])["blocks"]
    weights = np.array(blocks[0]["data"])
    assert weights.shape == (9, 9, 9) and np.allclose(weights.sum(-1), 1, atol=1e-5)
    assert np.allclose(np.triu(weights, 1), 0)  # causal: no step sees a later token
    lab = post(client, "lab/scaling", **sent, type="decoder.self", layer=29, head=0)
    assert lab["matrices"]["rows"] == analyzed["source_tokens"]


def test_sampling_is_seeded(client):
    warm = {"text": "Once upon a time", "max_new_tokens": 8, "temperature": 1, "top_p": 0.95}
    first = post(client, "generate", **warm, seed=11)["continuation"]
    assert post(client, "generate", **warm, seed=11)["continuation"] == first
    assert post(client, "generate", **warm, seed=12)["continuation"] != first


def test_chat_mode_wraps_the_text_in_the_chat_template(client):
    body = post(client, "generate", text="What is 2+2?", chat=True, max_new_tokens=64)
    assert body["prompt"].endswith(
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert body["prompt_tokens"][0] == "<|im_start|>"
    assert body["stop"] == "end-of-turn" and body["tokens"][-1] == "<|im_end|>"
    assert "4" in body["text"]


@pytest.mark.parametrize(
    "body, message",
    [
        ({"max_new_tokens": 65}, "the limit is 64 (ATTNVIZ_MAX_NEW_TOKENS)"),
        ({"model": "pronounce"}, "pronounce does not continue a prompt"),
        ({"continuation": [49152]}, "token id out of range: smollm2 has 0..49151"),
        ({"continuation": [13] * 65}, "continuation has 65 tokens; the limit is 64"),
        ({"continuation": [13] * 40, "max_new_tokens": 30}, "add up to more than the limit"),
        ({"text": " \u200b "}, "text is empty"),
        ({"temperature": -1}, "greater than or equal to 0"),
        ({"top_p": 0}, "greater than 0"),
    ],
)
def test_what_cannot_be_generated_is_refused_with_the_reason(client, body, message):
    for path in ("generate", "generate/stream"):
        response = client.post(f"/api/v1/{path}", json={"model": "smollm2", "text": "hi", **body})
        assert response.status_code == 422, response.text
        assert message in json.dumps(response.json()["detail"])
    if "model" in body:  # and the attention routes refuse a prompt option likewise
        chat = client.post(
            "/api/v1/analyze", json={"model": "pronounce", "text": "hi", "chat": True}
        )
        assert chat.status_code == 422 and "models that continue a prompt" in chat.text


def test_the_stream_sends_each_step_then_the_whole_answer(client):
    request = {"model": "smollm2", "text": PROMPT, "max_new_tokens": 5}
    with client.stream("POST", "/api/v1/generate/stream", json=request) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        got = events(response.iter_lines())
    kinds = [kind for kind, _ in got]
    assert kinds == ["step"] * 5 + ["done"]
    whole = post(client, "generate", text=PROMPT, max_new_tokens=5)
    assert got[-1][1] == whole
    assert [data for _, data in got[:-1]] == whole["steps"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A real uvicorn server of SmolLM2 with one run slot, its log lines in a file: the base
    URL and the file. (Its tests share it: a generation the first leaves running would hold
    the slot the second asks for, and fail it too.)"""
    log = tmp_path_factory.mktemp("served") / "log.jsonl"
    env = {
        "ATTNVIZ_ZOO": json.dumps(["smollm2"]),
        "ATTNVIZ_MAX_CONCURRENT_RUNS": "1",
        "ATTNVIZ_LOG_LEVEL": "info",
    }
    with log.open("w") as out:
        proc, base = start_server(env, stdout=out)
        try:
            yield base, log
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def logged(log, after: int, logger: str, timeout: float = 10) -> list[str]:
    """The messages `logger` wrote to the log past byte `after`: polled until there is one,
    then read again half a second later (so that a second one is seen too); lines only
    whole (ended)."""
    deadline, found, settled = time.monotonic() + timeout, [], None
    while True:
        with log.open() as f:
            f.seek(after)
            lines = [json.loads(line) for line in f if line.startswith("{") and line.endswith("\n")]
        found = [line["message"] for line in lines if line.get("logger") == logger]
        if found and settled is None:
            settled = time.monotonic() + 0.5
        if (settled and time.monotonic() >= settled) or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_a_client_that_goes_away_stops_the_generation_and_frees_its_slot(served):
    base, log = served
    start = log.stat().st_size
    request = {"text": "Once upon a time", "max_new_tokens": 64}
    with httpx2.Client(timeout=60) as http:
        with http.stream("POST", f"{base}/api/v1/generate/stream", json=request) as stream:
            steps = 0
            for line in stream.iter_lines():
                steps += line.startswith("event: step")
                if steps == 2:
                    break  # and the connection closes, 62 steps short
        # the only run slot is free again: a whole generation answers at once
        after = http.post(f"{base}/api/v1/generate", json={**request, "max_new_tokens": 3})
        assert after.status_code == 200 and len(after.json()["steps"]) == 3
    stopped = logged(log, start, "attnviz.generate")
    assert len(stopped) == 1 and stopped[0].startswith("generation stopped after "), stopped
    made = int(stopped[0].split()[3])
    assert 2 <= made < 64, stopped  # it stopped, not ran on to 64


def test_ropes_positional_table_is_its_wrapped_angles_and_a_distance_kernel(client):
    response = client.get("/api/v1/models/smollm2/positional-encoding?positions=24&dims=32")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["kind"] == "rotary" and body["dims"] == 32
    angles = np.array(body["table"])
    theta = 100000.0 ** (-np.arange(32) / 32)
    expected = np.angle(np.exp(1j * np.outer(np.arange(24), theta)))  # wrapped to ±pi
    assert np.allclose(angles, expected, atol=1e-4)
    kernel = np.array(body["similarity"])
    assert np.allclose(np.diag(kernel), 1, atol=1e-5)
    # what RoPE makes of two positions depends on their distance only
    for d in range(1, 24):
        assert np.allclose(np.diag(kernel, d), kernel[0, d], atol=1e-5)
    assert client.get("/api/v1/models/smollm2/positional-encoding?dims=33").status_code == 422


def test_keys_and_values_come_per_key_value_head(client):
    """Grouped-query attention: 9 query heads read 3 key/value heads, 3 each."""
    body = {"text": PROMPT, "types": ["decoder.self"], "layers": [2], "encoding": "f4"}
    blocks = post(client, "attention", **body, kinds=["q", "k", "v", "weights"])["blocks"]
    shapes = {b["kind"]: (b["heads"], b["shape"]) for b in blocks}
    assert shapes["q"] == (list(range(9)), [9, 5, 64])
    assert shapes["k"] == shapes["v"] == ([0, 1, 2], [3, 5, 64])
    assert shapes["weights"] == (list(range(9)), [9, 5, 5])
    some = post(client, "attention", **body, kinds=["k"], heads=[4, 5, 8])["blocks"][0]
    assert some["heads"] == [1, 2] and some["shape"] == [2, 5, 64]  # the heads they read


def test_the_lab_runs_the_prompt_with_its_continuation(client):
    made = post(client, "generate", text=PROMPT, max_new_tokens=3)
    sent = {"text": PROMPT, "continuation": made["continuation"]}
    # ablation: what the model predicts at each generated step and next, heads on and off
    layer = [{"type": "decoder.self", "layer": i, "head": h} for i in range(30) for h in range(9)]
    kept = post(client, "lab/ablation", **sent, ablate=layer[:1])
    assert kept["output"][:3] == made["tokens"]  # greedy: each step predicted its token
    gone = post(client, "lab/ablation", **sent, ablate=layer)
    assert gone["changed"] and gone["ablated_output"] != gone["output"]
    # compare against the twin: the same prompt and continuation on both
    both = post(client, "lab/compare", **sent, type="decoder.self", other_model="smollm2-untrained")
    assert both["second_rows"] == both["first_rows"] and len(both["first_rows"]) == 8


def test_blocks_can_name_their_tokens_side_instead_of_repeating_them(client):
    body = {"text": PROMPT, "encoding": "u1", "kinds": ["weights"]}
    full = post(client, "attention", **body)
    lean = post(client, "attention", **body, repeat_tokens=False)
    assert len(lean["blocks"]) == len(full["blocks"]) == 30
    for a, b in zip(full["blocks"], lean["blocks"], strict=True):
        assert b["data"] == a["data"] and b["rows"] is None and b["columns"] is None
        assert (b["rows_from"], b["columns_from"]) == ("target", "target")
        assert a["rows"] == full["target_tokens"] and a["predicted"] == full["predicted_tokens"]
    kv = post(client, "attention", **{**body, "kinds": ["k"], "encoding": "f2"},
              layers=[0], repeat_tokens=False)["blocks"][0]  # fmt: skip
    assert (kv["rows_from"], kv["columns_from"], kv["columns"]) == ("target", None, None)
    # at a few tokens the token lists are a large share of an all-heads answer
    assert len(json.dumps(lean)) < 0.85 * len(json.dumps(full))


LONG_PROMPT = " ".join(f"Line {i} of the list reads word{i}." for i in range(80))  # > 512


def test_a_long_prompts_generation_is_its_run_read_once(client):
    """The generation's own passes are the sequence's run: analysing it with its
    continuation reads nothing (no progress under its request id), and what it shows is what
    one pass over the whole sequence gives (our model code's long pass, run here)."""
    from attnviz.model.pretrained.causal import CausalLM

    made = post(client, "generate", text=LONG_PROMPT, max_new_tokens=3)
    assert len(made["prompt_tokens"]) > 512
    sent = {"model": "smollm2", "text": LONG_PROMPT, "continuation": made["continuation"]}
    response = client.post("/api/v1/analyze", json=sent, headers={"X-Request-ID": "read-once"})
    analyzed = response.json()
    assert analyzed["long"] and analyzed["output"] == made["tokens"]
    assert client.get("/api/v1/progress/read-once").status_code == 404  # no model read
    runner = CausalLM.load().read_long(2**31)
    _, ids, _, _ = runner.prompt(LONG_PROMPT)
    whole = runner.result(LONG_PROMPT, ids, made["continuation"])
    assert analyzed["predicted_tokens"] == whole.predicted_tokens
    last = analyzed["next_tokens"][-1]
    assert [a["id"] for a in last["top"]][:3] == [
        i for i, _ in whole.alternatives[last["position"]]
    ][:3]
    n = len(whole.source_ids)
    rows = post(
        client, "attention", **sent, types=["decoder.self"], layers=[29], heads=[0], rows=[n - 4, n]
    )
    theirs = whole.captured.attention["decoder.29.self_attn"].block("weights", 0, n - 4, n, 0, n)
    assert np.allclose(np.array(rows["blocks"][0]["data"]), theirs.numpy(), atol=1e-4)


def test_a_generation_stopped_by_its_client_answers_the_tokens_made(served):
    base = served[0]
    stop = f"{base}/api/v1/generate/stop"
    request = {"text": "Once upon a time", "max_new_tokens": 64}
    headers = {"X-Request-ID": "stop-me"}
    with httpx2.Client(timeout=60) as http:
        # no generation of this client's under that id yet; a bad id is a 422
        assert http.post(stop, json={"request_id": "stop-me"}).status_code == 404
        assert http.post(stop, json={"request_id": "a b"}).status_code == 422
        url = f"{base}/api/v1/generate/stream"
        lines, steps = [], 0
        with http.stream("POST", url, json=request, headers=headers) as stream:
            for line in stream.iter_lines():  # (events() would read the whole stream)
                lines.append(line)
                if line.startswith("data: ") and lines[-2] == "event: step":
                    steps += 1
                    if steps == 2:
                        stopped = http.post(stop, json={"request_id": "stop-me"})
                        assert stopped.status_code == 200
                        assert stopped.json() == {"stopping": True}
    seen = events(lines)
    kinds = [kind for kind, _ in seen]
    done = seen[-1][1]
    assert kinds[-1] == "done" and done["stop"] == "stopped"
    made = kinds.count("step")
    assert 2 <= made <= 3 and len(done["continuation"]) == made  # within one step
