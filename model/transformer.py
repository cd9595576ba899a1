"""Encoder-decoder (the seed's), encoder-only and decoder-only Transformers from one config."""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from .attention import MultiHeadAttention
from .attention_types import AttentionSpec
from .config import ModelConfig
from .declared import alti_blocks, long_read, stream_layout
from .hooks import HookPoint
from .layers import DecoderLayer, EncoderLayer, norm_layer
from .long import LongCapture, MaskRule
from .masks import decoder_mask, generate_mask, padding_mask, piece_positions, same_piece
from .positional import positions_module
from .served import Blocks, DecoderCache, Layout, PositionTable, ServedModel

LONG_REFUSED = "only a decoder-only model reads long prompts"


class SkipInit(TorchFunctionMode):
    """Modules built with their initialisers (`nn.init`'s, and random fills) skipped, on
    this thread only (a torch function mode is the thread's own): for weights loaded
    right after. Their random fills took 2 s of a server's 9 s start-up (measured)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__module__", None) == "torch.nn.init" or func in (
            Tensor.uniform_,
            Tensor.normal_,
        ):
            # the tensor, left as allocated (loaded right after); nn.init's functions
            # hand it on by name
            return args[0] if args else (kwargs or {})["tensor"]
        return func(*args, **(kwargs or {}))


class Stack(nn.Module):
    """Token embeddings, positions and numbered layers, so hook names read `encoder.0.…`."""

    hook_pos: HookPoint  # (where it has positions)

    def __init__(
        self,
        config: ModelConfig,
        vocab_size: int,
        layers: Sequence[nn.Module],
        token_types: bool,
    ) -> None:
        super().__init__()
        self.config = config
        self.tok_embed = nn.Embedding(vocab_size, config.d_model)
        self.embed_scale = math.sqrt(config.d_model) if config.embed_scale else 1.0
        self.hook_embed = HookPoint()  # (B, T, d), scaled token embeddings
        self.token_types = token_types and config.type_vocab_size > 0
        if self.token_types:
            self.type_embed = nn.Embedding(config.type_vocab_size, config.d_model)
            self.hook_type_embed = HookPoint()  # (B, T, d)
        self.pos = positions_module(config)
        if self.pos is not None:
            self.hook_pos = HookPoint()  # (T, d) added table, or (T, d_head/2) rotary angles
        self.embed_norm = norm_layer(config) if config.embed_norm else None
        self.dropout = nn.Dropout(config.dropout)
        self.n_layers = len(layers)
        for i, layer in enumerate(layers):
            self.add_module(str(i), layer)
        pre = config.norm_placement == "pre"
        self.final_norm = norm_layer(config) if pre else None
        self.hook_out = HookPoint()  # (B, T, d), the stack's output

    def layers(self) -> list[nn.Module]:
        return [self.get_submodule(str(i)) for i in range(self.n_layers)]

    def embed(
        self,
        ids: Tensor,
        offset: int = 0,
        token_type_ids: Tensor | None = None,
        positions: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Embedding sum for positions offset.. (or each token's `positions` (T,)), and the
        rotary angles if any."""
        x = self.hook_embed(self.tok_embed(ids) * self.embed_scale)
        if self.token_types:
            types = torch.zeros_like(ids) if token_type_ids is None else token_type_ids
            x = x + self.hook_type_embed(self.type_embed(types))
        angles = None
        if self.pos is not None:
            if positions is None:
                encoding = self.pos.encoding(offset, ids.size(1))
            else:
                encoding = self.pos.encoding(0, int(positions.max()) + 1)[positions]
            encoding = self.hook_pos(encoding)
            if self.pos.adds:
                x = x + encoding
            else:
                angles = encoding
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        return self.dropout(x), angles

    def finish(self, x: Tensor) -> Tensor:
        if self.final_norm is not None:
            x = self.final_norm(x)
        return self.hook_out(x)


class Encoder(Stack):
    def __init__(self, config: ModelConfig) -> None:
        layers = [EncoderLayer(config) for _ in range(config.n_layers)]
        super().__init__(config, config.source_vocab_size, layers, token_types=True)

    def forward(
        self,
        src: Tensor,
        mask: Tensor | None,
        token_type_ids: Tensor | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        x, angles = self.embed(src, token_type_ids=token_type_ids, positions=positions)
        for layer in self.layers():
            x = layer(x, mask, angles)
        return self.finish(x)


class Decoder(Stack):
    def __init__(self, config: ModelConfig, cross: bool) -> None:
        layers = [DecoderLayer(config, cross) for _ in range(config.decoder_layers)]
        super().__init__(config, config.target_vocab_size, layers, token_types=False)

    def forward(
        self,
        target: Tensor,
        mask: Tensor | None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: DecoderCache | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        offset = cache.length if cache is not None else 0
        x, angles = self.embed(target, offset=offset, positions=positions)
        for i, layer in enumerate(self.layers()):
            layer_cache = cache.layers[i] if cache is not None else None
            x = layer(x, mask, memory, memory_mask, angles, layer_cache)
        return self.finish(x)


@dataclass(frozen=True)
class Pieces:
    """A text read as pieces in one pass, as if each were read alone: the piece of each
    source position and of each target position, (S,) and (T,), for every row of the batch.
    Each position sees only its own piece's positions (encoder, decoder and cross-attention
    alike) and takes its position within its piece: a model trained on short sentences
    decodes a long text piece by piece (the pronouncer), and this pass is those pieces'
    passes at once."""

    source: Tensor
    target: Tensor


@dataclass
class DecodeResult:
    tokens: Tensor  # (B, T): the prefix followed by the generated tokens
    logits: Tensor  # (B, steps, V): the logits each step chose from


class Transformer(ServedModel):
    """The seed's Transformer, generalised: `config.architecture` picks the stacks.

    forward(input_ids, target) -> logits (encoder-decoder), forward(input_ids) -> hidden states
    (encoder-only) or logits (decoder-only). What it states as a served model closes the
    class (its readings by name: model/declared.py).
    """

    rotary_layout = "ours"
    records_generation = True  # (its KV-cache decoding keeps what the long path reads)

    def __init__(self, config: ModelConfig, init: bool = True) -> None:
        """`init=False` skips the initialisation, for weights loaded right after."""
        super().__init__()
        if config.head_size is not None and config.head_size * config.n_heads != config.d_model:
            raise ValueError("model/ builds heads of d_model / n_heads: head_size differs")
        self.config = config
        with contextlib.nullcontext() if init else SkipInit():
            if config.has_encoder:
                self.encoder = Encoder(config)
            if config.has_decoder:
                self.decoder = Decoder(config, cross=config.architecture == "encoder-decoder")
                bias = config.bias if config.output_bias is None else config.output_bias
                self.output = nn.Linear(config.d_model, config.target_vocab_size, bias=bias)
                self.hook_logits = HookPoint()  # (B, T, V)
        if init:
            self._init_parameters()
        if config.tie_embeddings:  # one matrix, after the init: the embedding's
            self.output.weight = self.decoder.tok_embed.weight

    def tied(self) -> dict[str, str]:
        """State-dict names that are another's tensor (tied embeddings): alias -> name.
        Checkpoints store such a tensor once, under the name it is tied to."""
        return {"output.weight": "decoder.tok_embed.weight"} if self.config.tie_embeddings else {}

    def _init_parameters(self) -> None:
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def generate_mask(self, src: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        return generate_mask(src, target, self.config.pad_id)

    def encode(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        pieces: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> Tensor:
        """The encoder's output; with `pieces` (S,), each piece read as if alone."""
        if src_mask is None:
            src_mask = padding_mask(src, self.config.pad_id)
        positions = None
        if pieces is not None:
            src_mask = src_mask & same_piece(pieces, pieces)
            positions = piece_positions(pieces)
        return self.encoder(src, src_mask, token_type_ids, positions)

    def decode(
        self,
        target: Tensor,
        memory: Tensor | None = None,
        src_mask: Tensor | None = None,
        target_mask: Tensor | None = None,
        cache: DecoderCache | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """Decoder hidden states for `target`; with a cache, `target` holds only the new
        tokens; `positions` (T,) replaces the positions counted from the cache's length."""
        if (memory is not None) != hasattr(self, "encoder"):
            needs = "needs" if hasattr(self, "encoder") else "takes no"
            raise ValueError(f"a {self.config.architecture} model {needs} encoder memory")
        if cache is not None:
            cache_ids = target if cache.ids is None else torch.cat([cache.ids, target], dim=1)
        if target_mask is None:
            all_ids = cache_ids if cache is not None else target
            target_mask = decoder_mask(
                all_ids, self.config.pad_id, q_len=target.size(1), window=self.config.sliding_window
            )
        hidden = self.decoder(target, target_mask, memory, src_mask, cache, positions)
        if cache is not None:
            cache.ids = cache_ids
        return hidden

    def mask_rules(self, source: Tensor | None, target: Tensor | None) -> dict[str, MaskRule]:
        """Per attention module (hook prefix), the mask one pass over these ids (B, T)
        applies to its first item, described (what `generate_mask`/`decoder_mask` build)."""
        pad = self.config.pad_id

        def valid(ids: Tensor) -> Tensor | None:
            keep = ids[0] != pad
            return None if bool(keep.all()) else keep

        rules: dict[str, MaskRule] = {}
        if source is not None and hasattr(self, "encoder"):
            n, keys = source.size(1), valid(source)
            for i in range(self.config.n_layers):
                rules[f"encoder.{i}.self_attn"] = MaskRule(n, n, valid=keys)
        if target is not None and hasattr(self, "decoder"):
            n, window = target.size(1), self.config.sliding_window
            own = MaskRule(n, n, causal=True, window=window, valid=valid(target))
            for i in range(self.config.decoder_layers):
                rules[f"decoder.{i}.self_attn"] = own
                if source is not None and self.config.architecture == "encoder-decoder":
                    rules[f"decoder.{i}.cross_attn"] = MaskRule(
                        n, source.size(1), valid=valid(source)
                    )
        return rules

    def logits(self, hidden: Tensor) -> Tensor:
        return self.hook_logits(self.output(hidden))

    def forward(
        self,
        input_ids: Tensor,
        target: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        pieces: Pieces | None = None,
    ) -> Tensor:
        """`pieces`: an encoder-decoder's text read as pieces in this one pass (`Pieces`)."""
        arch = self.config.architecture
        if arch == "encoder-only":
            return self.encode(input_ids, token_type_ids=token_type_ids)
        if arch == "decoder-only":
            return self.logits(self.decode(input_ids))
        if target is None:
            raise ValueError("an encoder-decoder model needs both input_ids and target")
        src_mask, target_mask = self.generate_mask(input_ids, target)
        if pieces is None:
            memory = self.encode(input_ids, src_mask)
            return self.logits(self.decode(target, memory, src_mask, target_mask))
        memory = self.encode(input_ids, src_mask, pieces=pieces.source)
        cross_mask = src_mask & same_piece(pieces.target, pieces.source)
        target_mask = target_mask & same_piece(pieces.target, pieces.target)
        positions = piece_positions(pieces.target)
        hidden = self.decode(target, memory, cross_mask, target_mask, positions=positions)
        return self.logits(hidden)

    @torch.no_grad()
    def greedy_decode(
        self,
        src: Tensor | None = None,
        prefix: Tensor | None = None,
        max_new_tokens: int = 50,
        use_cache: bool = True,
    ) -> DecodeResult:
        """Pick the most likely next token until every row has produced EOS.

        Encoder-decoder: `src` is required and `prefix` defaults to BOS. Decoder-only:
        `prefix` (the prompt) is required. Finished rows continue with padding.
        """
        cfg = self.config
        if cfg.architecture == "encoder-only":
            raise ValueError("an encoder-only model does not generate")
        memory = src_mask = None
        if cfg.architecture == "encoder-decoder":
            if src is None:
                raise ValueError("an encoder-decoder model needs src to decode from")
            src_mask = padding_mask(src, cfg.pad_id)
            memory = self.encode(src, src_mask)
            if prefix is None:
                prefix = torch.full((src.size(0), 1), cfg.bos_id, device=src.device)
        elif prefix is None:
            raise ValueError("a decoder-only model needs a prefix (the prompt)")

        cache = DecoderCache(cfg.decoder_layers) if use_cache else None
        tokens, step_input = prefix, prefix
        finished = torch.zeros(prefix.size(0), dtype=torch.bool, device=prefix.device)
        step_logits = []
        # (a model without a padding token, pad_id -1, continues finished rows with EOS)
        pad = torch.tensor([cfg.pad_id], device=prefix.device) if cfg.pad_id >= 0 else None
        after_eos = cfg.pad_id if pad is not None else cfg.eos_id
        for _ in range(max_new_tokens):
            if tokens.size(1) >= cfg.max_seq_len:
                break
            hidden = self.decode(step_input if use_cache else tokens, memory, src_mask, cache=cache)
            logits = self.logits(hidden[:, -1:])[:, 0]  # (B, V)
            step_logits.append(logits)
            # padding only ever follows EOS; it is never a prediction
            if pad is not None:
                logits = logits.index_fill(-1, pad, float("-inf"))
            next_token = logits.argmax(-1).masked_fill(finished, after_eos)
            tokens = torch.cat([tokens, next_token[:, None]], dim=1)
            step_input = next_token[:, None]
            finished |= next_token == cfg.eos_id
            if finished.all():
                break
        vocab = cfg.target_vocab_size
        logits = (
            torch.stack(step_logits, 1) if step_logits else torch.empty(tokens.size(0), 0, vocab)
        )
        return DecodeResult(tokens, logits)

    # what it declares as a served model (model/served.py)
    def positions(self, stack: str) -> PositionTable | None:
        return (self.encoder if stack == "encoder" else self.decoder).pos

    def projection_module(self, attention_type: str, layer: int) -> nn.Module:
        stack, _, kind = attention_type.partition(".")
        attention = self.get_submodule(f"{stack}.{layer}.{kind}_attn")
        assert isinstance(attention, MultiHeadAttention)
        return attention.wo

    @property
    def projects_heads(self) -> bool:
        return True

    @functools.cached_property
    def residual_layout(self) -> Layout | str:
        return stream_layout(self)

    def attention_blocks(self, spec: AttentionSpec) -> Blocks | str:
        return alti_blocks(self, spec)

    def score_scaling(self) -> float:
        return 1.0 / math.sqrt(self.config.head_dim)

    @property
    def long_refusal(self) -> str | None:
        return None if self.config.architecture == "decoder-only" else LONG_REFUSED

    def long_pass(
        self, ids: list[int], last_from: int, inputs: dict[str, Tensor] | None = None
    ) -> tuple[LongCapture, list[int], Tensor]:
        assert not inputs, "our model code reads token ids alone"
        return long_read(self, ids, last_from)
