"""The logit lens and direct logit attribution (model/methods/lens.py) against TransformerLens 4.3,
run in its own environment (`make ref-env`: .venv/ref) by harness/references/tl_lens.py on the
same checkpoint: a GPT-2-shaped (LayerNorm, learned positions, biases) and a Llama-shaped
(RMSNorm, grouped-query attention) tiny random model, their norms' gains randomized so
that the final norm's weight counts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from attnviz.model.methods.lens import attribute, lens_logits, read_stream
from harness.checkpoints import PROMPTS, read_back, saved, tiny
from harness.references import PYTHON

ROOT = Path(__file__).resolve().parents[2]


def with_gains(kind: str):
    """A tiny model whose norms' gains (and LayerNorm biases) are random, not ones."""
    model = tiny(kind)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ("norm" in name or "ln_" in name) and name.endswith("weight"):
                p.uniform_(0.5, 1.5)
    return model


def theirs(folder: Path, ids: list[int], tmp_path: Path) -> dict:
    if not PYTHON.exists():
        pytest.fail("the TransformerLens environment is missing: `make ref-env` makes it")
    given = tmp_path / "in.json"
    given.write_text(json.dumps({"model": str(folder), "ids": ids, "position": -1, "tokens": None}))
    out = tmp_path / "out.npz"
    done = subprocess.run(
        [str(PYTHON), str(ROOT / "harness/references/tl_lens.py"), str(given), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return dict(np.load(out))


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_lens_and_dla_equal_transformerlens(tmp_path, kind):
    """On both backends: our model code, and transformers' code read by its probe."""
    folder = saved(tmp_path, with_gains(kind))
    runners = [read_back(folder, backend) for backend in ("ours", "transformers")]
    ids, _ = runners[0].tokenize(PROMPTS[0] + " jumps over the lazy dog")
    tl = theirs(folder, ids, tmp_path)
    for runner in runners:
        check(runner, ids, tl)


def check(runner, ids: list[int], tl: dict) -> None:
    batch = torch.tensor([ids])
    stream = read_stream(runner.model, (batch,))
    depths = len(stream.pre) + 1
    assert tl["lens_logits"].shape[0] == depths
    for depth in range(depths):  # the residual through the final norm, recomputed per depth
        ours = lens_logits(stream, depth).double().numpy()
        assert np.abs(ours - tl["lens_logits"][depth]).max() <= 1e-4, depth
    _, capture = runner.model.run_with_capture(batch)
    a, b, position = int(tl["a"]), int(tl["b"]), int(tl["position"])
    made = attribute(runner.model, stream, capture, runner.attention[0], position, a, b)
    assert abs(made.logit_diff - float(tl["logit_diff"])) <= 1e-4
    # each head's output with its value bias in (TransformerLens's unfolded heads)
    assert np.abs(np.array(made.heads) - tl["head_dla_unfolded"]).max() <= 1e-4
    assert np.abs(np.array(made.feed_forward) - tl["mlp_dla"]).max() <= 1e-4
    assert np.abs(np.array(made.attention_bias) - tl["attn_bias_dla_unfolded"]).max() <= 1e-4
    assert abs(made.embeddings - float(tl["embed_dla"])) <= 1e-4
    assert abs(made.biases - float(tl["final_bias_dla"])) <= 1e-4
    # the decomposition: every term sums to the logit difference
    assert abs(made.total - made.logit_diff) <= 1e-4


def test_a_pre_hook_half_filed_by_torch_is_called_without_kwargs_safely():
    """torch files a `with_kwargs` pre-hook in two dicts one after the other; a pass run by
    another thread between the two calls the hook as hook(module, args). Caught in the
    threads test below about one run in four before (TypeError: missing 'kwargs')."""
    from attnviz.model.hooks import Recorder

    layer = torch.nn.Linear(3, 3)
    seen: list[torch.Tensor] = []
    with Recorder() as rec:
        rec.pre(layer, seen.append)
        (hook_id,) = layer._forward_pre_hooks
        del layer._forward_pre_hooks_with_kwargs[hook_id]  # the state between the two
        layer(torch.ones(1, 3))  # this pass is the recorder's own
    assert [t.shape for t in seen] == [torch.Size([1, 3])]


def test_two_threads_reading_one_models_stream_each_get_their_own(tmp_path):
    """The stream's hooks sit on a model every request shares: a pass run at the same time
    by another thread (another request) is not recorded into this one's."""
    from concurrent.futures import ThreadPoolExecutor

    runner = read_back(saved(tmp_path, tiny("llama")))
    inputs = [torch.tensor([list(range(5, 5 + n))]) for n in (7, 19)]
    alone = [read_stream(runner.model, (batch,)).final for batch in inputs]
    with ThreadPoolExecutor(2) as pool:
        for _ in range(5):
            both = list(pool.map(lambda b: read_stream(runner.model, (b,)).final, inputs))
            for got, expected in zip(both, alone, strict=True):
                # (two passes at once split torch's threads otherwise: float32 sums round
                # apart by ~1e-7 of the largest, where another pass's tensors would differ
                # in shape or by far more)
                assert got.shape == expected.shape
                assert (got - expected).abs().max() <= 1e-5 * expected.abs().max()
