"""A model's chat template, rendered within bounds: it comes in the model's files (anyone's),
so it must neither run forever nor fill memory. jinja2's immutable sandbox keeps it from
Python's internals and from changing what it is given; on top of it, what the template's
code does is checked as it runs:

- time: the deadline (MAX_SECONDS) at every block (each turn of a loop, each macro call),
  call, filter and operator;
- size: every value a call, filter or operator is given or makes, and every value it
  writes, weighs at most MAX_CHARS characters (a list weighs its elements: a thousand
  references to one long string weigh a thousand of it), and `*`, `**`, `+`, `%`, `~`,
  `join` and `replace` are weighed before they make their value; everything it writes
  (its output, and what {% set %} blocks and macros write) adds up to MAX_CHARS at most.

Past either bound it raises TemplateRefused, a ValueError naming the bound (the app's 422).
One operation of Python's own on values within the bounds (a filter's loop, `indent`, a
comparison) runs to its end: the bounds hold again at the next check. One output is 1 MiB
at most: 250 times the longest text the app reads by default (4,000
characters), and a template writes its text once with a few tokens around it."""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable, Iterable, Sized
from functools import wraps
from typing import Any

import jinja2
from jinja2.compiler import CodeGenerator, Frame
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

MAX_CHARS = 1 << 20  # of its output, of everything it writes, and of any one value
MAX_SECONDS = 1.0
MAX_COUNT = 1 << 16  # an integer a call or filter is given (a width, a number of slices)
MAX_SOURCE_CHARS = 1 << 18  # the template itself (real ones are a few thousand)
NUMBERS = re.compile(r"\d+")


class TemplateRefused(ValueError):
    """A chat template that cannot be read, or passed a bound while it rendered."""


def weight(value: Any, limit: int = MAX_CHARS) -> int:
    """About the characters of a value's text, counted no further than just past `limit`
    (so at most `limit` elements are visited): a list weighs its elements, each time."""
    total, stack = 0, [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, str | bytes):
            total += len(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            total += item.bit_length() // 3 + 1
        elif isinstance(item, dict):
            total += 2 + 4 * len(item)
            if total <= limit:
                stack.extend(itertools.chain(item.keys(), item.values()))
        elif isinstance(item, list | tuple | set | frozenset):
            total += 2 + 2 * len(item)
            if total <= limit:
                stack.extend(item)
        elif isinstance(item, Namespace):  # {% set ns.x = ... %}: its attributes
            stack.append(object.__getattribute__(item, "_Namespace__attrs"))
        else:  # None, a number, a macro, a loop: a short text
            total += 32
    return total


class Budget:
    """One rendering's deadline and the characters it may still write."""

    def __init__(self) -> None:
        self.deadline = time.monotonic() + MAX_SECONDS
        self.written = 0

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateRefused(f"its chat template runs past {MAX_SECONDS:g} s")

    def write(self, chars: int) -> None:
        self.written += chars
        if self.written > MAX_CHARS:
            raise TemplateRefused(f"its chat template writes more than {MAX_CHARS:,} characters")


class Buffer(list):
    """What a {% set %} block or a macro writes, counted as it is written."""

    def __init__(self, budget: Budget) -> None:
        super().__init__()
        self.budget = budget

    def append(self, text: str) -> None:
        self.budget.write(len(text))
        super().append(text)

    def extend(self, texts: Iterable[str]) -> None:
        texts = tuple(texts)
        self.budget.write(sum(len(t) for t in texts))
        super().extend(texts)


class BoundedCode(CodeGenerator):
    """jinja2's code generator, the template's code checking the bounds: the deadline at
    the start of every block (so every turn of a loop, even an empty one), its buffers
    counted, its `~` joins weighed first."""

    def blockvisit(self, nodes: Iterable[jinja2.nodes.Node], frame: Frame) -> None:
        self.writeline("environment.tick()")
        super().blockvisit(nodes, frame)

    def buffer(self, frame: Frame) -> None:
        frame.buffer = self.temporary_identifier()
        self.writeline(f"{frame.buffer} = environment.buffer()")

    def visit_Concat(self, node: jinja2.nodes.Concat, frame: Frame) -> None:
        self.write("environment.concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def raise_exception(message: str) -> None:
    """What Hugging Face's templates call to refuse a conversation (transformers' own)."""
    raise TemplateRefused(f"its chat template refuses the text: {message}")


def too_heavy(weight_: int, what: str) -> None:
    if weight_ > MAX_CHARS:
        raise TemplateRefused(f"its chat template makes {what} of over {MAX_CHARS:,} characters")


def check_widths(form: Any) -> None:
    """A format string's widths and precisions (`%9999999d`, `{:>9999999}`), before use."""
    if isinstance(form, str) and any(int(n) > MAX_CHARS for n in NUMBERS.findall(form)):
        raise TemplateRefused(f"its chat template formats a field wider than {MAX_CHARS:,}")


def materialized(items: Any) -> Sized:
    """What `join` joins, as a sized sequence (a filter's generator: at most MAX_CHARS)."""
    if isinstance(items, Sized):
        return items
    listed = list(itertools.islice(items, MAX_CHARS + 1))
    too_heavy(len(listed), "a join")
    return listed


def joined(separator: Any, items: Sized) -> int:
    return weight(items) + len(str(separator)) * max(len(items) - 1, 0)


def replaced(text: Any, old: Any, new: Any) -> int:
    text, old, new = str(text), str(old), str(new)
    return len(text) + (len(text) // max(len(old), 1) + 1) * len(new)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox with the bounds above, one Budget per rendering thread."""

    code_generator_class = BoundedCode
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True)
        self.finalize = self.written
        self.filters = {name: self.bounded(name, f) for name, f in self.filters.items()}
        self.globals.pop("lipsum")  # (paragraphs by the million, in one call)
        self.globals["raise_exception"] = raise_exception
        self.renders = threading.local()

    def render(self, template: jinja2.Template, **context: Any) -> str:
        budget = self.renders.budget = Budget()
        out = []
        try:
            for text in template.generate(**context):
                budget.write(len(text))
                out.append(text)
        finally:
            self.renders.budget = None
        return "".join(out)

    # what the template's code calls (see BoundedCode)
    def tick(self) -> None:
        self.renders.budget.tick()

    def buffer(self) -> Buffer:
        return Buffer(self.renders.budget)

    def concat(self, parts: Iterable[Any]) -> str:
        self.tick()
        too_heavy(sum(weight(p) for p in parts), "a `~` join")
        return "".join(map(str, parts))

    def written(self, value: Any) -> Any:
        """Each {{ value }}, weighed before it is made text."""
        too_heavy(weight(value), "a value to write")
        return value

    # jinja2's sandbox hooks, and its filters
    def call_binop(
        self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any
    ) -> Any:
        self.tick()
        too_heavy(weight(left) + weight(right), f"an operand of {operator}")
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(times, int) and not isinstance(seq, int | float):
                    too_heavy(weight(seq) * max(times, 0), "a repetition")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int):
            too_heavy(left.bit_length() * max(right, 0) // 3, "a power")
        elif operator == "%":
            check_widths(left)
        result = super().call_binop(context, operator, left, right)
        too_heavy(weight(result), f"a value by {operator}")
        return result

    def call(self, context: jinja2.runtime.Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        target = getattr(obj, "__wrapped__", obj)  # (the sandbox's wrapped str.format)
        owner, name = getattr(target, "__self__", None), getattr(target, "__name__", "")
        if isinstance(owner, str) and name == "join" and args:
            args = (materialized(args[0]), *args[1:])
            too_heavy(joined(owner, args[0]), "a join")
        elif isinstance(owner, str) and name == "replace" and len(args) >= 2:
            too_heavy(replaced(owner, args[0], args[1]), "a replacement")
        elif isinstance(owner, str) and name in ("format", "format_map"):
            check_widths(owner)
        return self.checked(
            lambda *a, **k: super(BoundedEnvironment, self).call(context, obj, *a, **k),
            args,
            kwargs,
        )

    def bounded(self, name: str, f: Callable) -> Callable:
        """A filter, checked (its pass_context-like marks kept by `wraps`)."""

        @wraps(f)
        def filtered(*args: Any, **kwargs: Any) -> Any:
            return self.checked(f, *self.estimated(name, args, kwargs))

        return filtered

    def estimated(self, name: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """`join`'s and `replace`'s results weighed before they are made; `format`'s
        widths read (the filters take the eval context first)."""
        values = [a for a in args if not isinstance(a, jinja2.nodes.EvalContext)]
        if name == "join" and values:
            items = materialized(values[0])
            separator = values[1] if len(values) > 1 else kwargs.get("d", "")
            too_heavy(joined(separator, items), "a join")
            args = tuple(items if a is values[0] else a for a in args)
        elif name == "replace" and len(values) >= 3:
            too_heavy(replaced(*values[:3]), "a replacement")
        elif name == "format" and values:
            check_widths(values[0])
        return args, kwargs

    def checked(self, f: Callable, args: tuple, kwargs: dict) -> Any:
        """`f` called within the bounds: its arguments weighed, an integer past MAX_COUNT
        (a width, a number of slices: each made by Python, unchecked) refused, its result
        weighed."""
        self.tick()
        given = [*args, *kwargs.values()]
        too_heavy(sum(weight(a) for a in given), "arguments")
        if any(isinstance(a, int) and a > MAX_COUNT for a in given):
            raise TemplateRefused(f"its chat template asks for a count over {MAX_COUNT:,}")
        result = f(*args, **kwargs)
        too_heavy(weight(result), "a value")
        return result


class ChatTemplate:
    """A chat template compiled once (TemplateRefused where it cannot be), rendered within
    the bounds by any number of threads at once."""

    def __init__(self, source: str) -> None:
        if not isinstance(source, str):  # (a GGUF file's metadata may hold anything)
            raise TemplateRefused("its chat template is not text")
        if len(source) > MAX_SOURCE_CHARS:
            raise TemplateRefused(
                f"its chat template has {len(source):,} characters, over {MAX_SOURCE_CHARS:,}"
            )
        self.environment = BoundedEnvironment()
        try:
            self.template = self.environment.from_string(source)
        except (jinja2.TemplateError, RecursionError, MemoryError) as exc:
            raise TemplateRefused(f"its chat template cannot be read: {exc}") from None

    def render(self, **context: Any) -> str:
        try:
            return self.environment.render(self.template, **context)
        except TemplateRefused:
            raise
        except Exception as exc:  # (the template's own errors: undefined names, types, ...)
            raise TemplateRefused(
                f"its chat template fails: {type(exc).__name__}: {exc}"[:500]
            ) from None
