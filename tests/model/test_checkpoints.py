"""Checkpoints: config.json beside model.safetensors, checked against each other on load;
nothing is ever unpickled."""

from __future__ import annotations

import ast
import json
import pickle
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from attnviz.app.catalog.zoo import load_zoo
from attnviz.app.settings import Settings
from attnviz.model import load_checkpoint, save_checkpoint
from attnviz.model.checkpoints import CheckpointError
from attnviz.model.pretrained.causal import _loaded

from .conftest import ARCH_CONFIGS, build


@pytest.mark.parametrize("arch", ARCH_CONFIGS)
def test_a_saved_model_loads_and_computes_the_same(tmp_path, arch):
    model = build(**ARCH_CONFIGS[arch])
    save_checkpoint(model, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    loaded = load_checkpoint(tmp_path)
    assert loaded.config == model.config and not loaded.training
    ids = torch.randint(3, 40, (2, 6))
    args = (ids, ids[:, :3]) if arch == "encoder-decoder" else (ids,)
    assert torch.equal(loaded(*args), model(*args))


def test_float16_weights_load_as_float32_within_half_precision(tmp_path):
    model = build()
    save_checkpoint(model, tmp_path, dtype=torch.float16)
    assert load_file(tmp_path / "model.safetensors")["output.weight"].dtype == torch.float16
    loaded = load_checkpoint(tmp_path)
    assert loaded.output.weight.dtype == torch.float32
    assert (loaded.output.weight - model.output.weight).abs().max() <= 1e-3


def test_the_sinusoidal_table_is_not_stored(tmp_path):
    save_checkpoint(build(), tmp_path)
    assert not any("pe" in name.split(".") for name in load_file(tmp_path / "model.safetensors"))


def test_weights_that_do_not_fit_the_config_are_a_clear_error(tmp_path):
    save_checkpoint(build(), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["target_vocab_size"] = 41
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"output.weight has shape \(40, 32\)"):
        load_checkpoint(tmp_path)


def test_missing_and_extra_tensors_are_named(tmp_path):
    save_checkpoint(build(), tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    state.pop("output.bias")
    state["surplus"] = torch.zeros(1)
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"missing tensors \['output.bias'\].*surplus"):
        load_checkpoint(tmp_path)


def test_a_folder_without_weights_is_a_clear_error(tmp_path):
    build().config.save(tmp_path / "config.json")
    with pytest.raises(CheckpointError, match=r"has no model\.safetensors"):
        load_checkpoint(tmp_path)


class Payload:
    """A pickle that, once unpickled, creates a file: proof that it ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def hostile_pickle(path: Path, marker: Path) -> None:
    path.write_bytes(pickle.dumps({"output.weight": Payload(marker)}))


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt", "weights.pth", "last.ckpt"])
def test_pickled_weights_are_refused_and_never_unpickled(tmp_path, name):
    build().config.save(tmp_path / "config.json")
    marker = tmp_path / "code-ran"
    hostile_pickle(tmp_path / name, marker)
    with pytest.raises(CheckpointError, match=rf"only pickled weights \['{name}'\].*never loaded"):
        load_checkpoint(tmp_path)
    assert not marker.exists()


def test_torch_save_output_is_refused_too(tmp_path):
    model = build()
    model.config.save(tmp_path / "config.json")
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="save the weights as safetensors"):
        load_checkpoint(tmp_path)


def test_a_pickle_named_model_safetensors_is_refused_and_never_unpickled(tmp_path):
    build().config.save(tmp_path / "config.json")
    marker = tmp_path / "code-ran"
    hostile_pickle(tmp_path / "model.safetensors", marker)
    with pytest.raises(CheckpointError, match="not a complete safetensors file"):
        load_checkpoint(tmp_path)
    assert not marker.exists()


@pytest.mark.parametrize("keep", [0, 7, 100, 0.5, -1], ids=["empty", "7B", "100B", "half", "-1B"])
def test_a_truncated_safetensors_file_is_refused(tmp_path, keep):
    save_checkpoint(build(), tmp_path)
    weights = tmp_path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: int(len(data) * keep) if isinstance(keep, float) else keep])
    with pytest.raises(CheckpointError, match=r"model\.safetensors is not a complete safetensors"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"n_layers": 3}, r"missing tensors \['decoder\.2\..*'encoder\.2\."),
        ({"n_layers": 1}, r"unexpected tensors \['decoder\.1\."),
        ({"d_model": 64, "d_ff": 128}, r"has shape \(50, 32\), the config says \(50, 64\)"),
        ({"architecture": "encoder-only"}, r"unexpected tensors \['decoder\."),
    ],
    ids=["more_layers", "fewer_layers", "wider", "other_architecture"],
)
def test_a_config_that_disagrees_with_the_weights_names_the_misfit(tmp_path, change, message):
    save_checkpoint(build(), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(tmp_path)


def test_a_config_for_a_huge_model_is_refused_before_allocating_it(tmp_path):
    # ~40 TB of float32 weights if it were built: refused from the file's header alone
    save_checkpoint(build(), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    huge = {"d_model": 2**16, "n_heads": 8, "d_ff": 2**20, "n_layers": 64}
    (tmp_path / "config.json").write_text(json.dumps({**config, **huge}))
    with pytest.raises(CheckpointError, match="does not fit its config"):
        load_checkpoint(tmp_path)


def test_integer_weights_for_float_parameters_are_refused(tmp_path):
    save_checkpoint(build(), tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    state["output.weight"] = state["output.weight"].to(torch.int8)
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"output\.weight is I8, not floating point"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize(
    "config, message",
    [
        ("{not json", "bad config.json"),
        ('{"d_model": 30, "n_heads": 4}', "d_model must be divisible by n_heads"),
        ('{"d_model": 32, "layers": 2}', r"unknown fields \['layers'\]"),
        ('{"d_model": "32"}', "bad config.json"),
        ("[1, 2]", "bad config.json"),
    ],
    ids=["not_json", "impossible", "unknown_field", "wrong_type", "not_an_object"],
)
def test_a_bad_config_is_a_clear_error(tmp_path, config, message):
    save_checkpoint(build(), tmp_path)
    (tmp_path / "config.json").write_text(config)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(tmp_path)


# What would unpickle: the modules, and the calls that use them underneath.
PICKLERS = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "shelve"}
UNPICKLING_CALLS = {("torch", "load"), ("jit", "load"), ("torch", "serialization")}


def unpickling_code(path: Path) -> list[str]:
    """Lines of one source file that import a pickler, call torch.load or torch.jit.load,
    or pass allow_pickle=True (numpy)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        if any(
            m.split(".")[0] in PICKLERS or m in ("torch.load", "torch.serialization")
            for m in modules
        ):
            found.append(f"{path}:{node.lineno} imports {modules}")
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name | ast.Attribute)
            and (getattr(node.value, "id", None) or node.value.attr, node.attr) in UNPICKLING_CALLS
        ):
            found.append(f"{path}:{node.lineno} uses .{node.attr}")
        if (
            isinstance(node, ast.keyword)
            and node.arg == "allow_pickle"
            and not (isinstance(node.value, ast.Constant) and node.value.value is False)
        ):
            found.append(f"{path}:{node.lineno} allow_pickle")
    return found


@pytest.mark.parametrize(
    "source",
    [
        "import pickle",
        "import joblib as jl",
        "from dill import loads",
        "from torch import load",
        "import torch\ntorch.load('w.pt', weights_only=True)",
        "import torch\nmodel = torch.jit.load('m.pt')",
        "from torch.serialization import load",
        "import numpy as np\nnp.load('a.npy', allow_pickle=True)",
        "import numpy as np\nnp.load('a.npy', allow_pickle=flag)",
    ],
)
def test_the_scan_finds_each_way_to_unpickle(tmp_path, source):
    (tmp_path / "bad.py").write_text(source + "\n")
    assert unpickling_code(tmp_path / "bad.py")


def test_the_scan_lets_safe_loading_pass(tmp_path):
    safe = "import numpy as np\nnp.load('a.npz', allow_pickle=False)\nimport safetensors\n"
    (tmp_path / "good.py").write_text(safe)
    assert unpickling_code(tmp_path / "good.py") == []


def test_no_code_path_in_model_or_app_unpickles():
    root = Path(__file__).resolve().parents[2]
    sources = sorted((root / "model").rglob("*.py")) + sorted((root / "app").rglob("*.py"))
    assert len(sources) > 20
    assert [line for path in sources for line in unpickling_code(path)] == []


def test_every_shipped_model_loads_and_runs_with_unpickling_disabled(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("something tried to unpickle")

    class NoUnpickler:
        def __init__(self, *args, **kwargs) -> None:
            refuse()

    monkeypatch.setattr(pickle, "Unpickler", NoUnpickler)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(torch.serialization, "load", refuse)
    _loaded.cache_clear()  # read here, not from an earlier test's load
    zoo = load_zoo(Settings(torch_threads=1))
    assert zoo.ids() == [
        "pronounce", "pronounce-untrained", "minilm", "minilm-untrained", "smollm2",
        "smollm2-untrained",
    ]  # fmt: skip
    for entry in zoo.models.values():
        result = entry.runner.run("The cat sat.")
        assert result.capture and result.source_tokens
    assert zoo.models["pronounce"].runner.run("猫追狗").output_tokens == [
        "mao1",
        "zhui1",
        "gou3",
    ]
