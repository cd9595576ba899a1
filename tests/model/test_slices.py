"""MiniCPM-V's (4.6's, 4.7's) picture tokens where SliceTokens places them, checked by
the processor and by the model themselves. The processor: a mark drawn over a token's box
changes the pixels of the cell the placing names in the view it names (the whole picture,
or a slice), and of no other cell there (each view holds the whole picture's marks: a
slice's token is looked for in the slices, the whole picture's in it); the k-th token's
cell is the k-th of the views' cells row by row, the views in the order the processor
packs them (its NaViT packing undone). The model: get_image_features, run on the
processor's pixels with the patches' indices swapped in for features, puts in token k of
a view the patches of the k-th merge x merge block of its patch grid, row by row ("16x":
its window merger's 2 x 2 windows, then its merger's 2 x 2 of those: 4 x 4 patches;
"4x", the window merger skipped: 2 x 2). On tiny seeded folders read at a 64-pixel
scale_resolution (the matrix's 32 makes most views a single token)."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from PIL import Image

from attnviz.model.hf.tiles import SliceTokens
from attnviz.model.pretrained.sources import load_origin
from harness import vlm_matrix

from .test_image_tokens import mark

PATCH = 8  # (the tiny tower's patch, in the processor's pixels)


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    """A function: the runner of a tiny folder of a model type, made once a module."""
    made = {}

    def read(model_type: str):
        if model_type not in made:
            folder = vlm_matrix.saved(model_type, tmp_path_factory.mktemp(model_type))
            config = folder / "preprocessor_config.json"
            said = json.loads(config.read_text()) | {"scale_resolution": 64}
            config.write_text(json.dumps(said))
            made[model_type] = load_origin(folder)[0]
        return made[model_type]

    return read


def sent(runner, picture: Image.Image, mode: str = "16x"):
    """The processor's pixel_values (NaViT-packed) and target_sizes of a picture."""
    out = runner.processor(images=picture, text=runner.picture_prompt("hi"),
                           return_tensors="pt", downsample_mode=mode)  # fmt: skip
    return out["pixel_values"], out["target_sizes"]


def views(runner, picture: Image.Image) -> list[torch.Tensor]:
    """The processor's views of a picture, (3, H, W) each: its reshape_by_patch undone."""
    pixels, sizes = sent(runner, picture)
    found, at = [], 0
    for rows, columns in sizes.tolist():
        n = rows * columns * PATCH
        packed = pixels[0, :, :, at : at + n].reshape(3, PATCH, rows, columns, PATCH)
        found.append(packed.permute(0, 2, 1, 3, 4).reshape(3, rows * PATCH, columns * PATCH))
        at += n
    return found


def changed(marked: list[torch.Tensor], plain: list[torch.Tensor], side: int) -> list:
    """(view, row, column) of each token cell of `side` pixels a mark changed."""
    found = []
    for view, (a, b) in enumerate(zip(marked, plain, strict=True)):
        moved = (a - b).abs().sum(0) > 0.5
        h, w = moved.shape
        grid = moved.reshape(h // side, side, w // side, side).any(-1).any(1)
        found += [(view, *map(int, cell)) for cell in grid.nonzero()]
    return found


def named(position, grids: list[tuple[int, int]], columns: int) -> tuple[int, int, int]:
    """(view, row, column) the placing names a token: the whole picture's (a thumbnail's)
    cell, or its slice's, its row and column counted over the slices' grid
    (get_sliced_grid's `columns` of slices a row)."""
    if position.kind == "thumbnail" or len(grids) == 1:
        return 0, position.row, position.column
    rows, width = grids[1]  # (each slice's tokens: all alike)
    r, c = divmod(position.row, rows), divmod(position.column, width)
    return 1 + r[0] * columns + c[0], r[1], c[1]


@pytest.mark.parametrize("model_type, size", [("minicpmv4_6", (68, 40)),
                                              ("minicpmv4_6", (160, 90)),
                                              ("minicpmv4_7", (90, 160))])  # fmt: skip
def test_a_mark_over_each_tokens_box_lands_in_the_cell_the_placing_names(runner, model_type, size):
    read = runner(model_type)
    side = read.patches.patch  # (a token's side in the processor's pixels)
    blank = Image.new("RGB", size, (128, 128, 128))
    plain = views(read, blank)
    grids = [(v.shape[1] // side, v.shape[2] // side) for v in plain]
    order = [(v, r, c) for v, (rows, cols) in enumerate(grids)
             for r in range(rows) for c in range(cols)]  # fmt: skip
    _, sliced, _ = read.patches.layout(*size)
    assert (len(plain) > 1) == bool(sliced), (size, grids)
    placed = [p for p in read.read_prompt(blank, "hi").positions
              if p.kind in ("patch", "thumbnail")]  # fmt: skip
    assert len(placed) == len(order) == read.patches.count(*size)
    for k, position in enumerate(placed):
        view, row, column = named(position, grids, sliced[1] if sliced else 1)
        assert (view, row, column) == order[k], (size, k, position)
        hits = changed(views(read, mark(blank, position.box)), plain, side)
        # (the whole picture holds a slice's mark too, the slices the whole picture's)
        mine = [hit for hit in hits if (hit[0] == 0) == (view == 0)]
        assert mine == [order[k]], (size, k, position.label, hits)


def indices(n: int, width: int) -> torch.Tensor:
    """(1, n, width) features: the first a position's index, the others 0."""
    found = torch.zeros(1, n, width)
    found[0, :, 0] = torch.arange(n, dtype=torch.float32)
    return found


def merged(model, pixels: torch.Tensor, sizes: torch.Tensor, mode: str) -> list[torch.Tensor]:
    """Each view's (tokens, patches a token): which of the packed patches (their indices
    over the whole packing) each token get_image_features returns holds, run with hooks.
    The window merger's input swapped for the patches' indices, its attention silenced
    (its residual kept): the windows it flattens into its MLP, in the order it returns
    them. The merger's input swapped for the windows' (or, "4x", the patches') indices,
    its last MLP made to return the indices it reads: the blocks of its tokens, in the
    order it returns them. (The tower's layers between them keep the windows' order:
    they move no position.)"""
    tower, merger = model.model.vision_tower, model.model.merger
    width = tower.config.hidden_size
    windows: list[torch.Tensor] = []

    def swap(module, args):
        return (indices(args[0].shape[1], width), *args[1:])

    def read(features: torch.Tensor) -> torch.Tensor:  # (rows, parts): each part's index
        return features.reshape(len(features), -1, width)[..., 0]

    def carry(module, args, out):  # (a token: the indices it reads, then 0s)
        parts = read(args[0])
        return torch.cat([parts, out.new_zeros(len(out), out.shape[1] - parts.shape[1])], 1)

    hooks = [tower.vit_merger.register_forward_pre_hook(swap),
             tower.vit_merger.self_attn.register_forward_hook(
                 lambda module, args, out: (torch.zeros_like(out[0]), *out[1:])),
             tower.vit_merger.pre_norm.register_forward_pre_hook(
                 lambda module, args: windows.append(read(args[0]))),
             merger.register_forward_pre_hook(swap),
             merger.mlp[-1].register_forward_hook(carry)]  # fmt: skip
    try:
        with torch.no_grad():
            tokens = model.model.get_image_features(pixels, sizes, downsample_mode=mode)
    finally:
        for hook in hooks:
            hook.remove()
    assert len(windows) == (mode == "16x")
    held = [t[:, :4].long() for t in tokens.pooler_output]  # (2 x 2 a token)
    if windows:  # (a token's windows, each its 2 x 2 patches)
        held = [windows[0].long()[t].flatten(1) for t in held]
    return held


def block(token: int, columns: int, merge: int, width: int) -> list[int]:
    """The patches (indices row by row over a view `width` patches wide) of the k-th
    merge x merge block, the blocks row by row, `columns` a row."""
    r, c = divmod(token, columns)
    return sorted((r * merge + i) * width + c * merge + j
                  for i in range(merge) for j in range(merge))  # fmt: skip


@pytest.mark.parametrize("model_type", ["minicpmv4_6", "minicpmv4_7"])
@pytest.mark.parametrize("mode, merge", [("16x", 4), ("4x", 2)])
def test_each_tokens_patches_are_the_block_the_placing_names_it(runner, model_type, mode, merge):
    read = runner(model_type)
    # (the placing of a folder of that mode: its image processor's, its config's merge)
    images = copy.copy(read.processor.image_processor)
    images.downsample_mode = mode
    placing = SliceTokens(images, PATCH, merge)
    for size in [(68, 40), (160, 90)]:  # (one view; the whole picture and three slices)
        pixels, sizes = sent(read, Image.new("RGB", size, (128, 128, 128)), mode)
        held = merged(read.model.hf, pixels, sizes, mode)
        assert sum(len(t) for t in held) == placing.count(*size), (mode, size)
        at = 0
        for (rows, width), patches in zip(sizes.tolist(), held, strict=True):
            columns = width // merge
            assert patches.shape == (rows // merge * columns, merge * merge), (size, rows, width)
            for token, inside in enumerate((patches - at).tolist()):
                assert sorted(inside) == block(token, columns, merge, width), (size, token)
            at += rows * width
