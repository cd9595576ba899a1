"""An encoder-decoder run by transformers' own modeling code (T5, BART, Marian, ...), as a
`Runner`: its greedy decoding and one captured pass over the source and what it fed its
decoder."""

from __future__ import annotations

import torch
from tokenizers import Tokenizer

from ..hooks import NamesFilter
from ..outputs import OutputKind
from ..pretrained.bytelevel import readable
from ..pretrained.hf import unknown_of
from ..runner import Capabilities, DecodedPiece, RunnerBase, RunResult, TokenUnit
from ..served import ServedModel
from .model import HFTransformer


class HFSeq2Seq(RunnerBase):
    """An encoder-decoder run by transformers' code (T5, BART, Marian, ...): its output is
    its greedy decoding (transformers' `generate`, one beam), and the capture one pass
    over the source and the tokens it fed its decoder: a decoder row is the step fed its
    token, predicting the next (as `pronounce`'s)."""

    model: HFTransformer  # (its greedy output: transformers' `generate`)

    output_kind: OutputKind = "transcription"
    capabilities = Capabilities(kv_cache=True)
    max_tokens = 512
    token_unit: TokenUnit = "sentencepiece"  # (each instance: its tokenizer's)
    special_tokens: frozenset[str] = frozenset()

    def __init__(
        self,
        model: HFTransformer,
        tokenizer: Tokenizer,
        vocabulary: list[str],
        specials: frozenset[str],
        unit: TokenUnit,
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.vocabulary = vocabulary
        self.special_tokens = specials
        self.token_unit = unit  # type: ignore[misc]
        self.unknown_token = unknown_of(tokenizer, "<unk>")
        self._shown: list[str] | None = None

    def with_model(self, model: ServedModel) -> HFSeq2Seq:
        if not isinstance(model, HFTransformer):
            raise TypeError("an encoder-decoder of transformers' code takes its own weights")
        return HFSeq2Seq(model, self.tokenizer, self.vocabulary, self.special_tokens,
                         self.token_unit)  # fmt: skip

    def piece(self, token_id: int) -> str:
        """An id's token as the tokenizer spells it."""
        return self.vocabulary[token_id]

    def shown(self, ids: list[int]) -> list[str]:
        tokens = [self.vocabulary[i] for i in ids]
        return readable(tokens, self.special_tokens) if self.token_unit == "byte-bpe" else tokens

    def target_vocabulary(self) -> list[str]:
        if self._shown is None:
            self._shown = [self.shown([i])[0] for i in range(len(self.vocabulary))]
        return self._shown

    def encode(self, text: str) -> tuple[list[int], bool, int]:
        """The source ids (the tokens its tokenizer adds kept), cut to max_tokens keeping
        the last (the end token)."""
        ids = self.tokenizer.encode(text).ids
        if not ids:
            raise ValueError("the text has no tokens")
        if len(ids) <= self.max_tokens:
            return ids, False, len(ids)
        return [*ids[: self.max_tokens - 1], ids[-1]], True, len(ids)

    def tokenize(self, text: str) -> tuple[list[int], list[str]]:
        ids, _, _ = self.encode(text)
        return ids, self.shown(ids)

    def decoded_pieces(self, result: RunResult) -> list[DecodedPiece]:
        return result.pieces or [self.decode_piece(result.source_ids)]

    def decode_piece(self, ids: list[int]) -> DecodedPiece:
        """The source decoded greedily: the decoder's input (its start token and the
        output, without the end token) and whether the output ended."""
        source = torch.tensor([ids])
        room = self.model.config.max_seq_len - 1
        made = self.model.greedy(source, min(3 * len(ids) + 10, room))
        ended = len(made) > 1 and made[-1] == self.model.config.eos_id
        return DecodedPiece(source, made[:-1] if ended else made, ended)

    @torch.no_grad()
    def run(self, text: str, capture: bool = True, names_filter: NamesFilter = None) -> RunResult:
        ids, cut, length = self.encode(text)
        piece = self.decode_piece(ids)
        target = torch.tensor([piece.target_ids])
        capture_, predicted = None, []
        if capture:
            logits, capture_ = self.model.run_with_capture(
                piece.source, target, names_filter=names_filter
            )
            vocab = self.target_vocabulary()
            predicted = [vocab[i] for i in logits[0].argmax(-1).tolist()]
        output = piece.target_ids[1:]
        return RunResult(
            text=" ".join(text.split()),
            source_tokens=self.shown(ids),
            source_ids=ids,
            source_raw=[self.vocabulary[i] for i in ids],
            target_tokens=self.shown(piece.target_ids),
            target_ids=piece.target_ids,
            target_raw=[self.vocabulary[i] for i in piece.target_ids],
            output_tokens=self.shown(output),
            truncated=cut,
            source_length=length,
            capture=capture_,
            predicted_tokens=predicted,
            pieces=[piece],
            output_text=self.tokenizer.decode(output, skip_special_tokens=True),
        )
