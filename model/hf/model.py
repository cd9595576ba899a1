"""A transformers model as a `HookedModule` that answers as model/'s `Transformer` does
(`forward`, `encode`, `decode`, `config`, hook names such as
`decoder.3.self_attn.hook_weights`), so that every view and experiment of the app reads it
unchanged. Its attention runs in `capture.capturing_attention`; which module is which
attention type and layer is found by tracing one short forward pass."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from torch import Tensor, nn

from ..attention import is_fused
from ..attention_types import AttentionSpec
from ..hooks import HookPoint
from ..long import LongCapture
from ..placement import device_of
from ..served import Blocks, DecoderCache, Layout, PositionTable, ServedModel
from . import long
from .calls import (
    BackendError,
    grown,
    hf_architecture,
    reads_pixels,
    specs_of,
    text_reader,
    trace,
)
from .capture import AttentionPoints, Call, calling
from .positions import Positions, halves_rotated, hook_positions, positions_of
from .summary import summary


class StackPoints(nn.Module):
    """Hook points of one stack, numbered by layer as model/'s are (`decoder.0.self_attn.…`),
    its `hook_pos`, and `pos`: the positions the model uses (or None)."""

    def __init__(self, stack: str, layers: int, modules: list[str]) -> None:
        super().__init__()
        for i in range(layers):
            layer = nn.Module()
            for name in modules:
                layer.add_module(name, AttentionPoints(f"{stack}.{i}.{name}"))
            self.add_module(str(i), layer)
        # (T, d) added table, (T, d_rot/2) rotary angles, or (Tq, Tk, H) a relative bias
        self.hook_pos = HookPoint()
        self.pos: Positions | None = None


class HFTransformer(ServedModel):
    """A transformers model (loaded with attn_implementation="attnviz") with model/'s
    interface: forward(input_ids) -> last hidden state (encoder-only) or logits
    (decoder-only), forward(input_ids, target) -> logits (encoder-decoder)."""

    def __init__(self, hf: Any, architecture: str | None = None) -> None:
        super().__init__()
        self.hf: Any = hf.eval()  # (a transformers model: any architecture's methods)
        found = architecture or hf_architecture(hf.config)
        self.architecture = {"image-encoder": "encoder-only",  # (pixels in)
                             "vision-language": "decoder-only"}.get(found, found)  # fmt: skip
        by_type = trace(self.hf, self.architecture)
        self._traced = [c for calls in by_type.values() for c in calls]
        # a model whose matrices bitsandbytes stores in 4 or 8 bits: what reads them is refused
        method = getattr(getattr(hf, "hf_quantizer", None), "quantization_config", None)
        kind = getattr(getattr(method, "quant_method", None), "value", None)
        self.weights_refusal: str | None = (
            f"its weight matrices are stored in {kind}'s packed bits: views that read them "
            "(value-weighted norms, ALTI, the logit lens, DLA, the graph) are not served for "
            "it; its attention is captured as for any model"
            if kind == "bitsandbytes"
            else None
        )
        self._projections = {t: [c.projection for c in calls] for t, calls in by_type.items()}
        self.specs = specs_of(by_type)
        # an image encoder reads pixels: no vocabulary, no logits (its output is its states),
        # and its positions are 2-D (a table per patch, or RoPE over rows and columns), not
        # the text's 1-D positions the positional view reads
        self.reads_pixels = reads_pixels(self.hf)
        # (a vision-language model's: its language model's, not its vision tower's)
        text = self.hf.get_decoder() if found == "vision-language" else self.hf
        positions = None if self.reads_pixels else positions_of(text)
        # transformers' usual RoPE pairs dim i with i + d/2 (rotate_half); where a family
        # pairs them otherwise (Cohere, GLM, DeepSeek's MLA), the neuron view shows no
        # "before" rather than a wrong one
        self.rotary_layout = "rotate_half" if halves_rotated(self.hf) else None
        vocab = 0 if self.reads_pixels else self.hf.get_input_embeddings().num_embeddings
        out = self.hf.get_output_embeddings()
        logits = out.out_features if isinstance(out, nn.Linear) else vocab
        positional = positions.positional if positions is not None else "none"
        self.config = summary(hf.config, self.architecture, self.specs, positional, vocab, logits)
        pad = getattr(hf.config, "pad_token_id", None)
        self.pad_id = pad if isinstance(pad, int) and pad >= 0 else None  # (None: no padding)
        types: dict[int, str] = {}
        for name, calls in by_type.items():
            for c in calls:
                if types.setdefault(id(c.module), name) != name:
                    raise BackendError("one attention module serves two attention types")
        self._types = types
        parameters = inspect.signature(self.hf.forward).parameters
        # (a vision-language model's positions are its own: Qwen2-VL's run over the
        # picture's rows and columns, computed by its forward from the prompt's pass)
        self._positions_given = (
            self.architecture == "decoder-only"
            and "position_ids" in parameters
            and found != "vision-language"
        )
        self._keeps_logits = "logits_to_keep" in parameters
        modules: dict[str, list[str]] = {}
        for spec in self.specs:
            modules.setdefault(spec.stack, []).append(spec.module)
        for stack, names in modules.items():
            layers = max(s.layers for s in self.specs if s.stack == stack)
            self.add_module(stack, StackPoints(stack, layers, names))
        self._points = {
            spec.type: [getattr(getattr(self, spec.stack), str(i)).get_submodule(spec.module)
                        for i in range(spec.layers)]
            for spec in self.specs
        }  # fmt: skip
        main = getattr(self, "encoder" if self.config.has_encoder else "decoder")
        main.pos = positions
        encoder = (
            self.hf
            if self.architecture == "encoder-only"
            else (self.hf.get_encoder() if self.architecture == "encoder-decoder" else None)
        )
        self._encoder_modules = {id(m) for m in encoder.modules()} if encoder is not None else set()
        if positions is not None:
            hook_positions(self, positions, main.hook_pos)
        if self.architecture == "decoder-only":
            long.keep_final(self)
        if self.config.has_decoder:
            self.hook_logits = HookPoint()  # (B, T, V)

    def call(self, hidden: list[Tensor] | None = None) -> Call:
        """A forward call's state (with `hidden`: the final hidden states kept there)."""
        return Call(self._types, self._points, hidden=hidden)

    def run_call(self, call: Call, **inputs):
        """transformers' forward on `inputs`, its attention calls firing `call`'s points."""
        with calling(call):
            return self.hf(**inputs)

    @property
    def traced(self):
        """The attention calls its trace saw."""
        return self._traced

    def projection_module(self, attention_type: str, layer: int) -> nn.Module | None:
        """The Linear (or Conv1D) that reads a layer's attention output unchanged (its
        heads' outputs side by side), as the trace found it; None where none does (a gate
        or a norm comes between)."""
        return self._projections[attention_type][layer]

    @functools.cached_property
    def residual_layout(self) -> Layout | str:
        """Where its residual stream is read (model/methods/lens.py's `Layout`), or why not: found
        once, by a probe pass (model/hf/stream.py)."""
        from .stream import residual_layout

        if self.weights_refusal is not None:
            return self.weights_refusal
        try:
            return residual_layout(self)
        except Exception as exc:  # (a model of the user's: its own code may raise anything)
            return f"its residual stream could not be found: {type(exc).__name__}: {exc}"

    @functools.cached_property
    def _encoder_blocks(self) -> Blocks | str:
        """An encoder's self-attention blocks as ALTI reads them (model/hf/stream.py), or
        why not: found once, by a probe pass."""
        from .stream import encoder_blocks

        if self.weights_refusal is not None:
            return self.weights_refusal
        try:
            return encoder_blocks(self)
        except Exception as exc:  # (a model of the user's: its own code may raise anything)
            return f"its attention blocks could not be found: {type(exc).__name__}: {exc}"

    def attention_blocks(self, spec: AttentionSpec) -> Blocks | str:
        """An encoder's blocks as its probe found them; a decoder's from its residual
        stream's layout (pre-norm: no post-norms)."""
        if spec.type == "encoder.self":
            blocks = self._encoder_blocks
            return f"on transformers' code: {blocks}" if isinstance(blocks, str) else blocks
        layout = self.residual_layout
        if isinstance(layout, str) or spec.type != "decoder.self" or layout.parallel:
            why = layout if isinstance(layout, str) else "this attention type is no decoder's"
            if not isinstance(layout, str) and layout.parallel:
                why = "its attention and feed-forward blocks read the same input (parallel)"
            return f"on transformers' code ALTI reads a decoder's residual stream: {why}"
        return Blocks(layout.layers, layout.attention, [None] * len(layout.layers))

    def positions(self, stack: str) -> PositionTable | None:
        points = self.get_submodule(stack)
        assert isinstance(points, StackPoints)
        return points.pos

    @property
    def projects_heads(self) -> bool:
        """Whether every attention call's output projection was found, and is read as it is
        stored (value norms): not where it is quantized."""
        if self.weights_refusal is not None:
            return False
        return all(p is not None for calls in self._projections.values() for p in calls)

    def prefixes(self) -> list[str]:
        """Every attention call's hook prefix, in the order of a forward pass's calls."""
        return [points.prefix for layers in self._points.values() for points in layers]

    @functools.cached_property
    def long_refusal(self) -> str | None:
        """None where it reads prompts longer than 512 tokens by the long path (checked on a
        probe, once); else why not."""
        return long.long_refusal(self)

    def long_pass(
        self, ids: list[int], last_from: int, inputs: dict[str, Tensor] | None = None
    ) -> tuple[LongCapture, list[int], Tensor]:
        """A long prompt's pass (hf/long.py): its capture, predictions and last logits."""
        return long.long_pass(self, ids, last_from, inputs)

    def padding(self, ids: Tensor, mask: Tensor | None = None) -> Tensor | None:
        """transformers' 2-D attention mask (1 = a token, 0 = padding) of a padded batch:
        from our boolean padding mask (B, 1, 1, S) where given, else from the padding id;
        None where nothing is padded."""
        if mask is not None:
            keep = mask.reshape(mask.size(0), -1)[:, -ids.size(1) :].long()
        elif self.pad_id is not None and self.architecture != "decoder-only":
            keep = (ids != self.pad_id).long()
        else:
            return None
        return None if bool(keep.all()) else keep

    @functools.cached_property
    def input_device(self) -> torch.device:
        """Where its inputs go: its input embedding's device (a model spread by a device map
        moves what follows by accelerate's hooks)."""
        if self.reads_pixels:
            return next(self.hf.parameters()).device
        return device_of(self.hf.get_input_embeddings())

    def forward(self, input_ids: Tensor, target: Tensor | None = None, **kwargs) -> Tensor:
        if self.reads_pixels:  # (an image encoder's input is its pictures' pixel values)
            with calling(self.call()):
                pixels = input_ids.to(self.input_device, self.hf.dtype)
                out = self.hf(pixel_values=pixels, **kwargs)
            return out.last_hidden_state.cpu()
        input_ids = input_ids.to(self.input_device)
        target = target.to(self.input_device) if target is not None else None
        padding = self.padding(input_ids)
        with calling(self.call()):
            if self.architecture == "encoder-only":  # (with a masked-LM head: the head's logits)
                out = self.hf(input_ids=input_ids, attention_mask=padding, **kwargs)
                logits = getattr(out, "logits", None)
                return (logits if logits is not None else out.last_hidden_state).cpu()
            if self.architecture == "decoder-only":
                out = self._reading(kwargs)(input_ids=input_ids, use_cache=False, **kwargs)
            else:
                if target is None:
                    raise ValueError("an encoder-decoder model needs both input_ids and target")
                out = self.hf(input_ids=input_ids, attention_mask=padding,
                              decoder_input_ids=target, use_cache=False)  # fmt: skip
        return self.hook_logits(out.logits).cpu()  # (a GPU's: what runs read, on the CPU)

    @functools.cached_property
    def _text(self) -> Any:
        """What reads a text alone (calls.text_reader); kept out of the module's
        submodules: it is the model, or a part of it, already."""
        return text_reader(self.hf)

    def _reading(self, inputs: dict) -> Any:
        """What reads a pass given these inputs: the model where they hold a picture (its
        pixels, or Kosmos-2.5's flattened patches), else what reads a text alone."""
        return self.hf if {"pixel_values", "flattened_patches"} & set(inputs) else self._text

    def encode(
        self, src: Tensor, src_mask: Tensor | None = None, pieces: Tensor | None = None
    ) -> Tensor:
        if pieces is not None:
            raise ValueError("a text is read in pieces in one pass by our model code only")
        src = src.to(self.input_device)
        src_mask = src_mask.to(self.input_device) if src_mask is not None else None
        padding = self.padding(src, src_mask)
        with calling(self.call()):
            encoder = (
                self.hf.base_model if self.architecture == "encoder-only" else self.hf.get_encoder()
            )
            return encoder(input_ids=src, attention_mask=padding).last_hidden_state.cpu()

    def decode(
        self,
        target: Tensor,
        memory: Tensor | None = None,
        src_mask: Tensor | None = None,
        target_mask: Tensor | None = None,
        cache: DecoderCache | None = None,
    ) -> Tensor:
        """The logits of the decoder for `target` (an encoder-decoder's: over the encoder's
        `memory`; with a cache: the new tokens only, through transformers' own KV cache
        kept on `cache`). Its head runs inside the model's forward (with any soft-capping
        or scaling of its logits), so `logits` of what this returns is the same tensor."""
        target = target.to(self.input_device)
        inputs: dict = {
            "decoder_input_ids" if self.architecture == "encoder-decoder" else "input_ids": target
        }
        if self.architecture == "encoder-decoder":
            if memory is None:
                raise ValueError("an encoder-decoder model decodes over encoder memory")
            from transformers.modeling_outputs import BaseModelOutput

            memory = memory.to(self.input_device)  # (encode gives it on the CPU)
            inputs["encoder_outputs"] = BaseModelOutput(last_hidden_state=memory)
            if src_mask is not None:  # the source's padding, for the cross-attention
                padding = src_mask.reshape(src_mask.size(0), -1)[:, -memory.size(1) :].long()
                if not bool(padding.all()):
                    inputs["attention_mask"] = padding.to(self.input_device)
        elif self.architecture != "decoder-only":
            raise BackendError("an encoder-only model does not decode")
        # (the text alone: BLIP-2's language model, after a first pass with its picture)
        reader = self._text
        with calling(self.call()) as call:
            if cache is None:
                out = reader(**inputs, use_cache=False)
            elif cache.stateless and cache.ids is not None:  # a model that returns no cache:
                ids = torch.cat([cache.ids, target], 1)  # the whole sequence again, with
                # what its prompt read besides
                read = grown(cache.inputs, ids.size(1))
                out = self.hf(**{**inputs, **read, next(iter(inputs)): ids}, use_cache=False)
                cache.ids = ids
                return self.hook_logits(out.logits[:, -target.size(1) :]).cpu()
            else:
                if cache.ids is None:  # the prompt's pass: what it reads besides its ids
                    inputs.update(cache.inputs)
                    reader = self._reading(inputs)
                if self._positions_given:  # (a hybrid whose first layer keeps no keys
                    # counts its cache's length wrong: transformers' generate says them too)
                    past = 0 if cache.ids is None else cache.ids.size(1)
                    steps = torch.arange(past, past + target.size(1), device=target.device)
                    inputs["position_ids"] = steps[None].expand(target.size(0), -1)
                if is_fused() and self._keeps_logits:  # (a long prompt's generation reads
                    # the newest position's logits only: not 8,192 x the vocabulary)
                    inputs["logits_to_keep"] = 1
                out = reader(**inputs, cache=getattr(cache, "hf", None), use_cache=True)
                # (BLIP-2's: its language model's output holds it)
                cache.hf = getattr(out, "cache", None) or getattr(
                    getattr(out, "language_model_outputs", None), "cache", None
                )
                cache.stateless = cache.hf is None  # (RecurrentGemma keeps its state inside)
                cache.ids = target if cache.ids is None else torch.cat([cache.ids, target], 1)
                cache.noted = call.long
                self._mirror(cache)
        return self.hook_logits(out.logits).cpu()

    @staticmethod
    def _mirror(cache: DecoderCache) -> None:
        """Each attention layer's keys and values of transformers' cache on ours (the lab
        counts their bytes); the same tensors, not copies. A hybrid's cache also holds
        its other layers' states: its attention layers are the ones with keys, in order."""
        caches = {"self": getattr(cache.hf, "self_attention_cache", cache.hf),
                 "cross": getattr(cache.hf, "cross_attention_cache", None)}  # fmt: skip
        for attention, held in caches.items():
            pairs = [(getattr(layer, "keys", None), getattr(layer, "values", None))
                     for layer in getattr(held, "layers", [])]  # fmt: skip
            pairs = [(k, v) for k, v in pairs if isinstance(k, Tensor) and isinstance(v, Tensor)
                     and k.numel()]  # fmt: skip
            for ours, (keys, values) in zip(cache.layers, pairs, strict=False):
                ours[attention].k, ours[attention].v = keys, values

    @torch.no_grad()
    def greedy(self, source: Tensor, max_new_tokens: int) -> list[int]:
        """An encoder-decoder's greedy output for one source (1, S) by transformers'
        `generate`, from its decoder start token to its end token (or the limit): the
        likeliest token at each step (one beam, no minimum length, no n-gram or
        repetition penalty), but for the tokens its generation config forces or bans."""
        source = source.to(self.input_device)
        out = self.hf.generate(
            source, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, min_length=0,
            min_new_tokens=0, no_repeat_ngram_size=0, repetition_penalty=1.0,
            encoder_no_repeat_ngram_size=0, length_penalty=1.0,
        )  # fmt: skip
        return out[0].tolist()

    def logits(self, hidden: Tensor) -> Tensor:
        """`decode` already gives logits (see there)."""
        return hidden

    def score_scaling(self) -> float | None:
        """The one factor every score is multiplied by, where that is all that is done to
        them before the mask (no soft-capping, position bias or sinks); else None."""
        if any(c.extras for c in self._traced):
            return None
        values = {c.scaling for c in self._traced}
        if len(values) != 1:
            return None
        (value,) = values
        return float(value) if value is not None else self.specs[0].head_dim ** -0.5
