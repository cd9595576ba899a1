"""Corpus statistics on Ray on this machine, against the same in this process.

    .venv/bin/python bench/bench_ray.py [--sentences 1000] [--model minilm]

The first N HSK sentences (English) with MiniLM: in this process (app/corpus/command.py's
in_process, the code a server's corpus run uses), then as a Ray Data pipeline on a local
Ray started here with 2 CPUs, with 1 and then 2 workers. Each Ray figure counts the whole
pipeline (its workers start and load the model: that is part of the cost); the cluster's
own start is given apart. 2 cores here: 2 workers cannot beat one process using both
cores; on a cluster each worker has its own.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from attnviz.app.corpus.command import in_process
from attnviz.app.corpus.corpora import shipped_sentences
from attnviz.app.corpus.on_ray import gathered, statistics_on_ray
from attnviz.app.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--model", default="minilm")
    args = parser.parse_args()
    sentences = list(shipped_sentences("hsk-en"))[: args.sentences]
    settings = Settings()
    start = time.perf_counter()
    _, here = in_process(args.model, sentences, settings)
    local = len(sentences) / (time.perf_counter() - start)
    import ray

    start = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    boot = time.perf_counter() - start
    rows = []
    for workers in (1, 2):
        start = time.perf_counter()
        got = gathered(
            statistics_on_ray(None, args.model, sentences, settings.model_dump(), workers),
            len(sentences),
        )
        took = time.perf_counter() - start
        diff = (got.nan_to_num() - here.nan_to_num()).abs().max().item()
        rows.append((workers, len(sentences) / took, took, diff))
    ray.shutdown()
    print(
        f"torch {torch.__version__}, ray {ray.__version__}; {len(sentences)} HSK sentences, "
        f"{args.model}; the local Ray started in {boot:.1f} s"
    )
    print("| where | sentences/s | of in-process | max diff from in-process |")
    print("| --- | --- | --- | --- |")
    print(f"| this process | {local:.1f} | 1.00 | 0 |")
    for workers, rate, took, diff in rows:
        print(
            f"| Ray, {workers} worker{'s' if workers > 1 else ''} ({took:.1f} s) | {rate:.1f} | "
            f"{rate / local:.2f} | {diff:.1e} |"
        )


if __name__ == "__main__":
    main()
