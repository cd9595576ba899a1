"""The contribution graph (model/methods/graph.py) against an independent float64 implementation of
the LLM Transparency Tool's `get_attention_contributions` and graph building
(harness/references/contributions.py `llm_tt`, `llm_tt_graph`; fed by transformers' own
modules, without the tool's two known slips: the value bias counted twice, the feed-forward
rows renormalized over every token), on tiny GPT-2 and Llama decoders."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from attnviz.model.methods.graph import graph, read_shares
from attnviz.model.methods.lens import read_stream
from harness.checkpoints import PROMPTS, read_back, saved, tiny
from harness.references.contributions import llm_tt, llm_tt_graph


@pytest.mark.parametrize("backend", ["ours", "transformers"])
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_shares_and_edges_equal_the_reference(tmp_path, kind, backend):
    theirs_model = tiny(kind)
    folder = saved(tmp_path, theirs_model)
    runner = read_back(folder, backend)
    ids, _ = runner.tokenize(PROMPTS[0] + " jumps over the lazy dog")
    batch = torch.tensor([ids])
    _, capture = runner.model.run_with_capture(batch)
    stream = read_stream(runner.model, (batch,))
    shares = read_shares(runner.model, stream, capture, runner.attention[0])
    theirs = llm_tt(theirs_model, ids)
    assert theirs["residual_mid"] <= 1e-12  # the reference's parts sum to its whole
    for layer in range(len(shares.attention)):
        assert (shares.attention[layer] - theirs["attn"][layer]).abs().max() <= 1e-5
        assert (shares.residual[layer] - theirs["attn_resid"][layer]).abs().max() <= 1e-5
        assert (shares.feed_forward[layer] - theirs["ffn"][layer]).abs().max() <= 1e-5
        assert (shares.kept[layer] - theirs["ffn_resid"][layer]).abs().max() <= 1e-5
        rows = shares.attention[layer].sum((1, 2)) + shares.residual[layer]
        assert (rows - 1).abs().max() <= 1e-12
    for position in (len(ids) - 1, 5):
        for threshold in (0.01, 0.04, 0.1):
            ours = {(e.source, e.target): e for e in graph(shares, position, threshold)}
            expected = {(e["source"], e["target"]): e for e in
                        llm_tt_graph(theirs, position, threshold)}  # fmt: skip
            assert ours.keys() == expected.keys(), (position, threshold)
            for key, edge in ours.items():
                assert abs(edge.weight - expected[key]["weight"]) <= 1e-5
                if edge.heads is not None:
                    apart = torch.tensor(edge.heads) - torch.tensor(expected[key]["heads"])
                    assert apart.abs().max() <= 1e-5
