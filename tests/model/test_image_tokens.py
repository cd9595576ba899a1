"""Where a vision-language model's picture tokens lie on the picture, checked by the
processor itself: a mark drawn over the box the map gives one token changes the pixels of
that token's cell of the processor's picture, and of no other. On tiny seeded folders of
the placings whose geometry is their own: DeepSeek-VL's and Janus's picture letterboxed
into a square, LightOnOcr's scaled to fit its longest edge and rounded up to whole
patches, Aya Vision's (InternVL's, Qianfan-OCR's) canvas of tiles and Idefics3's (and
SmolVLM's) tiles, each with its thumbnail (a tile's token looked for within the tiles, a
thumbnail's within the thumbnail: each holds the whole picture), Ovis2's whole picture
squeezed to its square, 2 x 2 patches a token; LLaVA-NeXT's base and
unpadded grid. LLaVA's is checked through the API in tests/app/test_vlm.py."""

from __future__ import annotations

import json

import pytest
import torch
import transformers as T
from PIL import Image, ImageDraw

from attnviz.model.checkpoints import CheckpointError
from attnviz.model.pretrained.sources import load_origin
from harness import vlm_matrix

# a picture wider than tall and one taller than wide: the padding falls on other sides
SIZES = [(90, 60), (40, 70)]


def cells(pixels: torch.Tensor, plain: torch.Tensor, side: int) -> torch.Tensor:
    """(tiles, rows, columns): which token cells of the processor's pictures (one, or a
    tile each) a mark changed."""
    changed = (pixels - plain).abs().sum(-3) > 0.5  # (tiles, H, W)
    changed = changed.reshape(-1, *changed.shape[-2:])
    t, h, w = changed.shape
    return changed.reshape(t, h // side, side, w // side, side).any(-1).any(2)


def mark(picture: Image.Image, box) -> Image.Image:
    """The picture with the middle half of a box painted red (a quarter of it inset on
    each side: clear of a pixel's rounding at its edges)."""
    left, top, right, bottom = box
    inset = (right - left) / 4, (bottom - top) / 4
    marked = picture.copy()
    ImageDraw.Draw(marked).rectangle(
        [left + inset[0], top + inset[1], right - inset[0], bottom - inset[1]], fill=(255, 0, 0)
    )
    return marked


def pixels_read(runner, picture: Image.Image) -> torch.Tensor:
    """The pixels the model reads of a picture: its processor's, with what the processor
    sends its image processor (Aya Vision's and InternVL's crop_to_patches, over their
    image processors' own, which the tiny folders leave at GotOcr2's default: off)."""
    return runner.processor(images=picture, text=runner.picture_prompt("hi"),
                            return_tensors="pt")["pixel_values"]  # fmt: skip


def cell_of(k: int, grid: tuple[int, int]) -> tuple[int, int, int]:
    """(tile, row, column) of the k-th picture token of the prompt, as the model reads the
    processor's pictures: a tile's tokens row by row, the tiles (the thumbnail last) in
    the order the processor gives them."""
    per = grid[0] * grid[1]
    return k // per, k % per // grid[1], k % grid[1]


MARKED = ["deepseek_vl", "janus", "lighton_ocr", "aya_vision", "internvl", "qianfan_ocr",
          "idefics3", "smolvlm", "ovis2", "granite_docling", "chameleon", "emu3",
          "deepseek_vl_hybrid"]  # fmt: skip


@pytest.mark.parametrize("model_type", MARKED)
def test_a_mark_over_a_tokens_box_lands_in_that_tokens_cell_alone(tmp_path, model_type):
    folder = vlm_matrix.saved(model_type, tmp_path)
    runner = load_origin(folder)[0]
    side = runner.patches.patch  # (a token's side in the processor's pixels)
    for size in SIZES:
        blank = Image.new("RGB", size, (128, 128, 128))
        read = runner.read_prompt(blank, "hi")
        placed = [p for p in read.positions if p.kind in ("patch", "thumbnail")]
        plain = pixels_read(runner, blank)
        tiles = cells(plain, plain, side).shape
        grid = tuple(tiles[1:])
        # (the tokens with a box: Emu3's row ends have none, its processor's count holds them)
        boxed = sum(p.box is not None for p in runner.patches.positions(*size))
        assert len(placed) == tiles[0] * grid[0] * grid[1] == boxed
        for k in (0, len(placed) // 2, len(placed) - 1):
            target = placed[k]
            left, top, right, bottom = target.box
            assert 0 <= left < right <= size[0] and 0 <= top < bottom <= size[1], target
            marked = mark(blank, target.box)
            pixels = pixels_read(runner, marked)
            tile, row, column = cell_of(k, grid)
            found = cells(pixels, plain, side)
            thumbnail = len(found) > 1 and tile == len(found) - 1
            assert (target.kind == "thumbnail") == thumbnail, target
            # (the tiles hold the mark as the thumbnail does: each is looked at alone)
            kept = found[tile:] if thumbnail else found[: len(found) - (len(found) > 1)]
            expected = [[0, row, column]] if thumbnail else [[tile, row, column]]
            assert kept.nonzero().tolist() == expected, (size, k, target)


@pytest.mark.parametrize("model_type", ["llava_next", "llava_next_video", "granite4_vision"])
def test_llava_nexts_marks_land_in_its_base_or_its_unpadded_grid(tmp_path, model_type):
    """LLaVA-NeXT's tokens (and LLaVA-NeXT-Video's, a picture read as LLaVA-NeXT reads it,
    through its own processor's class; Granite 4 Vision's, a token a 2 x 2 block of
    patches its windowed Q-Former's query starts from): the base picture's first, then the
    grid over its canvas of squares less the padding transformers' `unpad_image` drops, a
    newline ending each row. The cell each token's index names (found with transformers'
    own `select_best_resolution` and `unpad_image`) holds the mark drawn in its box."""
    from transformers.image_processing_utils import select_best_resolution
    from transformers.models.llava_next.modeling_llava_next import unpad_image

    folder = vlm_matrix.saved(model_type, tmp_path)
    runner = load_origin(folder)[0]
    images = T.AutoImageProcessor.from_pretrained(folder, backend="pil")
    p, side = runner.patches.patch, 32  # (a token's side, the tiny tower's square)
    n = side // p
    for size in SIZES:
        blank = Image.new("RGB", size, (128, 128, 128))
        read = runner.read_prompt(blank, "hi")
        placed = [x for x in read.positions if x.kind in ("patch", "thumbnail", "extra")]
        assert len(placed) == runner.patches.count(*size)
        best_h, best_w = select_best_resolution(size[::-1], images.image_grid_pinpoints)
        rows, columns = best_h // p, best_w // p
        kept = unpad_image(torch.arange(rows * columns).view(1, rows, columns), size[::-1])
        r0, c0 = divmod(int(kept[0, 0, 0]), columns)
        width = kept.shape[2] + 1  # (a row's tokens and its newline)
        assert len(placed) == n * n + kept.shape[1] * width
        plain = pixels_read(runner, blank)
        grid = [k for k in range(n * n, len(placed)) if (k - n * n) % width < width - 1]
        newlines = [k for k in range(n * n, len(placed)) if (k - n * n) % width == width - 1]
        assert {placed[k].kind for k in newlines} == {"extra"}
        for k in (0, n * n - 1, grid[0], grid[len(grid) // 2], grid[-1]):
            target = placed[k]
            marked = mark(blank, target.box)
            found = cells(pixels_read(runner, marked), plain, p)
            if k < n * n:  # the base: the whole picture in tile 0
                assert target.kind == "thumbnail"
                assert found[:1].nonzero().tolist() == [[0, k // n, k % n]], (size, k)
                continue
            r, c = divmod(k - n * n, width)
            row, column = r0 + r, c0 + c  # (on the canvas's grid)
            tile = 1 + row // n * (best_w // side) + column // n
            assert found[1:].nonzero().tolist() == [[tile - 1, row % n, column % n]], (size, k)


def test_banners_past_llava_nexts_unpadding_are_read_as_transformers_writes_them(tmp_path):
    """A banner far wider than tall keeps none of its grid's rows (its base's tokens
    alone); one far taller than wide keeps its rows but none of their patches (the base
    and a newline a row): as transformers' processor writes them."""
    folder = vlm_matrix.saved("llava_next", tmp_path)
    runner = load_origin(folder)[0]
    for size, newlines in (((300, 2), 0), ((2, 300), 4)):
        read = runner.read_prompt(Image.new("RGB", size, (128, 128, 128)), "hi")
        placed = [x for x in read.positions if x.kind in ("patch", "thumbnail", "extra")]
        assert [x.kind for x in placed] == ["thumbnail"] * 16 + ["extra"] * newlines, size
        assert runner.patches.count(*size) == 16 + newlines


def test_a_processor_that_disagrees_with_its_model_is_refused_when_read(tmp_path):
    """LLaVA's processor counts the class token it is told the tower adds: told none,
    it writes one image token fewer than the model reads. The folder is refused when
    read, saying so, rather than on each picture."""
    folder = vlm_matrix.saved("llava", tmp_path)
    config = folder / "processor_config.json"
    said = json.loads(config.read_text()) | {"num_additional_image_tokens": 0}
    config.write_text(json.dumps(said))
    with pytest.raises(
        CheckpointError, match="disagree on a 70 x 50 picture: its processor put 15"
    ):
        load_origin(folder)


def test_a_folders_tokens_a_tile_unlike_its_towers_is_refused_at_load(tmp_path):
    """SmolVLM's processor_config.json sizes its prompt (image_seq_len): a number other
    than its vision tower's tokens a tile is refused when the folder is read, not run."""
    folder = vlm_matrix.saved("smolvlm", tmp_path)
    config = folder / "processor_config.json"
    config.write_text(json.dumps(json.loads(config.read_text()) | {"image_seq_len": 10**10}))
    with pytest.raises(CheckpointError, match="writes 10000000000 tokens a tile, where its"):
        load_origin(folder)


def test_llava_onevisions_resampled_tokens_cover_the_patches_transformers_blends(tmp_path):
    """LLaVA-OneVision resamples its unpadded grid down (bilinear) past `anyres_max_N`
    squares' patches (the tiny one's N is 1). What each token blends is found with
    transformers' own `unpad_image` and torch's `interpolate` of the kept patches, as its
    `pack_image_features` does: a mark drawn in a token's box changes only patches that
    token blends, and some."""
    import math

    import torch.nn.functional as F
    from transformers.image_processing_utils import select_best_resolution
    from transformers.models.llava_next.modeling_llava_next import unpad_image

    folder = vlm_matrix.saved("llava_onevision", tmp_path)
    runner = load_origin(folder)[0]
    images = T.AutoImageProcessor.from_pretrained(folder, backend="pil")
    p, side = 8, 32
    n = side // p
    for size in SIZES:
        blank = Image.new("RGB", size, (128, 128, 128))
        read = runner.read_prompt(blank, "hi")
        grid = [x for x in read.positions if x.kind == "patch"]
        best_h, best_w = select_best_resolution(size[::-1], images.image_grid_pinpoints)
        rows, columns = best_h // p, best_w // p
        kept = unpad_image(torch.arange(rows * columns).view(1, rows, columns), size[::-1])
        r0, c0 = divmod(int(kept[0, 0, 0]), columns)
        kh, kw = kept.shape[1:]
        ratio = math.sqrt(kh * kw / (n * n))
        assert ratio > 1.1  # (resampled: the path under test)
        patches = torch.eye(kh * kw).view(1, kh * kw, kh, kw)
        blends = F.interpolate(patches, [int(kh // ratio), int(kw // ratio)], mode="bilinear")[0]
        h, w = blends.shape[1:]
        assert len(grid) == h * w
        plain = pixels_read(runner, blank)
        for k in range(len(grid)):
            marked = mark(blank, grid[k].box)
            found = cells(pixels_read(runner, marked), plain, p)
            changed = set()
            for tile, row, column in found[1:].nonzero().tolist():  # (the base aside)
                r = tile // (best_w // side) * n + row - r0
                c = tile % (best_w // side) * n + column - c0
                changed.add(r * kw + c)
            blended = set(blends[:, k // w, k % w].nonzero().flatten().tolist())
            assert changed and changed <= blended, (size, k, changed, blended)


@pytest.mark.parametrize("model_type", ["deepseek_vl", "janus", "deepseek_vl_hybrid"])
def test_a_banners_tokens_wholly_in_the_letterbox_are_named_padding(tmp_path, model_type):
    """A banner letterboxed into the square: its top and bottom rows of patches lie wholly
    in the padding (the processor's own pixels there are its background colour alone):
    "░ r,c", no box; every other token's box is on the picture."""
    folder = vlm_matrix.saved(model_type, tmp_path)
    runner = load_origin(folder)[0]
    images = T.AutoImageProcessor.from_pretrained(folder, backend="pil")
    banner = Image.new("RGB", (120, 30), (255, 0, 0))
    placed = [p for p in runner.read_prompt(banner, "hi").positions if p.kind != "text"]
    pixels = images(images=banner, return_tensors="pt")["pixel_values"][0]
    side = runner.patches.patch
    background = images(images=Image.new("RGB", (120, 30), images.background_color),
                        return_tensors="pt")["pixel_values"][0]  # fmt: skip
    for k, p in enumerate(placed):
        r, c = divmod(k, pixels.shape[-1] // side)
        cell = pixels[:, r * side : (r + 1) * side, c * side : (c + 1) * side]
        padding = bool(torch.equal(cell, background[:, r * side : (r + 1) * side,
                                                     c * side : (c + 1) * side]))  # fmt: skip
        assert (p.kind == "extra" and p.label == f"░ {r},{c}" and p.box is None) == padding, p
    assert any(p.kind == "extra" for p in placed) and any(p.kind == "patch" for p in placed)


def merged(model_type: str, model, side: int) -> torch.Tensor:
    """(tokens, patches a token): which of a tile's `side` x `side` patches (their indices,
    row by row) each of its tokens holds, by the model's own pixel shuffle, called as its
    image features are, on features that are the patches' indices."""
    patches = torch.arange(side * side, dtype=torch.float32).view(1, side * side, 1)
    if model_type in ("idefics3", "smolvlm"):
        connector = model.model.connector
        out = connector.pixel_shuffle(patches, connector.scale_factor)
    elif model_type == "granite_docling":  # (its coarse route: scale_factor x scale_factor)
        coarse = model.model.vision_model.connector.coarse
        out = coarse.pixel_shuffle(patches, coarse.scale_factor)
    elif model_type == "aya_vision":
        out = model.model.multi_modal_projector.pixel_shuffle(patches).reshape(1, -1, 4)
    else:  # (InternVL's, Qianfan-OCR's: on the patches' grid)
        grid = patches.reshape(1, side, side, 1)
        out = model.model.pixel_shuffle(grid, scale_factor=model.config.downsample_ratio)
        out = out.reshape(1, -1, out.shape[-1])
    return out[0].long()


@pytest.mark.parametrize("model_type", ["idefics3", "smolvlm", "aya_vision", "internvl",
                                        "qianfan_ocr", "granite_docling"])  # fmt: skip
def test_a_tiles_tokens_merge_its_patches_in_the_order_the_placing_names_them(tmp_path, model_type):
    """The boxes of a tile's tokens assume the pixel shuffle merges each 2 x 2 block of
    patches into one token, the tokens row by row: transformers' own pixel shuffle,
    given the patches' indices, says which patches each token holds."""
    folder = vlm_matrix.saved(model_type, tmp_path)
    model = T.AutoModelForImageTextToText.from_pretrained(folder)
    runner = load_origin(folder)[0]
    n = runner.patches.side  # (tokens a tile's side)
    side = 2 * n  # (patches a tile's side: 2 x 2 a token)
    held = merged(model_type, model, side)
    assert held.shape == (n * n, 4)
    for token, patches in enumerate(held.tolist()):
        blocks = {(p // side // 2, p % side // 2) for p in patches}
        assert blocks == {divmod(token, n)}, (token, patches)


def own_resolution_processors() -> list[str]:
    """transformers' PIL image processors with Qwen2-VL's settings (a merge and a temporal
    patch): those the own-resolution placing may read."""
    found = []
    for name in sorted(n for n in dir(T) if n.endswith("ImageProcessorPil")):
        try:
            made = getattr(T, name)()
        except Exception:  # (one that needs settings of its own: not at its defaults)
            continue
        if {"merge_size", "temporal_patch_size"} <= set(vars(made)):
            found.append(name)
    return found


# (those of the architectures the matrix serves by this placing: never refused)
PLACED = {"Qwen2VLImageProcessorPil", "Glm4vImageProcessorPil", "Glm46VImageProcessorPil"}


def test_the_own_resolution_placing_is_each_image_processors_grid_or_refused():
    """Each such image processor at its defaults (found here, not at collection: importing
    them all takes seconds): the placing's grid of a picture is the grid the processor
    itself sends (`image_grid_thw`, merged), wide, tall and small; or the placing refuses
    the processor when it is read, naming it (GLM-4V's resize rule, which counts frames,
    was read as Qwen2-VL's and miscounted every picture)."""
    found = own_resolution_processors()
    assert set(found) >= PLACED
    for name in found:
        own_resolution_grid(name)


def own_resolution_grid(name: str) -> None:
    from attnviz.model.hf.resolution import DynamicTokens

    made = getattr(T, name)()
    try:
        placing = DynamicTokens(made)
    except CheckpointError as exc:
        assert name in str(exc) and name not in PLACED, exc
        return
    merge = made.merge_size
    for width, height in [(70, 50), (300, 120), (90, 300)]:
        sent = made(images=Image.new("RGB", (width, height)), return_tensors="pt")
        _, rows, columns = sent["image_grid_thw"][0].tolist()
        w, h = placing.place(width, height).size
        assert (h // placing.patch, w // placing.patch) == (rows // merge, columns // merge), (
            name, width, height,
        )  # fmt: skip
        assert placing.count(width, height) == rows * columns // merge**2


# how a processor packs a picture's patches: Qwen2-VL's a token's merge x merge at a time
# (its merger reads them so); HunYuanVL's and HY-V4's row by row over the patch grid (their
# merger, a stride-2 convolution over that grid, reads each token's 2 x 2 block of it)
RASTER = {"hunyuan_vl", "hy_v4_vl"}


@pytest.mark.parametrize("model_type", ["glm5_next", "hunyuan_vl", "hy_v4_vl", "glm4v"])
def test_own_resolution_marks_move_their_tokens_patches_alone(tmp_path, model_type):
    """Qwen2-VL's kin whose tokens are placed otherwise than Qwen2-VL's (GLM-5's padded
    canvas; HunYuanVL's and HY-V4's newline a row, the first's begin and end; GLM-4V's
    frames): a mark in a token's box moves only patches of that token's block of the
    processor's pixels (all of them where the box is whole; a box clipped by the
    padding, part), and a token named padding has none of the picture."""
    folder = vlm_matrix.saved(model_type, tmp_path)
    runner = load_origin(folder)[0]
    m = runner.processor.image_processor.merge_size
    for size in SIZES:
        blank = Image.new("RGB", size, (128, 128, 128))
        read = runner.read_prompt(blank, "hi")
        grid = [p for p in read.positions if p.label[0] in "▦░"]
        _, rows, columns = read.inputs["image_grid_thw"][0].tolist()
        assert rows * columns == m * m * len(grid), (size, len(grid))
        plain = pixels_read(runner, blank)
        for k, target in enumerate(grid):
            r, c = divmod(k, columns // m)
            assert (target.row, target.column) == (r, c), target
            if target.box is None:  # (wholly in the padding)
                continue
            moved = (pixels_read(runner, mark(blank, target.box)) - plain).abs().sum(-1) > 0.5
            found = set(moved.nonzero().flatten().tolist())
            block = {(m * r + i, m * c + j) for i in range(m) for j in range(m)}
            if model_type in RASTER:
                patches = {divmod(n, columns) for n in found}
            else:  # (a token's m x m patches after another's, tokens row by row)
                token, at = (divmod(n, m * m) for n in found), columns // m
                patches = {(m * (t // at) + i // m, m * (t % at) + i % m) for t, i in token}
            assert patches and patches <= block, (size, k, sorted(patches))
            # (GLM-5's boxes clipped by its canvas's padding hold part of their block)
            assert patches == block or model_type == "glm5_next", (size, k, sorted(patches))
