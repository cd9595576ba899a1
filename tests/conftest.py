"""The suite runs in two parts (`make test`): tests that bound latency or time (a /healthz
bound, a load or soak, a server killed and restarted, a page's timings) run alone, after
the rest has run on two workers (pytest-xdist, a file per worker at a time)."""

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
    "deploy/test_replicas.py",  # (the manifests' checks, deploy/test_k8s.py, run with the rest)
)


# The files that take longest (pytest --durations on `make test`), handed to the two
# workers first: a file per worker at a time, in collection order, so that a long file
# taken last would leave one worker alone at the end.
LONGEST_FIRST = (
    "app/test_fuzz.py",  # (schemathesis' items: counted as one on an xdist worker)
    "e2e/test_xss.py",
    "e2e/test_long.py",
    "e2e/test_generation.py",
    "app/test_ray.py",
    "app/test_head_views.py",
    "e2e/test_lens.py",
    "model/test_families.py",
    "model/pronounce/test_train.py",
    "model/test_bench_llm_smoke.py",
    "app/test_lab_causal.py",
    "model/test_smollm2.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.relative_to(HERE).as_posix()
        if where.startswith(ALONE):
            item.add_marker(pytest.mark.alone)

    def rank(item: pytest.Item) -> int:
        where = item.path.relative_to(HERE).as_posix()
        return LONGEST_FIRST.index(where) if where in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # (stable: each file's tests keep their order)
