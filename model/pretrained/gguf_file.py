"""A GGUF file's header and metadata, read within bounds: the `gguf` library's reader with
every count and read checked against the file's end, and the typed accessors of its
metadata (a whole number, a positive number, an array of strings), each a CheckpointError
naming the field where the file does not say what a model needs."""

from __future__ import annotations

import math

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFValueType

from ..checkpoints import CheckpointError

# bounds of what a GGUF file's header may declare, each checked before it is looped over:
# metadata values in all arrays (Gemma 3's 262,000 tokens, their scores and types: ~790,000), and
# tensors (a Llama of 1,000 layers has 9,003); llama.cpp's own bound on dimensions
MAX_VALUES = 1 << 20
MAX_TENSORS = 1 << 16
MAX_DIMS = 4
ARRAY, STRING = int(GGUFValueType.ARRAY), int(GGUFValueType.STRING)  # (as ints: compared fast)


class GGUFFile(GGUFReader):
    """The `gguf` library's reader, checked: every read stays within the file and every
    count it declares (of fields, tensors, array values, dimensions) is checked against
    the bytes left and the bounds above before anything is looped over or allocated, so a
    truncated or corrupt file is a CheckpointError naming where, at once (the library's
    own loops over the empty reads past the end, its memory growing, for a count of 2^62).
    Its metadata is read from a plain array over the file's mapping: the library's own
    reads each of a vocabulary's ~100,000 strings as a numpy memmap slice, 4x slower
    (SmolLM2's file: 2.6 s against 0.6 s here); the same fields."""

    def __init__(self, path: str) -> None:
        self._values = 0
        try:
            super().__init__(path)
        except CheckpointError:
            raise
        except (ValueError, KeyError, IndexError, OverflowError) as exc:  # the library's checks
            raise CheckpointError(f"not a GGUF file it can read: {exc}") from None

    def _get(self, offset, dtype, count=1, override_order=None):
        plain = self.__dict__.get("_plain")
        if plain is None:
            plain = self._plain = self.data.view(np.ndarray)
        count = int(count)
        size = np.dtype(dtype).itemsize * count
        if offset + size > len(plain):
            raise CheckpointError(
                f"the GGUF file ends at byte {len(plain):,}, within the {size:,} bytes it "
                f"declares at byte {offset:,}: it is truncated or corrupt"
            )
        arr = plain[offset : offset + size].view(dtype=dtype)[:count]
        order = self.byte_order if override_order is None else override_order
        return arr.view(arr.dtype.newbyteorder(order))

    def _left(self, offset: int, items: int, least: int, what: str) -> None:
        """`items` of at least `least` bytes each must fit in the file after `offset`."""
        left = len(self._plain) - offset
        if items * least > left:
            raise CheckpointError(
                f"it declares {items:,} {what} at byte {offset:,}, more than the {left:,} "
                "bytes left hold: it is truncated or corrupt"
            )

    def _build_fields(self, offs, count):
        self._left(offs, int(count), 8 + 4 + 1, "metadata fields")  # key, type, a byte
        return super()._build_fields(offs, count)

    def _get_field_parts(self, orig_offs, raw_type):
        if raw_type == ARRAY:
            item = int(self._get(orig_offs, np.uint32)[0])
            items = int(self._get(orig_offs + 4, np.uint64)[0])
            if item == ARRAY:
                raise CheckpointError(
                    "its metadata holds an array of arrays (llama.cpp reads none)"
                )
            value_type = GGUFValueType(item)
            least = 8 if item == STRING else np.dtype(self.gguf_scalar_to_np[value_type]).itemsize
            self._left(orig_offs + 12, items, least, "array values")
            self._values += items
            if self._values > MAX_VALUES:
                raise CheckpointError(
                    f"its metadata arrays hold over {MAX_VALUES:,} values in all: not read"
                )
        return super()._get_field_parts(orig_offs, raw_type)

    def _build_tensor_info(self, offs, count):
        if count > MAX_TENSORS:
            raise CheckpointError(f"it declares {int(count):,} tensors, over {MAX_TENSORS:,}")
        self._left(offs, int(count), 8 + 4 + 4 + 8, "tensors")  # name, dims, type, offset
        return super()._build_tensor_info(offs, count)

    def _get_tensor_info_field(self, orig_offs):
        name_length = int(self._get(orig_offs, np.uint64)[0])
        dims = int(self._get(orig_offs + 8 + name_length, np.uint32)[0])
        if dims > MAX_DIMS:
            raise CheckpointError(f"a tensor at byte {orig_offs:,} declares {dims:,} dimensions")
        return super()._get_tensor_info_field(orig_offs)

    def _build_tensors(self, start_offs, fields):
        for f in fields:
            name = bytes(f.parts[1]).decode("utf-8", "replace")
            shape = [int(n) for n in f.parts[3]]
            quant = GGMLQuantizationType(int(f.parts[4][0]))
            block, size = GGML_QUANT_SIZES[quant]
            if not shape or min(shape) < 1 or shape[0] % block:
                raise CheckpointError(
                    f"its tensor {name} declares the shape {tuple(shape)} of {quant.name}"
                )
            end = start_offs + int(f.parts[5][0]) + math.prod(shape) // block * size
            if end > len(self._plain):
                raise CheckpointError(
                    f"its tensor {name}'s data ends at byte {end:,}, past the end of the file "
                    f"({len(self._plain):,} bytes): it is truncated or corrupt"
                )
        super()._build_tensors(start_offs, fields)


def field(reader: GGUFReader, key: str, default=None):
    found = reader.fields.get(key)
    if found is None:
        return default
    try:
        return found.contents()
    except ValueError as exc:  # (a string that is not UTF-8)
        raise CheckpointError(f"its metadata's {key} cannot be read: {exc}") from None


def count(reader: GGUFReader, key: str, default: int | None = None) -> int:
    """A positive whole number of the metadata (`default` where it has none)."""
    value = field(reader, key, default)
    if value is None:
        raise CheckpointError(f"its metadata has no {key}")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CheckpointError(f"its metadata's {key} is {value!r}, not a positive whole number")
    return value


def positive(reader: GGUFReader, key: str, default: float | None = None) -> float:
    """A positive finite number of the metadata (`default` where it has none)."""
    value = field(reader, key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise CheckpointError(f"its metadata's {key} is {value!r}, not a positive number")
    return float(value)


def strings(reader: GGUFReader, key: str) -> list[str]:
    """An array of strings of the metadata (empty where it has none)."""
    value = field(reader, key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CheckpointError(f"its metadata's {key} is not an array of strings")
    return value
