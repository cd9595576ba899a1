"""BERT's masked-language-model head (transformers' BertForMaskedLM) on our encoder: the
words written as [MASK] predicted, the top 5 of each. The encoder is BERT's (bert.py's
mapping, under the file's `bert.` prefix); the head, dense -> activation -> LayerNorm ->
the word embeddings' transpose (tied) plus a bias per token, is checked tensor by tensor
as the mapping checks the encoder's."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch import nn

from ..checkpoints import CheckpointError
from ..config import ModelConfig
from ..hooks import NamesFilter
from ..layers import ACTIVATION_MODULES, LayerNorm
from ..outputs import OutputKind
from ..runner import Capabilities, RunResult
from ..served import ServedModel
from ..transformer import Transformer
from ..twins import untrained
from .bert import BertRunner, config_from_bert, map_bert_state, read_safetensors

TOP = 5  # predictions reported per [MASK]
MASK_TOKENS = ("[MASK]", "<mask>", "<MASK>")  # BERT's, RoBERTa's and BART's, ...


def mask_token_of(tokens) -> str | None:
    """The token a masked-language model's tokenizer writes where a word is missing."""
    return next((t for t in MASK_TOKENS if t in tokens), None)


def required_mask_token(tokens) -> str:
    """The mask token among a tokenizer's special tokens; a CheckpointError without one."""
    token = mask_token_of(tokens)
    if token is None:
        raise CheckpointError(
            f"its tokenizer.json has no mask token ({', '.join(MASK_TOKENS)}) to predict"
        )
    return token


PREFIX = "bert."
HEAD = "cls.predictions."


class MaskedLMHead(nn.Module):
    """BertLMPredictionHead: logits = LayerNorm(act(dense h)) @ E^T + bias, E the word
    embeddings (or an output matrix of its own where the checkpoint unties them)."""

    embedding: nn.Embedding  # (the encoder's, not a submodule)

    def __init__(self, config: ModelConfig, embedding: nn.Embedding) -> None:
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model)
        self.activation = ACTIVATION_MODULES[config.activation]()
        self.norm = LayerNorm(config.d_model, config.norm_eps, fused=True)
        # the encoder's embedding, not a submodule: the head's state is its own tensors
        object.__setattr__(self, "embedding", embedding)
        self.output: torch.Tensor | None = None  # an untied output matrix
        self.bias = nn.Parameter(torch.zeros(config.source_vocab_size))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.activation(self.dense(hidden)))
        weight = self.embedding.weight if self.output is None else self.output
        return x @ weight.T + self.bias

    def check(self, tensors: dict[str, torch.Tensor], tied: bool) -> None:
        """The head's tensors (names under cls.predictions.) are each there once with the
        shape it has (tensors on the meta device will do): an untied checkpoint brings
        decoder.weight, a tied one may repeat it; otherwise CheckpointError."""
        d, vocab = self.dense.in_features, self.bias.numel()
        shapes = {"transform.dense.weight": (d, d), "transform.dense.bias": (d,),
                  "transform.LayerNorm.weight": (d,), "transform.LayerNorm.bias": (d,),
                  "bias": (vocab,), "decoder.weight": (vocab, d),
                  "decoder.bias": (vocab,)}  # fmt: skip
        optional = {"decoder.bias"} | ({"decoder.weight"} if tied else set())
        problems = [f"{HEAD}{name} has no place in the model" for name in tensors
                    if name not in shapes]  # fmt: skip
        for name, shape in shapes.items():
            if name not in tensors:
                if name not in optional:
                    problems.append(f"nothing fills {HEAD}{name}")
            elif tuple(tensors[name].shape) != shape:
                problems.append(f"{HEAD}{name} {tuple(tensors[name].shape)} != {shape}")
        if problems:
            raise CheckpointError("the masked-LM head does not map: " + "; ".join(problems))

    def fill(self, tensors: dict[str, torch.Tensor], tied: bool) -> None:
        """The head's weights from its checked tensors; a tied checkpoint's repeated
        decoder.weight must equal the word embeddings, decoder.bias the bias."""
        self.check(tensors, tied)
        decoder, bias = tensors.get("decoder.weight"), tensors["bias"]
        if "decoder.bias" in tensors and not torch.equal(tensors["decoder.bias"], bias):
            raise CheckpointError(f"{HEAD}decoder.bias differs from {HEAD}bias (they are one)")
        if tied and decoder is not None and not torch.equal(decoder, self.embedding.weight):
            raise CheckpointError(
                f"{HEAD}decoder.weight differs from the word embeddings, though "
                "tie_word_embeddings says they are one"
            )
        with torch.no_grad():
            self.dense.weight.copy_(tensors["transform.dense.weight"])
            self.dense.bias.copy_(tensors["transform.dense.bias"])
            self.norm.gamma.copy_(tensors["transform.LayerNorm.weight"])
            self.norm.beta.copy_(tensors["transform.LayerNorm.bias"])
            self.bias.copy_(bias)
        if not tied:
            if decoder is None:
                raise CheckpointError(f"{HEAD}decoder.weight is missing (its output is untied)")
            self.output = decoder.float()


def tied(hf: dict) -> bool:
    """Whether config.json ties the output matrix to the word embeddings (its default)."""
    return bool(hf.get("tie_word_embeddings", True))


def split(tensors: dict[str, torch.Tensor]) -> tuple[dict, dict]:
    """The encoder's tensors (their `bert.` prefix dropped) and the head's (under
    cls.predictions.); anything else is named as having no place."""
    encoder, head, other = {}, {}, []
    for name, tensor in tensors.items():
        if name.startswith(PREFIX):
            encoder[name.removeprefix(PREFIX)] = tensor
        elif name.startswith(HEAD):
            head[name.removeprefix(HEAD)] = tensor
        else:
            other.append(name)
    if other:
        raise CheckpointError(f"BertForMaskedLM weights do not map: {other} have no place")
    return encoder, head


class MaskedLM(BertRunner):
    """A BertForMaskedLM folder (a `Runner`): BERT's encoder with its words written as
    [MASK] predicted; `output_tokens` the likeliest word at each, `output_text` the text
    with them filled in, `RunResult.masked` the top 5 at each [MASK] position."""

    output_kind: OutputKind = "masked"
    capabilities = Capabilities(word_view=True)
    mask_token = "[MASK]"

    def __init__(self, model: ServedModel, tokenizer: Tokenizer, head: MaskedLMHead) -> None:
        self.model, self.tokenizer, self.head = model.eval(), tokenizer, head.eval()
        self.mask_id = tokenizer.token_to_id("[MASK]")
        if self.mask_id is None:
            raise CheckpointError("its tokenizer.json has no [MASK] token to predict")

    @classmethod
    def load(cls, directory: str | Path | None = None, tensors: dict | None = None) -> MaskedLM:
        """A BertForMaskedLM folder's weights (`tensors`, where read) and tokenizer, mapped
        and checked."""
        if directory is None:
            raise CheckpointError("a masked-LM model is read from a folder of yours")
        directory = Path(directory)
        hf = json.loads((directory / "config.json").read_text())
        config = config_from_bert(hf)
        model = untrained(config)
        if tensors is None:
            tensors = read_safetensors(directory / "model.safetensors")
        encoder, head_tensors = split(tensors)
        model.load_state_dict(map_bert_state(encoder, model))
        head = MaskedLMHead(config, model.encoder.tok_embed)
        head.fill(head_tensors, tied(hf))
        tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        return cls(model, tokenizer, head)

    def with_model(self, model: ServedModel) -> MaskedLM:
        if not isinstance(model, Transformer):
            raise TypeError("a BertForMaskedLM of model/ takes our model code's weights")
        head = MaskedLMHead(model.config, model.encoder.tok_embed)
        head.load_state_dict(self.head.state_dict(), strict=False)
        head.output = self.head.output
        return MaskedLM(model, self.tokenizer, head)

    @torch.no_grad()
    def run(self, text: str, capture: bool = True, names_filter: NamesFilter = None) -> RunResult:
        """One forward pass (captured if asked) and the top 5 at each [MASK]."""
        encoded, _, hidden, capture_ = self.encoded_pass(text, capture, names_filter)
        positions = [i for i, t in enumerate(encoded.ids) if t == self.mask_id]
        masked: dict[int, list[tuple[int, float]]] = {}
        filled = list(encoded.ids)
        if positions:
            probs = torch.softmax(self.head(hidden[0, positions]), dim=-1)
            top = probs.topk(min(TOP, probs.size(-1)), dim=-1)
            for row, position in enumerate(positions):
                masked[position] = list(
                    zip(top.indices[row].tolist(), top.values[row].tolist(), strict=True)
                )
                filled[position] = masked[position][0][0]
        return RunResult(
            text=" ".join(text.split()),
            source_tokens=encoded.tokens,
            source_raw=encoded.raw,
            source_ids=encoded.ids,
            target_tokens=[],
            target_ids=[],
            output_tokens=[self.token(top[0][0]) for top in masked.values()],
            truncated=encoded.truncated,
            source_length=encoded.original_length,
            capture=capture_,
            source_words=encoded.words,
            output_text=self.text(filled, positions) if positions else "",
            masked=masked,
        )

    def piece(self, token_id: int) -> str:
        """An id's token as the tokenizer stores it; an embedding row past the tokenizer's
        vocabulary by its name."""
        return self.tokenizer.id_to_token(token_id) or f"<unused {token_id}>"

    def token(self, token_id: int) -> str:
        """An id's token as people read it (WordPiece's pieces are)."""
        return self.piece(token_id)

    def text(self, ids: list[int], filled: list[int]) -> str:
        """The ids as text, as the tokenizer's decoder joins them: the tokenizer's [CLS]
        and [SEP] left out, what fills a position (`filled`) kept whatever it is."""
        tokens = [self.piece(t) for i, t in enumerate(ids)
                  if i in filled or self.piece(t) not in self.special_tokens]  # fmt: skip
        decoder = self.tokenizer.decoder
        return decoder.decode(tokens) if decoder is not None else " ".join(tokens)

    @torch.no_grad()
    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        """The head's logits at every position of a batch (B, T) -> (B, T, vocab)."""
        return self.head(self.model(ids))
