"""The suite runs in two parts (`make test`): tests that bound latency or time (a /healthz
bound, a load or soak, a server killed and restarted, a page's timings) run alone, after
the rest has run on two workers (pytest-xdist, a file per worker at a time, each on one
torch thread).

Each test is marked with the tier of what it needs (TIERS, by file; the first that matches):
`core` the seed's Transformer and tiny models made by transformers itself, nothing shipped,
served or installed beyond the environment (`make check`: the fast loop); `zoo` the shipped
models (their weights, the app serving them); `browser` headless Chromium; `reference` a
peer or the architecture matrix (TransformerLens' environment, every transformers family);
`ops` the wheel, the notebook, Ray, replicas, load, the container. `make test` runs them all."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent
ALONE = (
    "app/hostile/",
    "app/test_load_smoke.py",
    "app/test_bad_input.py",
    "app/test_health.py",
    "app/test_hostile_models.py",
    "e2e/test_long_once.py",  # (a page against the API, timed)
    "e2e/test_picture_timing.py",  # (the picture's overlay redrawn within a frame)
    "deploy/test_replicas.py",  # (the manifests' checks, deploy/test_k8s.py, run with the rest)
)


def alone() -> list[str]:
    """The paths of ALONE, for the run of them alone (`make test`): it collects nothing
    else (collecting the whole suite takes about 20 s)."""
    return [f"tests/{where}" for where in ALONE]


TIERS: tuple[tuple[str, str], ...] = (
    ("e2e/test_bench_smoke.py", "ops"),
    ("e2e/", "browser"),
    ("deploy/", "ops"),
    ("container/", "ops"),
    ("test_wheel.py", "ops"),
    ("test_notebook.py", "ops"),
    ("app/test_ray.py", "ops"),
    ("app/test_load_smoke.py", "ops"),
    ("model/test_bench_llm_smoke.py", "ops"),
    ("model/test_families.py", "reference"),
    ("model/test_vision_matrix.py", "reference"),
    ("model/test_vlm_matrix.py", "reference"),
    ("model/test_lens.py", "reference"),
    ("app/test_shares.py", "core"),
    ("app/test_images.py", "core"),
    ("app/", "zoo"),
    ("model/pronounce/", "zoo"),
    ("model/test_smollm2.py", "zoo"),
    ("model/test_minilm.py", "zoo"),
    ("model/test_checkpoints.py", "zoo"),
    ("test_capture.py", "zoo"),
    ("test_embedded.py", "zoo"),
    ("", "core"),  # the rest: model/ on tiny models, the house and docs rules
)


def tier_of(where: str) -> str:
    """The tier of a test file (its path under tests/)."""
    return next(tier for prefix, tier in TIERS if where.startswith(prefix))


# The files that take longest (pytest --durations on `make test`), handed to the workers
# first: a file per worker at a time, in collection order, so that a long file taken last
# would leave one worker alone at the end.
LONGEST_FIRST = (
    "app/test_fuzz.py",  # (schemathesis' items: counted as one on an xdist worker)
    "e2e/test_long.py",
    "e2e/test_xss.py",
    "app/test_ray.py",
    "e2e/test_generation.py",
    "app/test_head_views.py",
    "app/test_generate.py",
    "app/test_own_models.py",
    "model/pronounce/test_train.py",
    "model/test_smollm2.py",
    "e2e/test_page.py",
    "app/test_lab_causal.py",
    "model/test_vlm_matrix.py",
    "e2e/test_lens.py",
    "e2e/test_truth.py",
    "model/test_families.py",
    "e2e/test_inside_a_head.py",
    "model/test_bench_llm_smoke.py",
    "e2e/test_vlm.py",
    "e2e/test_layout.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.relative_to(HERE).as_posix()
        if where.startswith(ALONE):
            item.add_marker(pytest.mark.alone)
        item.add_marker(getattr(pytest.mark, tier_of(where)))

    def rank(item: pytest.Item) -> int:
        where = item.path.relative_to(HERE).as_posix()
        return LONGEST_FIRST.index(where) if where in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # (stable: each file's tests keep their order)
