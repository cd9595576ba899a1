"""Corpus statistics on Ray: a local Ray cluster (`ray start --head`, 2 CPUs) started here;
its results identical to the in-process run's on the same corpus, through the library,
the `attnviz corpus --ray` command and a server whose corpus runs go to it
(ATTNVIZ_RAY_ADDRESS); and without an address nothing of Ray is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
import torch

from attnviz.app.corpus.command import in_process
from attnviz.app.corpus.corpora import shipped_sentences
from attnviz.app.settings import Settings
from harness.serving import free_port, start_server

SENTENCES = list(shipped_sentences("hsk-en"))[:40]
RAY = str(Path(sys.executable).parent / "ray")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    port = free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    temp = tmp_path_factory.mktemp("ray")
    subprocess.run([RAY, "start", "--head", f"--port={port}", "--num-cpus=2",
                    "--include-dashboard=false", f"--temp-dir={temp}", "--disable-usage-stats"],
                   env=env, check=True, capture_output=True, timeout=180)  # fmt: skip
    yield f"127.0.0.1:{port}"
    subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def expected():
    return in_process("minilm", SENTENCES, Settings())


def same(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.shape == b.shape
    assert torch.equal(a.isnan(), b.isnan())
    assert (a.nan_to_num() - b.nan_to_num()).abs().max() <= 1e-6


def test_without_a_ray_address_nothing_of_ray_is_imported():
    code = (
        "import sys\n"
        "from attnviz.app.main import create_app\n"
        "from attnviz.app.corpus.command import in_process\n"
        "from attnviz.app.settings import Settings\n"
        "create_app(Settings())\n"
        "in_process('minilm', ['The cat sat.', 'A dog ran.'], Settings())\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True)  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_ray_workers_compute_what_this_process_does(cluster, expected, tmp_path):
    heads, stats = expected
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    out = tmp_path / "stats.csv"
    said = subprocess.run(
        [sys.executable, "-m", "attnviz.app.cli", "corpus", str(corpus), "--model", "minilm",
         "--ray", cluster, "--workers", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert said.returncode == 0, (said.stdout[-2000:], said.stderr[-4000:])  # (what Ray said)
    assert f"{len(SENTENCES)} sentences in" in said.stdout and "on Ray" in said.stdout
    rows = out.read_text().splitlines()
    assert len(rows) == 1 + len(SENTENCES) * len(heads)
    got = torch.full_like(stats, float("nan"))
    for line in rows[1:]:
        sentence, _, layer, head, *values = line.split(",")
        j = int(layer) * 12 + int(head)
        got[int(sentence), :, j] = torch.tensor([float(v) if v else float("nan") for v in values])
    assert torch.equal(got.isnan(), stats.isnan())
    assert (got.nan_to_num() - stats.nan_to_num()).abs().max() <= 1e-5  # (6 digits in CSV)


def test_a_servers_corpus_runs_go_to_ray(cluster, expected):
    stats = expected[1]
    env = {"ATTNVIZ_ZOO": json.dumps(["minilm"]), "ATTNVIZ_RAY_ADDRESS": cluster,
           "ATTNVIZ_LOG_LEVEL": "warning"}  # fmt: skip
    proc, base = start_server(env)
    try:
        run = httpx2.post(f"{base}/api/v1/corpus-runs",
                          json={"model": "minilm", "sentences": SENTENCES}).json()  # fmt: skip
        deadline = time.monotonic() + 300
        while run["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, run
            time.sleep(0.5)
            run = httpx2.get(f"{base}/api/v1/corpus-runs/{run['id']}").json()
        assert run["status"] == "done" and run["done"] == len(SENTENCES), run
        table = httpx2.get(f"{base}/api/v1/corpus-runs/{run['id']}/heads").json()["heads"]
        means = torch.tensor([[h["means"][n] if h["means"][n] is not None else float("nan")
                               for h in table] for n in table[0]["means"]])  # fmt: skip
        same(means, stats.nanmean(0))
        kept = httpx2.post(f"{base}/api/v1/corpus-runs", json={"model": "minilm",
                           "sentences": ["a"], "vectors": [{"type": "encoder.self",
                           "layer": 0, "head": 0}]})  # fmt: skip
        assert kept.status_code == 422 and "not on Ray" in kept.text
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_a_worker_of_a_model_placed_on_a_gpu_asks_ray_for_one():
    from attnviz.app.corpus.on_ray import gpus_per_worker, on_one_gpu

    mine = {"models": {"mine": "/models/mine", "big": {"path": "/m/b", "device": "cuda:1"},
                       "small": {"path": "/m/s", "device": "cpu"}}, "device": "auto"}  # fmt: skip
    assert gpus_per_worker("minilm", mine, cluster_gpus=8) == 0  # (shipped: on the CPU)
    assert gpus_per_worker("mine", mine, cluster_gpus=8) == 1  # auto, on a cluster of GPUs
    assert gpus_per_worker("mine", mine, cluster_gpus=0) == 0
    assert gpus_per_worker("big", mine, cluster_gpus=0) == 1  # (asked for: Ray says none fit)
    assert gpus_per_worker("small", mine, cluster_gpus=8) == 0
    assert [on_one_gpu(d) for d in ("cuda:1", "cuda", "auto", "cpu")] == [
        "cuda",
        "cuda",
        "auto",
        "cpu",
    ]
