"""Tiny seeded random vision-language models, each saved with its processor as a folder
of yours holds one: the architecture's config made tiny (here), its processor as its
family writes it (vlm_processors.py: LLaVA's, PaliGemma's, Gemma 3's pooled grid,
Idefics3's and SmolVLM's tiles, the canvas of Aya Vision, InternVL and Qianfan-OCR,
DeepSeek-VL's and Janus's square, LightOnOCR's rows, the any resolution of LLaVA-NeXT and
its successors, Qwen2-VL's own resolution, Ovis2's, and the learned queries of Idefics2,
BLIP-2, InstructBLIP, Aria, Kosmos-2 and Kosmos-2.5), for the vision-language matrix
(vlm_matrix.py) and the tests that read such a folder."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from harness.checkpoints import VOCAB, spread, tokenizer
from harness.vlm_configs import DERIVED, SUBCONFIGS, TEXT_OVERRIDES, VISION_OVERRIDES
from harness.vlm_families import family_of
from harness.vlm_processors import (
    AUDIO,
    IMAGE,
    ONEVISION,
    OVIS,
    OWN_TOKENS,
    PINPOINTS,
    QWEN_TOKENS,
    ROWS,
    SOFT,
    SPECIALS,
    UNK,
    save_processor,
)

TEXT = dict(
    vocab_size=VOCAB + 64, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
    eos_token_id=0, bos_token_id=0, pad_token_id=0,
)  # fmt: skip
VISION = dict(
    image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
    intermediate_size=64, depth=2, embed_dim=32, num_heads=4, mlp_ratio=2, out_hidden_size=64,
    spatial_merge_size=2, fullatt_block_indexes=[1], window_size=56,
    deepstack_visual_indexes=[1], text_hidden_size=64,
)  # fmt: skip
# (a Qwen Omni thinker's audio encoder, Whisper's: 2 layers, as wide as its text's input)
AUDIBLE = dict(encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=32, d_model=16,
               output_dim=TEXT["hidden_size"], downsample_hidden_size=16)  # fmt: skip
EXPERTS = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)


def sized(default: Any, sizes: dict) -> dict:
    """A sub-config's dict with the sizes it has set tiny, its dropouts at 0."""
    found = default.to_dict()
    was = dict(found)
    for name, value in sizes.items():
        if name in found:
            found[name] = value
    # (its key/value heads, where it has its own, as many to a query head's as it states:
    # EXAONE 4.5's and LFM3-VL's vision towers share 8 among 16)
    heads = next((n for n in ("num_attention_heads", "num_heads") if n in sizes and n in found), "")
    if heads and "num_key_value_heads" in found and "num_key_value_heads" not in sizes:
        shared = was["num_key_value_heads"]
        if isinstance(shared, int) and isinstance(was[heads], int) and was[heads] % shared == 0:
            found["num_key_value_heads"] = max(1, found[heads] * shared // was[heads])
    for name, value in list(found.items()):
        if "dropout" in name and isinstance(value, float):
            found[name] = 0.0
    for name in set(DERIVED) - set(sizes):  # (derived again, unless set here)
        found.pop(name, None)
    layers = found.get("num_hidden_layers")
    if isinstance(found.get("layer_types"), list) and isinstance(layers, int):
        # (one per layer: the last ones, where a hybrid puts its full attention)
        found["layer_types"] = found["layer_types"][-layers:]
    return found


def tiny(model_type: str, family: str, ids: dict[str, int]):
    """The architecture's config made tiny, its picture's tokens named by `ids`."""
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    if family == "vq":  # (Chameleon's and Emu3's VQ-VAE: its codes are text tokens)
        return vq_tiny(model_type, default, ids)
    if family == "views":  # (DeepSeek-OCR-2's: a 768-pixel view its processor counts as
        # 144 queries; SAM's patches of 64 pixels, its neck halving twice: 3 x 3 features
        # (at most 144: its encoder's queries of a 768-pixel view, 144))
        sam = sized(default.vision_config.sam_config, dict(
            hidden_size=32, output_channels=32, num_hidden_layers=2, num_attention_heads=4,
            mlp_dim=64, patch_size=64, window_size=4, global_attn_indexes=[1],
            downsample_channels=[32, 64]))  # fmt: skip
        encoder = sized(default.vision_config.encoder_config, TEXT | dict(vocab_size=8))
        text = sized(default.text_config, TEXT | dict(
            n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
            moe_intermediate_size=32, mlp_layer_types=["dense", "sparse"]))  # fmt: skip
        text.pop("head_dim", None)  # (its own: hidden_size / heads)
        return AutoConfig.for_model(model_type, text_config=text, image_token_id=ids[IMAGE],
                                    vision_config={"sam_config": sam,
                                                   "encoder_config": encoder})  # fmt: skip
    if family == "slices":  # (MiniCPM-V's: its window merger after layer 0, then its
        # merger: a token 4 x 4 patches of 8 pixels)
        extra = {}
        if hasattr(default, "newline_id"):  # (4.7's canvas M-RoPE reads its markers; its
            # newline: the BPE's "\n")
            extra = dict(image_start_id=ids["<start_of_image>"],
                         image_end_id=ids["<end_of_image>"],
                         slice_start_id=ids["<|vision_start|>"],
                         slice_end_id=ids["<|vision_end|>"],
                         newline_id=tokenizer(SPECIALS).token_to_id("Ċ"))  # fmt: skip
        return AutoConfig.for_model(
            model_type, text_config=sized(default.text_config, TEXT), insert_layer_id=0,
            vision_config=sized(default.vision_config, VISION | dict(image_size=64)),
            image_token_id=ids[IMAGE], video_token_id=ids["<|video_pad|>"], **extra,
        )  # fmt: skip
    over = VISION_OVERRIDES.get(model_type, {})
    vision = sized(default.vision_config, VISION | over) | over
    # (LLaVA-OneVision's any resolution reads SigLIP's patches, all of them: its own)
    onevision = hasattr(default, "vision_aspect_ratio")
    if family in ("llava", "anyres") and not onevision:
        vision = sized(AutoConfig.for_model("clip_vision_model"), VISION)
    extra: dict = {}
    # (Aya Vision's picture tokens; InternVL's, with its downsample_ratio, are <image>)
    aya = family == "canvas" and not hasattr(default, "downsample_ratio")
    # (an own-resolution architecture's picture token, those around it and its video's:
    # Qwen2-VL's, or those its processor names itself)
    own = OWN_TOKENS.get(model_type, QWEN_TOKENS)
    token = ids[{"dynamic": own[0], "pooled": SOFT, "rows": ROWS["image_token"]}.get(
        family, "<|IMG_PATCH|>" if aya else IMAGE)]  # fmt: skip
    for name in ("image_token_id", "image_token_index"):
        if hasattr(default, name):
            extra[name] = token
    if family == "anyres":
        extra |= {"vision_feature_layer": -1, "vision_feature_select_strategy": "default",
                  "image_grid_pinpoints": PINPOINTS}  # fmt: skip
    if onevision:  # (its grid resampled down past 1 square's patches: "anyres_max_1")
        extra |= {"vision_feature_select_strategy": "full", "vision_aspect_ratio": ONEVISION}
    if family == "llava":
        extra |= {"vision_feature_layer": -1, "vision_feature_select_strategy": "default"}
        if hasattr(default, "vision_feature_layers"):
            extra = {"vision_feature_layers": [-2, -1], "image_token_index": ids[IMAGE]}
    if family == "tiles":
        extra["scale_factor"] = 2
    if family == "qformer":  # (BLIP-2's Q-Former: 4 queries over a 32-pixel picture)
        text = sized(default.text_config, TEXT | dict(ffn_dim=96, word_embed_proj_dim=64))
        qformer = sized(default.qformer_config, VISION | dict(
            num_hidden_layers=1, encoder_hidden_size=VISION["hidden_size"],
            vocab_size=TEXT["vocab_size"]))  # fmt: skip
        return AutoConfig.for_model(model_type, text_config=text, vision_config=vision,
                                    qformer_config=qformer, num_query_tokens=4,
                                    image_token_index=ids[IMAGE])  # fmt: skip
    if family == "aria":  # (its processor sends pictures of 980 pixels a side: 14 x 14
        # patches of 70, which its projector makes into 4 queries)
        vision |= {"image_size": 980, "patch_size": 70}
        extra |= {"projector_patch_to_query_dict": {196: 4},
                  "max_value_projector_patch_to_query_dict": 4}  # fmt: skip
        text = sized(default.text_config, TEXT | dict(moe_num_experts=2, moe_topk=1,
                     moe_num_shared_experts=1, moe_intermediate_size=32))  # fmt: skip
        return AutoConfig.for_model(model_type, text_config=text, vision_config=vision,
                                    **extra)  # fmt: skip
    if family == "ovis":  # (2 x 2 patches a token, over a visual vocabulary of 32)
        vision |= {"hidden_stride": 2, "vocab_size": 32}
        return AutoConfig.for_model(
            model_type, text_config=sized(default.text_config, TEXT), vision_config=vision,
            image_token_id=ids["<IMG_ATOM>"], hidden_size=TEXT["hidden_size"],
            visual_indicator_token_ids=[ids[t] for t in OVIS[1:]],
        )  # fmt: skip
    if family == "granite4":  # (LLaVA-NeXT's grid, a query a 2 x 2 block of a 4 x 4
        # window's patches; its Q-Former's heads are its tower's width over 64)
        qformer = sized(default.qformer_config, dict(intermediate_size=64, num_hidden_layers=1,
                                                     vocab_size=TEXT["vocab_size"]))  # fmt: skip
        clip = sized(AutoConfig.for_model("clip_vision_model"), VISION) | {"hidden_size": 64}
        return AutoConfig.for_model(
            model_type, text_config=sized(default.text_config, TEXT), vision_config=clip,
            qformer_config=qformer, image_token_index=ids[IMAGE], vision_feature_layer=-1,
            vision_feature_select_strategy="default", image_grid_pinpoints=PINPOINTS,
            downsample_rate="2/4", deepstack_layer_map=[(1, 0)], spatial_vision_layer=-1,
            spatial_target_layers=[0, 1], projector_dropout=0.0,
        )  # fmt: skip
    if family == "kosmos":  # (its text's sizes by its own names; Kosmos-2's 64 latent
        # queries: its processor writes as many, a count its folder does not save; Kosmos-2.5's
        # 4, as its processor saves, over Pix2Struct's patches of its own width)
        text = sized(default.text_config, TEXT | dict(embed_dim=64, layers=2, ffn_dim=96,
                                                      attention_heads=4))  # fmt: skip
        if "patch_embed_hidden_size" in vision:  # (Kosmos-2.5's Pix2Struct tower: one
            # layer of one head, which reads the 4,096 patches its processor always sends)
            vision |= {"num_hidden_layers": 1, "num_attention_heads": 1,
                       "head_dim": VISION["hidden_size"]}  # fmt: skip
        latents = 4 if model_type == "kosmos-2.5" else default.latent_query_num
        return AutoConfig.for_model(model_type, text_config=text, vision_config=vision,
                                    latent_query_num=latents)  # fmt: skip
    if family == "docling":  # (2 x 2 patches a token, into the language model's width)
        vision |= {"scale_factor": 2, "out_hidden_size": TEXT["hidden_size"],
                   "use_fine_route": False}  # fmt: skip
        return AutoConfig.for_model(model_type, text_config=sized(default.text_config, TEXT),
                                    vision_config=vision, image_token_id=ids[IMAGE])  # fmt: skip
    if family == "queries":  # (Idefics2's perceiver: 4 latents a picture)
        extra["perceiver_config"] = sized(default.perceiver_config, dict(
            hidden_size=TEXT["hidden_size"], resampler_n_latents=4, resampler_depth=1,
            resampler_n_heads=2, resampler_head_dim=16, num_key_value_heads=1))  # fmt: skip
    if family == "canvas" and hasattr(default, "downsample_ratio"):  # (InternVL's)
        extra["downsample_ratio"] = 0.5
    elif family == "canvas":  # (2 x 2 patches a token)
        extra["downsample_factor"] = 2
    if family == "square" and "projection_dim" in vision:  # (Janus's aligner: into the text)
        vision |= {"projection_dim": TEXT["hidden_size"], "num_image_tokens": 16}
    if hasattr(default, "high_res_vision_config"):  # (DeepSeek-VL-Hybrid's SAM tower: a
        # 64-pixel square of 16-pixel patches, windows of 2)
        extra["high_res_vision_config"] = sized(default.high_res_vision_config, dict(
            hidden_size=32, output_channels=16, num_hidden_layers=2, num_attention_heads=4,
            image_size=64, window_size=2, global_attn_indexes=[1], mlp_dim=64,
            num_pos_feats=8))  # fmt: skip
    if family == "rows":  # (pictures of up to 64 x 64 pixels, 2 x 2 patches a token)
        vision["image_size"], extra["spatial_merge_size"] = 64, 2
        vision["head_dim"] = VISION["hidden_size"] // VISION["num_attention_heads"]
    if hasattr(default, "projection_dim"):  # (PaliGemma's: into the language model's width)
        extra["projection_dim"] = vision["projection_dim"] = TEXT["hidden_size"]
    if family == "pooled":  # (4 x 4 patches averaged into 2 x 2 tokens)
        extra |= {"mm_tokens_per_image": 4, "boi_token_index": ids["<start_of_image>"],
                  "eoi_token_index": ids["<end_of_image>"]}  # fmt: skip
    if family == "dynamic":
        named = {"vision_start_token_id": ids[own[1]], "vision_end_token_id": ids[own[2]],
                 "video_token_id": ids[own[3]]}  # fmt: skip
        # (those its config has: HunYuanVL's names none, its processor's tokenizer does)
        extra |= {k: v for k, v in named.items() if hasattr(default, k)}
        vision["patch_size"] = 14
        if "embed_dim" in vision:  # (Qwen2-VL's: its hidden_size is what its merger gives)
            vision["hidden_size"] = TEXT["hidden_size"]
    for name, sizes in SUBCONFIGS.get(model_type, {}).items():
        extra[name] = sized(getattr(default, name), sizes)
    over = TEXT_OVERRIDES.get(model_type, {})
    text = sized(default.text_config, TEXT | over) | over
    if AUDIO[0] in ids:  # (a Qwen Omni thinker's, its tokenizer's audio tokens its own: its
        # audio encoder tiny; Qwen3-Omni's text of 4 experts, 2 a token)
        extra["audio_config"] = sized(default.audio_config, AUDIBLE)
        text = sized(default.text_config, TEXT | EXPERTS)
        tokens = {"audio_token_id": AUDIO[0], "audio_token_index": AUDIO[0],
                  "audio_start_token_id": AUDIO[1], "audio_end_token_id": AUDIO[2]}  # fmt: skip
        extra |= {k: ids[t] for k, t in tokens.items() if hasattr(default, k)}
        # (its picture's wrappers, which its get_rope_index reads: its config class declares
        # none, a real thinker's config.json states them, as Qwen3-Omni's thinker_config)
        extra |= {"vision_start_token_id": ids["<|vision_start|>"],
                  "vision_end_token_id": ids["<|vision_end|>"]}  # fmt: skip
    if "indexer_budget" in text:  # (Qwen4-Exp's indexed attention: its token indexer, of
        # 2 query heads over blocks of 2 tokens, keeping 2 blocks and the tail; its default
        # config names none, which its model cannot be made without)
        text |= {"indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 16,
                 "indexer_budget": 4, "indexer_compress_ratio": 2}  # fmt: skip
    if family == "paligemma":  # (its processor adds 1,152 location and segment tokens)
        text["vocab_size"] = VOCAB + 64 + 1152
    # (rotary positions over time, rows and columns: 8 pairs a head; in each layer type's
    # parameters where it states them per type, Cohere Compass's; none where it has no
    # rotary positions, GLM-5's NoPE)
    if family == "dynamic" and "rope_parameters" in text:
        rope = text.get("rope_parameters") or {}
        types = set(text.get("layer_types") or ())
        for part in [rope[t] for t in rope if t in types and rope[t]] or [rope]:
            # (the pairs of its rotated part: GLM-4V turns half of each head's dimensions;
            # HY-V4's MLA rotates its qk_rope_head_dim's 16)
            turned = part.get("partial_rotary_factor", text.get("partial_rotary_factor", 1.0))
            section = [1, 1, 2] if turned == 0.5 else [2, 3, 3]
            if model_type.startswith("ernie4_5_vl"):  # (its sections are rows, columns, time:
                section = [3, 3, 2]  # its rows' and columns' interleaved, as many: [22, 22, 20])
            part["mrope_section"] = section
        text["rope_parameters"] = rope
    return AutoConfig.for_model(model_type, text_config=text, vision_config=vision, **extra)


CODES = 16  # (a VQ-VAE's codebook: its codes' ids the last of the text's vocabulary)


def vq_tiny(model_type: str, default: Any, ids: dict[str, int]):
    """Chameleon's and Emu3's: a VQ-VAE of three halvings (a code an 8 x 8 block, as
    Emu3's processor counts them), 32 channels (GroupNorm's 32 groups), 16 codes, whose
    ids are the last 16 of the text's vocabulary (Emu3's row-end token just before)."""
    from transformers import AutoConfig

    top = TEXT["vocab_size"]
    if model_type == "chameleon":  # (its codes named "IMGIMG", their digits as A-J, "Z")
        vq = sized(default.vq_config, dict(
            embed_dim=16, num_embeddings=CODES, latent_channels=16, base_channels=32,
            channel_multiplier=[1, 1, 1, 1], num_res_blocks=1, resolution=32))  # fmt: skip
        names = {"IMGIMG" + "".join(chr(ord("A") + int(d)) for d in str(c)) + "Z": top - CODES + c
                 for c in range(CODES)}  # fmt: skip
        text = {k: v for k, v in TEXT.items() if k != "head_dim"}
        return AutoConfig.for_model(model_type, **text, vq_config=vq,
                                    vocabulary_map={"<image>": ids[IMAGE], **names})  # fmt: skip
    vq = sized(default.vq_config, dict(
        codebook_size=CODES, embed_dim=4, latent_channels=4, base_channels=32,
        channel_multiplier=[1, 1, 1, 1], num_res_blocks=1, attn_resolutions=[],
        hidden_size=32, num_attention_heads=1))  # fmt: skip
    names = {f"<|visual token{c:06d}|>": top - CODES + c for c in range(CODES)}
    names["<|extra_200|>"] = top - CODES - 1  # (the row-end token)
    return AutoConfig.for_model(model_type, text_config=sized(default.text_config, TEXT),
                                vq_config=vq,
                                vocabulary_map={"<image>": ids[IMAGE], **names})  # fmt: skip


def picture() -> Image.Image:
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 256, (50, 70, 3), dtype=np.uint8))


def saved(model_type: str, folder: Path) -> Path:
    """A tiny seeded random model of a mapped architecture saved in `folder` with its
    processor, as a folder of yours holds one. Returns the folder."""
    import transformers

    family, named = family_of(model_type)
    if not family:
        raise ValueError(named)
    # (Kosmos-2's processor writes its picture's tokens as the ids after its tokenizer's
    # unknown token: ordinary tokens, as XLM-R's after its <unk>)
    # (and the tokens a processor writes of its own: OWN_TOKENS)
    specials = SPECIALS + tuple(t for t in OWN_TOKENS.get(model_type, ()) if t not in SPECIALS)
    made = tokenizer((*specials, UNK) if named == "Kosmos2Processor" else specials)
    ids = {t: made.token_to_id(t) for t in specials}
    config = tiny(model_type, family, ids)
    torch.manual_seed(0)
    with contextlib.redirect_stderr(io.StringIO()):
        model = transformers.AutoModelForImageTextToText.from_config(
            config, attn_implementation="eager"
        )
    spread(model)
    model.generation_config.pad_token_id = 0
    model.eval().save_pretrained(folder)
    save_processor(folder, model_type, family, named, made)
    return folder
