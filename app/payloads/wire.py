"""The wire format: matrices as nested lists or plotly.js typed arrays, and answers whose
large arrays are written into their JSON a few rows a call, off the event loop and without
pydantic's copy (design.md, "On the wire")."""

from __future__ import annotations

import base64
import re
import secrets
from collections.abc import Iterator
from typing import Any

import numpy as np
import pydantic_core
import torch
from pydantic import BaseModel

from .blocks import AttentionResponse, Deferred, TypedArray

# bytes each matrix entry takes in the response, for the size check before building it
BYTES_PER_ENTRY = {"json": 10, "u1": 4 / 3, "f2": 8 / 3, "f4": 16 / 3}
FLOATS_A_CALL = 1 << 16  # floats float_json writes in one call: a few ms of the GIL


def float_json(array: np.ndarray) -> bytes:
    """The JSON of `np.round(array, 6).tolist()` (NaN and infinities as null, as pydantic
    writes them), a few rows a call: one call over a 2,000-position table held the GIL,
    and with it the event loop, for half a second. The rounding is one numpy call over the
    whole array: numpy lets the GIL go for each call, and a thread that lets it go and takes
    it back every few microseconds is never made to hand it over (CPython's switch request
    waits for a whole interval without a switch), so rounding row by row kept /healthz
    waiting for the whole answer (0.1-0.15 s for a 1,410-position table; measured)."""
    rounded = np.round(np.asarray(array, dtype=np.float64), 6)
    return _rounded_json(rounded)


def _rounded_json(array: np.ndarray) -> bytes:
    if array.ndim > 1 and array.size > FLOATS_A_CALL:
        return b"[" + b",".join(_rounded_json(part) for part in array) + b"]"
    return pydantic_core.to_json(array.tolist(), inf_nan_mode="null")


def deferred(value: Any) -> Iterator[tuple[BaseModel, str, np.ndarray]]:
    """(model, field, array) of every Deferred model's held arrays in `value` (its fields,
    lists and dicts, walked)."""
    if isinstance(value, BaseModel):
        if isinstance(value, Deferred):
            yield from ((value, name, array) for name, array in value._floats.items())
        for name in type(value).model_fields:
            yield from deferred(getattr(value, name))
    elif isinstance(value, list | tuple):
        if value and not isinstance(value[0], BaseModel | list | tuple | dict):
            return  # (a list of numbers or strings holds no model)
        for item in value:
            yield from deferred(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from deferred(item)


def json_with_arrays(
    body: BaseModel, slots: list[tuple[BaseModel, str, np.ndarray]] | None = None
) -> bytes:
    """`body.model_dump_json()` where each (model, field) of `slots` (default: every held
    array of its Deferred models) holds its array's float_json: pydantic writes the rest
    around a marker put in the field's place (a random one: no text of a request can
    forge it)."""
    slots = list(deferred(body)) if slots is None else slots
    nonce = secrets.token_hex(12)
    kept = [getattr(holder, field) for holder, field, _ in slots]
    try:
        for i, (holder, field, _) in enumerate(slots):
            setattr(holder, field, f"{nonce}:{i}")
        text = body.model_dump_json(by_alias=True, warnings=False).encode()
    finally:
        for (holder, field, _), value in zip(slots, kept, strict=True):
            setattr(holder, field, value)
    parts, at = [], 0
    for found in re.finditer(rb'"' + nonce.encode() + rb':(\d+)"', text):
        parts += [text[at : found.start()], float_json(slots[int(found.group(1))][2])]
        at = found.end()
    parts.append(text[at:])
    return b"".join(parts)


def encode(stack: torch.Tensor, encoding: str) -> list | TypedArray:
    """Nested lists (rounded to 6 decimals) or a plotly.js typed array, row-major."""
    if encoding == "json":
        return np.round(stack.double().cpu().numpy(), 6).tolist()
    if encoding == "u1":
        data = (stack.float() * 255).round_().clamp_(0, 255).to(torch.uint8).cpu().numpy()
    else:
        data = stack.float().cpu().numpy().astype("<f2" if encoding == "f2" else "<f4", copy=False)
    shape = ",".join(str(n) for n in stack.shape)
    bdata = base64.b64encode(np.ascontiguousarray(data).data.cast("B")).decode("ascii")
    return TypedArray(dtype=encoding, bdata=bdata, shape=shape)


_MARKER = re.compile(rb'"bdata":"(\d+)"')


def attention_json(body: AttentionResponse) -> bytes:
    """`body.model_dump_json()`, with each typed array's base64 put in as bytes:
    base64 needs no JSON escaping, and pydantic's copy of a large answer took 0.13-0.19 s
    of the 1.4 s of all 270 heads of a 512-token SmolLM2 run as u1 (94 MB; measured). Each
    array's bdata is its index while pydantic writes the rest; `"bdata":"` with its quotes
    unescaped is found only where a field starts, never inside a string."""
    arrays = [b.data for b in body.blocks if isinstance(b.data, TypedArray)]
    payloads = [a.bdata for a in arrays]
    try:
        for i, array in enumerate(arrays):
            array.bdata = str(i)
        text = json_with_arrays(body)
    finally:
        for array, payload in zip(arrays, payloads, strict=True):
            array.bdata = payload
    parts, at = [], 0
    for found in _MARKER.finditer(text):
        parts += [text[at : found.start(1)], payloads[int(found.group(1))].encode("ascii")]
        at = found.end(1)
    parts.append(text[at:])
    return b"".join(parts)
