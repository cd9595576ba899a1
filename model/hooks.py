"""Hook points named from the module tree, and captures that belong to one call.

A `HookPoint` is an identity module placed where a tensor worth seeing is computed
(TransformerLens' idea). Nothing is ever registered on a module: the active captures and
hook functions live in a context variable, set for the duration of one call and reset in
`finally`, so concurrent calls on one shared model (threads, or tasks copying the context)
never see each other's tensors and nothing stays behind on the model. Each capture belongs
to one root module: other models run inside its block are not seen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
from torch import Tensor, nn

# A hook function gets the tensor and the hook's name; returning a tensor replaces it.
HookFn = Callable[[Tensor, str], Tensor | None]
NamesFilter = str | Iterable[str] | Callable[[str], bool] | None


class HookPoint(nn.Module):
    """Identity module that shows its input to the active capture and hook functions."""

    def forward(self, x: Tensor) -> Tensor:
        for context in reversed(_ACTIVE.get()):  # innermost block first
            name = context.points.get(id(self))
            if name is not None:
                x = context.fire(name, x)
        return x


class Capture(Mapping[str, Tensor]):
    """Detached tensors seen during one call: each hook name maps to every firing, in order.

    `capture[name]` is the latest firing (the only one for a plain forward pass);
    `capture.all(name)` lists one tensor per firing, e.g. one per step of cached decoding.
    Each is kept in the memory of the CPU (`on_device`: where it was made, a GPU's: the
    long path's q and k, whose windows are computed there), in the dtype it was made in.
    """

    def __init__(self, on_device: bool = False) -> None:
        self._store: dict[str, list[Tensor]] = {}
        self._on_device = on_device

    def __getitem__(self, name: str) -> Tensor:
        return self._store[name][-1]

    def __iter__(self) -> Iterator[str]:
        return iter(self._store)

    def __len__(self) -> int:
        return len(self._store)

    def all(self, name: str) -> list[Tensor]:
        return list(self._store[name])

    def add(self, name: str, tensor: Tensor) -> None:
        kept = tensor.detach() if self._on_device else tensor.detach().cpu()
        self._store.setdefault(name, []).append(kept)


class _HookContext:
    def __init__(
        self,
        points: dict[int, str],
        capture: Capture | None,
        capture_names: frozenset[str],
        fwd_hooks: Mapping[str, list[HookFn]],
    ) -> None:
        self.points = points  # id(hook point) -> its name under the root
        self.capture = capture
        self.capture_names = capture_names
        self.fwd_hooks = fwd_hooks

    def fire(self, name: str, x: Tensor) -> Tensor:
        for fn in self.fwd_hooks.get(name, ()):
            out = fn(x, name)
            if out is not None:
                x = out
        if self.capture is not None and name in self.capture_names:
            self.capture.add(name, x)
        return x


_ACTIVE: ContextVar[tuple[_HookContext, ...]] = ContextVar("attnviz_active_hooks", default=())


def active() -> bool:
    """Whether any capture or hook function is active in this context (a hook point
    whose input is costly to make can skip making it otherwise)."""
    return bool(_ACTIVE.get())


def wanted(point: HookPoint) -> bool:
    """Whether an active capture records this hook point or a hook function reads it (a
    module can skip computing what nobody will see, e.g. an N x N attention matrix)."""
    for context in _ACTIVE.get():
        name = context.points.get(id(point))
        if name is not None and (
            name in context.fwd_hooks
            or (context.capture is not None and name in context.capture_names)
        ):
            return True
    return False


def hook_names(root: nn.Module) -> list[str]:
    """Names of all hook points under `root` (their paths from it), in module-tree order."""
    return [name for name, m in root.named_modules() if isinstance(m, HookPoint)]


def resolve_names(available: list[str], names_filter: NamesFilter) -> frozenset[str]:
    """The hook names a filter selects: None = all, a name, a list of names, or a predicate."""
    if names_filter is None:
        return frozenset(available)
    if callable(names_filter):
        return frozenset(n for n in available if names_filter(n))
    wanted = [names_filter] if isinstance(names_filter, str) else list(names_filter)
    unknown = sorted(set(wanted) - set(available))
    if unknown:
        raise KeyError(f"unknown hook names: {unknown}")
    return frozenset(wanted)


@contextmanager
def hooked(
    root: nn.Module,
    names_filter: NamesFilter = None,
    fwd_hooks: Iterable[tuple[str, HookFn]] = (),
    capture: bool = True,
    on_device: bool = False,
) -> Iterator[Capture]:
    """Within this block, calls of `root` in this context capture and run hook functions;
    what is captured is kept on the CPU (`on_device`: where it was made).

    Blocks nest: an inner block adds to the outer ones and runs first, so an outer capture
    sees what an inner hook function returned. Each block sees its own root only.
    """
    points = {id(m): name for name, m in root.named_modules() if isinstance(m, HookPoint)}
    available = list(points.values())
    by_name: dict[str, list[HookFn]] = {}
    for name, fn in fwd_hooks:
        by_name.setdefault(name, []).append(fn)
    unknown = sorted(set(by_name) - set(available))
    if unknown:
        raise KeyError(f"unknown hook names: {unknown}")
    result = Capture(on_device)
    names = resolve_names(available, names_filter) if capture else frozenset()
    context = _HookContext(points, result if capture else None, names, by_name)
    token = _ACTIVE.set((*_ACTIVE.get(), context))
    try:
        yield result
    finally:
        _ACTIVE.reset(token)


class HookedModule(nn.Module):
    """A root module whose hook points can be captured and hooked per call."""

    def hook_names(self) -> list[str]:
        return hook_names(self)

    def run_with_capture(
        self, *args: Any, names_filter: NamesFilter = None, **kwargs: Any
    ) -> tuple[Any, Capture]:
        """Run forward once; return (output, the tensors the selected hooks saw)."""
        with torch.no_grad(), hooked(self, names_filter) as capture:
            out = self(*args, **kwargs)
        return out, capture

    def run_with_hooks(
        self, *args: Any, fwd_hooks: Iterable[tuple[str, HookFn]], **kwargs: Any
    ) -> Any:
        """Run forward once with hook functions that may replace what they see."""
        with hooked(self, fwd_hooks=fwd_hooks, capture=False):
            return self(*args, **kwargs)


_RECORDING: ContextVar[object | None] = ContextVar("attnviz_recording", default=None)


class Recorder:
    """Forward hooks that record for one pass of this context's only: registered on a model
    that other requests run at the same time (in other threads), they ignore those passes.
    `with Recorder() as rec:` registers through `rec.pre(module, fn)` / `rec.post(module,
    fn)` (fn gets the layer's input, or its output's first tensor) and removes them on exit."""

    def __init__(self) -> None:
        self._token = object()
        self._handles: list = []
        self._reset: Any = None

    def __enter__(self) -> Recorder:
        self._reset = _RECORDING.set(self._token)
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        _RECORDING.reset(self._reset)  # type: ignore[arg-type]

    def _mine(self) -> bool:
        return _RECORDING.get() is self._token

    def pre(self, module: nn.Module, fn) -> None:
        # (`kwargs` has a default: torch files a hook with kwargs in two dicts one after
        # the other, and another thread's pass running between the two calls it without)
        def hook(m, args, kwargs=None):
            if self._mine():
                fn(args[0] if args else kwargs["hidden_states"])

        self._handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))

    def post(self, module: nn.Module, fn) -> None:
        def hook(m, args, out):
            if self._mine():
                fn(out[0] if isinstance(out, tuple | list) else out)

        self._handles.append(module.register_forward_hook(hook))

    def call(self, module: nn.Module, fn) -> None:
        """fn(module, its positional inputs, its output) after each of this pass's calls."""

        def hook(m, args, out):
            if self._mine():
                fn(m, args, out)

        self._handles.append(module.register_forward_hook(hook))

    def replace(self, module: nn.Module, fn) -> None:
        """A module's output in this pass replaced by fn(its output)."""

        def hook(m, args, out):
            return fn(out) if self._mine() else None

        self._handles.append(module.register_forward_hook(hook))
