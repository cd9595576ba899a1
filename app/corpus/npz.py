"""NumPy's .npz written as a stream: a zip of .npy members, each member's header written
from its declared shape and then its rows piece by piece, so that a download of a corpus
run's vectors never holds more than one sentence's arrays and a few hundred kB of zip
(numpy.savez builds the whole file, and each array whole, in memory first)."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

PIECE = 256 * 1024  # bytes gathered before they are sent


@dataclass(frozen=True)
class Member:
    name: str  # without .npy
    dtype: np.dtype
    shape: tuple[int, ...]
    pieces: Callable[[], Iterable[np.ndarray]]  # its rows, in order, in that dtype


def floats(name: str, tensors: Sequence[torch.Tensor]) -> Member:
    """(rows, d) float32 from a list of (n_i, d) tensors, as torch.cat would make it."""
    width = tensors[0].shape[1]
    rows = sum(t.shape[0] for t in tensors)
    return Member(
        name,
        np.dtype("<f4"),
        (rows, width),
        lambda: (t.to(torch.float32).cpu().numpy() for t in tensors),
    )


def repeated(name: str, values: Sequence[int], counts: Sequence[int]) -> Member:
    """np.repeat(values, counts), as int64."""
    return Member(
        name,
        np.dtype("<i8"),
        (sum(counts),),
        lambda: (np.full(c, v, dtype="<i8") for v, c in zip(values, counts, strict=True)),
    )


def strings(name: str, lists: Sequence[Sequence[str]]) -> Member:
    """The strings of every list, flat, as np.array would type them (<U of the longest)."""
    longest = max((len(t) for tokens in lists for t in tokens), default=0)
    dtype = np.dtype(f"<U{max(1, longest)}")
    total = sum(len(tokens) for tokens in lists)
    return Member(name, dtype, (total,), lambda: (np.array(t, dtype=dtype) for t in lists))


class _Pipe(io.RawIOBase):
    """A write-only, unseekable file whose bytes are taken out as they come."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        chunk = bytes(data)
        self._parts.append(chunk)
        self.size += len(chunk)
        return len(chunk)

    def take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        self.size = 0
        return out


def stream(members: Iterable[Member]) -> Iterator[bytes]:
    """The .npz's bytes, in pieces of about PIECE bytes."""
    pipe = _Pipe()
    with zipfile.ZipFile(pipe, mode="w", compression=zipfile.ZIP_STORED) as archive:
        for member in members:
            header = {"descr": member.dtype.str, "fortran_order": False, "shape": member.shape}
            with archive.open(f"{member.name}.npy", mode="w", force_zip64=True) as out:
                np.lib.format.write_array_header_1_0(out, header)
                for piece in member.pieces():
                    out.write(np.ascontiguousarray(piece, dtype=member.dtype).tobytes())
                    if pipe.size >= PIECE:
                        yield pipe.take()
            yield pipe.take()
    yield pipe.take()
