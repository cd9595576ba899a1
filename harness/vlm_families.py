"""Which family an architecture of the vision-language matrix is: how its processor places a
picture's tokens (model/hf/image_tokens.py maps the placings of the families here), read
from transformers' own mappings, its processor's class and image processor; or why none
is read (torchvision alone, no picture at all, a placing not mapped yet)."""

from __future__ import annotations

from typing import Any

FAMILIES = {"LlavaProcessor": "llava", "Idefics3Processor": "tiles",
            "PaliGemmaProcessor": "paligemma", "Gemma3Processor": "pooled",
            "LightOnOcrProcessor": "rows", "DeepseekVLProcessor": "square",
            "JanusProcessor": "square", "DeepseekVLHybridProcessor": "square",
            "AyaVisionProcessor": "canvas",
            "SmolVLMProcessor": "tiles", "InternVLProcessor": "canvas",
            "QianfanOCRProcessor": "canvas",
            "LlavaNextProcessor": "anyres", "LlavaNextVideoProcessor": "anyres",
            "VideoLlavaProcessor": "llava", "LlavaOnevisionProcessor": "anyres",
            "Idefics2Processor": "queries", "Blip2Processor": "qformer",
            "InstructBlipProcessor": "qformer", "AriaProcessor": "aria",
            "Ovis2Processor": "ovis", "GraniteDoclingProcessor": "docling",
            "ChameleonProcessor": "vq", "Emu3Processor": "vq",
            "DeepseekOcr2Processor": "views", "MiniCPMV4_6Processor": "slices",
            "MiniCPMV4_7Processor": "slices", "Granite4VisionProcessor": "granite4",
            "Kosmos2Processor": "kosmos", "Kosmos2_5Processor": "kosmos"}  # fmt: skip

# the processor class a real folder names in its processor_config.json, where transformers'
# auto mapping names none (GLM-OCR has no processing module of its own: zai-org/GLM-OCR's
# folder names GLM-4.6V's processor, as mlx-vlm's port of it reads it; Kosmos-2's and
# Kosmos-2.5's modules, kosmos2 and kosmos2_5, are not named as their types are:
# transformers' own mapping named their processors before it was made from the modules')
# A Qwen Omni thinker's folder, the thinker saved alone, holds its whole model's processor:
# the thinkers' own docstrings read them with Qwen2_5OmniProcessor and Qwen3OmniMoeProcessor,
# and saqws/Effective-multimodal-RAG's run_thinker.py saves a thinker and
# Qwen2_5OmniProcessor in one folder. nvidia/Cosmos3-Nano's folder names one, as NVIDIA's
# cookbook reads it with AutoProcessor: its Reasoner is Qwen3-VL, transformers names
# Qwen3-VL's image and video processors for cosmos3_omni, and an early draft of its port
# (Cosmos3Reasoner*, transformers #46146) made its processor a Qwen3VLProcessor.
NAMED_BY_FOLDERS = {"glm_ocr": "Glm46VProcessor", "kosmos-2": "Kosmos2Processor",
                    "kosmos-2.5": "Kosmos2_5Processor",
                    "qwen2_5_omni_thinker": "Qwen2_5OmniProcessor",
                    "qwen3_omni_moe_thinker": "Qwen3OmniMoeProcessor",
                    "cosmos3_omni": "Qwen3VLProcessor"}  # fmt: skip

# the reason of a row that is no vision-language model, though transformers' mapping lists it
NO_PICTURE = "it reads no picture"


def family_of(model_type: str) -> tuple[str, str]:
    """(the family of the architecture's processor, how its tiny model is made: "llava",
    "paligemma", "pooled", "tiles", "canvas", "square", "rows", "anyres", "dynamic",
    "ovis", "queries" (Idefics2's), "qformer" (BLIP-2's, InstructBLIP's), "aria",
    "docling" (GraniteDocling's tiles), "kosmos" (Kosmos-2's and Kosmos-2.5's latent
    queries), or "",
    its processor's class name or why none is read: the placings image_tokens.py maps are
    those of the families here)."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES
    from transformers.models.auto.video_processing_auto import VIDEO_PROCESSOR_MAPPING_NAMES

    named = PROCESSOR_MAPPING_NAMES.get(model_type) or NAMED_BY_FOLDERS.get(model_type)
    vision = getattr(transformers.AutoConfig.for_model(model_type), "vision_config", None)
    if not isinstance(named, str) and vision is None:
        return "", NO_PICTURE + " (its config has no vision tower, and no processor is named)"
    if not isinstance(named, str):
        return "", "transformers names no processor for it"
    try:
        cls = getattr(transformers, named)
        kinds = {c.__name__ for c in cls.__mro__}
    except (ImportError, AttributeError) as exc:
        said = "needs torchvision" if "orchvision" in str(exc) else f"{type(exc).__name__}"
        return "", f"its processor class ({named}) {said}, which is not installed here"
    for kind, family in FAMILIES.items():
        if kind in kinds:
            return family, named
    images = image_processor_names(model_type, named)
    if own_resolution_images(model_type, named) is not None:
        return "dynamic", named
    try:  # (a class transformers marks as needing torchvision answers nothing of itself)
        parts = set(cls.get_attributes())
    except ImportError:
        parts = {"image_processor", "video_processor"}
    if not parts & {"image_processor", "video_processor"}:  # (Evolla's: proteins and text)
        said = ", ".join(sorted(parts))
        return "", f"{NO_PICTURE} (its processor, {named}, has no image processor: {said})"
    # (transformers' own marks: the class requires torchvision, or its pictures are read
    # by a torchvision image processor alone, or as a video's frames by a torchvision video
    # processor alone, InstructBLIP-Video's; or its vision tower is timm's, which needs it)
    needs = "torchvision" in (getattr(cls, "_backends", None) or ())
    videos = VIDEO_PROCESSOR_MAPPING_NAMES.get(model_type)
    needs |= "image_processor" not in parts and set(videos or {}) == {"torchvision"}
    tower = MODEL_MAPPING_NAMES.get(getattr(vision, "model_type", ""))
    if (
        needs
        or (isinstance(images, dict) and set(images) == {"torchvision"})
        or (tower == "TimmWrapperModel" and not transformers.utils.is_timm_available())
    ):
        return "", (
            f"its processor ({named}) reads pictures with torchvision alone, which does not "
            "install beside the CPU build of torch here"
            if tower != "TimmWrapperModel"
            else "its vision tower is timm's (TimmWrapperModel): timm needs torchvision, "
            "which does not install beside the CPU build of torch here"
        )
    return "", f"its processor ({named}) places a picture's tokens in a way not mapped yet"


def image_processor_names(model_type: str, named: str) -> Any:
    """transformers' image processor names of the architecture: its own, else those of an
    architecture sharing its processor class (Qwen3-VL-MoE names none of its own:
    Qwen3-VL's processor reads its pictures)."""
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    sharing = [t for t, n in PROCESSOR_MAPPING_NAMES.items() if n == named]
    return IMAGE_PROCESSOR_MAPPING_NAMES.get(model_type) or next(
        (IMAGE_PROCESSOR_MAPPING_NAMES[t] for t in sharing if t in IMAGE_PROCESSOR_MAPPING_NAMES),
        None,
    )


def own_resolution_images(model_type: str, named: str) -> Any:
    """The architecture's PIL image processor class where it has Qwen2-VL's settings (a
    merge and a temporal patch: the own-resolution placing's), else None."""
    import transformers

    images = image_processor_names(model_type, named)
    names = list(images.values()) if isinstance(images, dict) else list(images or ())
    for name in [n for n in names if n]:
        pil = getattr(transformers, f"{name.removesuffix('Fast')}Pil", None)
        if pil is not None and {"merge_size", "temporal_patch_size"} <= set(vars(pil())):
            return pil
    return None
