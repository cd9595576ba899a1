"""Where a vision-language model's picture tokens lie on the picture, checked by the
processor itself: a mark drawn over the box the map gives one token changes the pixels of
that token's cell of the processor's picture, and of no other. On tiny seeded folders of
the placings whose geometry is their own: DeepSeek-VL's and Janus's picture letterboxed
into a square, LightOnOcr's scaled to fit its longest edge and rounded up to whole patches
(LLaVA's is checked through the API in tests/app/test_vlm.py)."""

from __future__ import annotations

import pytest
import torch
import transformers as T
from PIL import Image, ImageDraw

from attnviz.model.pretrained.sources import load_origin
from harness import vlm_matrix

# a picture wider than tall and one taller than wide: the padding falls on other sides
SIZES = [(90, 60), (40, 70)]


@pytest.mark.parametrize("model_type", ["deepseek_vl", "janus", "lighton_ocr"])
def test_a_mark_over_a_tokens_box_lands_in_that_tokens_cell_alone(tmp_path, model_type):
    folder = vlm_matrix.saved(model_type, tmp_path)
    runner = load_origin(folder)[0]
    images = T.AutoProcessor.from_pretrained(folder, backend="pil").image_processor
    side = runner.patches.patch  # (a token's side in the processor's pixels)
    for size in SIZES:
        blank = Image.new("RGB", size, (128, 128, 128))
        read = runner.read_prompt(blank, "hi")
        placed = [p for p in read.positions if p.kind == "patch"]
        rows = 1 + max(p.row for p in placed)
        columns = 1 + max(p.column for p in placed)
        assert len(placed) == rows * columns == sum(t == runner.image_token_id for t in read.ids)
        plain = images(images=blank, return_tensors="pt")["pixel_values"][0]
        for target in (placed[0], placed[len(placed) // 2], placed[-1]):
            left, top, right, bottom = target.box
            assert 0 <= left < right <= size[0] and 0 <= top < bottom <= size[1], target
            marked = blank.copy()
            inset = (right - left) / 4, (bottom - top) / 4  # (a pixel's rounding at its edges)
            ImageDraw.Draw(marked).rectangle(
                [left + inset[0], top + inset[1], right - inset[0], bottom - inset[1]],
                fill=(255, 0, 0),
            )
            pixels = images(images=marked, return_tensors="pt")["pixel_values"][0]
            changed = (pixels - plain).abs().sum(0) > 0.5  # (H, W) of the processor's picture
            h, w = changed.shape
            cells = changed.reshape(h // side, side, w // side, side).any(-1).any(1)
            assert cells[:rows, :columns].any(), target
            assert cells.nonzero().tolist() == [[target.row, target.column]], (size, target)
            assert not torch.equal(pixels, plain)
