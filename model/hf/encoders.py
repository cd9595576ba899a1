"""Encoders run by transformers' code as runners: `HFEncoder` (its output the mean-pooled
last hidden state, as the shipped MiniLM's) and, with its masked-LM head, `HFMaskedLM`."""

from __future__ import annotations

from tokenizers import Tokenizer
from torch import nn

from ..outputs import OutputKind
from ..pretrained.bert import BertRunner
from ..pretrained.bytelevel import readable
from ..pretrained.hf import unknown_of
from ..pretrained.masked_lm import MaskedLM, required_mask_token
from ..runner import Capabilities, TokenUnit
from .model import HFTransformer


class HFEncoder(BertRunner):
    """An encoder run by transformers' code: its output the mean-pooled last hidden state
    (as BertRunner's), its special tokens and token unit its tokenizer's."""

    def __init__(
        self, model: HFTransformer, tokenizer: Tokenizer, specials: frozenset[str], unit: TokenUnit
    ) -> None:
        super().__init__(model, tokenizer)
        self.special_tokens = specials
        self.token_unit = unit  # type: ignore[misc]
        self.unknown_token = unknown_of(tokenizer, "[UNK]")

    def encode(self, text: str):
        """BertRunner's encoding, its byte-level tokens as people read them (RoBERTa's)."""
        encoding = super().encode(text)
        if self.token_unit == "byte-bpe":
            encoding.raw = encoding.tokens
            encoding.tokens = readable(encoding.tokens, self.special_tokens)
        return encoding

    def with_model(self, model) -> HFEncoder:
        return HFEncoder(model, self.tokenizer, self.special_tokens, self.token_unit)


class HFMaskedLM(HFEncoder):
    """An encoder with its masked-LM head run by transformers' code (RobertaForMaskedLM,
    DistilBertForMaskedLM, ModernBertForMaskedLM, ...): the words written as its mask
    token predicted, the top 5 of each, as MaskedLM's (the head is transformers': the
    model's output is already its logits)."""

    output_kind: OutputKind = "masked"
    capabilities = Capabilities(word_view=True)
    run, text, logits = MaskedLM.run, MaskedLM.text, MaskedLM.logits

    def piece(self, token_id: int) -> str:
        """An id's token as the tokenizer stores it (an embedding row past its vocabulary by
        its name)."""
        return self.tokenizer.id_to_token(token_id) or f"<unused {token_id}>"

    def token(self, token_id: int) -> str:
        """An id's token as people read it (RoBERTa's byte-level `Ġword` as `␣word`)."""
        piece = self.piece(token_id)
        return readable([piece], self.special_tokens)[0] if self.token_unit == "byte-bpe" else piece

    def __init__(
        self, model: HFTransformer, tokenizer: Tokenizer, specials: frozenset[str], unit: TokenUnit
    ) -> None:
        super().__init__(model, tokenizer, specials, unit)
        self.head = nn.Identity()
        self.mask_token = required_mask_token(specials)
        self.mask_id = tokenizer.token_to_id(self.mask_token)

    def with_model(self, model) -> HFMaskedLM:
        return HFMaskedLM(model, self.tokenizer, self.special_tokens, self.token_unit)
