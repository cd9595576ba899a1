"""Bad model files of yours are refused, never fatal (issue 27): every check of a model runs
before a tensor is read, in bounded time, and a failure of any kind refuses that model with
its reason while the others are served; a chat template renders within a bound of time and
of size. Real files: tiny Llama GGUFs written with the `gguf` library (and copied with new
metadata by its own gguf_new_metadata), cuts of the shipped SmolLM2 file, and a folder whose
tokenizer.json makes `tokenizers` panic (pyo3's PanicException: a BaseException)."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import gguf
import httpx2
import pytest
from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

from attnviz.app.catalog.yours import own_models
from attnviz.app.settings import Settings
from attnviz.model.pretrained.llama import smollm2_path
from harness.checkpoints import VOCAB, saved, tiny, write_gguf
from harness.serving import start_server

LOOPING = "{% for a in range(50000) %}{% for b in range(50000) %}{% endfor %}{% endfor %}"
HUGE = "{% for i in range(50000) %}{{ 'x' * 4000 }}{% endfor %}"  # 200 MB, 4,000 at a time
REPEATED = "{{ 'x' * 200000000 }}"  # 200 MB at once
BROKEN = "{% for %}"
UNREADABLE = "truncated or corrupt"


def with_metadata(source: Path, path: Path, changes: dict[str, MetadataDetails]) -> Path:
    """A copy of a GGUF file with some metadata changed, by the gguf library's own tool."""
    reader = gguf.GGUFReader(str(source))
    writer = gguf.GGUFWriter(str(path), "llama", endianess=reader.endianess)
    copy_with_new_metadata(reader, writer, dict(changes), [])
    return path


def template(source: Path, path: Path, text: str) -> Path:
    return with_metadata(
        source, path, {"tokenizer.chat_template": MetadataDetails(gguf.GGUFValueType.STRING, text)}
    )


def panicking(folder: Path) -> Path:
    """A folder whose tokenizer.json makes `tokenizers` panic as it reads it (a
    Precompiled normalizer without its map: tokenizers#1627)."""
    spec = json.loads((folder / "tokenizer.json").read_text())
    spec["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": None}
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    return folder


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("good") / "tiny.gguf"
    write_gguf(tiny("llama"), path)
    return path


def cut(source: Path, size: int, path: Path) -> Path:
    with source.open("rb") as file:
        path.write_bytes(file.read(size))
    return path


def test_a_truncated_or_corrupt_gguf_is_refused_at_once_with_its_reason(good, tmp_path):
    """The first 113 bytes of SmolLM2's file and other cuts of it and of a tiny one (in the
    header, the metadata, the tensor table, the tensor data), and a file whose one array
    declares 2^62 values (the `gguf` library's own reader loops on it for ever, its memory
    growing ~100 MB/s): each refused with its reason, on either backend, in bounded time;
    the good one beside them served."""
    smollm2 = smollm2_path()
    models = {f"smol{n}": cut(smollm2, n, tmp_path / f"smol{n}.gguf")
              for n in (20, 113, 5000, 1_500_000)}  # fmt: skip
    size = good.stat().st_size
    for n in range(24, size, size // 40):
        models[f"tiny{n}"] = cut(good, n, tmp_path / f"tiny{n}.gguf")
    key = b"general.architecture"
    lying = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
    lying += struct.pack("<IIQ", gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT8, 2**62)
    (tmp_path / "lying.gguf").write_bytes(lying)
    models["lying"] = tmp_path / "lying.gguf"
    for backend in ("auto", "transformers"):
        start = time.monotonic()
        found, refused = own_models(Settings(models={**models, "good": good},
                                             backend=backend), set())  # fmt: skip
        took = time.monotonic() - start
        assert [model_id for model_id, _, _ in found] == ["good"]
        assert set(refused) == set(models)
        unclear = {m: r for m, r in refused.items() if UNREADABLE not in r}
        assert not unclear, unclear
        assert str(tmp_path) not in str(refused)
        assert took < 5, f"{len(models)} files refused in {took:.1f} s"
    assert refused["lying"].startswith("it declares 4,611,686,018,427,387,904 array values")


def test_a_gguf_that_declares_more_than_it_holds_is_refused_before_a_tensor_is_read(good, tmp_path):
    """An embedding with more rows than the token list, a vocabulary size past it, tensors
    whose shapes are not the configuration's, a billion layers stated over 21 tensors, a
    merge that makes no token (`tokenizers` panics on one longer than any token), and
    weights past the loaded set's bound: each refused at start-up with its reason, unread
    (its float32 size from the declared shapes)."""
    rows = tmp_path / "rows.gguf"
    write_gguf(tiny("llama", vocab_size=VOCAB + 8), rows)
    uint32 = gguf.GGUFValueType.UINT32
    vocab_size = {"llama.vocab_size": MetadataDetails(uint32, VOCAB + 8)}
    vocabulary = with_metadata(good, tmp_path / "vocabulary.gguf", vocab_size)
    width = {"llama.embedding_length": MetadataDetails(uint32, 128)}
    wider = with_metadata(good, tmp_path / "wider.gguf", width)
    depth = {"llama.block_count": MetadataDetails(uint32, 10**9)}
    deeper = with_metadata(good, tmp_path / "deeper.gguf", depth)
    fields = gguf.GGUFReader(str(good)).fields
    longest = max(fields["tokenizer.ggml.tokens"].contents(), key=len)
    merges = [f"{longest} {longest}", *fields["tokenizer.ggml.merges"].contents()]
    merge = with_metadata(good, tmp_path / "merge.gguf", {"tokenizer.ggml.merges": MetadataDetails(
        gguf.GGUFValueType.ARRAY, merges, sub_type=gguf.GGUFValueType.STRING)})  # fmt: skip
    models = {"rows": rows, "vocabulary": vocabulary, "wider": wider, "deeper": deeper,
              "merge": merge}  # fmt: skip
    _, refused = own_models(Settings(models=models), set())
    assert refused == {
        "rows": "its tensors do not fit its metadata: token_embd.weight is declared (64, 328); "
        "its configuration makes it (64, 320); output.weight is declared (64, 328); its "
        "configuration makes it (64, 320)",
        "vocabulary": "its vocabulary is 328 tokens (llama.vocab_size) but its token list "
        "holds 320: the ids past it would have no text",
        "wider": refused["wider"],
        "deeper": "it declares 21 tensors, too few for 1,000,000,000 layers",
        "merge": f"its merge {merges[0]!r} does not join two of its tokens into a third",
    }
    assert refused["wider"].startswith("its tensors do not fit its metadata: token_embd.weight "
                                       "is declared (64, 320); its configuration makes it "
                                       "(128, 320)")  # fmt: skip
    floats = 4 * sum(p.numel() for p in tiny("llama").parameters())
    _, refused = own_models(Settings(models={"good": good}, own_models_bytes=floats - 1), set())
    assert refused == {"good": f"its weights take {floats:,} bytes in float32, more than the "
                       f"models of yours may hold on cpu: {floats - 1:,} bytes "
                       "(ATTNVIZ_OWN_MODELS_BYTES)"}  # fmt: skip


@pytest.fixture(scope="module")
def served(good, tmp_path_factory):
    """A real server with the good tiny GGUF, its copies with hostile chat templates, a
    folder that panics `tokenizers` at start-up, one that will only once read, and a cut
    GGUF."""
    root = tmp_path_factory.mktemp("hostile")
    later = saved(root / "later", tiny("llama"))
    models = {
        "mine": good,
        "looping": template(good, root / "looping.gguf", LOOPING),
        "huge": template(good, root / "huge.gguf", HUGE),
        "repeated": template(good, root / "repeated.gguf", REPEATED),
        "broken": template(good, root / "broken.gguf", BROKEN),
        "panic": panicking(saved(root / "panic", tiny("llama"))),
        "later": later,
        "cut": cut(smollm2_path(), 113, root / "cut.gguf"),
    }
    args = [a for model_id, path in models.items() for a in ("--model", f"{model_id}={path}")]
    proc, base = start_server({"ATTNVIZ_ZOO": '["pronounce"]'}, args=args)
    try:
        yield base, later
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_model_that_panics_its_library_is_refused_and_the_others_served(served):
    base, _ = served
    listed = {m["id"]: m for m in httpx2.get(f"{base}/api/v1/models").json()}
    assert listed["panic"]["status"] == "refused"
    assert listed["panic"]["reason"].startswith("PanicException: Precompiled: ")
    assert UNREADABLE in listed["cut"]["reason"]
    assert {m for m, info in listed.items() if info["status"] == "served"} == {
        "pronounce", "pronounce-untrained", "mine", "looping", "huge", "repeated", "broken",
        "later"}  # fmt: skip


def test_a_model_that_panics_when_first_read_is_a_503_and_the_server_serves_on(served):
    """Its files replaced after start-up: reading it panics `tokenizers`; each request for
    it is a 503 naming why, the rest is served."""
    base, later = served
    panicking(later)
    for _ in range(2):
        answer = httpx2.post(f"{base}/api/v1/analyze", json={"model": "later", "text": "Hi"},
                             timeout=60)  # fmt: skip
        assert answer.status_code == 503, answer.text
        assert "cannot be read: PanicException: Precompiled: " in answer.json()["detail"]
    assert httpx2.get(f"{base}/healthz").status_code == 200
    body = {"model": "mine", "text": "The quick", "max_new_tokens": 2}
    assert httpx2.post(f"{base}/api/v1/generate", json=body, timeout=60).status_code == 200


@pytest.mark.parametrize(
    "model, said",
    [
        ("looping", "its chat template runs past 1 s"),
        ("huge", "its chat template writes more than 1,048,576 characters"),
        ("repeated", "its chat template makes a repetition of over 1,048,576 characters"),
        ("broken", "its chat template cannot be read: "),
    ],
)
def test_a_chat_template_past_its_bounds_is_a_422_in_bounded_time(served, model, said):
    """A chat turn is refused with the bound it passed, both where a run renders it and
    where a generation does; the model itself still runs (a template that cannot be read
    leaves it without chat, not unread)."""
    base, _ = served
    for route, extra in (("analyze", {}), ("generate", {"max_new_tokens": 1})):
        start = time.monotonic()
        answer = httpx2.post(f"{base}/api/v1/{route}", json={"model": model, "text": "Hi",
                             "chat": True, **extra}, timeout=60)  # fmt: skip
        took = time.monotonic() - start
        assert answer.status_code == 422, answer.text
        assert said in answer.json()["detail"]
        assert took < 5, f"{model}'s template refused in {took:.1f} s"
    plain = {"model": model, "text": "The quick", "max_new_tokens": 2}
    assert httpx2.post(f"{base}/api/v1/generate", json=plain, timeout=60).status_code == 200
