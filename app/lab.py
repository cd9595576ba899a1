"""The attention lab: the seed tutorial's claims as experiments on the served models, by
interventions at the hook points (model/analysis.py), never a second copy of the model."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

import numpy as np
import torch
from fastapi import HTTPException
from torch import Tensor

from model.analysis import (
    ablate_heads,
    entropy_bits,
    head_metrics,
    permuted,
    rollout,
    without_mask,
    without_positions,
    without_scaling,
)
from model.hooks import hooked
from model.masks import pad_batch, padding_mask
from model.pronounce.pronouncer import Transcription, pieces
from model.transformer import DecoderCache

from . import lab_schemas as s
from .service import Inference, encode, hook_name, reading_form, tokens_of
from .zoo import ModelEntry

SPECIAL = frozenset({"[CLS]", "[SEP]", "<bos>", "<eos>"})
MAX_CACHE_STEPS = 64
METRICS_EXPLAINED = {
    "entropy": "mean softmax entropy of a query row, in bits (low: focused)",
    "max_weight": "mean of each row's largest weight",
    "distance": "self-attention: mean |query - key| in tokens, weighted by attention",
    "previous": "self-attention: mean weight on the token just before the query",
    "first": "mean weight on the first key",
    "special": "mean weight on special tokens ([CLS], [SEP], <bos>)",
    "alignment": "cross-attention: share of rows whose strongest key is within one token of "
    "the diagonal stretched over both lengths",
}
ROLLOUT_ASSUMES = (
    "Each layer's heads are averaged and mixed with the identity for the residual "
    "connection, rows renormalised, and the layers multiplied (Abnar & Zuidema 2020): "
    "information is assumed to move linearly along attention weights and the residual "
    "stream only, ignoring values, the output projection, the feed-forward layers and "
    "LayerNorm. A heuristic of where information comes from, not an attribution."
)


class Lab:
    """Experiments for one request: the model entry, its ordinary run, and its ids.

    The ordinary run comes through `Inference.run` (validated, cached, in a run slot of its
    own); the experiments' extra model runs happen inside `session()`, one run slot for the
    whole experiment, so the lab is bounded like every other request."""

    def __init__(self, inference: Inference, model: str | None, text: str) -> None:
        self.inference = inference
        self.entry: ModelEntry = inference.entry(model)
        self.result: Transcription = inference.run(self.entry, text)  # validated, cached
        self.model = self.entry.runner.model
        self.config = self.entry.config
        runner = self.entry.runner
        if self.config.architecture == "encoder-only":
            # the ids of the very tokens the run read (re-encoding its display text may
            # differ: the tokenizer drops control characters that split() reads as spaces)
            ids = [runner.tokenizer.token_to_id(t) for t in self.result.source_tokens]
            self.src = torch.tensor([ids])
            self.tgt = None
        else:
            self.src = torch.tensor([runner.source.encode(self.result.text).ids])
            decoder_ids = [runner.target.bos_id, *runner.target.encode(self.result.output_tokens)]
            self.tgt = torch.tensor([decoder_ids])

    # -- plumbing ----------------------------------------------------------------------

    def session(self):
        """The run slot the experiment's model runs share (not re-entrant: take it once)."""
        return self.inference.limiter.slot()

    def choose_type(self, wanted: str | None, self_only: bool = False) -> str:
        types = self.entry.attention_types()
        if self_only:
            types = [t for t in types if t.endswith(".self")]
        chosen = wanted or types[0]
        if chosen not in types:
            if self_only and chosen in self.entry.attention_types():
                raise HTTPException(422, f"this needs self-attention: {self.entry.id} has {types}")
            raise HTTPException(422, f"{self.entry.id} has no {chosen} attention: it has {types}")
        return chosen

    def check_head(self, attention_type: str, layer: int, head: int) -> None:
        layers, heads = self.entry.layers(attention_type), self.config.n_heads
        if layer >= layers:
            raise HTTPException(
                422, f"layer {layer} out of range: {attention_type} has 0..{layers - 1}"
            )
        if head >= heads:
            raise HTTPException(422, f"head {head} out of range: this model has 0..{heads - 1}")

    def hooks_on(self, suffix: str, fn) -> list[tuple[str, object]]:
        return [(name, fn) for name in self.model.hook_names() if name.endswith(suffix)]

    def forward(self, hooks: Iterable = (), names=None, src: Tensor | None = None):
        """(output, capture) of one forward pass with hook functions."""
        src = self.src if src is None else src
        with torch.no_grad(), hooked(self.model, names, fwd_hooks=list(hooks)) as capture:
            out = self.model(src) if self.tgt is None else self.model(src, self.tgt)
        return out, capture

    def encoder_patterns(self, src: Tensor, hooks: Iterable = ()) -> list[Tensor]:
        """Each encoder layer's weights (B, H, T, T) for `src`, with hook functions."""
        names = [hook_name("encoder.self", i, "hook_pattern") for i in range(self.config.n_layers)]
        with torch.no_grad(), hooked(self.model, names, fwd_hooks=list(hooks)) as capture:
            self.model.encode(src)
        return [capture[n] for n in names]

    def pattern(self, capture, attention_type: str, layer: int) -> Tensor:
        return capture[hook_name(attention_type, layer, "hook_pattern")][0]

    # -- experiments -------------------------------------------------------------------

    def scaling(self, req: s.HeadRequest) -> s.ScalingResponse:
        attention_type = self.choose_type(req.type)
        self.check_head(attention_type, req.layer, req.head)
        layers = range(self.entry.layers(attention_type))
        names = [hook_name(attention_type, i, "hook_pattern") for i in layers]
        hooks = self.hooks_on(".hook_scores", without_scaling(self.config.head_dim))
        _, scaled = self.forward(names=names)
        _, unscaled = self.forward(hooks, names=names)
        rows, columns = tokens_of(self.result, attention_type)
        heads, entropies = [], {True: [], False: []}
        for i in layers:
            stats = {}
            for key, capture in ((True, scaled), (False, unscaled)):
                weights = self.pattern(capture, attention_type, i)
                stats[key] = (entropy_bits(weights).mean(-1), weights.max(-1).values.mean(-1))
                entropies[key].append(stats[key][0])
            for h in range(self.config.n_heads):
                heads.append(
                    s.ScalingHead(
                        layer=i,
                        head=h,
                        entropy_scaled=round(float(stats[True][0][h]), 6),
                        entropy_unscaled=round(float(stats[False][0][h]), 6),
                        max_weight_scaled=round(float(stats[True][1][h]), 6),
                        max_weight_unscaled=round(float(stats[False][1][h]), 6),
                    )
                )
        pick = (attention_type, req.layer)
        return s.ScalingResponse(
            model=self.entry.id,
            type=attention_type,
            head_dim=self.config.head_dim,
            matrices=s.HeadPair(
                rows=rows,
                columns=columns,
                first=encode(self.pattern(scaled, *pick)[req.head], "json"),
                second=encode(self.pattern(unscaled, *pick)[req.head], "json"),
            ),
            heads=heads,
            mean_entropy_scaled=round(float(torch.cat(entropies[True]).mean()), 6),
            mean_entropy_unscaled=round(float(torch.cat(entropies[False]).mean()), 6),
        )

    def positions(self, req: s.PositionsRequest) -> s.PositionsResponse:
        if not self.config.has_encoder:
            raise HTTPException(422, f"{self.entry.id} has no encoder to permute")
        self.check_head("encoder.self", req.layer, req.head)
        if self.config.positional == "none":
            raise HTTPException(422, f"{self.entry.id} has no positional encoding to remove")
        n = self.src.size(1)
        if req.order is None:
            wordpiece = self.entry.tokens == "wordpiece"
            order = [0, *range(n - 2, 0, -1), n - 1] if wordpiece else list(range(n - 1, -1, -1))
        else:
            order = list(req.order)
            if sorted(order) != list(range(n)):
                raise HTTPException(
                    422, f"order must be a permutation of 0..{n - 1} (the {n} source tokens)"
                )
        moved = self.src[:, order]
        off = self.hooks_on("encoder.hook_pos", without_positions)
        cases = {}
        for key, hooks in (("with", []), ("without", off)):
            original = self.encoder_patterns(self.src, hooks)
            shuffled = self.encoder_patterns(moved, hooks)
            diff = max(
                float((b[0] - permuted(a[0], order)).abs().max())
                for a, b in zip(original, shuffled, strict=True)
            )
            cases[key] = s.PositionsCase(
                max_abs_diff=diff,
                original=encode(original[req.layer][0, req.head], "json"),
                permuted=encode(shuffled[req.layer][0, req.head], "json"),
            )
            del original, shuffled  # every layer's weights: large at 512 tokens
        tokens = self.result.source_tokens
        return s.PositionsResponse(
            model=self.entry.id,
            tokens=tokens,
            permuted_tokens=[tokens[i] for i in order],
            order=order,
            with_positions=cases["with"],
            without_positions=cases["without"],
        )

    def masks(self, req: s.MasksRequest) -> s.MasksResponse:
        causal = None
        if self.config.has_decoder:
            self.check_head("decoder.self", req.layer, req.head)
            names = [hook_name("decoder.self", req.layer, "hook_pattern")]
            off = [(hook_name("decoder.self", i, "hook_mask"), without_mask)
                   for i in range(self.config.decoder_layers)]  # fmt: skip
            _, masked = self.forward(names=names)
            _, unmasked = self.forward(off, names=names)
            w_on = self.pattern(masked, "decoder.self", req.layer)[req.head]
            w_off = self.pattern(unmasked, "decoder.self", req.layer)[req.head]
            future = torch.ones_like(w_on, dtype=torch.bool).triu(1)
            causal = s.CausalCase(
                rows=self.result.decoder_tokens,
                with_mask=encode(w_on, "json"),
                without_mask=encode(w_off, "json"),
                future_weight_with=round(float((w_on * future).sum(-1).mean()), 6),
                future_weight_without=round(float((w_off * future).sum(-1).mean()), 6),
            )
        else:
            self.check_head("encoder.self", req.layer, req.head)
        padding = self._padding(req)
        return s.MasksResponse(
            model=self.entry.id, layer=req.layer, head=req.head, causal=causal, padding=padding
        )

    def _padding(self, req: s.MasksRequest) -> s.PaddingCase:
        """The text and a second sentence (default: the text's first half, or the text twice
        when it is too short to halve) in one padded batch: the padding mask, and the
        shorter one's weights, as on its own."""
        runner = self.entry.runner
        ids = self.src[0].tolist()
        limit = self.inference.settings.max_text_chars
        if req.second is not None and len(req.second) > limit:
            raise HTTPException(
                422, f"second has {len(req.second)} characters; the limit is {limit}: shorten it"
            )
        if req.second is not None:
            second = reading_form(req.second)
            if not second.strip():
                raise HTTPException(422, "second is empty: type a second sentence")
            encoded = runner.encode(second) if self.tgt is None else runner.source.encode(second)
            other, tokens = encoded.ids, encoded.tokens
        else:
            keep = max(1, len(ids) // 2)
            if self.tgt is None:  # keep [CLS] ... [SEP]
                keep = max(3, keep)
                other = [*ids[: keep - 1], ids[-1]]
                tokens = [*self.result.source_tokens[: keep - 1], self.result.source_tokens[-1]]
            else:
                other, tokens = ids[:keep], self.result.source_tokens[:keep]
            if len(other) == len(ids):  # too short to halve: the text twice, padding it
                source = self.result.source_tokens
                if self.tgt is None:
                    other, tokens = [*ids[:-1], *ids[1:]], [*source[:-1], *source[1:]]
                else:
                    other, tokens = ids * 2, source * 2
        if not other:
            raise HTTPException(422, "the second sentence has no tokens")
        if len(other) == len(ids):
            raise HTTPException(
                422,
                "the two sentences have the same length, so nothing is padded: "
                "give a second sentence of another length",
            )
        other = other[: self.entry.runner.max_source_tokens]
        tokens = tokens[: len(other)]
        batch = pad_batch([ids, other], self.config.pad_id)
        shorter = 0 if len(ids) < len(other) else 1
        length = len(ids) if shorter == 0 else len(other)
        together = self.encoder_patterns(batch)[req.layer][shorter, req.head]
        alone = self.encoder_patterns(batch[shorter : shorter + 1, :length])[req.layer][0, req.head]
        mask = padding_mask(batch, self.config.pad_id)[:, 0, 0]
        return s.PaddingCase(
            tokens=[self.result.source_tokens, tokens],
            length=batch.size(1),
            mask=mask.tolist(),
            shorter=shorter,
            weights=encode(together, "json"),
            pad_weight=round(float(together[:, length:].sum()), 9),
            max_abs_diff_alone=float((together[:length, :length] - alone).abs().max()),
        )

    def decoded_pieces(self) -> list[tuple[Tensor, list[int], bool]]:
        """What `Pronouncer.transcribe` decodes: per piece of the text (cut after a space or
        punctuation past TRAINED_CHARS), its source ids (1, S), the decoder input its greedy
        output makes ([<bos>, ...]) and whether that output ended with <eos>."""
        runner, cfg = self.entry.runner, self.config
        ids = self.src[0].tolist()
        rows = [ids[a:b] for a, b in pieces(self.result.text[: len(ids)])]
        batch = pad_batch(rows, cfg.pad_id)
        limit = min(3 * batch.size(1) + 10, cfg.max_seq_len - 1)  # as greedy_read
        decoded = self.model.greedy_decode(batch, max_new_tokens=limit).tokens.tolist()
        eos = runner.target.eos_id
        out = []
        for row, tokens in zip(rows, decoded, strict=True):
            ended = eos in tokens
            tokens = tokens[: tokens.index(eos)] if ended else tokens
            out.append((torch.tensor([row]), tokens, ended))
        return out

    def kv_cache(self) -> s.CacheResponse:
        """Greedy decoding of the first piece, step by step through the cache."""
        if self.tgt is None or not self.config.has_encoder:
            raise HTTPException(422, f"{self.entry.id} does not decode: no KV cache to show")
        model, cfg = self.model, self.config
        vocab = self.entry.runner.target.vocab.tokens
        names = [hook_name("decoder.self", i, "hook_pattern") for i in range(cfg.decoder_layers)]
        steps = []
        with self.session(), torch.no_grad():
            parts = self.decoded_pieces()
            src, tokens, ended = parts[0]
            steps_total = len(tokens)
            tokens = tokens[:MAX_CACHE_STEPS]
            src_mask = padding_mask(src, cfg.pad_id)
            memory = model.encode(src, src_mask)
            cache = DecoderCache(cfg.decoder_layers)
            pad = torch.tensor([cfg.pad_id])
            for step, token in enumerate(tokens):
                fed = torch.tensor([tokens[: step + 1]])
                with hooked(model, names) as capture:
                    hidden = model.decode(fed[:, -1:], memory, src_mask, cache=cache)
                cached = model.logits(hidden[:, -1])
                full = model.logits(model.decode(fed, memory, src_mask)[:, -1])
                sizes = [
                    sum(t.numel() * t.element_size()
                        for kv in layer.values() for t in (kv.k, kv.v) if t is not None)
                    for layer in cache.layers
                ]  # fmt: skip
                best = int(cached.index_fill(-1, pad, float("-inf")).argmax())  # never <pad>
                steps.append(
                    s.CacheStep(
                        step=step,
                        token=vocab[token],
                        predicted=vocab[best],
                        keys=[vocab[t] for t in tokens[: step + 1]],
                        rows=[encode(capture[n][0, :, 0], "json") for n in names],
                        cache_bytes=sizes,
                        max_abs_diff=float((cached - full).abs().max()),
                    )
                )
        piece = "".join(self.result.source_tokens[: src.size(1)])
        return s.CacheResponse(
            model=self.entry.id,
            piece=piece,
            pieces=len(parts),
            ended=ended,
            steps=steps,
            truncated=steps_total > MAX_CACHE_STEPS,
        )

    def metrics(self) -> s.MetricsResponse:
        rows = []
        capture = self.result.capture
        for attention_type in self.entry.attention_types():
            _, keys = tokens_of(self.result, attention_type)
            special = [i for i, t in enumerate(keys) if t in SPECIAL]
            for layer in range(self.entry.layers(attention_type)):
                weights = self.pattern(capture, attention_type, layer).float()
                values = head_metrics(weights, attention_type.endswith(".self"), special)
                for h in range(weights.size(0)):
                    rows.append(
                        s.MetricsRow(
                            type=attention_type,
                            layer=layer,
                            head=h,
                            **{name: column[h] for name, column in values.items()},
                        )
                    )
        return s.MetricsResponse(model=self.entry.id, rows=rows, explain=METRICS_EXPLAINED)

    def rollout(self, req: s.RolloutRequest) -> s.RolloutResponse:
        attention_type = self.choose_type(req.type, self_only=True)
        layers = range(self.entry.layers(attention_type))
        patterns = [self.pattern(self.result.capture, attention_type, i).float() for i in layers]
        tokens, _ = tokens_of(self.result, attention_type)
        return s.RolloutResponse(
            model=self.entry.id,
            type=attention_type,
            tokens=tokens,
            matrix=encode(rollout(patterns, req.residual), "json"),
            residual=req.residual,
            assumes=ROLLOUT_ASSUMES,
        )

    def ablation(self, req: s.AblationRequest) -> s.AblationResponse:
        by_module: dict[str, list[int]] = {}
        for ref in req.heads:
            self.choose_type(ref.type)
            self.check_head(ref.type, ref.layer, ref.head)
            by_module.setdefault(hook_name(ref.type, ref.layer, "hook_context"), []).append(
                ref.head
            )
        hooks = [(name, ablate_heads(heads)) for name, heads in by_module.items()]
        runner = self.entry.runner
        on = off = []
        labels: list[str] = []
        with self.session(), torch.no_grad():
            parts = self.decoded_pieces() if self.tgt is not None else []
            with hooked(self.model, fwd_hooks=hooks, capture=False):
                ablated = runner.transcribe(self.result.text, capture=False)
                if parts:
                    off, _ = self._probabilities(parts)
            if parts:
                on, labels = self._probabilities(parts)
        cosine = None
        if ablated.embedding is not None and self.result.embedding is not None:
            cosine = round(float(np.dot(ablated.embedding, self.result.embedding)), 6)
        changed = ablated.output_tokens != self.result.output_tokens or (
            cosine is not None and cosine < 1 - 1e-6
        )
        return s.AblationResponse(
            model=self.entry.id,
            heads=req.heads,
            output=self.result.output_tokens,
            ablated_output=ablated.output_tokens,
            probability_tokens=labels,
            probabilities=on,
            ablated_probabilities=off,
            cosine=cosine,
            changed=changed,
        )

    def _probabilities(
        self, parts: list[tuple[Tensor, list[int], bool]]
    ) -> tuple[list[float], list[str]]:
        """Teacher-forced, piece by piece as the model decoded them: the probability of
        each output token and of each piece's end, with their labels."""
        target = self.entry.runner.target
        probs, labels = [], []
        for src, tokens, ended in parts:
            logits = self.model(src, torch.tensor([tokens]))[0]  # (T, V)
            wanted = [*tokens[1:], target.eos_id] if ended else tokens[1:]
            picked = logits.softmax(-1)[torch.arange(len(wanted)), torch.tensor(wanted)]
            probs += [round(float(p), 6) for p in picked]
            labels += [target.vocab.tokens[t] for t in wanted]
        return probs, labels


def compare(inference: Inference, req: s.CompareRequest) -> s.CompareResponse:
    """One head of two inputs (or two models), and its difference where tokens match."""
    first = Lab(inference, req.model, req.text)
    other_text = req.text if req.other_text is None else req.other_text
    second = Lab(inference, req.other_model or req.model, other_text)
    attention_type = first.choose_type(req.type)
    second.choose_type(attention_type)
    first.check_head(attention_type, req.layer, req.head)
    second.check_head(attention_type, req.layer, req.head)
    a = first.pattern(first.result.capture, attention_type, req.layer)[req.head].float()
    b = second.pattern(second.result.capture, attention_type, req.layer)[req.head].float()
    rows_a, cols_a = tokens_of(first.result, attention_type)
    rows_b, cols_b = tokens_of(second.result, attention_type)
    ra, rb = matched(rows_a, rows_b)
    ca, cb = matched(cols_a, cols_b)
    difference = a[ra][:, ca] - b[rb][:, cb] if ra and ca else torch.zeros(0, 0)
    return s.CompareResponse(
        models=[first.entry.id, second.entry.id],
        type=attention_type,
        layer=req.layer,
        head=req.head,
        first_rows=rows_a,
        first_columns=cols_a,
        first=encode(a, "json"),
        second_rows=rows_b,
        second_columns=cols_b,
        second=encode(b, "json"),
        aligned_rows=[rows_a[i] for i in ra],
        aligned_columns=[cols_a[i] for i in ca],
        difference=encode(difference, "json"),
    )


def matched(a: list[str], b: list[str]) -> tuple[list[int], list[int]]:
    """Positions of the tokens two sequences share, in the first one's order: first the
    longest in-order matches (difflib, so an inserted word leaves the rest aligned), then
    among the tokens left over the k-th occurrence in `a` pairs with the k-th left in `b`
    (so a permutation aligns completely)."""
    blocks = difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
    pairs = {block.a + k: block.b + k for block in blocks for k in range(block.size)}
    taken = set(pairs.values())
    left: dict[str, list[int]] = {}
    for j, token in enumerate(b):
        if j not in taken:
            left.setdefault(token, []).append(j)
    for i, token in enumerate(a):
        if i not in pairs and left.get(token):
            pairs[i] = left[token].pop(0)
    first = sorted(pairs)
    return first, [pairs[i] for i in first]
