"""The processors of the tiny vision-language folders (vlm_checkpoints.py), each as its
family writes it, and the special tokens their tokenizer holds: the picture's token of each
family (LLaVA's <image>, Qwen2-VL's <|image_pad|>, Gemma 3's soft token, Pixtral's rows,
Aya Vision's, Ovis2's atoms), the tokens written around it, and LLaVA-NeXT's canvases."""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Any

IMAGE = "<image>"
PAD = "<|image_pad|>"  # (the picture's token of Qwen2-VL's processors)
SOFT = "<image_soft_token>"  # (Gemma 3's picture tokens, written as <start_of_image>)
# (Pixtral's picture tokens: a row's, the end of a row's and of the picture's)
ROWS = {"image_token": "[IMG]", "image_break_token": "[IMG_BREAK]",
        "image_end_token": "[IMG_END]"}  # fmt: skip
# (Aya Vision's: a picture's start and end, and its tokens)
AYA = ("<|START_OF_IMG|>", "<|END_OF_IMG|>", "<|IMG_PATCH|>", "<|IMG_LINE_BREAK|>")
# (Ovis2's: a picture's atoms, and what it writes around them and between its tiles)
OVIS = ("<IMG_ATOM>", "<IMG_START>", "<IMG_GRID>", "<IMG_COL>", "<IMG_ROW>", "<IMG_END>")
# (the tokens Chameleon's and Emu3's processors write around a picture's codes)
VQ = {"ChameleonProcessor": {"image_token": IMAGE, "boi_token": "<start_of_image>",
                             "eoi_token": "<end_of_image>"},
      "Emu3Processor": {"image_token": IMAGE, "boi_token": "<start_of_image>",
                        "eoi_token": "<end_of_image>",
                        "image_wrapper_token": "<fake_token_around_image>",
                        "eof_token": "<global-img>"}}  # fmt: skip
# (MiniCPM-V's: a picture's, a video's, a picture's and a slice's start and end, its id's)
MINICPM = {"image_token": IMAGE, "video_token": "<|video_pad|>",
           "image_start_token": "<start_of_image>", "image_end_token": "<end_of_image>",
           "slice_start_token": "<|vision_start|>", "slice_end_token": "<|vision_end|>",
           "image_id_start_token": "<row_1_col_1>",
           "image_id_end_token": "<row_1_col_2>"}  # fmt: skip
UNK = "<unk>"  # (Kosmos-2's tokenizer's: its picture's tokens are the ids after it)
SPECIALS = (
    "<|endoftext|>", IMAGE, PAD, SOFT, "<start_of_image>", "<end_of_image>", "<bos>",
    "<fake_token_around_image>", "<global-img>", "<|vision_start|>", "<|vision_end|>",
    "<|video_pad|>", *ROWS.values(), *AYA,
    *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)), *OVIS,
)  # fmt: skip
# (the tokens an own-resolution architecture's processor names itself, whatever its
# tokenizer says: its picture's, those around it, its video's; else Qwen2-VL's)
OWN_TOKENS = {
    "cohere_compass": ("<|IMAGE_PAD|>", "<|VISION_START|>", "<|VISION_END|>", "<|VIDEO_PAD|>"),
    "dots3_note": ("<|imgpad|>", "<|vision_start|>", "<|vision_end|>", "<|video_pad|>"),
}
QWEN_TOKENS = (PAD, "<|vision_start|>", "<|vision_end|>", "<|video_pad|>")
# (the Qwen Omni processors': a picture's, a video's and its start and end as Qwen2-VL's;
# its audio's and its start and end, tokens of their own of the thinkers' tokenizers)
AUDIO = ("<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>")
OWN_TOKENS |= {
    t: (*QWEN_TOKENS, *AUDIO) for t in ("qwen2_5_omni_thinker", "qwen3_omni_moe_thinker")
}
OMNI = {"image_token": PAD, "video_token": "<|video_pad|>", "audio_token": AUDIO[0],
        "vision_bos_token": "<|vision_start|>", "vision_eos_token": "<|vision_end|>",
        "audio_bos_token": AUDIO[1], "audio_eos_token": AUDIO[2]}  # fmt: skip
OMNI_PROCESSORS = ("Qwen2_5OmniProcessor", "Qwen3OmniMoeProcessor")
# (LLaVA-NeXT's canvases: a 32-pixel square, two side by side or stacked, or four)
PINPOINTS = [[32, 32], [32, 64], [64, 32], [64, 64]]
ONEVISION = "anyres_max_1"  # (LLaVA-OneVision's grid resampled down past one square's)


def save_processor(folder: Path, model_type: str, family: str, named: str, made) -> None:
    """The processor a folder of the architecture holds, as its family's is written."""
    import transformers

    # (Gemma 3's processor reads its picture's tokens from its tokenizer)
    named_tokens = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                    "image_token": SOFT} if family == "pooled" else {}  # fmt: skip
    if family == "dynamic":  # (GLM-4V's processor writes the tokenizer's, else <|image|>)
        named_tokens = {"image_token": OWN_TOKENS.get(model_type, QWEN_TOKENS)[0]}
        if named in OMNI_PROCESSORS:
            named_tokens = dict(OMNI)
    if named in ("HunYuanVLProcessor", "Ernie4_5_VLMoeProcessor"):  # (their processors
        # read the picture's wrappers from it too; ERNIE's a video's token and wrappers)
        named_tokens |= {"image_start_token": "<|vision_start|>",
                         "image_end_token": "<|vision_end|>"}  # fmt: skip
    if named == "Ernie4_5_VLMoeProcessor":  # (tokens of their own, added past the vocabulary)
        named_tokens |= {"video_token": "<|video_pad|>", "video_start_token": "<|video_start|>",
                         "video_end_token": "<|video_end|>"}  # fmt: skip
    if family == "aria":  # (Aria's processor reads its picture's token from it)
        named_tokens = {"image_token": IMAGE}
    if family == "rows":  # (LightOnOcr's processor reads its picture's tokens from it)
        named_tokens = ROWS
    # (InternVL's and Qianfan-OCR's processors read their picture's tokens from it)
    if named in ("InternVLProcessor", "QianfanOCRProcessor"):
        named_tokens = {
            "start_image_token": "<start_of_image>", "context_image_token": IMAGE,
            "end_image_token": "<end_of_image>", "video_token": "<|video_pad|>",
        }  # fmt: skip
    if family == "square":  # (DeepSeek-VL's and Janus's processors read theirs from it)
        named_tokens = {"image_token": IMAGE, "boi_token": "<start_of_image>",
                        "eoi_token": "<end_of_image>"}  # fmt: skip
    # (Chameleon's, Emu3's, DeepSeek-OCR-2's and MiniCPM-V's processors read theirs from it)
    named_tokens = VQ.get(named, named_tokens)
    if family in ("views", "slices"):
        named_tokens = {"image_token": IMAGE} if family == "views" else MINICPM
    if named == "Kosmos2_5Processor":  # (its processor reads its picture's tokens from it)
        named_tokens = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                        "image_token": IMAGE}  # fmt: skip
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=made, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
        bos_token="<bos>", extra_special_tokens=named_tokens,
        # (Chameleon's processor appends it; not the padding's id 0, which generate masks)
        **({"sep_token": "<fake_token_around_image>"} if named == "ChameleonProcessor" else {}),
        **({"unk_token": UNK} if named == "Kosmos2Processor" else {}),
    )  # fmt: skip
    # (LLaVA's settings: 8-pixel patches, its class token dropped)
    llava = dict(patch_size=8, vision_feature_select_strategy="default", image_token=IMAGE,
                 num_additional_image_tokens=1)  # fmt: skip
    if named == "ChameleonProcessor":  # (a 32-pixel crop: 4 x 4 codes)
        transformers.ChameleonProcessor(
            image_processor=transformers.ChameleonImageProcessorPil(
                size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}),
            tokenizer=fast, image_seq_length=16,
        ).save_pretrained(folder)  # fmt: skip
    elif named == "Emu3Processor":  # (at most 32 x 32 pixels, sides multiples of 8: 70 x 50
        # is 3 rows of 4 codes and a row end)
        transformers.Emu3Processor(
            image_processor=transformers.Emu3ImageProcessor(
                min_pixels=8 * 8, max_pixels=32 * 32, spatial_factor=8),
            tokenizer=fast,
        ).save_pretrained(folder)  # fmt: skip
    elif family == "views":  # (views of 768 pixels: 144 queries; 70 x 50 is not tiled)
        transformers.DeepseekOcr2Processor(
            image_processor=transformers.DeepseekOcr2ImageProcessorPil(
                size={"height": 768, "width": 768}, tile_size=768),
            tokenizer=fast, patch_size=16, downsample_ratio=4,
        ).save_pretrained(folder)  # fmt: skip
    elif family == "slices":  # (about 32 x 32 pixels whole, then its slices: 70 x 50 is
        # 1 token and 4 slices of 1; its class's video half needs torchvision)
        images = transformers.MiniCPMV4_6ImageProcessorPil(
            scale_resolution=32, patch_size=8, max_slice_nums=4)  # fmt: skip
        in_parts(folder, named, images, fast)
    elif family == "llava" and named == "LlavaProcessor":
        transformers.LlavaProcessor(
            image_processor=transformers.CLIPImageProcessorPil(
                size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
            ),
            tokenizer=fast, **llava,
        ).save_pretrained(folder)  # fmt: skip
    elif family == "llava":  # (Video-LLaVA's: its class's video half needs torchvision)
        images = transformers.VideoLlavaImageProcessor(
            size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
        )
        in_parts(folder, named, images, fast, **llava)
    elif family == "square":  # (a 32 x 32 square of 4 x 4 patches)
        images = getattr(transformers, f"{named.removesuffix('Processor')}ImageProcessorPil")
        # (DeepSeek-VL-Hybrid's SAM tower's square too: 64 pixels)
        high = {"high_res_size": {"height": 64, "width": 64}} if "Hybrid" in named else {}
        getattr(transformers, named)(
            image_processor=images(size={"height": 32, "width": 32}, min_size=8, **high),
            tokenizer=fast, num_image_tokens=16,
        ).save_pretrained(folder)  # fmt: skip
    elif family == "canvas" and named == "InternVLProcessor":  # (saved as its parts)
        images = transformers.GotOcr2ImageProcessorPil(
            size={"height": 32, "width": 32}, max_patches=4
        )
        in_parts(folder, named, images, fast, image_seq_length=4)
    elif named == "QianfanOCRProcessor":  # (InternVL's canvas, its class without videos)
        transformers.QianfanOCRProcessor(
            image_processor=transformers.GotOcr2ImageProcessorPil(
                size={"height": 32, "width": 32}, max_patches=4
            ),
            tokenizer=fast, image_seq_length=4,
        ).save_pretrained(folder)  # fmt: skip
    elif family == "canvas":  # (tiles of 32 x 32: 2 x 2 tokens of 2 x 2 patches)
        transformers.AyaVisionProcessor(
            image_processor=transformers.GotOcr2ImageProcessorPil(
                size={"height": 32, "width": 32}, max_patches=4
            ),
            tokenizer=fast, patch_size=8, img_size=32, downsample_factor=2,
        ).save_pretrained(folder)  # fmt: skip
    elif family == "rows":
        transformers.LightOnOcrProcessor(
            image_processor=transformers.PixtralImageProcessorPil(
                size={"longest_edge": 64}, patch_size={"height": 16, "width": 16}
            ),
            tokenizer=fast, patch_size=8, spatial_merge_size=2,
        ).save_pretrained(folder)  # fmt: skip
    elif family == "anyres":  # (LLaVA-NeXT-Video's: saved as its parts)
        images = transformers.LlavaNextImageProcessorPil(
            size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32},
            image_grid_pinpoints=PINPOINTS,
        )  # fmt: skip
        if named == "LlavaOnevisionProcessor":
            images = transformers.LlavaOnevisionImageProcessorPil(
                size={"height": 32, "width": 32}, image_grid_pinpoints=PINPOINTS
            )
            in_parts(
                folder, named, images, fast, num_image_tokens=16, image_token=IMAGE,
                vision_feature_select_strategy="full", vision_aspect_ratio=ONEVISION,
            )  # fmt: skip
        elif named == "LlavaNextProcessor":
            transformers.LlavaNextProcessor(
                image_processor=images, tokenizer=fast, **llava
            ).save_pretrained(folder)
        else:
            in_parts(folder, named, images, fast, **llava)
    elif family == "qformer":  # (InstructBLIP's Q-Former reads the text too: its tokenizer)
        images = transformers.BlipImageProcessorPil(size={"height": 32, "width": 32})
        also = {"qformer_tokenizer": fast} if named == "InstructBlipProcessor" else {}
        getattr(transformers, named)(
            image_processor=images, tokenizer=fast, num_query_tokens=4, **also
        ).save_pretrained(folder)
    elif family == "aria":  # (pictures of 980 pixels a side, as its processor sends)
        transformers.AriaProcessor(
            image_processor=transformers.AriaImageProcessorPil(split_image=False),
            tokenizer=fast, size_conversion={980: 4},
        ).save_pretrained(folder)  # fmt: skip
    elif family == "ovis":  # (the whole picture, squeezed to 32 pixels a side)
        transformers.Ovis2Processor(
            image_processor=transformers.Ovis2ImageProcessorPil(size={"height": 32, "width": 32}),
            tokenizer=fast, image_seq_length=4,
        ).save_pretrained(folder)  # fmt: skip
    elif family == "queries":  # (pictures within 32 to 64 pixels a side, not split)
        transformers.Idefics2Processor(
            image_processor=transformers.Idefics2ImageProcessorPil(
                size={"shortest_edge": 32, "longest_edge": 64}, do_image_splitting=False
            ),
            tokenizer=fast, image_seq_len=4,
        ).save_pretrained(folder)  # fmt: skip
    elif family == "paligemma":
        images = transformers.SiglipImageProcessorPil(size={"height": 32, "width": 32})
        images.image_seq_length = 16  # (its processor repeats <image> this many times)
        transformers.PaliGemmaProcessor(image_processor=images, tokenizer=fast).save_pretrained(
            folder
        )
    elif family == "pooled":
        transformers.Gemma3Processor(
            image_processor=transformers.Gemma3ImageProcessorPil(size={"height": 32, "width": 32}),
            tokenizer=fast, image_seq_length=4,
        ).save_pretrained(folder)  # fmt: skip
    elif family == "granite4":  # (LLaVA-NeXT's canvases, a query a 2 x 2 block)
        images = transformers.LlavaNextImageProcessorPil(
            size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32},
            image_grid_pinpoints=PINPOINTS,
        )  # fmt: skip
        transformers.Granite4VisionProcessor(
            image_processor=images, tokenizer=fast, downsample_rate="2/4", **llava
        ).save_pretrained(folder)
    elif named == "Kosmos2_5Processor":  # (Pix2Struct's patches of 16 pixels, as many as
        # its processor's class asks for, 4,096; 4 latent queries)
        transformers.Kosmos2_5Processor(
            image_processor=transformers.Kosmos2_5ImageProcessorPil(), tokenizer=fast,
            num_image_tokens=4,
        ).save_pretrained(folder)  # fmt: skip
    elif family == "kosmos":  # (CLIP's 32-pixel crop; the location tokens it adds to its
        # tokenizer, a 4 x 4 grid's, and its 11 tags within the model's vocabulary)
        transformers.Kosmos2Processor(
            image_processor=transformers.CLIPImageProcessorPil(
                size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
            ),
            tokenizer=fast, num_patch_index_tokens=16,
        ).save_pretrained(folder)  # fmt: skip
    elif family == "docling":  # (tiles of 32 x 32, at most 4, and a thumbnail)
        transformers.GraniteDoclingProcessor(
            image_processor=transformers.GraniteDoclingImageProcessorPil(
                size={"height": 32, "width": 32}, max_patches=4
            ),
            tokenizer=fast, image_seq_len=4,
        ).save_pretrained(folder)  # fmt: skip
    elif family == "tiles" and named == "Idefics3Processor":
        transformers.Idefics3Processor(
            image_processor=transformers.Idefics3ImageProcessorPil(
                size={"longest_edge": 64}, max_image_size={"longest_edge": 32}
            ),
            tokenizer=fast, image_seq_len=4,
        ).save_pretrained(folder)  # fmt: skip
    elif family == "tiles":  # (SmolVLM's: its class's video half needs torchvision)
        images = transformers.SmolVLMImageProcessorPil(
            size={"longest_edge": 64}, max_image_size={"longest_edge": 32}
        )
        in_parts(folder, named, images, fast, image_seq_len=4)
    else:  # (its own image processor, Qwen2-VL's settings; saved as its parts: its
        # processor's class is read by its pictures' half)
        from harness.vlm_families import own_resolution_images

        own = own_resolution_images(model_type, named)
        # (as its vision tower reads pictures: its patch, merge and temporal patch, where
        # its config states them, else as its class does (VideoLLaMA3's pictures unmerged);
        # Cosmos3-Edge's and PaddleOCR-VL's patchify their own way)
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        vision = config.get("vision_config") or {}
        # (a vision tower stating no temporal patch reads one frame a patch: dots3's patch
        # embedding reads 3 x 14 x 14 values, where Qwen2-VL's class would send 2 frames)
        stated = {"patch_size": vision.get("patch_size"),
                  "merge_size": vision.get("spatial_merge_size"),
                  "temporal_patch_size": vision.get("temporal_patch_size", 1)}  # fmt: skip
        said = {k: v for k, v in stated.items() if isinstance(v, int)}
        if hasattr(own, "min_image_tokens"):  # (GLM-5's bounds: in tokens)
            said |= {"min_image_tokens": 4, "max_image_tokens": 16}
        made = own(**said)
        # (4 to 16 tokens a picture: GLM-4V's bounds count a picture's frames)
        counts_frames = (
            "num_frames" in inspect.signature(sys.modules[own.__module__].smart_resize).parameters
        )
        frames = made.temporal_patch_size if counts_frames else 1
        side = made.patch_size * made.merge_size
        least, most = (side * side * n * frames for n in (4, 16))
        images = own(size={"shortest_edge": least, "longest_edge": most}, **said)
        # (the Qwen Omni processors' audio half: Whisper's features, as many bins as its
        # audio encoder reads; numpy's, saved within processor_config.json as transformers
        # saves a processor's parts)
        heard = {}
        if named in OMNI_PROCESSORS:
            bins = (config.get("audio_config") or {})["num_mel_bins"]
            heard["feature_extractor"] = transformers.WhisperFeatureExtractor(
                feature_size=bins
            ).to_dict()
        in_parts(folder, named, images, fast, **heard)


def in_parts(folder: Path, named: str, images: Any, fast: Any, **settings: Any) -> None:
    """A processor saved as its parts, as a folder holds one whose class reads videos too
    (which needs torchvision): its image processor, tokenizer and processor_config.json
    (the class's name and its settings)."""
    images.save_pretrained(folder)
    fast.save_pretrained(folder)
    said = {"processor_class": named, **settings}
    (folder / "processor_config.json").write_text(json.dumps(said), encoding="utf-8")
