"""Corpus statistics and the query-key space over a corpus, against the plain way.

    .venv/bin/python bench/bench_corpus.py [--sentences 1000] [--models minilm smollm2]
                                           [--qk-tokens 10000] [--threads 2] [--no-page]

For each model, a real `attnviz serve` reads the first N sentences of the shipped HSK
corpus (English) as a corpus run (POST /api/v1/corpus-runs, polled until done): its
sentences per second, against a plain loop over transformers (the same model: BertModel
from MiniLM's folder, LlamaForCausalLM from SmolLM2's GGUF; eager attention,
output_attentions=True) one sentence at a time, on the same token ids (the same tokenizer,
inside the timed loop) computing the same statistics with the same function
(model/methods/corpus_stats.py, every layer at once), run after the server's run on the same
cores. The corpus run batches sentences of one token length (up to 16) in one pass.
Then the query-key space of one MiniLM head over a corpus run of at least --qk-tokens
tokens: the server's time for POST /api/v1/qk-space (PCA), and the page's time from
asking to drawn (plotly.js's scattergl in headless Chromium on SwiftShader, its marks
attnviz:qk-asked and attnviz:qk-drawn).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import httpx2
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from attnviz.app.corpus.corpora import shipped_sentences
from attnviz.model.methods.corpus_stats import sentence_statistics
from harness.serving import start_server

QK_HEAD = {"type": "encoder.self", "layer": 3, "head": 2}


def corpus_run(base: str, model: str, limit: int, vectors=()) -> dict:
    body = {"model": model, "corpus": "hsk-en", "limit": limit, "vectors": list(vectors)}
    run = httpx2.post(f"{base}/api/v1/corpus-runs", json=body, timeout=60).json()
    while run["status"] in ("queued", "running"):
        time.sleep(0.5)
        run = httpx2.get(f"{base}/api/v1/corpus-runs/{run['id']}", timeout=60).json()
    assert run["status"] == "done", run
    return run


def reference(model: str, sentences: list[str]) -> float:
    """Sentences per second of the plain loop over transformers."""
    from transformers import BertModel

    if model == "minilm":
        from attnviz.model.pretrained.bert import BertRunner, package_dir

        ours = BertRunner.load()
        theirs = BertModel.from_pretrained(str(package_dir()), attn_implementation="eager").eval()
        specials, causal = {"[CLS]", "[SEP]"}, False
    else:
        from attnviz.model.pretrained.causal import CausalLM
        from harness.references import smollm2

        ours = CausalLM.load()
        theirs = smollm2.model()  # (transformers' reading of the same GGUF file, kept)
        specials, causal = set(ours.special_tokens), True
    start = time.perf_counter()
    with torch.no_grad():
        for sentence in sentences:
            ids, tokens = ours.tokenize(sentence)  # the same ids (and the same tokenizer)
            out = theirs(torch.tensor([ids]), output_attentions=True)
            special = [i for i, t in enumerate(tokens) if t in specials]
            # every layer's heads at once, as the corpus run computes them
            weights = torch.cat([w[0] for w in out.attentions])
            sentence_statistics(weights, ids, ids, True, causal, special)
    return len(sentences) / (time.perf_counter() - start)


def page_draw(base: str, run_id: str, text: str) -> float:
    from playwright.sync_api import sync_playwright

    flags = [
        "--no-sandbox",
        "--use-gl=angle",
        "--use-angle=swiftshader",
        "--enable-unsafe-swiftshader",
    ]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=flags)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        query = f"model=minilm&view=qk&type=encoder.self&layer=3&head=2&cr={run_id}&text={text}"
        page.goto(f"{base}/?{query}")
        deadline = time.monotonic() + 120
        read = "performance.getEntriesByName('attnviz:qk-drawn').length"
        while not page.evaluate(read):
            assert time.monotonic() < deadline, "the cloud was not drawn within 120 s"
            time.sleep(0.05)
        read_marks = (
            "['asked', 'answered', 'drawn'].map((m) => "
            "performance.getEntriesByName('attnviz:qk-' + m).at(-1).startTime)"
        )
        first = page.evaluate(read_marks)
        # again, the WebGL bundle loaded and the text's run cached: another colouring
        page.select_option("#qk-colour", "sentence")
        while page.evaluate("performance.getEntriesByName('attnviz:qk-drawn').length") < 2:
            assert time.monotonic() < deadline + 120, "not drawn again within 120 s"
            time.sleep(0.05)
        again = page.evaluate(read_marks)
        browser.close()
    return [((m[2] - m[0]) / 1000, (m[1] - m[0]) / 1000) for m in (first, again)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--models", nargs="*", default=["minilm", "smollm2"])
    parser.add_argument("--qk-tokens", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-page", action="store_true", help="skip the page's draw time")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sentences = list(shipped_sentences("hsk-en"))[: args.sentences]
    env = {
        "ATTNVIZ_ZOO": json.dumps(["minilm", "smollm2"]),
        "ATTNVIZ_TORCH_THREADS": str(args.threads),
        "ATTNVIZ_LOG_LEVEL": "warning",
        # a benchmark times the runs, not the client's share of the server (a SmolLM2 run
        # of 1,000 sentences owes minutes of work, and the next would be a 429)
        "ATTNVIZ_CLIENT_COST_PER_MINUTE": "0",
    }
    proc, base = start_server(env, timeout=240)
    rows = []
    try:
        for model in args.models:
            run = corpus_run(base, model, args.sentences)
            ours = run["done"] / run["elapsed_s"]
            rows.append((model, run["done"], ours))
        # the query-key space of one head over a corpus of at least --qk-tokens tokens
        from attnviz.model.pretrained.bert import BertRunner

        minilm = BertRunner.load()
        all_en = list(shipped_sentences("hsk-en"))
        count, n = 0, 0
        while count < args.qk_tokens and n < len(all_en):
            count += len(minilm.tokenize(all_en[n])[0])
            n += 1
        run = corpus_run(base, "minilm", n, [QK_HEAD])
        body = {"model": "minilm", "text": "The cat sat.", **QK_HEAD, "corpus_run": run["id"]}
        times, points = [], 0
        for _ in range(3):
            start = time.perf_counter()
            answer = httpx2.post(f"{base}/api/v1/qk-space", json=body, timeout=120)
            times.append(time.perf_counter() - start)
            assert answer.status_code == 200, answer.text
            points = len(answer.json()["queries"]["tokens"])
        server_qk = sorted(times)[1]
        draw = None if args.no_page else page_draw(base, run["id"], "The cat sat.")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(f"torch {torch.__version__}, {args.threads} threads; HSK sentences in English")
    print(
        "| model | sentences | ours, sentences/s | transformers loop, sentences/s | ours / theirs |"
    )
    print("| --- | --- | --- | --- | --- |")
    for model, done, ours in rows:
        theirs = reference(model, sentences[:done])
        print(f"| {model} | {done} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f} |", flush=True)
    print(
        f"\nquery-key space of MiniLM encoder L3 H2 over {n} sentences: {points} queries and "
        f"{points} keys"
    )
    print(f"  server (POST /api/v1/qk-space, PCA, median of 3): {server_qk:.2f} s")
    if draw is not None:
        for what, (whole, answer) in zip(("first", "again"), draw, strict=True):
            print(
                f"  page, {what}: asked to drawn (scattergl on SwiftShader) {whole:.2f} s, of "
                f"which the answer (server, transfer, JSON; first: and plotly's WebGL bundle) "
                f"{answer:.2f} s, the draw {whole - answer:.2f} s"
            )


if __name__ == "__main__":
    main()
