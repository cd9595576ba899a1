"""Pictures through the API: sent once (the file's bytes, base64 in JSON, a data: URL or a
multipart form: one digest), named by runs; an image encoder of yours (a tiny seeded ViT
and DeiT, saved with their image processors) served through the views, its weights
transformers' own eager attention, each position named and placed on the picture; a
route of text refuses a model of pictures and the other way round, each with its reason."""

from __future__ import annotations

import base64
import io
import logging

import numpy as np
import pytest
import torch
import transformers as T
from fastapi.testclient import TestClient
from PIL import Image

from attnviz.app.main import create_app
from attnviz.app.settings import Settings
from tests.app.test_api import decode

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
GRID = dict(image_size=32, patch_size=8)  # 4 x 4 patches
MODELS = {
    "vit": (T.ViTModel, T.ViTConfig(**GRID, **SMALL),
            T.ViTImageProcessorPil(size={"height": 32, "width": 32})),
    "deit": (T.DeiTModel, T.DeiTConfig(**GRID, **SMALL),
             T.DeiTImageProcessorPil(size={"height": 40, "width": 40},
                                     crop_size={"height": 32, "width": 32})),
    # a dual encoder's folder: its text and vision towers (read by its vision tower's class)
    "clip": (T.CLIPModel, T.CLIPConfig(text_config=SMALL, vision_config={**GRID, **SMALL},
                                       projection_dim=16),
             T.CLIPImageProcessorPil(size={"shortest_edge": 32},
                                     crop_size={"height": 32, "width": 32})),
}  # fmt: skip
# the class of transformers' that reads each one's pictures alone: the reference
READS_PICTURES = {"vit": T.ViTModel, "deit": T.DeiTModel, "clip": T.CLIPVisionModel}


def photo(width: int = 70, height: int = 50, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def png(image: Image.Image, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG", **options)
    return out.getvalue()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("pictures")
    for name, (cls, config, processor) in MODELS.items():
        torch.manual_seed(0)
        model = cls(config).eval()
        with torch.no_grad():  # (away from the initialisation's near-uniform attention)
            for p in model.parameters():
                if p.dim() >= 2:
                    p.normal_(0, 0.15)
        model.save_pretrained(root / name)
        processor.save_pretrained(root / name)
    settings = Settings(zoo=["pronounce"], torch_threads=1, models={m: root / m for m in MODELS})
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c, root


def eager_attentions(root, name: str, picture: Image.Image) -> tuple:
    """Every layer's weights of transformers' own eager attention on the picture, as the
    folder's processor prepares it (the independent reference)."""
    processor = T.AutoImageProcessor.from_pretrained(root / name, backend="pil")
    reference = READS_PICTURES[name].from_pretrained(root / name, attn_implementation="eager")
    with torch.no_grad():
        pixels = processor(images=picture, return_tensors="pt")["pixel_values"]
        return reference.eval()(pixel_values=pixels, output_attentions=True).attentions


def upload(c, data: bytes) -> dict:
    answer = c.post("/api/v1/images", content=data, headers={"content-type": "image/png"})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_picture_sent_four_ways_is_one_digest_and_drawn_back(served):
    c, _ = served
    data = png(photo())
    raw = upload(c, data)
    assert (raw["width"], raw["height"], raw["format"]) == (70, 50, "PNG")
    encoded = base64.b64encode(data).decode()
    as_json = c.post("/api/v1/images", json={"data": encoded}).json()
    as_url = c.post("/api/v1/images", json={"data": f"data:image/png;base64,{encoded}"}).json()
    form = c.post("/api/v1/images", files={"image": ("photo.png", data, "image/png")}).json()
    # stored otherwise (no compression), the same pixels: the same key
    again = upload(c, png(photo(), compress_level=0))
    assert {d["digest"] for d in (raw, as_json, as_url, form, again)} == {raw["digest"]}
    drawn = c.get(f"/api/v1/images/{raw['digest']}")
    assert drawn.status_code == 200 and drawn.headers["content-type"] == "image/png"
    assert drawn.headers["x-image-size"] == "70x50"
    back = np.asarray(Image.open(io.BytesIO(drawn.content)).convert("RGB"))
    assert (back == np.asarray(photo())).all()  # (under 1,024 a side: as it was)


def test_what_is_no_picture_is_refused_with_its_reason(served):
    c, _ = served
    cases = [
        (dict(content=b"hello", headers={"content-type": "image/png"}), 422, "not a PNG, JPEG"),
        (dict(json={"data": "%%%"}), 422, "not base64"),
        (dict(json={"data": "aGk=", "more": 1}), 422, "nothing else"),
        (dict(files={"other": ("a.png", b"x", "image/png")}), 422, 'the file "image"'),
        (dict(content=b"x", headers={"content-type": "text/plain"}), 415, "image/png"),
    ]
    for kwargs, status, said in cases:
        answer = c.post("/api/v1/images", **kwargs)
        assert answer.status_code == status, (kwargs, answer.text)
        assert said in str(answer.json()["detail"]), answer.text
    too_big = c.post(
        "/api/v1/images",
        content=b"\x89PNG\r\n\x1a\n" + b"\x00" * 27_000_000,
        headers={"content-type": "image/png"},
    )
    assert too_big.status_code == 413
    missing = c.get("/api/v1/images/" + "0" * 64)
    assert missing.status_code == 404 and "send it again" in missing.json()["detail"]


def test_an_image_encoder_is_listed_as_reading_pictures(served):
    c, _ = served
    infos = {m["id"]: m for m in c.get("/api/v1/models").json()}
    vit = infos["vit"]
    assert vit["status"] == "served", vit
    assert (vit["token_unit"], vit["output"], vit["architecture"]) == (
        "patches", "features", "encoder-only",
    )  # fmt: skip
    assert vit["capabilities"]["pictures"] and not vit["capabilities"]["text"]
    # (the lab's other experiments read text)
    assert vit["capabilities"]["experiments"] == ["rollout", "flow", "distance"]
    assert "reads a picture" in vit["description"]
    pronounce = infos["pronounce"]["capabilities"]
    assert pronounce["text"] and not pronounce["pictures"]


@pytest.mark.parametrize("name", list(MODELS))
def test_every_heads_weights_over_a_picture_are_transformers_eager_attention(served, name):
    c, root = served
    picture = photo()
    digest = upload(c, png(picture))["digest"]
    analysis = c.post("/api/v1/analyze", json={"model": name, "image": digest})
    assert analysis.status_code == 200, analysis.text
    body = analysis.json()
    image = body["image"]
    assert (image["digest"], image["width"], image["height"]) == (digest, 70, 50)
    assert image["grid"] == [4, 4]
    leading = ["[CLS]", "[DIST]"] if name == "deit" else ["[CLS]"]
    labels = leading + [f"▦ {r},{c}" for r in range(4) for c in range(4)]
    assert body["source_tokens"] == labels == [p["label"] for p in image["positions"]]
    assert body["text"] == "" and body["target_tokens"] == []
    patch = image["positions"][len(leading) + 4 * 2 + 3]  # row 2, column 3
    if name == "vit":  # (resized to 32 x 32: each patch 8/32 of each side)
        assert patch["box"] == pytest.approx([3 * 70 / 4, 2 * 50 / 4, 70, 3 * 50 / 4])
    elif name == "clip":  # (its shortest side to 32: 44 x 32, the centre 32 x 32 cropped)
        assert patch["box"] == pytest.approx(
            [(6 + 24) * 70 / 44, 16 * 50 / 32, (6 + 32) * 70 / 44, 24 * 50 / 32]
        )
    else:  # (resized to 40 x 40, its centre 32 x 32 cropped: 4 pixels off each side)
        assert patch["box"] == pytest.approx(
            [(4 + 24) * 70 / 40, (4 + 16) * 50 / 40, (4 + 32) * 70 / 40, (4 + 24) * 50 / 40]
        )
    answer = c.post(
        "/api/v1/attention",
        json={"model": name, "image": digest, "encoding": "f4", "kinds": ["weights"]},
    )
    assert answer.status_code == 200, answer.text
    blocks = answer.json()["blocks"]
    expected = eager_attentions(root, name, picture)
    assert [b["layer"] for b in blocks] == [0, 1]
    for block in blocks:
        assert block["rows"] is None or block["rows"] == labels
        got = decode(block["data"])
        assert np.abs(got - expected[block["layer"]][0].numpy()).max() <= 1e-5


def test_routes_of_text_refuse_a_model_of_pictures_and_the_other_way_round(served):
    c, _ = served
    digest = upload(c, png(photo(seed=1)))["digest"]
    cases = [
        ("/api/v1/analyze", {"model": "vit", "text": "a cat"}, 422, "reads pictures, not text"),
        ("/api/v1/analyze", {"model": "vit", "text": "a", "image": digest}, 422,
         "reads a picture alone: leave text out"),
        ("/api/v1/analyze", {"model": "pronounce", "image": digest}, 422,
         "reads text, not pictures"),
        ("/api/v1/analyze", {"model": "pronounce"}, 422, "give text"),
        ("/api/v1/analyze", {"model": "vit", "image": "f" * 64}, 404, "send it again"),
        ("/api/v1/analyze", {"model": "vit", "image": "not a digest"}, 422, "64 characters"),
        ("/api/v1/generate", {"model": "vit", "text": "a cat"}, 422,
         "does not continue a prompt (generation is for models that do). It reads a picture"),
        ("/api/v1/lab/rollout", {"model": "vit", "text": "a cat"}, 422,
         "reads pictures, not text: send one as image"),
        ("/api/v1/lab/metrics", {"model": "vit", "text": "a cat"}, 422,
         "the metrics experiment cannot run on vit: it reads pictures, and this reads a text"),
        ("/api/v1/neuron", {"model": "vit", "text": "a cat", "layer": 0, "head": 0,
                            "query": 0}, 422, "reads pictures, and this reads a text"),
        ("/api/v1/export", {"model": "vit", "text": "a cat"}, 422, "reads pictures"),
        ("/api/v1/models/vit/positional-encoding?positions=8", None, 422,
         "vit reads pictures: its positions are a picture's patches"),
        ("/api/v1/corpus-runs", {"model": "vit", "sentences": ["a cat"]}, 422,
         "vit reads pictures, and a corpus run reads sentences"),
    ]  # fmt: skip
    for path, body, status, said in cases:
        answer = c.get(path) if body is None else c.post(path, json=body)
        assert answer.status_code == status, (path, body, answer.text)
        assert said in str(answer.json()["detail"]), (path, answer.text)


def test_a_pictures_export_carries_each_positions_box(served):
    c, _ = served
    digest = upload(c, png(photo(seed=2)))["digest"]
    answer = c.post("/api/v1/export", json={"model": "vit", "image": digest})
    assert answer.status_code == 200, answer.text
    assert (
        f"vit-{__import__('hashlib').sha256(digest.encode()).hexdigest()[:12]}"
        in (answer.headers["content-disposition"])
    )
    arrays = np.load(io.BytesIO(answer.content))
    assert arrays["image_boxes"].shape == (17, 4)
    assert np.isnan(arrays["image_boxes"][0]).all()  # [CLS]: no box
    assert arrays["image_boxes"][1].tolist() == pytest.approx([0, 0, 70 / 4, 50 / 4])
    assert arrays["image_size"].tolist() == [70, 50]
    assert arrays["encoder.0.self_attn.hook_weights"].shape == (1, 4, 17, 17)


def test_a_picture_run_is_kept_by_its_digest(served, caplog):
    c, _ = served
    digest = upload(c, png(photo(seed=3)))["digest"]
    with caplog.at_level(logging.INFO, logger="attnviz.app.runs.inference"):
        for _ in range(2):
            assert c.post("/api/v1/analyze", json={"model": "vit", "image": digest}).is_success
        other = upload(c, png(photo(seed=4)))["digest"]
        assert c.post("/api/v1/analyze", json={"model": "vit", "image": other}).is_success
    runs = [r.getMessage() for r in caplog.records if "positions of a picture" in r.getMessage()]
    assert len(runs) == 2 and all(m.startswith("vit read 17 positions") for m in runs), runs


def test_rollout_over_a_picture_is_its_definition_on_transformers_weights(served):
    """Attention rollout (Abnar & Zuidema 2020) of a picture's run, recomputed here from
    transformers' own eager attention: each layer's heads averaged, half identity, rows
    renormalised, the layers multiplied."""
    c, root = served
    picture = photo(seed=5)
    digest = upload(c, png(picture))["digest"]
    answer = c.post("/api/v1/lab/rollout", json={"model": "vit", "image": digest})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["tokens"][:2] == ["[CLS]", "▦ 0,0"]
    layers = eager_attentions(root, "vit", picture)
    rolled = torch.eye(17, dtype=torch.float64)
    for weights in layers:
        mixed = 0.5 * weights[0].double().mean(0) + 0.5 * torch.eye(17, dtype=torch.float64)
        rolled = (mixed / mixed.sum(-1, keepdim=True)) @ rolled
    assert np.abs(np.array(body["matrix"]) - rolled.numpy()).max() <= 1e-5


def test_attention_distance_is_its_definition_on_transformers_weights(served):
    """Each head's mean attention distance (the ViT paper's figure 7), recomputed here from
    transformers' eager attention: patch-to-patch weights renormalised, times the distance
    between patch centres in the model's pixels, averaged over the query patches."""
    c, root = served
    picture = photo(seed=6)
    digest = upload(c, png(picture))["digest"]
    answer = c.post("/api/v1/lab/distance", json={"model": "deit", "image": digest})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["patch"], body["grid"]) == ([8, 8], [4, 4])
    layers = eager_attentions(root, "deit", picture)
    centres = [(8 * (r + 0.5), 8 * (c + 0.5)) for r in range(4) for c in range(4)]
    apart = np.array([[np.hypot(a[0] - b[0], a[1] - b[1]) for b in centres] for a in centres])
    for layer, weights in enumerate(layers):
        on_patches = weights[0, :, 2:, 2:].double().numpy()  # ([CLS], [DIST] first)
        kept = on_patches.sum(-1, keepdims=True)
        expected = ((on_patches / kept) * apart).sum(-1).mean(-1)
        assert np.abs(np.array(body["distance"][layer]) - expected).max() <= 1e-3
        assert (
            np.abs(np.array(body["elsewhere"][layer]) - (1 - kept[..., 0]).mean(-1)).max() <= 1e-5
        )
    refused = c.post("/api/v1/lab/distance", json={"model": "pronounce", "text": "猫"})
    assert refused.status_code == 422
    assert "reads no picture, and this measures a picture's patches" in refused.json()["detail"]


def test_a_notebook_shows_a_picture_of_a_folder_or_of_a_model_in_memory(served):
    """attnviz.show(model, image=...): the picture held by the cell's own app, its digest in
    the view's link, the Picture view opened; the app reads it as the server does."""
    from urllib.parse import parse_qs

    import httpx2

    import attnviz

    _, root = served
    picture = np.asarray(photo(seed=7))
    in_memory = T.ViTModel.from_pretrained(root / "vit").eval()
    processor = T.AutoImageProcessor.from_pretrained(root / "vit", backend="pil")
    for shown in (
        attnviz.show(root / "vit", image=picture),
        attnviz.show(in_memory, image=picture, processor=processor),
    ):
        query = {k: v[0] for k, v in parse_qs(shown.search.lstrip("?")).items()}
        assert query["view"] == "picture" and "text" not in query
        server = shown._server  # (the cell's own app)

        async def analyzed(body=query, app=server.app) -> dict:
            transport = httpx2.ASGITransport(app=app)
            async with httpx2.AsyncClient(transport=transport, base_url="http://cell") as c:
                answer = await c.post(
                    "/api/v1/analyze", json={"model": body["model"], "image": body["img"]}
                )
                assert answer.status_code == 200, answer.text
                return answer.json()

        body = server.run(analyzed())
        assert (body["image"]["width"], body["image"]["height"]) == (70, 50)
        assert body["source_tokens"][:2] == ["[CLS]", "▦ 0,0"]
        shown.close()
    with pytest.raises(TypeError, match=r"show\(model, text\), show\(model, image=...\)"):
        attnviz.show(root / "vit")


def test_attention_flow_is_the_max_flow_networkx_finds_on_transformers_weights(served):
    """Attention flow (Abnar & Zuidema 2020) to [CLS] after the last layer, from each
    input position: the maximum flow networkx computes on the layered graph built here
    from transformers' eager attention (heads averaged, half identity, rows renormalised)."""
    import networkx as nx

    c, root = served
    picture = photo(seed=8)
    digest = upload(c, png(picture))["digest"]
    answer = c.post("/api/v1/lab/flow", json={"model": "vit", "image": digest, "query": 0})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    layers = eager_attentions(root, "vit", picture)
    graph = nx.DiGraph()
    for layer, weights in enumerate(layers):
        a = 0.5 * weights[0].double().mean(0).numpy() + 0.5 * np.eye(17)
        a = a / a.sum(-1, keepdims=True)
        for i in range(17):
            for j in range(17):
                graph.add_edge((layer, j), (layer + 1, i), capacity=a[i, j])
    expected = [nx.maximum_flow_value(graph, (0, j), (2, 0)) for j in range(17)]
    assert np.abs(np.array(body["flow"]) - expected).max() <= 2e-5  # (to a millionth an edge)
    assert body["tokens"][0] == "[CLS]" and body["query"] == 0
    far = c.post("/api/v1/lab/flow", json={"model": "vit", "image": digest, "query": 17})
    assert far.status_code == 422 and "out of range" in far.json()["detail"]


def test_a_client_pays_for_the_pixels_it_sends_and_a_picture_past_the_store_is_a_413():
    """A picture's price is a unit of work a megapixel, charged once its header is read
    (before its pixels are decoded): of a budget of 40 units a minute, work dearer than
    half of it waits for half to be there, so the third 20-megapixel picture waits; and a
    picture larger than the server keeps is refused, not kept in vain."""
    big = png(Image.new("RGB", (5000, 4000), (20, 120, 200)))
    settings = Settings(zoo=["pronounce"], torch_threads=1, client_cost_per_minute=40)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        for _ in range(2):
            sent = c.post("/api/v1/images", content=big, headers={"content-type": "image/png"})
            assert sent.status_code == 200, sent.text
        third = c.post("/api/v1/images", content=big, headers={"content-type": "image/png"})
        assert third.status_code == 429, third.text
        assert third.json()["detail"].startswith(
            "a picture of 20,000,000 pixels costs 20 units of work (a unit a megapixel)"
        )
    small_store = Settings(zoo=["pronounce"], torch_threads=1, images_bytes=1_000_000)
    with TestClient(create_app(small_store), raise_server_exceptions=False) as c:
        kept = c.post("/api/v1/images", content=png(photo()), headers={"content-type": "image/png"})
        assert kept.status_code == 200
        refused = c.post(
            "/api/v1/images",
            content=png(Image.new("RGB", (1000, 1000))),
            headers={"content-type": "image/png"},
        )
        assert refused.status_code == 413
        assert "4,000,000 bytes decoded, more than this server keeps" in refused.json()["detail"]
