"""The vision half of the architecture matrix (harness/vision_matrix.py): every image
encoder of the installed transformers, from its own auto mappings, as a tiny seeded random
model with an image processor, read back as attnviz reads it, against transformers' eager
attention; each row equal or saying why not, and docs/architectures.md's table this run's.
All of it runs in `make test` (under 10 s here: most rows are refused before a model is
made)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.vision_matrix import image_architectures, section, table, vision_matrix

# Measured on transformers 5.24: 78 image architectures; 39 have no attention through the
# interface (convolutional networks, and those with their own attention code), and of the
# other 39, 24 are served and equal (docs/architectures.md's table names them and says why
# not for the rest). A change that serves fewer is a regression.
SERVED_AND_EQUAL_AT_LEAST = 24
PAGE = Path(__file__).resolve().parents[2] / "docs" / "architectures.md"


@pytest.fixture(scope="module")
def rows():
    return vision_matrix()


def test_the_image_architectures_come_from_transformers_own_mappings():
    found = image_architectures()
    assert len(found) > 60
    assert {"vit", "deit", "dinov2", "siglip_vision_model", "swin", "resnet"} <= set(found)


def test_every_served_image_encoder_equals_transformers_and_the_rest_say_why(rows):
    by_type = {r.model_type: r for r in rows}
    for row in rows:
        assert row.equal or (row.reason and not row.served), row
    for served in ("vit", "deit", "beit", "dinov2_with_registers", "siglip_vision_model",
                   "clip_vision_model", "dinov3_vit", "yolos"):  # fmt: skip
        assert by_type[served].equal, by_type[served]
    # (its class token, the patches, then its detection tokens: each served row's map was
    # checked by changing one patch's pixels, harness/vision_matrix.py placed_where_named)
    assert by_type["yolos"].positions == 1 + 16 + 100
    # (ViT-MAE reads the quarter of its patches its seeded noise keeps: its class token and
    # 4 of 16, each placed where its pixels are)
    assert by_type["vit_mae"].equal and by_type["vit_mae"].positions == 1 + 4
    # (SigLIP 2's NaFlex: the 70 x 50 picture as 3 x 5 patches of 8, padded to 16)
    for naflex in ("siglip2", "siglip2_vision_model"):  # (its labels: tests/model/test_vision.py)
        assert by_type[naflex].equal and by_type[naflex].positions == 16, by_type[naflex]
    assert "reads videos" in by_type["videomae"].reason
    assert sum(r.equal for r in rows) >= SERVED_AND_EQUAL_AT_LEAST
    assert section(PAGE.read_text(encoding="utf-8")) == table(rows), (
        "docs/architectures.md's vision table is not this run's: "
        "python -m harness.vision_matrix --table"
    )
