"""The REST API through the app's own routes: every route, every documented error."""

from __future__ import annotations

import base64
import contextlib
import io
import threading
import time

import httpx2
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from attnviz.app.main import create_app
from attnviz.app.payloads.blocks import AttentionResponse, Block
from attnviz.app.payloads.wire import attention_json, encode
from attnviz.app.settings import Settings
from attnviz.model.positional import sinusoidal_table
from attnviz.model.runtime import usable_cpus

TEXT = "银行行走 hello"


def decode(data) -> np.ndarray:
    if isinstance(data, list):
        return np.array(data, dtype=np.float64)
    shape = tuple(int(n) for n in data["shape"].split(","))
    raw = np.frombuffer(base64.b64decode(data["bdata"]), dtype="<" + data["dtype"])
    values = raw.reshape(shape).astype(np.float64)
    return values / 255 if data["dtype"] == "u1" else values


def attention(client, **body):
    response = client.post("/api/v1/attention", json={"text": TEXT, **body})
    assert response.status_code == 200, response.text
    return response.json()


def test_models_describe_their_attention(client):
    models = client.get("/api/v1/models").json()
    ids = [m["id"] for m in models]
    assert ids == [
        "pronounce", "pronounce-untrained", "minilm", "minilm-untrained", "smollm2",
        "smollm2-untrained",
    ]  # fmt: skip
    llm = models[4]
    assert (llm["architecture"], llm["positional"], llm["decoder_layers"]) == (
        "decoder-only",
        "rotary",
        30,
    )
    assert llm["attention"] == [
        {"type": "decoder.self", "layers": 30, "query_heads": 9, "kv_heads": 3, "head_dim": 64,
         "rows": "target", "columns": "target"}
    ]  # fmt: skip
    # its context, read whole (model/long/); 16 characters a token (any real text)
    assert (llm["token_unit"], llm["output"], llm["max_tokens"], llm["max_text_chars"]) == (
        "byte-bpe",
        "continuation",
        8192,
        131072,
    )
    assert "<|im_start|>" in llm["special_tokens"]
    assert llm["capabilities"]["generation"] and llm["max_new_tokens"] == 64
    assert models[0]["max_new_tokens"] is None
    default = models[0]
    assert default["default"] and not models[1]["default"]
    assert default["architecture"] == "encoder-decoder" and default["positional"] == "sinusoidal"
    assert (default["encoder_layers"], default["decoder_layers"]) == (3, 3)
    assert default["attention_types"] == ["encoder.self", "decoder.self", "decoder.cross"]
    assert default["attention"] == [
        {"type": t, "layers": 3, "query_heads": 8, "kv_heads": 8, "head_dim": 32,
         "rows": rows, "columns": columns}
        for t, rows, columns in (
            ("encoder.self", "source", "source"),
            ("decoder.self", "target", "target"),
            ("decoder.cross", "target", "source"),
        )
    ]  # fmt: skip
    assert default["max_tokens"] == 128 and default["languages"] == ["zh", "en"]
    assert default["max_text_chars"] == 4000 and default["token_unit"] == "characters"
    assert default["output"] == "transcription"
    assert default["special_tokens"] == ["<bos>", "<eos>"]
    assert default["capabilities"] == {
        "kv_cache": True, "similarity": False, "word_view": False, "generation": False,
        "text": True, "pictures": False, "value_norms": True,
        "experiments": ["scaling", "positions", "masks", "kv-cache", "metrics", "rollout",
                        "flow", "alti", "contribution", "ablation", "compare"],
    }  # fmt: skip
    assert "heads" not in default and "tokens" not in default  # removed: attention, token_unit


def test_the_blocks_are_sent_once_and_legacy_items_is_refused(client):
    request = {"types": ["decoder.cross"], "layers": [2], "encoding": "u1"}
    body = attention(client, **request)
    assert "items" not in body and len(body["blocks"]) == 1
    refused = client.post(
        "/api/v1/attention", json={"text": TEXT, "legacy_items": False, **request}
    )
    assert refused.status_code == 422 and "legacy_items" in refused.text


def test_analyze_gives_tokens_output_and_every_head(client):
    body = client.post("/api/v1/analyze", json={"text": "  银行\t行走  "}).json()
    assert body["model"] == "pronounce" and body["text"] == "银行 行走"
    assert body["source_tokens"] == ["银", "行", "␣", "行", "走"]  # the space token, visible
    assert body["source_raw"] == ["银", "行", " ", "行", "走"]  # as the tokenizer has it
    assert body["output"] == ["yin2", "hang2", "|", "xing2", "zou3"]
    assert body["target_tokens"] == ["<bos>", *body["output"]]
    assert body["output_text"] == "yin2 hang2 | xing2 zou3"
    assert len(body["summaries"]) == 3 * 3 * 8
    for s in body["summaries"]:
        assert 0 <= s["entropy"] <= np.log2(6) + 1e-6 and 0 < s["max_weight"] <= 1


def test_attention_blocks_stack_the_heads_and_carry_their_axes(client):
    body = attention(client, types=["decoder.cross"], layers=[1], heads=[3, 0])
    [block] = body["blocks"]
    assert (block["type"], block["layer"], block["kind"]) == ("decoder.cross", 1, "weights")
    assert block["heads"] == [3, 0]
    assert block["rows"] == body["target_tokens"] and block["columns"] == body["source_tokens"]
    weights = decode(block["data"])
    assert weights.shape == tuple(block["shape"]) == (2, len(block["rows"]), len(block["columns"]))
    assert np.allclose(weights.sum(-1), 1, atol=1e-5)
    each = [attention(client, types=["decoder.cross"], layers=[1], heads=[h]) for h in (3, 0)]
    for stacked, single in zip(weights, each, strict=True):
        assert np.array_equal(stacked, decode(single["blocks"][0]["data"])[0])


def test_every_layer_and_head_by_default(client):
    body = attention(client, encoding="u1")
    assert [(b["type"], b["layer"]) for b in body["blocks"]] == [
        (t, layer) for t in ("encoder.self", "decoder.self", "decoder.cross") for layer in range(3)
    ]
    assert all(b["heads"] == list(range(8)) for b in body["blocks"])


@pytest.mark.parametrize("encoding, tolerance", [("u1", 0.5 / 255), ("f2", 1e-3), ("f4", 1e-6)])
def test_typed_encodings_decode_to_the_json_matrix(client, encoding, tolerance):
    request = dict(types=["encoder.self"], layers=[2], kinds=["weights", "mask"])
    plain = attention(client, **request)["blocks"]
    typed = attention(client, encoding=encoding, **request)["blocks"]
    assert len(plain) == len(typed) == 2
    assert plain[1]["heads"] is None and decode(plain[1]["data"]).shape[0] == 1  # mask: once
    for a, b in zip(plain, typed, strict=True):
        assert np.abs(decode(a["data"]) - decode(b["data"])).max() <= tolerance + 1e-6


def test_scores_and_projections_in_floats(client):
    body = attention(
        client,
        types=["decoder.self"],
        layers=[0],
        heads=[2],
        kinds=["scores", "q", "k", "v"],
        encoding="f4",
    )
    scores, q, k, v = (decode(i["data"])[0] for i in body["blocks"])
    n = len(body["target_tokens"])
    assert scores.shape == (n, n) and q.shape == k.shape == v.shape == (n, 32)
    assert np.allclose(q @ k.T / np.sqrt(32), scores, atol=1e-4)  # scores are q k^T / sqrt(d)
    assert body["blocks"][1]["columns"] is None


def test_masked_positions_have_zero_weight(client):
    body = attention(client, types=["decoder.self"], kinds=["weights", "mask"], encoding="f4")
    blocks = body["blocks"]  # per layer: the weights of 8 heads, then the mask
    assert [b["kind"] for b in blocks] == ["weights", "mask"] * 3
    for layer in range(3):
        weights = decode(blocks[2 * layer]["data"])
        [mask] = decode(blocks[2 * layer + 1]["data"])
        assert np.array_equal(mask, np.tril(np.ones_like(mask)))  # causal, no padding
        assert np.all(weights[:, mask == 0] == 0) and np.all(weights[:, mask == 1] > 0)


def test_positional_table_is_the_models(client):
    body = client.get("/api/v1/models/pronounce/positional-encoding?positions=40&dims=16").json()
    assert body["kind"] == "sinusoidal" and "sin(pos" in body["formula"]
    table = np.array(body["table"])
    assert table.shape == (40, 16)
    assert np.allclose(table, sinusoidal_table(40, 256)[:, :16].numpy(), atol=1e-6)
    similarity = np.array(body["similarity"])
    assert similarity.shape == (40, 40) and np.allclose(np.diag(similarity), 1, atol=1e-5)


def test_export_is_every_tensor_as_float32(client):
    response = client.post("/api/v1/export", json={"text": TEXT})
    assert response.status_code == 200
    assert response.headers["content-disposition"].startswith('attachment; filename="pronounce-')
    archive = np.load(io.BytesIO(response.content))
    runner = client.app.state.inference.zoo.models["pronounce"].runner
    # the same run, made again on the server's tensor thread (the same torch threads, so
    # the same sums in the same order): every hook point captured
    result = client.app.state.inference.threads.submit(runner.run, TEXT).result()
    tokens = {"source_tokens", "target_tokens", "source_raw", "target_raw"}
    assert set(archive.files) == {*result.capture, *tokens}
    for name, tensor in result.capture.items():
        array = archive[name]
        assert array.dtype == np.float32 and array.shape == tuple(tensor.shape), name
        assert np.array_equal(array, tensor.float().numpy()), name
    assert "decoder.2.cross_attn.hook_weights" in archive.files
    # the space as people read it (␣), and as the tokenizer spells it in the raw list
    assert list(archive["source_tokens"]) == list("银行行走␣hello")
    assert list(archive["source_raw"]) == list("银行行走 hello")
    assert list(archive["target_tokens"]) == result.target_tokens


@pytest.mark.parametrize(
    "path, body, status, message",
    [
        ("/api/v1/analyze", {"text": "hi", "model": "gpt-5"}, 404, "unknown model 'gpt-5'"),
        ("/api/v1/analyze", {"text": " \n\t"}, 422, "text is empty"),
        ("/api/v1/analyze", {"text": "长" * 4001}, 422, "the limit is 4000"),
        ("/api/v1/attention", {"text": "hi", "layers": [3]}, 422, "layers are 0..2"),
        ("/api/v1/attention", {"text": "hi", "heads": [8]}, 422, "heads are 0..7"),
        (
            "/api/v1/attention",
            {"text": "hi", "kinds": ["q"], "encoding": "u1"},
            422,
            "ask f2 or f4",
        ),
        ("/api/v1/attention", {"text": "hi", "encoding": "f8"}, 422, "json"),
        ("/api/v1/attention", {"text": "hi", "layers": [-1]}, 422, "greater than or equal to 0"),
        ("/api/v1/analyze", {"text": 5}, 422, "valid string"),
        ("/api/v1/analyze", {"txt": "hi"}, 422, "unknown field 'txt'"),
        ("/api/v1/analyze", {"text": "hi", "model": ""}, 404, "unknown model ''"),
        ("/api/v1/attention", {"text": "hi", "layers": []}, 422, "at least 1 item"),
        ("/api/v1/attention", {"text": "hi", "layers": [True]}, 422, "valid integer"),
    ],
)
def test_bad_input_gets_a_clear_4xx(client, path, body, status, message):
    response = client.post(path, json=body)
    assert response.status_code == status
    assert message in str(response.json()["detail"])
    assert client.post("/api/v1/analyze", json={"text": "好"}).status_code == 200


def test_nan_in_numbers_is_refused_not_crashed(client):
    raw = b'{"text": "hi", "layers": [NaN]}'
    response = client.post(
        "/api/v1/attention", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json() == {
        "detail": [
            {"loc": ["body", "layers", 0], "msg": "Input should be a valid integer",
             "type": "int_type"}
        ]
    }  # fmt: skip


def test_bodies_over_the_limit_are_413_with_or_without_a_length(client):
    big = b'{"text": "' + b"a" * 300_000 + b'"}'
    assert client.post("/api/v1/analyze", content=big).status_code == 413

    def chunks():
        for _ in range(300):
            yield b"a" * 1000

    response = client.post("/api/v1/analyze", content=chunks())
    assert response.status_code == 413 and "request body over" in response.json()["detail"]


def test_responses_over_the_size_limit_say_how_to_narrow():
    with TestClient(create_app(Settings(torch_threads=1, max_response_bytes=20_000))) as c:
        response = c.post("/api/v1/attention", json={"text": TEXT, "kinds": ["weights", "q"]})
        assert response.status_code == 422 and "ask for fewer" in response.json()["detail"]
        narrow = {"text": TEXT, "layers": [0], "heads": [0], "encoding": "u1"}
        assert c.post("/api/v1/attention", json=narrow).status_code == 200
        # every layer in u1 (12 kB) fits: the blocks are counted once, as they are sent
        once = c.post("/api/v1/attention", json={"text": TEXT, "encoding": "u1"})
        assert once.status_code == 200 and len(once.content) < 20_000
        wide = c.post("/api/v1/attention", json={"text": TEXT, "encoding": "f2"})
        assert wide.status_code == 422
        assert "over the limit of 20.0 kB" in wide.json()["detail"]
        assert "legacy_items" not in wide.json()["detail"]


def test_a_full_queue_answers_503_with_retry_after():
    settings = Settings(torch_threads=1, max_concurrent_runs=1, max_queued_runs=0)
    with TestClient(create_app(settings)) as c:
        limiter = c.app.state.inference.limiter
        with limiter.slot():  # another run holds the only slot
            response = c.post("/api/v1/analyze", json={"text": "猫追狗"})
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        assert c.post("/api/v1/analyze", json={"text": "猫追狗"}).status_code == 200


def test_requests_for_a_text_being_run_wait_for_that_run(monkeypatch):
    # the page asks for a text's summary and its first head at once: one model run
    settings = Settings(torch_threads=1, max_concurrent_runs=4, max_queued_runs=4)
    with TestClient(create_app(settings)) as c:
        inference = c.app.state.inference
        runner = inference.entry("pronounce").runner
        runs: list[str] = []
        real_run = runner.run

        def counted(text: str, **kwargs):
            runs.append(text)
            return real_run(text, **kwargs)

        monkeypatch.setattr(runner, "run", counted)
        answers: dict[str, httpx2.Response] = {}
        routes = ["analyze", "attention", "analyze", "export"]

        def call(i: int) -> None:
            body = (
                {"text": "银行行长", "layers": [0]}
                if routes[i] == "attention"
                else {"text": "银行行长"}
            )
            answers[i] = c.post(f"/api/v1/{routes[i]}", json=body)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(routes))]
        with contextlib.ExitStack() as others:  # other runs hold every slot meanwhile
            for _ in range(4):
                others.enter_context(inference.limiter.slot())
            for t in threads:
                t.start()
            time.sleep(1.0)  # all four have arrived, each on a thread: one waits for a
            # slot, the other three for its run
        for t in threads:
            t.join()
    assert runs == ["银行行长"]
    assert [answers[i].status_code for i in range(len(routes))] == [200] * len(routes)
    assert answers[0].json() == answers[2].json()
    assert answers[1].json()["source_tokens"] == list("银行行长")


def test_tensor_work_runs_on_the_tensor_threads_one_per_run(monkeypatch):
    # one OpenMP team per thread that runs torch: the request pool and the event loop
    # never do (app.runs.tensor_threads), and the threads are as many as the runs
    assert Settings(torch_threads=0).concurrent_runs() == 1
    assert Settings(torch_threads=1).concurrent_runs() == usable_cpus()
    assert Settings(max_concurrent_runs=3).concurrent_runs() == 3
    with TestClient(create_app(Settings(torch_threads=1, max_concurrent_runs=2))) as c:
        runner = c.app.state.inference.entry("pronounce").runner
        seen: list[str] = []
        real_run = runner.run

        def recorded(text: str, **kwargs):
            seen.append(threading.current_thread().name)
            return real_run(text, **kwargs)

        monkeypatch.setattr(runner, "run", recorded)
        for text in ("猫", "狗", "鱼"):
            assert c.post("/api/v1/analyze", json={"text": text}).status_code == 200
        lab = {"text": "鸟", "layer": 0, "head": 0}
        assert c.post("/api/v1/lab/scaling", json=lab).status_code == 200
        assert c.app.state.inference.threads._max_workers == 2
    assert len(seen) == 4 and all(name.startswith("attnviz-torch") for name in seen)


def test_sixteen_parallel_requests_each_get_their_own_answer(client):
    texts = [f"{w}追{v}" for w in "猫狗鸟鱼" for v in "马牛羊猪"]
    request = {"layers": [2], "encoding": "f4"}
    expected = {t: attention(client, text=t, **request) for t in texts}
    results: dict[str, dict] = {}
    # one client, sixteen at once: no per-client limit (ATTNVIZ_CLIENT_REQUESTS) here
    settings = Settings(torch_threads=1, cache_bytes=0, max_concurrent_runs=4, client_requests=0)
    with TestClient(create_app(settings)) as fresh:  # no cache: every request runs the model

        def call(text: str) -> None:
            results[text] = fresh.post("/api/v1/attention", json={"text": text, **request}).json()

        threads = [threading.Thread(target=call, args=(t,)) for t in texts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for text in texts:
        assert results[text]["source_tokens"] == list(text)
        assert results[text]["target_tokens"] == expected[text]["target_tokens"]
        for a, b in zip(results[text]["blocks"], expected[text]["blocks"], strict=True):
            assert np.allclose(decode(a["data"]), decode(b["data"]), atol=1e-6)


def test_unpaired_surrogates_are_refused_not_crashed(client):
    raw = b'{"text": "ok \\udfff"}'  # valid JSON, not valid Unicode
    response = client.post(
        "/api/v1/analyze", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422 and "surrogate" in str(response.json()["detail"])


def test_an_output_stopped_at_its_limit_is_said_of_its_piece_not_the_input(client):
    # the untrained twin babbles until each piece's limit; its whole input was read
    body = client.post(
        "/api/v1/analyze", json={"text": "a" * 100, "model": "pronounce-untrained"}
    ).json()
    assert body["truncated"] is False and len(body["source_tokens"]) == 100
    assert body["pieces"] == [
        {"source": [0, 40], "target": [0, 131], "ended": False},
        {"source": [40, 80], "target": [131, 262], "ended": False},
        {"source": [80, 100], "target": [262, 333], "ended": False},
    ]
    assert len(body["target_tokens"]) == len(body["predicted_tokens"]) == 333


def test_a_long_sentences_pieces_and_rows_agree_with_its_output(client):
    text = "The quick brown fox jumps over the lazy dog because it was tired."
    body = client.post("/api/v1/analyze", json={"text": text}).json()
    assert [p["source"] for p in body["pieces"]] == [[0, 40], [40, 65]]
    assert all(p["ended"] for p in body["pieces"]) and not body["truncated"]
    steps = []  # per piece: its output, then its end
    for piece in body["pieces"]:
        start, end = piece["target"]
        assert body["target_tokens"][start] == "<bos>"
        steps += [*body["target_tokens"][start + 1 : end], "<eos>"]
    assert body["predicted_tokens"] == steps
    assert [t for t in steps if t != "<eos>"] == body["output"]


def test_repeated_types_are_counted_once(client):
    body = attention(client, types=["encoder.self"] * 1000, layers=[0], encoding="u1")
    assert len(body["blocks"]) == 1 and body["blocks"][0]["shape"][0] == 8
    refused = client.post(
        "/api/v1/attention", json={"text": "hi", "types": ["encoder.self"] * 1025}
    )
    assert refused.status_code == 422 and "at most 1024 items" in refused.text


def test_minilm_reads_english_wordpieces_and_gives_its_embedding(client):
    body = client.post("/api/v1/analyze", json={"text": "The cat sat.", "model": "minilm"}).json()
    assert body["source_tokens"] == ["[CLS]", "the", "cat", "sat", ".", "[SEP]"]
    assert body["target_tokens"] == [] and body["output"] == []
    assert len(body["embedding"]) == 384
    assert abs(np.linalg.norm(body["embedding"]) - 1) < 1e-5
    assert {s["type"] for s in body["summaries"]} == {"encoder.self"}
    assert len(body["summaries"]) == 6 * 12
    info = {m["id"]: m for m in client.get("/api/v1/models").json()}["minilm"]
    assert (info["encoder_layers"], info["max_tokens"]) == (6, 512)
    assert [(a["layers"], a["query_heads"], a["head_dim"]) for a in info["attention"]] == [
        (6, 12, 32)
    ]
    assert info["attention_types"] == ["encoder.self"] and info["positional"] == "learned"
    assert info["token_unit"] == "wordpiece" and info["output"] == "embedding"
    assert info["capabilities"]["word_view"] and info["capabilities"]["similarity"]
    assert "kv-cache" not in info["capabilities"]["experiments"]


def test_minilm_attention_and_its_learned_positions(client):
    body = attention(client, model="minilm", text="The cat sat.", layers=[5], encoding="f4")
    assert len(body["blocks"]) == 1 and body["blocks"][0]["rows"][0] == "[CLS]"
    weights = decode(body["blocks"][0]["data"])
    assert weights.shape == (12, 6, 6) and np.allclose(weights.sum(-1), 1, atol=1e-5)
    wrong = {"text": "hi", "model": "minilm", "types": ["decoder.cross"]}
    response = client.post("/api/v1/attention", json=wrong)
    assert response.status_code == 422 and "has no attention of type" in response.json()["detail"]
    table = client.get("/api/v1/models/minilm/positional-encoding?positions=8&dims=4").json()
    runner = client.app.state.inference.zoo.models["minilm"].runner
    weights = runner.model.encoder.pos.embedding.weight[:8, :4].detach().numpy()
    assert table["kind"] == "learned" and np.allclose(table["table"], weights, atol=1e-6)


def test_minilm_word_view_merges_pieces_and_can_hide_specials(client):
    request = dict(model="minilm", text="Tokenization helps.", layers=[2], heads=[4], encoding="f4")
    tokens = attention(client, **request)["blocks"][0]
    assert tokens["rows"] == ["[CLS]", "token", "##ization", "helps", ".", "[SEP]"]
    [m] = decode(tokens["data"])
    words = attention(client, granularity="word", **request)["blocks"][0]
    assert words["rows"] == words["columns"] == ["[CLS]", "tokenization", "helps", ".", "[SEP]"]
    [w] = decode(words["data"])
    assert np.isclose(w[1, 2], m[1:3, 3].mean(), atol=1e-6)  # mean over query pieces
    assert np.isclose(w[2, 1], m[3, 1:3].sum(), atol=1e-6)  # sum over key pieces
    assert np.allclose(w.sum(1), 1, atol=1e-5)
    hidden = attention(client, granularity="word", hide_special=True, **request)["blocks"][0]
    assert hidden["rows"] == ["tokenization", "helps", "."]
    [h] = decode(hidden["data"])
    assert np.allclose(h.sum(1), 1, atol=1e-5)
    bad = client.post("/api/v1/attention", json={"text": "猫", "granularity": "word"})
    assert bad.status_code == 422 and "no word pieces" in bad.json()["detail"]
    bad = client.post(
        "/api/v1/attention", json={**request, "kinds": ["scores"], "granularity": "word"}
    )
    assert bad.status_code == 422 and "weights only" in bad.json()["detail"]


def test_minilm_compares_two_sentences(client):
    def similarity(a: str, b: str) -> float:
        body = {"text": a, "compare": b, "model": "minilm"}
        response = client.post("/api/v1/analyze", json=body)
        assert response.status_code == 200, response.text
        return response.json()["similarity"]

    close = similarity("A man is playing a guitar.", "Someone plays the guitar.")
    far = similarity("A man is playing a guitar.", "The stock market fell sharply today.")
    assert 0.5 < close <= 1 and far < close - 0.3
    assert abs(similarity("Same words.", "Same words.") - 1) < 1e-5
    response = client.post("/api/v1/analyze", json={"text": "猫", "compare": "狗"})
    assert response.status_code == 422 and "no sentence embedding" in response.json()["detail"]


@pytest.mark.parametrize("text", ["他在银行工作", "银行的人在街上行走", "我们长大了就去重庆"])
def test_cross_attention_rows_are_the_steps_that_predict_each_syllable(client, text):
    # pronounce's alignment head (its model card's): the row of the step that predicts a
    # character's syllable looks hardest at that character, 行 read hang2 and xing2 alike.
    # Labelled by the token fed in (one step earlier), every row would be one off.
    body = attention(client, text=text, types=["decoder.cross"], layers=[2], heads=[1])
    block = body["blocks"][0]
    weights = decode(block["data"])[0]
    fed, predicted = block["rows"], block["predicted"]
    assert fed == body["target_tokens"] and predicted == body["predicted_tokens"]
    assert fed[0] == "<bos>" and predicted[-1] == "<eos>"
    assert predicted[:-1] == fed[1:]  # the step fed token i predicts token i + 1
    syllables = predicted[:-1]
    assert len(syllables) == len(text) == len(block["columns"])
    for i, syllable in enumerate(syllables):
        assert int(weights[i].argmax()) == i, (syllable, text[i])


def test_each_model_says_which_head_it_opens_on_and_its_examples(client):
    infos = {m["id"]: m for m in client.get("/api/v1/models").json()}
    assert infos["pronounce"]["start_head"] == {
        "type": "decoder.cross", "layer": 2, "head": 1, "role": "alignment",
        "source": "model card",
    }  # fmt: skip
    minilm = infos["minilm"]["start_head"]
    assert minilm["source"] == "metrics" and minilm["role"] == "previous-token"
    assert infos["minilm-untrained"]["start_head"] == {**minilm, "source": "trained model"}
    # the head the metrics chose is a previous-token head on the model's first example
    example = infos["minilm"]["examples"][0]
    assert all(e.isascii() for e in infos["minilm"]["examples"])
    summary = client.post("/api/v1/analyze", json={"model": "minilm", "text": example}).json()
    ours = [
        s for s in summary["summaries"]
        if (s["type"], s["layer"], s["head"]) == (minilm["type"], minilm["layer"], minilm["head"])
    ]  # fmt: skip
    assert ours[0]["role"] == "previous-token"
    assert any(not e.isascii() for e in infos["pronounce"]["examples"])


def test_unknown_tokens_are_counted(client):
    body = client.post("/api/v1/analyze", json={"model": "minilm", "text": "猫追狗 is a cat"})
    assert body.json()["unknown_tokens"] == 3
    assert client.get("/api/v1/models").json()[2]["unknown_token"] == "[UNK]"
    assert client.post("/api/v1/analyze", json={"text": "猫追狗"}).json()["unknown_tokens"] == 0


def test_lab_kv_cache_shows_the_output_and_masks_the_head_that_looks_ahead(client):
    kv = client.post("/api/v1/lab/kv-cache", json={"text": "银行行长"}).json()
    assert kv["piece"] == "银行行长" and kv["output"] == ["yin2", "hang2", "hang2", "zhang3"]
    masks = client.post("/api/v1/lab/masks", json={"text": "银行行长", "layer": 0, "head": 0})
    causal = masks.json()["causal"]
    best = causal["most_future"]
    assert best["weight"] >= causal["future_weight_without"]
    again = client.post(
        "/api/v1/lab/masks", json={"text": "银行行长", "layer": best["layer"], "head": best["head"]}
    ).json()["causal"]
    assert again["future_weight_without"] == best["weight"]


def test_the_attention_answer_is_pydantics_json_byte_for_byte():
    """attention_json splices the base64 in as bytes: the same bytes as model_dump_json,
    whatever the tokens hold (a token spelling a marker, quotes, NUL)."""
    tricky = ['"bdata":"0"', 'a"b', "\x00", "猫", "\\"]
    blocks = [
        Block(type="encoder.self", layer=i, kind="weights", heads=[0], rows=tricky,
              columns=tricky, shape=[1, 5, 5], data=encode(torch.rand(1, 5, 5), encoding))
        for i, encoding in enumerate(["u1", "f4", "json"])
    ]  # fmt: skip
    body = AttentionResponse(model="m", source_tokens=tricky, target_tokens=[], truncated=False,
                             encoding="u1", blocks=blocks)  # fmt: skip
    assert attention_json(body) == body.model_dump_json().encode()
    assert body.blocks[0].data.bdata == blocks[0].data.bdata  # given back
