"""A vision-language model of yours served: a tiny seeded LLaVA (a Llama over a CLIP vision
tower), an Idefics3 (whose processor cuts the picture into tiles) and a Qwen2-VL (which
reads it at its own resolution), each saved with its processor. A picture and a text are
read in one pass of the language model, each position a text token or a patch placed on
the picture, every head's weights transformers' own eager attention on the processor's
input; a picture is continued as transformers' `generate` continues it; without a
picture the model reads and continues text as any decoder does."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers as T
from fastapi.testclient import TestClient
from PIL import Image, ImageDraw

from attnviz.app.main import create_app
from attnviz.app.settings import Settings
from harness import vlm_matrix
from harness.checkpoints import saved_idefics3, saved_llava, saved_qwen2_vl
from tests.app.test_api import decode
from tests.app.test_pictures import photo, png, upload

TEXT = "What is in the picture?"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlm")
    saved_llava(root / "llava")
    saved_llava(root / "llava-full", strategy="full")
    saved_idefics3(root / "idefics3")
    saved_qwen2_vl(root / "qwen2-vl")
    for name in ("gemma3", "blip-2"):
        (root / name).mkdir()
        vlm_matrix.saved(name, root / name)
    names = ("llava", "llava-full", "idefics3", "qwen2-vl", "gemma3", "blip-2")
    settings = Settings(
        zoo=["pronounce"], torch_threads=1, client_cost_per_minute=0,
        models={name: root / name for name in names},
    )  # fmt: skip
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c, root


def reference(root, name: str):
    """transformers' own model (eager attention) and processor of the folder."""
    model = T.AutoModelForImageTextToText.from_pretrained(
        root / name, attn_implementation="eager"
    ).eval()
    return model, T.AutoProcessor.from_pretrained(root / name, backend="pil")


def test_a_vision_language_model_is_listed_as_reading_text_and_pictures(served):
    c, _ = served
    info = {m["id"]: m for m in c.get("/api/v1/models").json()}["llava"]
    assert info["status"] == "served", info
    assert info["architecture"] == "decoder-only"
    can = info["capabilities"]
    assert can["text"] and can["pictures"] and can["generation"]


@pytest.mark.parametrize("name", ["llava", "llava-full"])
def test_a_picture_and_a_text_are_one_pass_whose_heads_are_transformers_eager(served, name):
    c, root = served
    picture = photo()
    digest = upload(c, png(picture))["digest"]
    analysis = c.post("/api/v1/analyze", json={"model": name, "image": digest, "text": TEXT})
    assert analysis.status_code == 200, analysis.text
    body = analysis.json()
    model, processor = reference(root, name)
    inputs = processor(images=picture, text=f"<image>\n{TEXT}", return_tensors="pt")
    ids = inputs["input_ids"][0].tolist()
    # the prompt: the picture's 16 patches (and the class token, kept by "full"), then the text
    leading = ["[CLS]"] if name == "llava-full" else []
    patches = leading + [f"▦ {r},{c}" for r in range(4) for c in range(4)]
    tokens = body["source_tokens"]
    assert tokens[: len(patches)] == patches
    assert "".join(tokens[len(patches) :]) == "↵" + TEXT.replace(" ", "␣")
    assert len(tokens) == len(ids)
    image = body["image"]
    assert image["grid"] == [4, 4] and (image["width"], image["height"]) == (70, 50)
    kinds = [p["kind"] for p in image["positions"]]
    assert kinds == [*(["cls"] if leading else []), *["patch"] * 16,
                     *["text"] * (len(ids) - len(patches))]  # fmt: skip
    assert [p["label"] for p in image["positions"]] == tokens
    # CLIP's processor: its shortest side to 32 (44 x 32), the centre 32 x 32 cropped
    box = image["positions"][len(leading) + 4 * 2 + 3]["box"]  # row 2, column 3
    expected = [(6 + 24) * 70 / 44, 16 * 50 / 32, (6 + 32) * 70 / 44, 24 * 50 / 32]
    assert box == pytest.approx(expected)
    with torch.no_grad():
        out = model(**inputs, output_attentions=True)
    answer = c.post(
        "/api/v1/attention",
        json={"model": name, "image": digest, "text": TEXT, "encoding": "f4", "kinds": ["weights"]},
    )
    assert answer.status_code == 200, answer.text
    blocks = answer.json()["blocks"]
    assert [b["layer"] for b in blocks] == [0, 1]
    for block in blocks:
        got = decode(block["data"])
        assert got.shape == out.attentions[block["layer"]][0].shape
        assert np.abs(got - out.attentions[block["layer"]][0].numpy()).max() <= 1e-5
    # the next token the pass predicts is transformers' own
    (last,) = [n for n in body["next_tokens"] if n["position"] == len(ids) - 1]
    assert last["top"][0]["id"] == int(out.logits[0, -1].argmax())
    assert body["output"] == [last["top"][0]["token"]]


def test_each_patches_box_lies_over_the_mark_drawn_on_it(served):
    """A mark drawn over the box the map gives one patch lands in that patch of the
    processor's pixels, and in no other."""
    c, root = served
    _, processor = reference(root, "llava")
    blank = Image.new("RGB", (90, 60), (128, 128, 128))
    digest = upload(c, png(blank))["digest"]
    body = c.post("/api/v1/analyze", json={"model": "llava", "image": digest, "text": "hi"}).json()
    patches = [p for p in body["image"]["positions"] if p["kind"] == "patch"]
    plain = processor.image_processor(images=blank, return_tensors="pt")["pixel_values"][0]
    for target in (patches[0], patches[6], patches[15]):
        left, top, right, bottom = target["box"]
        marked = blank.copy()
        inset = (right - left) / 4, (bottom - top) / 4  # (a pixel's rounding from its edges)
        ImageDraw.Draw(marked).rectangle(
            [left + inset[0], top + inset[1], right - inset[0], bottom - inset[1]], fill=(255, 0, 0)
        )
        pixels = processor.image_processor(images=marked, return_tensors="pt")["pixel_values"][0]
        changed = (pixels - plain).abs().sum(0) > 0.5  # (H, W) of the processor's picture
        cells = changed.reshape(4, 8, 4, 8).any(-1).any(1)  # (rows, columns) of patches
        assert cells.nonzero().tolist() == [[target["row"], target["column"]]], target


@pytest.mark.parametrize("name", ["llava", "blip-2"])
def test_without_a_picture_it_reads_and_continues_text_as_transformers_does(served, name):
    """BLIP-2's pass asks for a picture every time: a text alone is its language model's,
    transformers' own (the same modules), not a 500."""
    c, root = served
    whole, processor = reference(root, name)
    model = whole.language_model if name == "blip-2" else whole
    ids = processor.tokenizer("The quick brown fox", return_tensors="pt")["input_ids"]
    made = model.generate(ids, max_new_tokens=8, do_sample=False)[0, ids.shape[1] :].tolist()
    answer = c.post(
        "/api/v1/generate", json={"model": name, "text": "The quick brown fox",
                                  "max_new_tokens": 8},
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    body = answer.json()
    # transformers' greedy continuation, to its end token (kept) or 8 tokens
    assert body["continuation"] == made, (body["continuation"], made)
    asked = {
        "model": name,
        "text": "The quick brown fox",
        "encoding": "f4",
        "kinds": ["weights"],
    }
    weights = c.post("/api/v1/attention", json=asked)
    assert weights.status_code == 200, weights.text
    with torch.no_grad():
        out = model(input_ids=ids, output_attentions=True)
    for block in weights.json()["blocks"]:
        expected = out.attentions[block["layer"]][0].numpy()
        assert np.abs(decode(block["data"]) - expected).max() <= 1e-5


def test_a_picture_read_as_a_chat_turn_is_refused_with_its_reason(served):
    c, _ = served
    digest = upload(c, png(photo(seed=3)))["digest"]
    answer = c.post(
        "/api/v1/analyze", json={"model": "llava", "image": digest, "text": "hi", "chat": True}
    )
    assert answer.status_code == 422
    assert "no chat turn is read" in answer.json()["detail"]


def test_a_picture_is_continued_as_transformers_does_and_each_new_token_looks_at_it(served):
    """Generation after a picture and a text: transformers' greedy continuation; the run
    of the prompt and what was generated, each new token's row over the picture's patches
    transformers' eager weights on the whole sequence."""
    c, root = served
    model, processor = reference(root, "llava")
    picture = photo(seed=5)
    digest = upload(c, png(picture))["digest"]
    inputs = processor(images=picture, text=f"<image>\n{TEXT}", return_tensors="pt")
    prompt = inputs["input_ids"].shape[1]
    made = model.generate(**inputs, max_new_tokens=8, do_sample=False)[0, prompt:].tolist()
    asked = {"model": "llava", "image": digest, "text": TEXT, "max_new_tokens": 8}
    answer = c.post("/api/v1/generate", json=asked)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["continuation"] == made
    patches = [f"▦ {r},{c}" for r in range(4) for c in range(4)]
    assert body["prompt_tokens"][:16] == patches and len(body["prompt_tokens"]) == prompt
    assert "<image>" not in body["prompt_tokens"]
    # the whole sequence's run: the prompt's pass with what was generated after it
    full = {"model": "llava", "image": digest, "text": TEXT, "continuation": made}
    body = c.post("/api/v1/analyze", json=full).json()
    assert len(body["source_tokens"]) == prompt + len(made)
    assert [p["kind"] for p in body["image"]["positions"]][prompt:] == ["text"] * len(made)
    weights = c.post("/api/v1/attention", json={**full, "encoding": "f4", "kinds": ["weights"]})
    assert weights.status_code == 200, weights.text
    sequence = torch.tensor([[*inputs["input_ids"][0].tolist(), *made]])
    with torch.no_grad():
        out = model(input_ids=sequence, pixel_values=inputs["pixel_values"], output_attentions=True)
    for block in weights.json()["blocks"]:
        got = decode(block["data"])
        expected = out.attentions[block["layer"]][0].numpy()
        assert np.abs(got - expected).max() <= 1e-5
        # each generated token gives the picture's patches a share of its attention
        assert (got[:, prompt:, :16].sum(-1) > 0).all()


@torch.no_grad()
def assert_heads_equal(c, name: str, digest: str, model, inputs) -> None:
    """Every layer's heads the server sends on the picture and TEXT equal transformers'
    eager weights (the reference `model` on the processor's `inputs` of the same)."""
    out = model(**inputs, output_attentions=True)
    asked = {"model": name, "image": digest, "text": TEXT, "encoding": "f4"}
    blocks = c.post("/api/v1/attention", json={**asked, "kinds": ["weights"]}).json()["blocks"]
    assert [b["layer"] for b in blocks] == list(range(len(out.attentions)))
    for block in blocks:
        expected = out.attentions[block["layer"]][0].numpy()
        assert decode(block["data"]).shape == expected.shape
        assert np.abs(decode(block["data"]) - expected).max() <= 1e-5


def changed_cells(before, after, side: int) -> set[tuple[int, int, int]]:
    """(tile, row, column) of each token's block of the processor's pixels (tiles, C, H, W)
    that a mark changed."""
    moved = (after - before).abs().sum(1) > 0.5  # (tiles, H, W)
    tiles, height, width = moved.shape
    blocks = moved.reshape(tiles, side, height // side, side, width // side).any(-1).any(2)
    return {tuple(cell) for cell in blocks.nonzero().tolist()}


def tokens_of(model, tile) -> torch.Tensor:
    """A tile's tokens (tokens, features) before its vision tower's attention mixes them:
    its patch embeddings merged by the model's own pixel shuffle."""
    inner = model.model
    with torch.no_grad():
        patches = torch.ones(1, *(s // 8 for s in tile.shape[-2:]), dtype=torch.bool)
        embedded = inner.vision_model.embeddings(tile[None], patch_attention_mask=patches)
        embedded = embedded.contiguous()
        return inner.connector.pixel_shuffle(embedded, model.config.scale_factor)[0]


def test_a_tiled_pictures_tokens_are_idefics3s_and_each_lies_over_its_mark(served):
    """Idefics3: the picture cut into tiles (each tile's patches merged 2 x 2 into a
    token) and read again whole as a thumbnail; every head transformers' eager attention;
    a mark drawn in any token's box lands in that token's block of its tile, and nowhere
    else among the tiles, and moves that token alone of the model's own merged patches."""
    c, root = served
    model, processor = reference(root, "idefics3")
    picture = photo()  # 70 x 50: its longest side to 64, then 64 x 64: 2 x 2 tiles
    digest = upload(c, png(picture))["digest"]
    body = c.post("/api/v1/analyze", json={"model": "idefics3", "image": digest, "text": TEXT})
    assert body.status_code == 200, body.text
    body = body.json()
    positions = body["image"]["positions"]
    tiles = [p for p in positions if p["kind"] == "patch"]
    thumbnail = [p for p in positions if p["kind"] == "thumbnail"]
    assert body["image"]["grid"] == [4, 4]  # (2 x 2 tiles of 2 x 2 tokens)
    assert [p["label"] for p in tiles[:8]] == [
        "▦ 0,0", "▦ 0,1", "▦ 1,0", "▦ 1,1", "▦ 0,2", "▦ 0,3", "▦ 1,2", "▦ 1,3"
    ]  # fmt: skip
    assert [p["label"] for p in thumbnail] == ["▣ 0,0", "▣ 0,1", "▣ 1,0", "▣ 1,1"]
    assert thumbnail[3]["box"] == pytest.approx([35, 25, 70, 50])
    assert "<image>" not in body["source_tokens"]
    inputs = processor(images=[picture], text=f"<image>\n{TEXT}", return_tensors="pt")
    assert len(body["source_tokens"]) == inputs["input_ids"].shape[1]
    assert_heads_equal(c, "idefics3", digest, model, inputs)
    # the marks: on a 100 x 40 picture (1 x 2 tiles), in a tile token's box and in a
    # thumbnail token's
    blank = Image.new("RGB", (100, 40), (128, 128, 128))
    digest = upload(c, png(blank))["digest"]
    body = c.post("/api/v1/analyze", json={"model": "idefics3", "image": digest, "text": "hi"})
    positions = body.json()["image"]["positions"]
    placed = [p for p in positions if p["kind"] in ("patch", "thumbnail")]
    assert [p["kind"] for p in placed].count("patch") == 8  # (2 tiles)
    plain = processor.image_processor(images=[[blank]], return_tensors="pt")["pixel_values"][0]
    for index, target in enumerate(placed):
        left, top, right, bottom = target["box"]
        inset = (right - left) / 4, (bottom - top) / 4
        marked = blank.copy()
        ImageDraw.Draw(marked).rectangle(
            [left + inset[0], top + inset[1], right - inset[0], bottom - inset[1]], fill=(255, 0, 0)
        )
        pixels = processor.image_processor(images=[[marked]], return_tensors="pt")["pixel_values"]
        cells = changed_cells(plain, pixels[0], 2)
        whole = len(pixels[0]) - 1  # (the thumbnail: the last tile)
        # the model's own order of a tile's tokens: its patch embeddings through its
        # connector's pixel shuffle; the mark moves the token of the map's order only
        tile, k = divmod(index, 4) if target["kind"] == "patch" else (whole, index - 8)
        moved = tokens_of(model, pixels[0][tile]) - tokens_of(model, plain[tile])
        assert (moved.abs().sum(-1) > 1e-6).nonzero().flatten().tolist() == [k], target
        if target["kind"] == "patch":
            assert {cell for cell in cells if cell[0] != whole} == {(tile, *divmod(k, 2))}
        else:
            assert {cell for cell in cells if cell[0] == whole} == {
                (whole, target["row"], target["column"])
            }, target


def qwen_reference(root, picture, text: str) -> dict:
    """Qwen2-VL's input for a picture and a text, made in the test from its definition:
    transformers' image processor's pixels and grid, and the prompt's image token
    repeated once per merged token (its processor's own class needs torchvision here)."""
    images = T.Qwen2VLImageProcessorPil.from_pretrained(root / "qwen2-vl")
    tokenizer = T.PreTrainedTokenizerFast.from_pretrained(root / "qwen2-vl")
    made = images(images=picture, return_tensors="pt")
    tokens = int(made["image_grid_thw"].prod()) // 4
    prompt = "<|vision_start|>" + "<|image_pad|>" * tokens + f"<|vision_end|>\n{text}"
    ids = tokenizer(prompt, return_tensors="pt")
    # (its token types: 1 for the picture's, 0 for the text's)
    types = (ids["input_ids"] == tokenizer.convert_tokens_to_ids("<|image_pad|>")).long()
    return {**ids, **made, "mm_token_type_ids": types}


def test_a_picture_its_processor_refuses_is_a_422_saying_why(served):
    """Qwen2-VL's resize rule refuses a picture past 200 to 1 (transformers' own check):
    a strip of 3,000 x 10 pixels is a 422 naming that, never a 500, and the next picture
    is read."""
    c, _ = served
    digest = upload(c, png(photo(width=3000, height=10, seed=4)))["digest"]
    answer = c.post("/api/v1/analyze", json={"model": "qwen2-vl", "image": digest, "text": TEXT})
    assert answer.status_code == 422, answer.text
    assert "cannot read this 3,000 x 10 picture" in answer.json()["detail"]
    assert "aspect ratio" in answer.json()["detail"]
    digest = upload(c, png(photo(seed=4)))["digest"]
    again = c.post("/api/v1/analyze", json={"model": "qwen2-vl", "image": digest, "text": TEXT})
    assert again.status_code == 200, again.text


def test_a_picture_at_its_own_resolution_is_qwen2_vls_and_continued_as_it_does(served):
    """Qwen2-VL: the picture resized to its own multiple of a merged token (no crop),
    2 x 2 patches a token; every head transformers' eager attention, its greedy
    continuation of the picture transformers' `generate` (its positions over the
    picture's rows and columns kept through the cache); a mark in any token's box moves
    exactly that token's four patches of the processor's pixels."""
    c, root = served
    model = T.AutoModelForImageTextToText.from_pretrained(
        root / "qwen2-vl", attn_implementation="eager"
    ).eval()
    picture = photo(width=120, height=60, seed=2)
    digest = upload(c, png(picture))["digest"]
    inputs = qwen_reference(root, picture, TEXT)
    rows, columns = (int(n) // 2 for n in inputs["image_grid_thw"][0, 1:])
    assert (rows, columns) == (2, 4)  # (120 x 60: 112 x 56 pixels, 4 x 8 patches)
    body = c.post("/api/v1/analyze", json={"model": "qwen2-vl", "image": digest, "text": TEXT})
    assert body.status_code == 200, body.text
    body = body.json()
    assert body["image"]["grid"] == [rows, columns]
    labels = [f"▦ {r},{k}" for r in range(rows) for k in range(columns)]
    assert body["source_tokens"][1 : 1 + rows * columns] == labels
    assert len(body["source_tokens"]) == inputs["input_ids"].shape[1]
    assert_heads_equal(c, "qwen2-vl", digest, model, inputs)
    prompt = inputs["input_ids"].shape[1]
    made = model.generate(**inputs, max_new_tokens=8, do_sample=False)[0, prompt:].tolist()
    asked = {"model": "qwen2-vl", "image": digest, "text": TEXT, "max_new_tokens": 8}
    answer = c.post("/api/v1/generate", json=asked)
    assert answer.status_code == 200, answer.text
    assert answer.json()["continuation"] == made
    # the sequence's run: the generated tokens read as text after the picture
    asked = {**asked, "continuation": made, "encoding": "f4", "kinds": ["weights"]}
    del asked["max_new_tokens"]
    blocks = c.post("/api/v1/attention", json=asked).json()["blocks"]
    whole = {**inputs, "input_ids": torch.tensor([[*inputs["input_ids"][0].tolist(), *made]])}
    whole["mm_token_type_ids"] = torch.nn.functional.pad(inputs["mm_token_type_ids"], (0, 8))
    with torch.no_grad():
        out = model(**{k: v for k, v in whole.items() if k != "attention_mask"},
                    output_attentions=True)  # fmt: skip
    for block in blocks:
        expected = out.attentions[block["layer"]][0].numpy()
        assert np.abs(decode(block["data"]) - expected).max() <= 1e-5
    # the marks, on a blank picture of the same size
    blank = Image.new("RGB", (120, 60), (128, 128, 128))
    digest = upload(c, png(blank))["digest"]
    body = c.post("/api/v1/analyze", json={"model": "qwen2-vl", "image": digest, "text": "hi"})
    placed = [p for p in body.json()["image"]["positions"] if p["kind"] == "patch"]
    plain = qwen_reference(root, blank, "hi")["pixel_values"]
    for k, target in enumerate(placed):
        left, top, right, bottom = target["box"]
        inset = (right - left) / 4, (bottom - top) / 4
        marked = blank.copy()
        ImageDraw.Draw(marked).rectangle(
            [left + inset[0], top + inset[1], right - inset[0], bottom - inset[1]], fill=(255, 0, 0)
        )
        pixels = qwen_reference(root, marked, "hi")["pixel_values"]
        moved = ((pixels - plain).abs().sum(-1) > 0.5).nonzero().flatten().tolist()
        assert moved == [4 * k, 4 * k + 1, 4 * k + 2, 4 * k + 3], target


def test_a_notebook_captures_and_shows_a_picture_and_a_text_of_a_vlm_folder(served):
    """attnviz.capture(folder, text, image=...) and attnviz.show(folder, text, image=...):
    the run the server makes, each position named; the view's link holds both."""
    from urllib.parse import parse_qs

    import attnviz

    c, root = served
    picture = photo(seed=9)
    captured = attnviz.capture(root / "llava", TEXT, image=np.asarray(picture))
    digest = upload(c, png(picture))["digest"]
    body = c.post("/api/v1/analyze", json={"model": "llava", "image": digest, "text": TEXT})
    assert captured.source_tokens == body.json()["source_tokens"]
    assert [p.kind for p in captured.positions][:16] == ["patch"] * 16
    shown = attnviz.show(root / "llava", TEXT, image=picture)
    query = {k: v[0] for k, v in parse_qs(shown.search.lstrip("?")).items()}
    assert query["view"] == "picture" and query["text"] == TEXT and len(query["img"]) == 64
    shown.close()
    with pytest.raises(TypeError, match="a model in memory reads one or the other"):
        attnviz.capture(T.LlavaForConditionalGeneration.from_pretrained(root / "llava"), TEXT,
                        image=picture)  # fmt: skip


def test_gemma_3s_pooled_tokens_each_lie_over_their_mark(served):
    """Gemma 3: the picture resized to its square, its 4 x 4 patches averaged 2 x 2 into
    2 x 2 tokens; a mark in any token's box moves that token alone of the model's own
    projector's tokens (its patch embeddings pooled as it pools them), and the prompt's
    picture is its soft tokens, each named by its place."""
    c, root = served
    model = T.AutoModelForImageTextToText.from_pretrained(root / "gemma3").eval()
    processor = T.AutoProcessor.from_pretrained(root / "gemma3", backend="pil")
    blank = Image.new("RGB", (90, 60), (128, 128, 128))
    digest = upload(c, png(blank))["digest"]
    body = c.post("/api/v1/analyze", json={"model": "gemma3", "image": digest, "text": TEXT})
    assert body.status_code == 200, body.text
    body = body.json()
    placed = [p for p in body["image"]["positions"] if p["kind"] == "patch"]
    assert [p["label"] for p in placed] == ["▦ 0,0", "▦ 0,1", "▦ 1,0", "▦ 1,1"]
    assert placed[3]["box"] == pytest.approx([45, 30, 90, 60])
    assert "<start_of_image>" in body["source_tokens"]

    def tokens(picture) -> torch.Tensor:
        pixels = processor.image_processor(images=picture, return_tensors="pt")["pixel_values"]
        inner = model.model
        with torch.no_grad():
            embedded = inner.vision_tower.embeddings(pixels)
            return inner.multi_modal_projector(embedded)[0]

    plain = tokens(blank)
    for k, target in enumerate(placed):
        left, top, right, bottom = target["box"]
        inset = (right - left) / 4, (bottom - top) / 4
        marked = blank.copy()
        ImageDraw.Draw(marked).rectangle(
            [left + inset[0], top + inset[1], right - inset[0], bottom - inset[1]], fill=(255, 0, 0)
        )
        moved = (tokens(marked) - plain).abs().sum(-1) > 1e-6
        assert moved.nonzero().flatten().tolist() == [k], target
