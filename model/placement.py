"""Where a model runs and in which dtype: `Placement` (ATTNVIZ_DEVICE, ATTNVIZ_DTYPE,
ATTNVIZ_MAX_MEMORY, or a model's own entry) resolved against what this torch sees.

- device `auto`: every CUDA GPU torch sees, the model spread over them by accelerate's
  `device_map="auto"` (one GPU: all of it there); else Apple's `mps`; else the CPU.
  `cuda` is the first GPU, `cuda:N` the N-th; a device torch does not see refuses the
  model, saying so (never a silent fall back to the CPU where one was named).
- dtype `auto`: the checkpoint's own (config.json's `dtype`/`torch_dtype`, else the one
  float dtype its safetensors hold; float32 where they hold several and the config states
  none, and for a GGUF file's dequantized weights).
- `max_memory` ({"0": "70GiB", "cpu": "20GiB"}): accelerate's bound per device for a
  `device_map`; given, the model is spread by `device_map="auto"` within it (layers past
  the GPUs' room on the CPU, and past the CPU's on disk).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from .checkpoints import CheckpointError

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
DTYPE_NAMES = ("auto", *DTYPES)
QUANTIZE = ("none", "4bit", "8bit")  # bitsandbytes' NF4 and LLM.int8() weights, on CUDA
DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")
# names a checkpoint states its dtype by (config.json, safetensors headers)
STORED = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
          "BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}  # fmt: skip


def gpus() -> int:
    """The CUDA devices this torch sees (0 on a CPU build, or with none present)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def has_mps() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def device_check(device: str) -> str:
    """A device setting as written, or a ValueError naming what it may be."""
    if not DEVICE.fullmatch(device):
        raise ValueError(f"device {device!r} is none of auto, cpu, cuda, cuda:N, mps")
    return device


def dtype_check(dtype: str) -> str:
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"dtype {dtype!r} is none of {', '.join(DTYPE_NAMES)}")
    return dtype


@dataclass(frozen=True)
class Placement:
    """Where a model is asked to run and in which dtype (settings, or its own entry)."""

    device: str = "auto"
    dtype: str = "auto"
    max_memory: Mapping[str, str | int] = field(default_factory=dict)
    quantize: str = "none"  # bitsandbytes' 4bit or 8bit weights (CUDA only), or none

    def __post_init__(self) -> None:
        device_check(self.device)
        dtype_check(self.dtype)
        if self.quantize not in QUANTIZE:
            raise ValueError(f"quantize {self.quantize!r} is none of {', '.join(QUANTIZE)}")

    def quantization(self, dtype: torch.dtype) -> Any | None:
        """transformers' BitsAndBytesConfig of a model read quantized (its matrices in 4 or
        8 bits, computed in `dtype`), or None; CheckpointError where that cannot be: off
        CUDA, or without bitsandbytes (the `quantized` extra)."""
        if self.quantize == "none":
            return None
        where = self.where()
        if not where.device.startswith("cuda"):
            raise CheckpointError(
                f"{self.quantize} weights (bitsandbytes) are computed by CUDA kernels: this "
                f"model is placed on {where.device}; serve it unquantized there, or place it "
                "on a GPU"
            )
        try:
            import bitsandbytes  # noqa: F401
        except ImportError:
            raise CheckpointError(
                f"{self.quantize} weights need bitsandbytes: pip install 'attnviz[quantized]'"
            ) from None
        from transformers import BitsAndBytesConfig

        if self.quantize == "8bit":
            return BitsAndBytesConfig(load_in_8bit=True)
        return BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype
        )

    def where(self) -> Where:
        """The device (or devices) it runs on here; CheckpointError where the one named is
        not there."""
        count = gpus()
        if self.device == "auto":
            if count > 1:
                return Where("cuda", "auto")  # (spread over the GPUs, within max_memory)
            if count:
                return self._on_gpu(0)
            return Where("mps", "mps") if has_mps() else self._on_cpu()
        if self.device.startswith("cuda"):
            index = int(self.device.partition(":")[2] or 0)
            if index >= count:
                seen = f"{count} CUDA device{'s' if count != 1 else ''}" if count else "no CUDA"
                build = "" if torch.version.cuda else f" (torch {torch.__version__} is a CPU build)"
                raise CheckpointError(
                    f"the device {self.device} was asked for, and torch sees {seen}{build}: "
                    "choose another (ATTNVIZ_DEVICE, or the model's own device)"
                )
            return self._on_gpu(index)
        if self.device == "mps":
            if not has_mps():
                raise CheckpointError("the device mps was asked for, and this torch has no MPS")
            return Where("mps", "mps")  # (max_memory is accelerate's for CUDA and the CPU)
        return self._on_cpu()

    def _on_gpu(self, index: int) -> Where:
        """One GPU: spread from it (to the CPU, then the disk) only where `max_memory`
        bounds that GPU itself; else all of the model on it."""
        device = f"cuda:{index}"
        return Where(device, "auto" if index in self.memory_for(device) else device)

    def _on_cpu(self) -> Where:
        """The CPU: spread to the disk only where `max_memory` bounds the CPU."""
        return Where("cpu", "auto" if "cpu" in self.memory_for("cpu") else None)

    def torch_dtype(self, stored: torch.dtype | None) -> torch.dtype:
        """The dtype it runs in: the one asked for, or (auto) the checkpoint's own float type
        (float32 where it states none, or one that is no float: a quantized file's)."""
        if self.dtype != "auto":
            return DTYPES[self.dtype]
        return stored if stored is not None and stored in DTYPES.values() else torch.float32

    def memory_for(self, device: str) -> dict[int | str, str | int]:
        """`max_memory` as accelerate takes it (GPU indices as ints), kept to what a model
        placed on `device` may use: `cuda` (spread) every device named; `cuda:N` that GPU,
        the CPU and the disk; `cpu` the CPU and the disk (a server-wide bound naming GPUs
        never moves a model asked onto the CPU onto them)."""
        allowed: set[str] | None = None
        if device == "cpu":
            allowed = {"cpu", "disk"}
        elif device.startswith("cuda:"):
            allowed = {device.partition(":")[2], "cpu", "disk"}
        return {
            int(k) if str(k).isdigit() else k: v
            for k, v in self.max_memory.items()
            if allowed is None or str(k) in allowed
        }


@dataclass(frozen=True)
class Where:
    """Where a model runs here: `device` is what budgets count its bytes on ("cpu",
    "mps", "cuda:N", or "cuda" for a model spread over GPUs); `device_map` is what
    transformers is given (None: built on the CPU, as torch makes it)."""

    device: str
    device_map: str | None = None

    @property
    def spread(self) -> bool:
        return self.device_map == "auto"

    @property
    def on_cpu(self) -> bool:
        return self.device == "cpu" and not self.spread


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def stored_dtype(config: Mapping[str, Any], dtypes: Iterable[str] = ()) -> torch.dtype | None:
    """The float dtype a checkpoint states (config.json's `dtype` or `torch_dtype`, its
    text config's), else the only float dtype its tensors are stored in; None where
    neither says one."""
    text = config.get("text_config")
    for where in (config, text if isinstance(text, Mapping) else {}):
        for key in ("dtype", "torch_dtype"):
            said = where.get(key)
            if isinstance(said, str) and said.removeprefix("torch.") in STORED:
                return STORED[said.removeprefix("torch.")]
    floats = {STORED[d] for d in dtypes if d in STORED}
    return floats.pop() if len(floats) == 1 else None


def relative_tolerance(dtype: torch.dtype) -> float:
    """What a check that recomputes a model's sums in another order allows, relative to
    their size: 1e-4 in float32; four units of the dtype's rounding (its eps) in bfloat16 or
    float16, where the model's own sums round at every step."""
    return 1e-4 if dtype in (torch.float32, torch.float64) else 4 * torch.finfo(dtype).eps


def element_bytes(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def module_bytes(model: torch.nn.Module) -> int:
    """The bytes of a module's parameters and buffers as they are held (each tensor once)."""
    seen: dict[int, int] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        seen[id(tensor)] = tensor.numel() * tensor.element_size()
    return sum(seen.values())


def device_of(module: torch.nn.Module) -> torch.device:
    """Where a model takes its inputs: its first parameter's device (the input embedding's,
    for a model spread by a device map; accelerate's hooks move what follows); for weights
    offloaded to disk (on the meta device until their layer runs), the device accelerate
    runs them on; a model wholly on the meta device, meta."""
    first = None
    for parameter in module.parameters():
        if parameter.device.type != "meta":
            return parameter.device
        first = first or parameter.device
    for part in module.modules():
        device = getattr(getattr(part, "_hf_hook", None), "execution_device", None)
        if device is not None:
            return torch.device(device)
    return first or torch.device("cpu")


def devices_said(device: str) -> str:
    """What this torch sees and where `auto` puts a model, in a sentence for the log."""
    count = gpus()
    build = f"torch {torch.__version__}" + (
        f" (CUDA {torch.version.cuda})" if torch.version.cuda else " (a CPU build)"
    )
    if count:
        names = ", ".join(
            f"cuda:{i} {torch.cuda.get_device_name(i)} "
            f"({torch.cuda.get_device_properties(i).total_memory / 2**30:.0f} GiB)"
            for i in range(count)
        )
        seen = f"{build} sees {count} CUDA device{'s' if count > 1 else ''}: {names}"
    else:
        seen = f"{build} sees no CUDA device" + (": mps is there" if has_mps() else "")
    try:
        placed = f"run on {Placement(device).where().device}"
    except CheckpointError as exc:
        placed = f"are refused ({exc})"
    return f"{seen}; ATTNVIZ_DEVICE {device}: models of yours {placed}"


def device_memory(device: str) -> int | None:
    """The bytes a GPU has (its total memory), or None for the CPU (the cgroup's, see
    app/budgets.py) or a device whose memory torch does not tell."""
    if device.startswith("cuda") and gpus():
        if device == "cuda":  # spread over every GPU
            return sum(torch.cuda.get_device_properties(i).total_memory for i in range(gpus()))
        return torch.cuda.get_device_properties(int(device.partition(":")[2] or 0)).total_memory
    return None
