"""The memory budgets against the memory the server has (issue 43): read from its cgroup
(a container's limit) or the machine; at start-up the fixed needs must fit (or it does not
start, saying what to change) and the caches are scaled to the room left."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from attnviz.app.budgets import DoesNotFit, fit, memory_limit, models_room, resident_bytes
from attnviz.app.main import create_app
from attnviz.app.settings import Settings

GIB = 2**30


def root_with(tmp_path, files: dict[str, str]):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_the_limit_is_the_setting_the_cgroups_or_the_machines(tmp_path):
    meminfo = {"proc/meminfo": "MemTotal:       24683784 kB\nMemFree: 1 kB\n"}
    v2 = root_with(tmp_path / "v2", {"sys/fs/cgroup/memory.max": "4294967296\n", **meminfo})
    assert memory_limit(Settings(), v2) == (
        4 * GIB,
        "the cgroup's limit (/sys/fs/cgroup/memory.max)",
    )
    free = root_with(tmp_path / "free", {"sys/fs/cgroup/memory.max": "max\n", **meminfo})
    assert memory_limit(Settings(), free) == (24683784 * 1024, "the machine's memory")
    v1 = root_with(
        tmp_path / "v1",
        {"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712", **meminfo},
    )
    assert memory_limit(Settings(), v1)[1] == "the machine's memory"  # (v1's "no limit")
    assert memory_limit(Settings(memory_limit_bytes=3 * GIB), v2) == (
        3 * GIB,
        "ATTNVIZ_MEMORY_LIMIT_BYTES",
    )


def test_the_caches_are_scaled_to_the_room_left_or_the_server_does_not_start():
    # caches 1.5 + 0.5 + 1.5 + 0.25 GiB (runs, corpus results, models of yours, pictures),
    # a capture of 1.5 GB
    settings = Settings(max_concurrent_runs=1, own_models_bytes=3 * 2**29)
    assert fit(settings, GIB, 16 * GIB, "test").changed == ""
    scaled = fit(settings, int(1.4 * GIB), 5 * GIB, "the pod's")
    fixed = 1_500_000_000 + (128 + 768 + 256) * 2**20 + 100_000_000  # (and what it holds)
    room = 5 * GIB - int(1.4 * GIB) - fixed
    total = (scaled.cache_bytes + scaled.corpus_results_bytes + scaled.own_models_bytes
             + scaled.images_bytes)  # fmt: skip
    assert room - 4 <= total <= room
    assert scaled.cache_bytes == scaled.own_models_bytes
    assert abs(scaled.cache_bytes - 3 * scaled.corpus_results_bytes) <= 3  # (one factor)
    assert abs(scaled.cache_bytes - 6 * scaled.images_bytes) <= 6
    assert scaled.changed.startswith("the memory budgets pass 5,120 MiB (the pod's) by ")
    assert "ATTNVIZ_CACHE_BYTES 1,536 -> " in scaled.changed
    with pytest.raises(DoesNotFit) as refused:
        fit(settings, int(1.4 * GIB), 4 * GIB, "the pod's")
    said = str(refused.value)
    assert said.startswith(
        "the server needs 4,111 MiB besides its caches (1,433 held with its models loaded, "
        "the captures of 1 runs at once of 1,430 (ATTNVIZ_MAX_CAPTURE_BYTES) and of the runs "
        "lent their turns, 128 (ATTNVIZ_TURN_BYTES), two answers of 47 "
        "(ATTNVIZ_MAX_RESPONSE_BYTES), "
        "256 of work, and 768 for UMAP's process), and its caches 3,840 MiB, "
    )
    assert said.endswith(
        "against 4,096 MiB (the pod's): give it more memory, or lower those budgets"
    )


def test_a_server_whose_budgets_do_not_fit_scales_them_or_does_not_start():
    held = resident_bytes()
    assert held > 0
    needs = held + 1_500_000_000 + (128 + 768 + 256) * 2**20 + 100_000_000
    # (the app's own models, pronounce alone, loaded at start-up: a little more held)
    roomy = Settings(
        torch_threads=1,
        max_concurrent_runs=1,
        zoo=["pronounce"],
        memory_limit_bytes=needs + 2 * GIB,
    )
    with TestClient(create_app(roomy)) as c:
        runs = c.app.state.inference.runs.max_bytes
        pictures = c.app.state.inference.pictures.max_bytes
    assert pictures * 6 == pytest.approx(runs, abs=6)  # (the pictures' store scaled alike)
    # (scaled: 3.75 GiB of caches in what 2 GiB leave once its model is loaded)
    assert 256 * 2**20 < runs < 1536 * 2**20
    tight = Settings(
        torch_threads=1, max_concurrent_runs=1, zoo=["pronounce"], memory_limit_bytes=needs
    )
    with pytest.raises(DoesNotFit, match="give it more memory"), TestClient(create_app(tight)):
        pass


def test_the_run_cache_keeps_a_bounded_number_of_runs_whatever_their_bytes():
    """Each cached run holds hundreds of objects Python's collector walks, holding the
    interpreter's lock: thousands of short runs in 1.5 GiB made its full collections hold
    the event loop 63-132 ms. So the cache keeps MOST_RUNS runs at most, the oldest out."""
    from attnviz.app.runs.cache import MOST_RUNS, RunCache

    with TestClient(create_app(Settings(torch_threads=1, zoo=["pronounce"]))) as c:
        inference = c.app.state.inference
        runner = inference.entry("pronounce").runner
        cache = RunCache(2**30, most=3)
        for i in range(5):
            cache.put(str(i), runner.run(f"第{i + 1}句"))
        assert [cache.get(str(i)) is not None for i in range(5)] == [False, False, True, True, True]
        assert inference.runs.most == MOST_RUNS == 256


def test_the_bound_of_models_of_yours_is_by_default_the_room_the_rest_leaves():
    """ATTNVIZ_OWN_MODELS_BYTES 0 (its default): what the memory limit leaves after the
    server's needs and the other caches, so that a 1B bf16 model (2.5 GB) is served on a
    machine of 24 GiB without a setting; nothing where the other caches are scaled."""
    settings = Settings(max_concurrent_runs=1)
    assert settings.own_models_bytes == 0
    fixed = 1_500_000_000 + (128 + 768 + 256) * 2**20 + 100_000_000  # (and what it holds)
    fitted = fit(settings, GIB, 24 * GIB, "the machine's memory")
    others = settings.cache_bytes + settings.corpus_results_bytes + settings.images_bytes
    assert fitted.own_models_bytes == 24 * GIB - GIB - fixed - others > 2_500_000_000
    assert fitted.changed == ""
    assert models_room(settings, GIB, 24 * GIB) == fitted.own_models_bytes
    scaled = fit(settings, int(1.4 * GIB), 5 * GIB, "the pod's")
    assert scaled.own_models_bytes == 0 and "ATTNVIZ_OWN_MODELS_BYTES" not in scaled.changed
