"""Corpus runs: every head's statistics over sentences, checked against a direct
computation from the model's own captured weights; the job's progress, cancel and
limits; bad files refused naming the line; the head search; the downloads; and a query-key
space over a corpus's kept vectors."""

from __future__ import annotations

import csv
import io
import math
import time

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from attnviz.app.corpus.jobs import CorpusRuns
from attnviz.app.main import create_app
from attnviz.app.settings import Settings
from attnviz.model.methods.corpus_stats import STATISTICS, sentence_statistics
from attnviz.model.pretrained import BertRunner

SENTENCES = [
    "The cat sat on the mat.",
    "A man is playing a guitar on the stage.",
    "The bank raised its interest rates again this year.",
    "She sat on the bank of the river and watched the boats.",
    "the the the cat",
]


def wait(client, run_id: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        body = client.get(f"/api/v1/corpus-runs/{run_id}").json()
        if body["status"] not in ("queued", "running"):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.1)


def submit(client, status: int = 202, **body) -> dict:
    answer = client.post("/api/v1/corpus-runs", json=body)
    assert answer.status_code == status, answer.text
    return answer.json()


def direct(weights: torch.Tensor, ids: list[int], special: set[int]) -> dict[str, list[float]]:
    """Each statistic by loops over rows and keys, as its definition says."""
    heads, n, _ = weights.shape
    out = {name: [] for name in STATISTICS}
    for h in range(heads):
        w = weights[h].double().tolist()
        rows = range(n)
        entropy = [-sum(x * math.log2(x) for x in w[q] if x > 0) for q in rows]
        out["entropy"].append(sum(entropy) / n)
        out["distance"].append(sum(sum(w[q][k] * abs(q - k) for k in rows) for q in rows) / n)
        out["previous"].append(sum(w[q][q - 1] for q in range(1, n)) / (n - 1))
        out["first"].append(sum(w[q][0] for q in rows) / n)
        out["special"].append(sum(sum(w[q][k] for k in special) for q in rows) / n)
        same = [
            sum(w[q][k] for k in rows if k != q and ids[k] == ids[q])
            for q in rows
            if any(ids[k] == ids[q] for k in rows if k != q)
        ]
        out["same"].append(sum(same) / len(same) if same else math.nan)
        out["induction"].append(math.nan)  # an encoder: not causal
        out["alignment"].append(math.nan)
    return out


def test_every_heads_statistics_are_those_computed_directly(client):
    run = submit(client, model="minilm", sentences=SENTENCES)
    assert (run["total"], run["source"]) == (5, "yours") and run["status"] in ("queued", "running")
    done = wait(client, run["id"])
    assert done["status"] == "done" and done["done"] == 5 and done["rate"] > 0
    heads = client.get(f"/api/v1/corpus-runs/{run['id']}/heads").json()["heads"]
    assert len(heads) == 6 * 12
    # independently: MiniLM's own weights, sentence by sentence, by loops
    minilm = BertRunner.load()
    expected = {}
    for sentence in SENTENCES:
        ids, tokens = minilm.tokenize(sentence)
        special = {i for i, t in enumerate(tokens) if t in ("[CLS]", "[SEP]")}
        _, capture = minilm.model.run_with_capture(torch.tensor([ids]))
        for layer in range(6):
            weights = capture[f"encoder.{layer}.self_attn.hook_weights"][0]
            for name, values in direct(weights, ids, special).items():
                for h, v in enumerate(values):
                    expected.setdefault((layer, h, name), []).append(v)
    for head in heads:
        for name in STATISTICS:
            values = [v for v in expected[(head["layer"], head["head"], name)] if not math.isnan(v)]
            got = head["means"][name]
            if not values:
                assert got is None, (head, name)
            else:
                assert got == pytest.approx(sum(values) / len(values), abs=1e-5), (head, name)


def test_the_head_search_ranks_heads_with_their_sentences(client):
    run = submit(client, model="minilm", sentences=SENTENCES)
    wait(client, run["id"])
    found = client.get(
        f"/api/v1/corpus-runs/{run['id']}/search", params={"pattern": "previous", "top": 5}
    ).json()
    scores = [h["score"] for h in found["heads"]]
    assert len(scores) == 5 and scores == sorted(scores, reverse=True) and scores[0] > 0.5
    table = client.get(f"/api/v1/corpus-runs/{run['id']}/statistics.csv")
    assert table.headers["content-disposition"].endswith('.csv"')
    rows = list(csv.DictReader(io.StringIO(table.text)))
    assert len(rows) == 5 * 72
    top = found["heads"][0]
    per = {
        int(r["sentence"]): float(r["previous"])
        for r in rows
        if (int(r["layer"]), int(r["head"])) == (top["layer"], top["head"])
    }
    assert top["score"] == pytest.approx(sum(per.values()) / 5, abs=1e-5)
    best = max(per, key=per.get)
    assert top["examples"][0]["sentence"] == best and top["examples"][0]["text"] == SENTENCES[best]
    assert top["examples"][0]["score"] == pytest.approx(per[best], abs=1e-5)


def test_a_shipped_corpus_is_listed_with_its_licence_and_a_run_can_be_cancelled(client):
    corpora = {c["id"]: c for c in client.get("/api/v1/corpora").json()}
    assert corpora["hsk-zh"]["sentences"] == corpora["hsk-en"]["sentences"] == 4354
    assert corpora["hsk-zh"]["licence"] == "CC-BY-SA-4.0"
    run = submit(client, model="minilm", corpus="hsk-en")
    assert run["total"] == 4354
    deadline = time.monotonic() + 60
    while client.get(f"/api/v1/corpus-runs/{run['id']}").json()["done"] < 3:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert client.post(f"/api/v1/corpus-runs/{run['id']}/cancel").status_code == 403
    owner = {"X-Owner-Token": run["owner_token"]}  # its creation's answer: the owner's
    cancelled = client.post(f"/api/v1/corpus-runs/{run['id']}/cancel", headers=owner)
    assert cancelled.status_code == 200
    stopped = wait(client, run["id"])
    assert stopped["status"] == "cancelled" and 3 <= stopped["done"] < 4354
    heads = client.get(f"/api/v1/corpus-runs/{run['id']}/heads").json()
    assert heads["run"]["done"] == stopped["done"]  # what it read is kept
    # read by token length, not in order: the results are those of the sentences read
    table = client.get(f"/api/v1/corpus-runs/{run['id']}/statistics.csv").text
    rows = list(csv.DictReader(io.StringIO(table)))
    read = {int(r["sentence"]) for r in rows}
    assert len(read) == stopped["done"] and len(rows) == 72 * len(read)
    assert all(r["entropy"] for r in rows)  # each one read, none a NaN placeholder
    found = client.get(
        f"/api/v1/corpus-runs/{run['id']}/search", params={"pattern": "first"}
    ).json()
    assert {e["sentence"] for h in found["heads"] for e in h["examples"]} <= read


def test_bad_corpora_are_refused_and_change_nothing(client):
    before = client.get("/api/v1/corpora").json()
    upload = client.post(
        "/api/v1/corpus-runs/upload",
        params={"model": "minilm"},
        content=b"fine\nbad \xff byte\n",
        headers={"content-type": "text/plain"},
    )
    assert upload.status_code == 422
    assert upload.json()["detail"].startswith("line 2 is not UTF-8 (byte 0xff at byte 5")
    control = client.post("/api/v1/corpus-runs/upload", content=b"ok\nnul\x00\n")
    assert control.status_code == 422 and "line 2 holds a control character" in control.text
    empty = client.post("/api/v1/corpus-runs/upload", content=b"\n \n")
    assert empty.status_code == 422 and "no sentence" in empty.text
    both = submit(client, 422, model="minilm", corpus="hsk-en", sentences=["a"])
    assert "one of the two" in both["detail"]
    big = client.post("/api/v1/corpus-runs/upload", content=b"a\n" * (3 * 2**21))
    assert big.status_code == 413
    assert client.get("/api/v1/corpus-runs/nope").status_code == 404
    assert client.get("/api/v1/corpora").json() == before
    ok = client.post(
        "/api/v1/corpus-runs/upload",
        params={"model": "minilm", "limit": 2},
        content="\ufeffone cat\r\ntwo dogs\r\nthree\r\n".encode(),
    )
    assert ok.status_code == 202 and ok.json()["total"] == 2


def test_a_waiting_run_holds_no_room_and_one_that_finds_none_when_it_starts_says_so():
    """A run's results take their room when it starts: runs waiting reserve none (a
    client's two queued runs could hold the budget from everyone while they wait)."""
    settings = Settings(
        torch_threads=1, zoo=["minilm"], client_cost_per_minute=0, corpus_results_bytes=2**20
    )
    with TestClient(create_app(settings)) as a:
        b, c = (TestClient(a.app, client=(f"192.0.2.{i}", 5000)) for i in (2, 3))
        per_sentence = CorpusRuns.estimate(1, 72)  # MiniLM: 6 layers of 12 heads
        assert 100 * per_sentence < 2**20 - 300 * per_sentence < 200 * per_sentence
        # 100 sentences of ~110 tokens (a second or two: still running when the third
        # is sent; their text's 52 kB counts too), then 300 short ones
        long = [(sentence + " ") * 8 for sentence in SENTENCES] * 20
        first = submit(a, model="minilm", sentences=long)
        second = submit(b, model="minilm", sentences=SENTENCES * 60)
        # with the first two's room taken (theirs reserved at submission, this was a 503)
        third = submit(c, model="minilm", sentences=SENTENCES * 20)
        assert [wait(a, run["id"])["status"] for run in (first, second)] == ["done"] * 2
        failed = wait(c, third["id"])
        assert failed["status"] == "failed" and failed["done"] == 0
        assert failed["error"] == (
            "when it started, the results kept for other runs left no room for its own "
            "(ATTNVIZ_CORPUS_RESULTS_BYTES, 1,048,576 bytes): send it again later, or "
            "fewer sentences"
        )
        heads = c.get(f"/api/v1/corpus-runs/{third['id']}/heads")
        assert heads.status_code == 409
        assert heads.json()["detail"].endswith("ended (failed) before it read a sentence")


def test_a_corpus_runs_kept_vectors_make_its_query_key_space(client):
    head = {"type": "encoder.self", "layer": 3, "head": 2}
    run = submit(client, model="minilm", sentences=SENTENCES, vectors=[head])
    wait(client, run["id"])
    npz = client.get(f"/api/v1/corpus-runs/{run['id']}/vectors.npz")
    arrays = np.load(io.BytesIO(npz.content))
    minilm = BertRunner.load()
    n = sum(len(minilm.tokenize(s)[0]) for s in SENTENCES)
    assert arrays["encoder.self.L3.H2.queries"].shape == (n, 32)
    body = client.post(
        "/api/v1/qk-space",
        json={"model": "minilm", "text": "a cat", **head, "corpus_run": run["id"]},
    ).json()
    assert body["sentences"][1:] == SENTENCES
    assert len(body["queries"]["tokens"]) == len(minilm.tokenize("a cat")[0]) + n
    # the weights recomputed from the kept vectors are the model's own: the same top keys
    ids = torch.tensor([minilm.tokenize(SENTENCES[0])[0]])
    _, capture = minilm.model.run_with_capture(ids)
    weights = capture["encoder.3.self_attn.hook_weights"][0, 2]
    first = len(minilm.tokenize("a cat")[0])
    top = (weights.topk(5, dim=-1).indices + first).tolist()
    assert body["top_keys"][first : first + ids.size(1)] == top
    other = client.post(
        "/api/v1/qk-space",
        json={
            "model": "minilm",
            "text": "a cat",
            "type": "encoder.self",
            "layer": 0,
            "head": 0,
            "corpus_run": run["id"],
        },
    )
    assert other.status_code == 422 and "kept no vectors" in other.text


def test_the_induction_statistic_on_a_causal_head():
    """A row whose token came before puts weight on what followed it: by loops."""
    torch.manual_seed(0)
    ids = [5, 6, 7, 5, 6, 8]
    weights = torch.rand(2, 6, 6).tril()
    weights = weights / weights.sum(-1, keepdim=True)
    got = sentence_statistics(weights, ids, ids, True, True, [])[STATISTICS.index("induction")]
    for h in range(2):
        rows = []
        for q in range(6):
            after = [p + 1 for p in range(q) if ids[p] == ids[q] and p + 1 <= q]
            if after:
                rows.append(sum(weights[h, q, k].item() for k in after))
        assert got[h].item() == pytest.approx(sum(rows) / len(rows))


def test_an_encoder_decoders_cross_attention_gets_its_alignment(client):
    """pronounce reads each sentence alone (its decoder reads its own output): the
    alignment of each cross-attention head is head_metrics' on the same run."""
    from attnviz.model.methods.analysis import head_metrics

    texts = ["银行 行走", "read the record", "我们长大了"]
    run = submit(client, model="pronounce", sentences=texts)
    assert wait(client, run["id"])["status"] == "done"
    heads = client.get(f"/api/v1/corpus-runs/{run['id']}/heads").json()["heads"]
    cross = [h for h in heads if h["type"] == "decoder.cross"]
    runner = client.app.state.inference.entry("pronounce").runner
    expected: dict[tuple[int, int], list[float]] = {}
    for text in texts:
        capture = runner.run(text).capture
        for layer in range(runner.model.config.decoder_layers):
            weights = capture[f"decoder.{layer}.cross_attn.hook_weights"][0]
            for h, v in enumerate(head_metrics(weights, False, [])["alignment"]):
                expected.setdefault((layer, h), []).append(v)
    assert cross and all(h["means"]["previous"] is None for h in cross)
    for h in cross:
        want = expected[(h["layer"], h["head"])]
        assert h["means"]["alignment"] == pytest.approx(sum(want) / len(want), abs=1e-6)


def test_a_causal_heads_same_token_weight_counts_earlier_occurrences_only():
    ids = [5, 6, 5, 7]
    weights = torch.tensor(
        [[1, 0, 0, 0], [0.5, 0.5, 0, 0], [0.6, 0.1, 0.3, 0], [0.25, 0.25, 0.25, 0.25]],
        dtype=torch.float32,
    )[None]
    same = sentence_statistics(weights, ids, ids, True, True, [])[STATISTICS.index("same")]
    # only row 2 has an earlier 5 (row 0 cannot see the later one): its weight on key 0
    assert same[0].item() == pytest.approx(0.6)
    encoder = sentence_statistics(weights, ids, ids, True, False, [])[STATISTICS.index("same")]
    assert encoder[0].item() == pytest.approx((0.0 + 0.6) / 2)  # rows 0 and 2, both ways
