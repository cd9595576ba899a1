"""The vision-language half of the architecture matrix (harness/vlm_matrix.py): every
vision-language architecture of the installed transformers, from its own image-text-to-text
mapping; those whose processor's placing of a picture's tokens is mapped made as a tiny
seeded random model with its processor, read back as attnviz reads a folder, against
transformers' eager attention and its greedy `generate` on a picture and a text; each row
equal or saying why not, and docs/architectures.md's table this run's. All of it runs in
`make test`."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.vlm_matrix import section, table, vision_language_architectures, vlm_matrix

# Measured on transformers 5.24: 100 vision-language architectures, 91 with attention
# through the interface; 56 served and equal (the table in docs/architectures.md names
# them). A change that serves fewer is a regression.
SERVED_AND_EQUAL_AT_LEAST = 56
PAGE = Path(__file__).resolve().parents[2] / "docs" / "architectures.md"


@pytest.fixture(scope="module")
def rows():
    return vlm_matrix()


def test_the_vision_language_architectures_come_from_transformers_own_mapping():
    found = vision_language_architectures()
    assert len(found) > 80
    assert {"llava", "qwen2_vl", "idefics3", "paligemma", "gemma3"} <= set(found)


def test_every_served_vlm_equals_transformers_and_continues_alike_and_the_rest_say_why(rows):
    by_type = {r.model_type: r for r in rows}
    for row in rows:
        assert row.equal or (row.reason and not (row.served and row.weights <= 1e-5
                                                 and row.continued)), row  # fmt: skip
    for served in ("llava", "vipllava", "paligemma", "gemma3", "idefics3", "qwen2_vl",
                   "qwen2_5_vl", "qwen3_vl", "deepseek_vl", "janus", "lighton_ocr",
                   "aya_vision", "smolvlm", "internvl", "llava_next", "video_llava",
                   "qianfan_ocr", "llava_next_video", "llava_onevision", "idefics2",
                   "blip-2", "instructblip", "aria", "ovis2", "granite_docling", "glm_ocr",
                   "chameleon", "emu3", "deepseek_ocr2", "minicpmv4_6", "minicpmv4_7",
                   "cosmos3_edge", "exaone4_5", "lfm3_vl", "paddleocr_vl", "video_llama_3",
                   "ernie4_5_vl_moe", "granite4_vision", "hunyuan_vl", "qwen4_exp",
                   "hy_v4_vl", "glm5_next", "cohere_compass", "kosmos-2",
                   "kosmos-2.5", "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker",
                   "cosmos3_omni", "deepseek_vl_hybrid"):  # fmt: skip
        assert by_type[served].equal, by_type[served]
    # a 70 x 50 picture: LLaVA's 4 x 4 patches; Idefics3's 2 x 2 tiles of 2 x 2 tokens and
    # its thumbnail's 2 x 2; Qwen2-VL's 56 x 56 pixels, 2 x 2 tokens of 2 x 2 patches
    assert (by_type["llava"].tokens, by_type["idefics3"].tokens) == (16, 20)
    assert by_type["smolvlm"].tokens == 20  # (Idefics3's tiles, through SmolVLM's classes)
    assert by_type["qwen2_vl"].tokens == 4
    assert (by_type["paligemma"].tokens, by_type["gemma3"].tokens) == (16, 4)
    # DeepSeek-VL's and Janus's 32 x 32 square of 4 x 4 patches; LightOnOcr's picture
    # scaled to 64 x 45, rounded up to 64 x 48: 3 x 4 tokens of 2 x 2 patches of 8 pixels
    assert (by_type["deepseek_vl"].tokens, by_type["janus"].tokens) == (16, 16)
    assert by_type["lighton_ocr"].tokens == 12
    # Aya Vision's 2 x 2 canvas of 32-pixel tiles (nearest 70 x 50 of at most 4) and its
    # thumbnail, 2 x 2 tokens each
    assert by_type["aya_vision"].tokens == by_type["internvl"].tokens == 20
    assert "not mapped yet" in by_type["git"].reason
    assert "torchvision alone" in by_type["mistral3"].reason
    # (those transformers' mapping lists that read no picture: Evolla reads proteins, a
    # Mistral 4 folder has no vision tower; Gemma 3n's tower is timm's)
    assert all(by_type[t].reason.startswith("it reads no picture") for t in ("evolla", "mistral4"))
    assert "timm needs torchvision" in by_type["gemma3n"].reason
    # LLaVA-NeXT's base square (4 x 4) and its 64 x 64 canvas's 8 x 8 patches less the rows
    # of padding (6 kept; their 6 newline tokens are no patches): 16 + 6 x 8
    assert by_type["llava_next"].tokens == by_type["llava_next_video"].tokens == 16 + 6 * 8
    # LLaVA-OneVision's: its base, then those 6 x 8 patches resampled down past one
    # square's 16 ("anyres_max_1"): by sqrt(48 / 16), to 3 x 4
    assert by_type["llava_onevision"].tokens == 16 + 3 * 4
    assert by_type["video_llava"].tokens == 16 and by_type["qianfan_ocr"].tokens == 20
    # Idefics2's perceiver's 4 latents, BLIP-2's and InstructBLIP's Q-Former's 4 queries,
    # Aria's projector's 4 (a 980-pixel picture's 14 x 14 patches of 70)
    assert {by_type[t].tokens for t in ("idefics2", "blip-2", "instructblip", "aria")} == {4}
    assert by_type["ovis2"].tokens == 4  # (a 32-pixel square's 4 x 4 patches, 2 x 2 a token)
    # GraniteDocling's tiles as Idefics3's; Chameleon's 32 x 32 crop in VQ codes of 8
    # pixels; Emu3's picture resized to 32 x 24 pixels, 3 rows of 4 codes (each row's end token
    # aside); DeepSeek-OCR-2's whole view's 144 queries (a picture smaller than a tile has
    # no tiles of its own); MiniCPM-V's whole picture and its 4 slices, a token each;
    # Granite 4 Vision's base, 2 x 2 tokens of 2 x 2 patches, and its unpadded grid's 2 x 4
    assert by_type["granite_docling"].tokens == 20 and by_type["chameleon"].tokens == 16
    assert (by_type["emu3"].tokens, by_type["deepseek_ocr2"].tokens) == (12, 144)
    assert by_type["minicpmv4_6"].tokens == by_type["minicpmv4_7"].tokens == 5
    assert by_type["granite4_vision"].tokens == 4 + 2 * 4
    # Kosmos-2's 64 latent queries (its processor's own count, a class setting no folder
    # changes), Kosmos-2.5's 4; GLM-5's 70 x 50 picture unscaled at the top left of a
    # canvas of 3 x 2 tokens of 28 pixels, each holding some of it
    assert (by_type["kosmos-2"].tokens, by_type["kosmos-2.5"].tokens) == (64, 4)
    assert by_type["glm5_next"].tokens == 6
    assert sum(r.equal for r in rows) >= SERVED_AND_EQUAL_AT_LEAST
    assert section(PAGE.read_text(encoding="utf-8")) == table(rows), (
        "docs/architectures.md's vision-language table is not this run's: "
        "python -m harness.vlm_matrix --table"
    )
