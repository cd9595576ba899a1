"""Vision-language models on transformers' own code: a folder's model with its processor,
read offline; a picture and a text read in one captured pass of the language model, whose
sequence holds the picture's tokens.

Every position of that sequence says what it is (`ImagePosition`): a text token, or a
token of the picture with its place and its box in the picture's own pixels, by how the
folder's processor makes them (image_tokens.py). A text token's attention is drawn over
the picture by these boxes. The language model's attention is captured, as a decoder's
is; the vision tower's calls run through the same attention function, uncaptured (its own
view is not served yet)."""

from __future__ import annotations

import contextlib
import inspect
import io
import json
from pathlib import Path
from typing import Any

import torch

from ..checkpoints import CheckpointError
from ..hooks import Capture, NamesFilter
from ..long.reading import LONG_FROM, PromptTooLong, too_long
from ..patches import ImageMap, ImagePosition, PicturePrompt
from ..pretrained.causal import CausalLM, but_logits
from ..runner import Capabilities, RunResult
from ..served import ServedModel
from .calls import BackendError, grown
from .image_tokens import ImageTokens, around_image, image_token_of, image_tokens


def load_processor(folder: str | Path) -> Any:
    """A folder's processor (its image processor's PIL backend: torchvision is not
    installed), read offline; where its class also reads videos, which need torchvision,
    its pictures' half (`pictures_half`)."""
    import transformers

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return transformers.AutoProcessor.from_pretrained(
                folder, backend="pil", local_files_only=True, trust_remote_code=False
            )
    except (ImportError, OSError, ValueError, KeyError, TypeError) as exc:
        # (its video processor needs torchvision: ImportError, or InternVL's ValueError)
        half = pictures_half(Path(folder))
        if half is None:
            raise CheckpointError(f"transformers cannot read its processor: {exc}") from None
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                return half.from_pretrained(
                    folder, backend="pil", local_files_only=True, trust_remote_code=False
                )
        except (OSError, ValueError, KeyError, TypeError, ImportError) as again:
            raise CheckpointError(
                f"transformers cannot read its processor: {exc} (nor its pictures' half: {again})"
            ) from None


def pictures_half(folder: Path) -> Any:
    """The folder's processor class without its video processor (which needs torchvision):
    transformers' own class, its pictures read by its own code; None where the class
    named takes no video processor."""
    import transformers

    named = None
    for file in ("processor_config.json", "preprocessor_config.json"):
        try:
            named = json.loads((folder / file).read_text(encoding="utf-8")).get("processor_class")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(named, str):
            break
    cls = getattr(transformers, named, None) if isinstance(named, str) else None
    if cls is None or "video_processor" not in inspect.signature(cls.__init__).parameters:
        return None

    attributes = [a for a in cls.get_attributes() if a != "video_processor"]

    def get_attributes(half):
        return attributes  # (what transformers reads from the folder for it)

    def from_args_and_dict(half, args, processor_dict, **kwargs):
        # the class's own __init__ is called, as transformers calls it, with the settings
        # of processor_config.json it names; its parts by name, its video processor none
        # (SmolVLM's class asks for one, with no default)
        parts = dict(zip(attributes, args, strict=True), video_processor=None)
        made = transformers.ProcessorMixin.from_args_and_dict.__func__  # type: ignore[attr-defined]
        return made(half, [], processor_dict, **parts, **kwargs)

    def without_videos(self, *args, **kwargs):
        # what the class hands transformers' ProcessorMixin, in its own order (Video-LLaVA
        # names its parts by place: image, video, tokenizer), less the video processor
        kwargs |= dict(zip(cls.get_attributes(), args, strict=False))
        kwargs.pop("video_processor", None)
        transformers.ProcessorMixin.__init__(self, **kwargs)

    shim = type("WithoutVideos", (transformers.ProcessorMixin,), {"__init__": without_videos})
    named_for = {"get_attributes": classmethod(get_attributes),
                 "from_args_and_dict": classmethod(from_args_and_dict),
                 # (what the class's __init__ reads of its video processor, MiniCPM-V's
                 # slice_mode and downsample_mode: none; a class attribute, not saved)
                 "video_processor": NoVideos()}  # fmt: skip
    return type(f"{cls.__name__}Pictures", (cls, shim), named_for)


class NoVideos:
    """A processor's absent video processor, as its class's __init__ reads it: every
    setting None."""

    def __getattr__(self, name: str) -> None:
        if name.startswith("__"):
            raise AttributeError(name)
        return None


def image_at(made: Any, image_token_id: int) -> list[int]:
    """Where a processor's prompt holds the picture's tokens: those its
    image_embeds_position_mask marks 1, where it gives one (Kosmos-2's, whose picture's
    tokens are of distinct ids; Kosmos-2.5's marks the tokens around them -1), else those
    of the image token's id."""
    mask = made.get("image_embeds_position_mask")
    found = mask == 1 if isinstance(mask, torch.Tensor) else made["input_ids"] == image_token_id
    return found[0].nonzero().flatten().tolist()


class VisionLanguageLM(CausalLM):
    """A vision-language model served: a run reads a picture and a text (the prompt: the
    picture's token, between the tokens the model writes around one, a line break and the
    text; or the text as written where it names the picture's token itself), the language
    model's pass over both captured; without a picture, its language model reads text as
    any decoder does."""

    capabilities = Capabilities(generation=True, pictures=True)
    processor: Any  # the folder's processor (AutoProcessor's)
    image_token: str  # what the processor writes where a picture goes, and its id
    image_token_id: int
    patches: ImageTokens
    around: tuple[str, str]  # what the model's prompts write before and after a picture
    separator: str  # what comes between the picture and the text
    prepended: bool  # whether the processor writes the picture's tokens itself, first
    asked: dict[str, Any]  # what its processor is asked for besides its defaults
    masked: bool  # whether its pass reads the prompt's attention mask (see `of`)

    @classmethod
    def of(cls, runner: CausalLM, processor: Any) -> VisionLanguageLM:
        """A decoder's runner (its tokenizer, stops, chat template) with its processor."""
        made = cls.__new__(cls)
        made.__dict__.update(runner.__dict__)
        made.processor = processor
        hf: Any = getattr(runner.model, "hf", None)  # (an HFTransformer's)
        made.image_token, made.image_token_id = image_token_of(hf.config, processor)
        made.patches = image_tokens(hf.config, processor)
        made.special_tokens = runner.special_tokens | {made.image_token}
        made.around = around_image(hf.config, processor)
        # (PaliGemma's and Gemma 3's processors write their own bos and line breaks)
        kinds = {c.__name__ for c in type(processor).__mro__}
        made.separator = "" if kinds & {"PaliGemmaProcessor", "Gemma3Processor"} else "\n"
        # (BLIP-2's, InstructBLIP's, Kosmos-2's and Kosmos-2.5's processors write the
        # picture's tokens first, always)
        made.prepended = bool(kinds & {"Blip2Processor", "InstructBlipProcessor",
                                       "Kosmos2Processor", "Kosmos2_5Processor"})  # fmt: skip
        # (a prompt's token types, where the model's pass reads them: Cosmos3-Edge's
        # processor gives them only when asked, its rotary positions over the picture
        # found by them)
        reads = inspect.signature(hf.forward).parameters
        made.asked = {"return_mm_token_type_ids": True} if "mm_token_type_ids" in reads else {}
        # (its prompt's attention mask, where its rotary positions over the picture are
        # found by it, not by token types: the Qwen Omni thinkers' get_rope_index, whose
        # pass without one reads the picture at a text's positions)
        made.masked = "mm_token_type_ids" not in reads and any(
            hasattr(m, "get_rope_index") for m in (hf, getattr(hf, "model", None))
        )
        return made

    def checked(self) -> VisionLanguageLM:
        """The runner, where its processor puts in the prompt of a 70 x 50 picture the
        image tokens its placing counts: a processor whose settings disagree with the
        model's (a strategy, a patch size, the tokens of a tile, the canvases) is refused
        when the folder is read, not on each picture. (A prompt's length is not checked
        here: a picture of more tokens than a run reads is refused when it is sent.)"""
        from PIL import Image

        picture = Image.new("RGB", (70, 50), (128, 128, 128))
        try:  # (its processor's own errors: the folder's fault)
            made = self.processor(images=picture, text=self.picture_prompt(""),
                                  return_tensors="pt", **self.asked)  # fmt: skip
        except (MemoryError, torch.OutOfMemoryError):
            raise
        except Exception as exc:
            raise CheckpointError(
                f"its processor cannot read a 70 x 50 picture: {type(exc).__name__}: {exc}"
            ) from None
        written = len(image_at(made, self.image_token_id))
        placed = len(self.patches.positions(70, 50))
        if written != placed or self.patches.count(70, 50) != placed:
            raise CheckpointError(
                f"its processor and its model disagree on a 70 x 50 picture: its processor "
                f"put {written} image tokens in the prompt where its vision tower's grid has "
                f"{placed}"
            )
        return self

    def with_model(self, model: ServedModel) -> VisionLanguageLM:
        twin = super().with_model(model)
        return VisionLanguageLM.of(twin, self.processor)

    def read_long(self, max_capture_bytes: int) -> VisionLanguageLM:
        return VisionLanguageLM.of(super().read_long(max_capture_bytes), self.processor)

    @property
    def reads_long_prompts(self) -> bool:
        """Whether a picture and a text past 512 tokens are read, by the long path: where
        its model reads long prompts (its long pass checked against its own forward) and a
        capture budget is set (`read_long`)."""
        return self.max_capture_bytes is not None and self.reads_long

    def picture_prompt(self, text: str | None) -> str:
        """The prompt a picture and a text make (see the class)."""
        text = text or ""
        if self.image_token in text or self.prepended:
            return text
        before, after = self.around
        return f"{before}{self.image_token}{after}{self.separator}{text}"

    def positions_read(self, width: int, height: int) -> int:
        return self.patches.count(width, height)

    def read_prompt(self, picture: Any, text: str | None) -> PicturePrompt:
        """A picture and a text as the processor makes them: the prompt, its ids, what
        the model reads besides them (the picture's pixels), and what each position is."""
        prompt = self.picture_prompt(text)
        made = self.processor(images=picture, text=prompt, return_tensors="pt", **self.asked)
        ids: list[int] = made["input_ids"][0].tolist()
        # (a runner that reads long prompts reads as many as its capture budget holds)
        if self.reads_long_prompts and len(ids) > self.max_tokens:
            raise too_long(len(ids), self.max_tokens, self.model.config.max_seq_len)
        if not self.reads_long_prompts and len(ids) > min(self.max_tokens, LONG_FROM):
            raise PromptTooLong(
                f"the picture and the text make {len(ids):,} tokens; this server reads at "
                f"most {min(self.max_tokens, LONG_FROM):,} of this model: "
                + (f"it reads no longer prompt ({self.model.long_refusal})"
                   if self.model.long_refusal else "no capture budget is set for it")
            )  # fmt: skip
        placed = self.patches.positions(*picture.size)
        at = image_at(made, self.image_token_id)
        if len(at) != len(placed):
            raise BackendError(
                f"its processor put {len(at)} image tokens in the prompt where its vision "
                f"tower's grid has {len(placed)}: its patches cannot be placed"
            )
        model: Any = self.model  # (an HFTransformer)
        inputs = {
            k: v.to(model.input_device, model.hf.dtype if v.is_floating_point() else v.dtype)
            for k, v in made.items()
            if k not in ("input_ids", "labels")
            and isinstance(v, torch.Tensor)
            and (k != "attention_mask" or self.masked)
        }
        positions = [ImagePosition("text", token) for token in self.shown(ids)]
        for i, position in zip(at, placed, strict=True):
            positions[i] = position
        return PicturePrompt(prompt, ids, inputs, positions)

    @torch.no_grad()
    def read_picture(
        self,
        picture: Any,
        digest: str,
        text: str | None = None,
        names_filter: NamesFilter = None,
        continuation: list[int] | tuple[int, ...] = (),
    ) -> RunResult:
        """One pass of the language model over the prompt a picture and a text make, and
        the tokens generated after it (`continuation`)."""
        read = self.read_prompt(picture, text)
        ids, generated = read.ids, list(continuation)
        context = self.model.config.max_seq_len
        if len(ids) + len(generated) > context:
            raise too_long(len(ids) + len(generated), context, context)
        model: Any = self.model
        inputs = grown(read.inputs, len(ids) + len(generated))
        capture: Capture
        # (no (T, T) matrix kept: the long path, as a text's; a runner that keeps 512
        # reads its prompt's continuation past them whole, as a text's)
        if len(ids) + len(generated) > LONG_FROM and self.reads_long_prompts:
            if names_filter is not None:
                raise PromptTooLong(
                    f"the picture and the text make {len(ids) + len(generated):,} tokens; a "
                    f"pass that keeps whole attention matrices reads at most {LONG_FROM}"
                )
            capture, predicted, last = model.long_pass([*ids, *generated], len(ids) - 1, inputs)
        else:
            names = but_logits if names_filter is None else names_filter
            logits, capture = model.run_with_capture(
                torch.tensor([[*ids, *generated]]), names_filter=names, **inputs
            )
            predicted = logits[0].argmax(-1).tolist()
            last = logits[0, len(ids) - 1 :]
        result = self._result(read.prompt, ids, generated, capture, predicted, last, False, None)
        shown = read.shown(result.source_tokens)
        result.source_tokens = result.target_tokens = shown
        positions = read.positions + [ImagePosition("text", t) for t in shown[len(ids) :]]
        # (a grid token's height and width in the pixels the model reads: its patch's, or
        # LLaVA-OneVision's resampled token's)
        sized = getattr(self.patches, "token_size", None)
        size = sized(*picture.size) if sized else (self.patches.patch,) * 2
        result.image = ImageMap(digest, picture.size, positions, size)
        return result
