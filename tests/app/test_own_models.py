"""Models of the user's own (ATTNVIZ_MODELS, `attnviz serve --model ID=PATH`): a tiny
Llama folder made with transformers is served beside the shipped models by a real server,
with what /api/v1/models says of it, its attention and generation equal to transformers';
an architecture model/ does not read (Qwen3) through transformers' own code, equal to it;
a folder that cannot be read is listed as refused with its reason (no server paths) and
the rest are served."""

from __future__ import annotations

import itertools
import json
import re

import httpx2
import numpy as np
import pytest
import torch

from attnviz.model.pretrained.hf import load_folder
from harness.checkpoints import saved, saved_masked_lm, tiny
from harness.serving import start_server
from tests.app.test_api import decode


def tiny_of(model_type: str):
    """A tiny seeded random model of an architecture, by transformers' own classes."""
    from harness.architectures import build_model

    return build_model(model_type, "decoder-only")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("own")
    theirs = tiny("llama")
    good = saved(root / "good", theirs)
    bad = saved(root / "bad", tiny("llama"))
    (bad / "tokenizer.json").unlink()
    saved_masked_lm(root / "mlm")
    qwen3 = saved(root / "qwen3", tiny_of("qwen3"))
    bloom = saved(root / "bloom", tiny_of("bloom"))
    long = saved(root / "long", tiny("llama", max_position_embeddings=2048))
    proc, base = start_server(
        {"ATTNVIZ_ZOO": '["pronounce"]', "ATTNVIZ_LOG_FORMAT": "text"},
        capture_output=True,
        args=["--model", f"mine={good}", "--model", f"broken={bad}", "--model", f"mlm={root}/mlm",
              "--model", f"q3={qwen3}", "--model", f"bloom={bloom}", "--model", f"long={long}"],
    )  # fmt: skip
    try:
        yield theirs, good, base
    finally:
        proc.terminate()
        log = proc.communicate(timeout=30)[0]
    assert f"model broken from {bad} is not served: {bad} has no tokenizer.json" in log
    assert "model bloom from" in log


def test_a_folder_of_yours_is_served_beside_the_shipped_models(served):
    theirs, good, base = served
    infos = {m["id"]: m for m in httpx2.get(f"{base}/api/v1/models").json()}
    assert set(infos) == {"pronounce", "pronounce-untrained", "mine", "mlm", "q3", "broken",
                          "bloom", "long"}  # fmt: skip
    mine = infos["mine"]
    # named by its folder's name: no path of the server's disk is answered
    assert (mine["source"], mine["family"], mine["stored_as"]) == (good.name, "llama", "float32")
    assert str(good.parent) not in httpx2.get(f"{base}/api/v1/models").text
    assert mine["parameters"] == sum(p.numel() for p in theirs.parameters())
    assert mine["architecture"] == "decoder-only" and mine["capabilities"]["generation"]
    assert mine["capabilities"]["value_norms"]  # on our model code, said before it is read
    assert infos["pronounce"]["source"] == "shipped" and infos["pronounce"]["family"] is None


def test_a_model_that_cannot_be_served_is_listed_with_its_reason(served):
    _, good, base = served
    infos = {m["id"]: m for m in httpx2.get(f"{base}/api/v1/models").json()}
    assert infos["broken"] == {
        "id": "broken", "status": "refused",
        "reason": "<its folder> has no tokenizer.json: its text cannot be read",
    }  # fmt: skip
    assert infos["bloom"]["status"] == "refused"
    assert "not through transformers' attention interface" in infos["bloom"]["reason"]
    assert str(good.parent) not in str([infos["broken"], infos["bloom"]])
    assert infos["mine"]["status"] == "served"
    page = httpx2.get(f"{base}/").text  # the page lists it, with the reason
    boot = json.loads(re.search(r'<script id="boot"[^>]*>(.*?)</script>', page, re.S)[1])
    assert {m["id"]: m["reason"] for m in boot["refused"]} == {
        "broken": infos["broken"]["reason"], "bloom": infos["bloom"]["reason"],
    }  # fmt: skip


def test_an_architecture_model_does_not_read_runs_on_transformers_own_code(served):
    _, good, base = served
    info = {m["id"]: m for m in httpx2.get(f"{base}/api/v1/models").json()}["q3"]
    assert info["family"] == "qwen3" and "transformers' own modeling code" in info["description"]
    theirs = tiny_of("qwen3")
    text = "The quick brown fox"
    prompt = load_folder(good).tokenize(text)[0]  # the same tokenizer.json, read here
    body = {"model": "q3", "text": text, "encoding": "f4"}
    blocks = httpx2.post(f"{base}/api/v1/attention", json=body, timeout=60).json()["blocks"]
    made = httpx2.post(f"{base}/api/v1/generate", json={"model": "q3", "text": text,
                       "max_new_tokens": 6}, timeout=60).json()  # fmt: skip
    with torch.no_grad():
        expected = theirs(torch.tensor([prompt]), output_attentions=True)
        greedy = theirs.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)  # fmt: skip
    assert len(blocks) == 2
    for block in blocks:
        got = decode(block["data"])
        assert np.abs(got - expected.attentions[block["layer"]][0].numpy()).max() <= 1e-5
    assert made["continuation"] == greedy[0, len(prompt) :].tolist()


def test_its_attention_and_generation_are_transformers_own(served):
    theirs, good, base = served
    text = "The quick brown fox"
    prompt = load_folder(good).tokenize(text)[0]  # the same tokenizer.json, read here

    def post(path: str, **body) -> dict:
        answer = httpx2.post(f"{base}/api/v1/{path}", json={"model": "mine", "text": text,
                             **body}, timeout=60)  # fmt: skip
        assert answer.status_code == 200, answer.text
        return answer.json()

    blocks = post("attention", encoding="f4")["blocks"]
    made = post("generate", max_new_tokens=6)
    with torch.no_grad():
        expected = theirs(torch.tensor([prompt]), output_attentions=True)
        greedy = theirs.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)  # fmt: skip
    assert len(blocks) == 2 and blocks[0]["shape"] == [4, len(prompt), len(prompt)]
    for block in blocks:
        got = decode(block["data"])
        assert np.abs(got - expected.attentions[block["layer"]][0].numpy()).max() <= 1e-5
    assert made["continuation"] == greedy[0, len(prompt) :].tolist()


def test_a_language_model_of_yours_reads_prompts_up_to_its_context(served):
    _, good, base = served
    infos = {m["id"]: m for m in httpx2.get(f"{base}/api/v1/models").json()}
    assert (infos["mine"]["max_tokens"], infos["long"]["max_tokens"]) == (256, 2048)
    ours = load_folder(good)  # (the same tokenizer.json)
    text = "猫追狗 and the lazy dog " * 60
    ids = ours.tokenizer.encode(text).ids  # (tokenize cuts them to its 256)
    assert 600 < len(ids) < 2048
    refused = httpx2.post(f"{base}/api/v1/analyze", json={"model": "mine", "text": text})
    assert (
        refused.status_code == 422
        and "reads at most 256 of this model (its context)" in (refused.json()["detail"])
    )
    body = {"model": "long", "text": text}
    analysis = httpx2.post(f"{base}/api/v1/analyze", json=body, timeout=60).json()
    assert analysis["long"] and len(analysis["source_tokens"]) == len(ids)
    asked = {**body, "layers": [1], "heads": [3], "pool": 64, "reduce": "mean", "encoding": "json"}
    block = httpx2.post(f"{base}/api/v1/attention", json=asked, timeout=60).json()["blocks"][0]
    import transformers

    folder = good.parent.parent / "long" / "model"  # (saved() writes into a "model" folder)
    reference = transformers.LlamaForCausalLM.from_pretrained(
        folder, attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        weights = reference(torch.tensor([ids]), output_attentions=True).attentions[1][0, 3]
    edges = block["row_edges"]
    for i, (a, b) in enumerate(itertools.pairwise(edges)):
        for j, (c, d) in enumerate(itertools.pairwise(edges)):
            assert abs(block["data"][0][i][j] - float(weights[a:b, c:d].mean())) <= 1e-5


def test_a_masked_lm_of_yours_predicts_each_mask(served):
    base = served[2]
    info = next(m for m in httpx2.get(f"{base}/api/v1/models").json() if m["id"] == "mlm")
    assert (info["family"], info["output"], info["architecture"]) == (
        "bert", "masked", "encoder-only")  # fmt: skip
    assert "[MASK]" in info["examples"][0] and not info["capabilities"]["similarity"]
    text = "The quick [MASK] fox jumps over the [MASK] dog."
    answer = httpx2.post(f"{base}/api/v1/analyze", json={"model": "mlm", "text": text})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    masks = [i for i, t in enumerate(body["source_tokens"]) if t == "[MASK]"]
    assert [m["position"] for m in body["masked"]] == masks
    for m in body["masked"]:
        probabilities = [a["probability"] for a in m["top"]]
        assert len(m["top"]) == 5 and probabilities == sorted(probabilities, reverse=True)
    assert body["output"] == [m["top"][0]["token"] for m in body["masked"]]
    assert body["output_text"].startswith("the quick ")  # (its tokenizer lowercases)
    # the lab's ablation compares what it predicts at each [MASK]
    head = {"type": "encoder.self", "layer": 0, "head": 0}
    body_ = {"model": "mlm", "text": text, "ablate": [head]}
    lab = httpx2.post(f"{base}/api/v1/lab/ablation", json=body_, timeout=60)
    assert lab.status_code == 200, lab.text
    assert lab.json()["output"] == body["output"]


def test_a_model_of_yours_is_read_on_first_use_and_freed_past_the_bound(tmp_path, caplog):
    """Checked at start-up without its weights (a wrong shape is found from the headers),
    read when first used, and the least recently used freed past ATTNVIZ_OWN_MODELS_BYTES
    (here room for one)."""
    import gc
    import weakref

    from fastapi.testclient import TestClient

    from attnviz.app.main import create_app
    from attnviz.app.settings import Settings
    from tests.model.test_hf import retensor

    first, second = saved(tmp_path / "a", tiny("llama")), saved(tmp_path / "b", tiny("qwen2"))
    shaped = saved(tmp_path / "c", tiny("llama"))
    retensor(shaped, lambda t: t.update({"model.norm.weight": torch.zeros(3)}))
    room = 4 * sum(p.numel() for p in tiny("qwen2").parameters()) + 1  # one of them
    settings = Settings(zoo=["pronounce"], torch_threads=1, own_models_bytes=room,
                        models={"a": first, "b": second, "c": shaped})  # fmt: skip
    with caplog.at_level("ERROR", logger="attnviz"), TestClient(create_app(settings)) as client:
        models = client.app.state.inference.zoo.models
        assert "c" not in models and "model.norm.weight (3,) != " in caplog.text
        a, b = models["a"].runner, models["b"].runner
        listed = {m["id"]: m for m in client.get("/api/v1/models").json()}
        assert listed["a"]["start_head"]["source"] == "first head" and listed["b"]["parameters"]
        assert not a.is_loaded and not b.is_loaded  # listing reads no weights
        body = {"model": "a", "text": "The quick", "max_new_tokens": 2}
        assert client.post("/api/v1/generate", json=body).status_code == 200
        assert a.is_loaded and not b.is_loaded
        weights = weakref.ref(a.model)
        assert client.post("/api/v1/generate", json={**body, "model": "b"}).status_code == 200
        assert b.is_loaded and not a.is_loaded  # a freed for b
        gc.collect()
        assert weights() is None  # and its weights with it
        assert client.post("/api/v1/generate", json=body).status_code == 200  # read again
        assert a.is_loaded and not b.is_loaded


def test_what_is_found_only_when_read_is_a_503_naming_it(tmp_path, caplog):
    """A tied output that differs from the embedding is seen only when the weights are
    read: every request then gets a 503 with the reason, and it is not read again. A
    model larger than the loaded set may hold is refused at start-up; probing a runner for
    what it lacks reads nothing."""
    from fastapi.testclient import TestClient

    from attnviz.app.main import create_app
    from attnviz.app.settings import Settings
    from tests.model.test_hf import retensor, set_config

    tied = saved(tmp_path / "tied", tiny("llama"))
    set_config(tied, tie_word_embeddings=True)
    retensor(tied, lambda t: t.update({"lm_head.weight": t["model.embed_tokens.weight"] + 1}))
    big = saved(tmp_path / "big", tiny("llama"))
    room = 4 * sum(p.numel() for p in tiny("llama").parameters()) - 1
    settings = Settings(zoo=["pronounce"], torch_threads=1, own_models_bytes=room,
                        models={"tied": tied, "big": big})  # fmt: skip
    with caplog.at_level("ERROR", logger="attnviz"), TestClient(create_app(settings)) as client:
        assert "model big" in caplog.text and "(ATTNVIZ_OWN_MODELS_BYTES)" in caplog.text
        runner = client.app.state.inference.zoo.models["tied"].runner
        assert runner.card is None and not hasattr(runner, "lexicon") and not runner.is_loaded
        for _ in range(2):
            answer = client.post("/api/v1/analyze", json={"model": "tied", "text": "The quick"})
            assert answer.status_code == 503
            assert (
                "lm_head.weight differs from model.embed_tokens.weight" in answer.json()["detail"]
            )
        assert caplog.text.count("the model tied cannot be read") == 1  # read once


def test_the_docs_three_commands_serve_a_tiny_gpt2(tmp_path):
    """The docs' "Your own model" commands as written there: the first in a fresh
    folder, the second's arguments to a real server there (with only `pronounce` besides,
    to keep the test short), the third against it."""
    import re
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "docs" / "own-models.md").read_text()
    block = re.search(r"```sh\n(# 1\. a tiny random GPT-2.*?)```", readme, re.S).group(1)
    make = re.search(r'^\.venv/bin/python (-c ".*?")$', block, re.S | re.M).group(1)
    subprocess.run([sys.executable, *shlex.split(make)], cwd=tmp_path, check=True, timeout=300)
    serve = re.search(r"^\.venv/bin/attnviz serve (.*?)$", block, re.M).group(1)
    proc, base = start_server({"ATTNVIZ_ZOO": '["pronounce"]'}, args=shlex.split(serve),
                              cwd=tmp_path)  # fmt: skip
    try:
        curl = re.search(r"^(curl .*)$", block, re.M).group(1)
        port = base.rsplit(":", 1)[1]
        said = subprocess.run(curl.replace("localhost:8000", f"127.0.0.1:{port}"), shell=True,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert said.stdout.strip() == "['pronounce', 'pronounce-untrained', 'mine']"
        info = httpx2.get(f"{base}/api/v1/models").json()[-1]
        assert (info["family"], info["source"]) == ("gpt2", "tiny-gpt2")
        made = httpx2.post(f"{base}/api/v1/generate", json={"model": "mine", "text": "The quick",
                           "max_new_tokens": 3}, timeout=60)  # fmt: skip
        assert made.status_code == 200 and len(made.json()["continuation"]) == 3, made.text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
