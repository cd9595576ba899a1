"""Training the pronunciation model: deterministic, resumable, with held-out evaluation."""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from ..checkpoints import save_checkpoint
from ..config import ModelConfig
from ..masks import pad_batch
from ..runtime import set_threads
from ..transformer import Transformer
from .data import Example, Generator, Lexicon, held_out_split
from .evaluate import Metrics, evaluate
from .tokenizers import SourceTokenizer, TargetTokenizer

BUCKETS = 8  # batches drawn together and sorted by length, so little is padding


@dataclass
class TrainConfig:
    steps: int = 5000
    batch_size: int = 64
    lr: float = 1e-3
    warmup: int = 500
    min_lr_ratio: float = 0.05
    label_smoothing: float = 0.1
    weight_decay: float = 0.01
    seed: int = 0
    mix: tuple[float, float, float] = (0.55, 0.35, 0.10)  # Chinese, English, mixed
    eval_every: int = 500
    eval_n: int = 200
    save_every: int = 200
    threads: int = 0  # 0: OMP_NUM_THREADS where set, else every CPU this process may use
    model: dict = field(default_factory=dict)  # ModelConfig overrides


def pronounce_config(source_vocab: int, target_vocab: int, **overrides) -> ModelConfig:
    """The seed's encoder-decoder (Post-LN, sinusoidal, ReLU, its LayerNorm), sized for CPU."""
    base = dict(
        architecture="encoder-decoder",
        source_vocab_size=source_vocab,
        target_vocab_size=target_vocab,
        d_model=256,
        n_heads=8,
        n_layers=3,
        n_decoder_layers=3,
        d_ff=1024,
        max_seq_len=256,
        dropout=0.0,  # the data is never repeated; dropout cost a fifth of each CPU step
    )
    return ModelConfig(**{**base, **overrides})


def collate(
    examples: list[Example], src_tok: SourceTokenizer, target_tok: TargetTokenizer
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(src, decoder input [BOS, y...], decoder target [y..., EOS]), zero-padded."""
    targets = [target_tok.encode(e.target) for e in examples]
    return (
        pad_batch([src_tok.encode(e.text).ids for e in examples]),
        pad_batch([[target_tok.bos_id, *t] for t in targets]),
        pad_batch([[*t, target_tok.eos_id] for t in targets]),
    )


class Batches:
    """Batch `step` as a pure function of (seed, step): resuming replays the same data."""

    def __init__(self, generator: Generator, batch_size: int) -> None:
        self.generator = generator
        self.batch_size = batch_size
        self._chunk: tuple[int, list[list[Example]]] | None = None

    def __call__(self, step: int) -> list[Example]:
        chunk = step // BUCKETS
        if self._chunk is None or self._chunk[0] != chunk:
            pool = self.generator.batch(chunk, self.batch_size * BUCKETS)
            pool.sort(key=lambda e: (len(e.text), len(e.target)))
            batches = [pool[i : i + self.batch_size] for i in range(0, len(pool), self.batch_size)]
            random.Random(chunk).shuffle(batches)
            self._chunk = (chunk, batches)
        return self._chunk[1][step % BUCKETS]


def lr_at(step: int, tc: TrainConfig) -> float:
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    progress = (step - tc.warmup) / max(1, tc.steps - tc.warmup)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return tc.lr * (tc.min_lr_ratio + (1 - tc.min_lr_ratio) * cosine)


def _save_state(
    directory: Path, model: Transformer, opt: torch.optim.Optimizer, meta: dict
) -> None:
    """Resumable state in safetensors + JSON (nothing pickled). A complete copy is written
    beside the old one and swapped in, so an interruption never loses both."""
    tmp = directory.with_name(directory.name + ".tmp")
    old = directory.with_name(directory.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    save_checkpoint(model, tmp)
    names: dict[torch.Tensor, str] = {p: n for n, p in model.named_parameters()}
    tensors = {}
    for p, state in opt.state.items():
        for key, value in state.items():
            tensors[f"{names[p]}::{key}"] = value.detach().reshape(-1).clone()
    save_file(tensors, tmp / "optimizer.safetensors")
    (tmp / "state.json").write_text(json.dumps(meta, indent=1))  # written last: complete
    shutil.rmtree(old, ignore_errors=True)
    if directory.exists():
        directory.rename(old)
    tmp.rename(directory)
    shutil.rmtree(old, ignore_errors=True)


def _find_state(directory: Path) -> Path | None:
    """The newest complete state: the folder itself, or a copy left by an interruption."""
    for candidate in (directory, directory.with_name(directory.name + ".tmp")):
        if (candidate / "state.json").is_file():
            return candidate
    old = directory.with_name(directory.name + ".old")
    return old if (old / "state.json").is_file() else None


def _load_state(directory: Path, model: Transformer, opt: torch.optim.Optimizer) -> dict:
    model.load_state_dict(load_file(directory / "model.safetensors"))
    tensors = load_file(directory / "optimizer.safetensors")
    for name, p in model.named_parameters():
        if f"{name}::exp_avg" in tensors:
            opt.state[p] = {
                "step": tensors[f"{name}::step"].reshape(()),
                "exp_avg": tensors[f"{name}::exp_avg"].view_as(p),
                "exp_avg_sq": tensors[f"{name}::exp_avg_sq"].view_as(p),
            }
    return json.loads((directory / "state.json").read_text())


def train(
    out: str | Path, tc: TrainConfig, progress: bool = True, until: int | None = None
) -> Metrics | None:
    """Train into `out`, resuming from `out/train_state` if it is there; `until` stops
    early (the state is saved, a later call resumes). Returns the final metrics."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    set_threads(tc.threads)
    lexicon = Lexicon()
    src_tok, target_tok = SourceTokenizer.build(lexicon), TargetTokenizer.build(lexicon)
    split = held_out_split(lexicon, seed=tc.seed)
    held_out = frozenset(split["zh"] + split["en_sentences"])
    batches = Batches(Generator(lexicon, tc.seed, tc.mix, held_out), tc.batch_size)

    torch.manual_seed(tc.seed)
    config = pronounce_config(len(src_tok.vocab), len(target_tok.vocab), **tc.model)
    model = Transformer(config)
    opt = torch.optim.AdamW(
        model.parameters(), lr=tc.lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=tc.weight_decay
    )
    settings = json.loads(json.dumps(asdict(tc)))  # as it reads back from JSON
    state_dir = out / "train_state"
    meta = {"step": 0, "log": [], "train_config": settings, "segments": []}
    found = _find_state(state_dir)
    if found is not None:
        meta = _load_state(found, model, opt)
        if meta["train_config"] != settings:
            raise ValueError(
                f"{state_dir} was trained with other settings: {meta['train_config']}; "
                f"resume with those, or train into a new folder"
            )
    step, log = meta["step"], meta["log"]
    meta["segments"].append([step, step])  # [first step, last step] of each run
    (out / "train_config.json").write_text(json.dumps(settings, indent=1))

    model.train()
    bar = tqdm(total=tc.steps, initial=step, disable=not progress, unit="step", mininterval=2)
    tokens_seen, started = 0, time.perf_counter()
    metrics = None
    stop = tc.steps if until is None else min(until, tc.steps)
    while step < stop:
        src, target_in, target_out = collate(batches(step), src_tok, target_tok)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, tc)
        logits = model(src, target_in)
        loss = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)),
            target_out.reshape(-1),
            ignore_index=config.pad_id,
            label_smoothing=tc.label_smoothing,
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens_seen += int((src != 0).sum() + (target_out != 0).sum())
        rate = tokens_seen / (time.perf_counter() - started)
        bar.update(1)
        bar.set_postfix(
            loss=f"{loss.item():.3f}",
            tok_s=f"{rate:.0f}",
            lr=f"{lr_at(step, tc):.1e}",
            refresh=False,
        )
        if step % tc.eval_every == 0 or step == tc.steps:
            metrics = evaluate(model, src_tok, target_tok, lexicon, split, n=tc.eval_n)
            log.append({"step": step, "loss": loss.item(), **asdict(metrics)})
            bar.write(f"step {step}: loss {loss.item():.3f} | {metrics.line()}")
        if step % tc.save_every == 0 or step == stop:
            meta.update(step=step, log=log)
            meta["segments"][-1][1] = step
            _save_state(state_dir, model, opt, meta)
    bar.close()
    if step < tc.steps:
        return None

    model.eval()
    save_checkpoint(model, out, dtype=torch.float16)
    src_tok.vocab.save(out / "source_vocab.json")
    target_tok.vocab.save(out / "target_vocab.json")
    (out / "train_log.json").write_text(json.dumps(log, indent=1))
    return metrics or evaluate(model, src_tok, target_tok, lexicon, split, n=tc.eval_n)
