"""Long inputs (model/long/): a run that keeps queries and keys, not N x N matrices, and
recomputes any window of a head, exact or pooled, against transformers' eager attention
of tiny random models (2,048 tokens; `LONG_TOKENS` sets it) and a float64 recomputation
from the queries and keys transformers' own projections make."""

from __future__ import annotations

import itertools
import math
import os

import pytest
import torch

from attnviz.model.long import LongCapture, MaskRule, edges
from attnviz.model.masks import decoder_mask, padding_mask
from attnviz.model.methods.analysis import head_metrics
from attnviz.model.pretrained.hf import load_folder
from harness.checkpoints import VOCAB, saved, tiny

N = int(os.environ.get("LONG_TOKENS", "2048"))  # `make test-long`: 8,192


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    theirs = tiny("llama", max_position_embeddings=max(4096, N), num_attention_heads=4)
    ours = load_folder(saved(tmp_path_factory.mktemp("long"), theirs))
    ids = torch.randint(0, VOCAB, (N,), generator=torch.Generator().manual_seed(7)).tolist()
    with torch.no_grad():
        expected = theirs(torch.tensor([ids]), output_attentions=True)
    return theirs, ours, ids, expected


def test_a_long_run_keeps_no_square_matrix_and_predicts_as_transformers(llama):
    _theirs, ours, ids, expected = llama
    result = ours.result("", ids, [])
    capture = result.capture
    assert isinstance(capture, LongCapture)
    assert not any(n.endswith(("hook_weights", "hook_scores", "hook_mask")) for n in capture)
    largest = max(t.numel() for n in capture for t in capture.all(n))
    assert largest < N * N / 4  # linear in N: no (N, N) tensor anywhere
    with pytest.raises(KeyError, match="by windows"):
        capture["decoder.0.self_attn.hook_weights"]
    assert (
        result.predicted_tokens[-1]
        == ours.target_vocabulary()[int(expected.logits[0, -1].argmax())]
    )
    assert [ours.target_vocabulary()[int(i)] for i in expected.logits[0].argmax(-1)] == (
        result.predicted_tokens
    )


def test_every_heads_exact_window_is_transformers_eager_attention(llama):
    _theirs, ours, ids, expected = llama
    capture = ours.result("", ids, []).capture
    for layer, weights in enumerate(expected.attentions):
        heads = capture.attention[f"decoder.{layer}.self_attn"]
        for head in range(weights.size(1)):
            got, rows, columns = heads.window("weights", head, (0, N), (0, N))
            assert rows == list(range(N + 1)) and columns == list(range(N + 1))
            assert float((got - weights[0, head]).abs().max()) <= 1e-5, (layer, head)
        # a window anywhere, cut mid-row
        got, _, _ = heads.window("weights", 1, (1500, 1756), (1000, 1900))
        assert float((got - weights[0, 1, 1500:1756, 1000:1900]).abs().max()) <= 1e-5


def pooled_reference(matrix: torch.Tensor, rows: list[int], cols: list[int], reduce: str):
    out = torch.empty(len(rows) - 1, len(cols) - 1, dtype=torch.float64)
    for i, (a, b) in enumerate(itertools.pairwise(rows)):
        for j, (c, d) in enumerate(itertools.pairwise(cols)):
            cell = matrix[a:b, c:d].double()
            out[i, j] = cell.max() if reduce == "max" else cell.mean()
    return out


@pytest.mark.parametrize("reduce", ["max", "mean"])
def test_pooled_cells_are_the_max_or_mean_of_the_exact_weights_they_cover(llama, reduce):
    _theirs, ours, ids, expected = llama
    heads = ours.result("", ids, []).capture.attention["decoder.1.self_attn"]
    exact = expected.attentions[1][0, 2]
    got, rows, cols = heads.window("weights", 2, (0, N), (0, N), pool=100, reduce=reduce)
    assert rows == edges(0, N, 100) and len(rows) - 1 <= 100 and rows[1] - rows[0] == -(-N // 100)
    assert got.shape == (len(rows) - 1, len(cols) - 1)
    assert float((got.double() - pooled_reference(exact, rows, cols, reduce)).abs().max()) <= 1e-5
    # a window of it, pooled to cells of uneven count
    got, rows, cols = heads.window("weights", 2, (700, 1901), (33, 1200), pool=37, reduce=reduce)
    assert rows[0] == 700 and rows[-1] == 1901 and cols[0] == 33 and cols[-1] == 1200
    reference = pooled_reference(exact, rows, cols, reduce)
    assert float((got.double() - reference).abs().max()) <= 1e-5
    if reduce == "mean":  # a row's cells times their widths: the row's mass there
        row, _, cols = heads.window("weights", 2, (N - 1, N), (0, N), pool=64, reduce="mean")
        widths = torch.tensor([b - a for a, b in itertools.pairwise(cols)], dtype=torch.float32)
        assert abs(float((row[0] * widths).sum()) - 1.0) <= 1e-4


def transformers_qk(theirs, ids: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, the queries and keys after RoPE (H, T, d) as transformers' own modules
    make them: its projections read by forward hooks, its rotary embedding applied."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    config = theirs.config
    d = config.hidden_size // config.num_attention_heads
    seen: dict[str, torch.Tensor] = {}
    hooks = []
    for i, layer in enumerate(theirs.model.layers):
        for part in ("q_proj", "k_proj"):
            module = getattr(layer.self_attn, part)
            hooks.append(module.register_forward_hook(
                lambda m, args, out, key=f"{i}.{part}": seen.__setitem__(key, out)))  # fmt: skip
    batch = torch.tensor([ids])
    with torch.no_grad():
        theirs(batch)
        positions = torch.arange(len(ids))[None]
        cos, sin = theirs.model.rotary_emb(theirs.model.embed_tokens(batch), positions)
    for hook in hooks:
        hook.remove()
    out = []
    for i in range(config.num_hidden_layers):
        q = seen[f"{i}.q_proj"].view(1, len(ids), -1, d).transpose(1, 2)
        k = seen[f"{i}.k_proj"].view(1, len(ids), -1, d).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        out.append((q[0], k[0]))
    return out


def test_sampled_rows_equal_a_float64_recomputation_from_transformers_projections(llama):
    theirs, ours, ids, _ = llama
    capture = ours.result("", ids, []).capture
    group = theirs.config.num_attention_heads // theirs.config.num_key_value_heads
    for layer, (q, k) in enumerate(transformers_qk(theirs, ids)):
        heads = capture.attention[f"decoder.{layer}.self_attn"]
        for head in (0, 3):
            for row in (0, 1, 777, N - 1):
                scores = q[head, row].double() @ k[head // group].double().T / math.sqrt(q.size(-1))
                expect_scores = scores[: row + 1]
                weights = torch.softmax(expect_scores, dim=0)
                got_w, _, _ = heads.window("weights", head, (row, row + 1), (0, N))
                got_s, _, _ = heads.window("scores", head, (row, row + 1), (0, N))
                assert float((got_w[0, : row + 1].double() - weights).abs().max()) <= 1e-5
                assert not got_w[0, row + 1 :].any()  # the future: exactly 0
                assert float((got_s[0].double() - scores).abs().max()) <= 1e-4
                mask, _, _ = heads.window("mask", head, (row, row + 1), (0, N))
                assert mask[0].tolist() == [1.0] * (row + 1) + [0.0] * (N - row - 1)


def test_a_sliding_windows_heads_are_mistrals(tmp_path):
    theirs = tiny("mistral", sliding_window=64, max_position_embeddings=2048)
    ours = load_folder(saved(tmp_path, theirs))
    ids = torch.randint(0, VOCAB, (700,), generator=torch.Generator().manual_seed(3)).tolist()
    with torch.no_grad():
        expected = theirs(torch.tensor([ids]), output_attentions=True)
    capture = ours.result("", ids, []).capture
    assert isinstance(capture, LongCapture)
    for layer, weights in enumerate(expected.attentions):
        heads = capture.attention[f"decoder.{layer}.self_attn"]
        for head in range(weights.size(1)):
            got, _, _ = heads.window("weights", head, (0, 700), (0, 700))
            assert float((got - weights[0, head]).abs().max()) <= 1e-5, (layer, head)
        pooled, rows, cols = heads.window("weights", 0, (0, 700), (0, 700), pool=50)
        reference = pooled_reference(weights[0, 0], rows, cols, "max")
        assert float((pooled.double() - reference).abs().max()) <= 1e-5


def test_streamed_head_metrics_equal_those_of_the_whole_matrix(llama):
    _theirs, ours, ids, expected = llama
    from attnviz.model.long import HeadStats

    heads = ours.result("", ids, []).capture.attention["decoder.0.self_attn"]
    special = [0, 5, 1999]
    reference = head_metrics(expected.attentions[0][0], True, special)
    for head in range(4):
        stats = HeadStats()
        heads.head_stats(head, True, special, stats)
        means = stats.means()
        for name in ("entropy", "max_weight", "first", "special", "distance", "previous"):
            # (distance is in positions: thousands at 8,192 tokens)
            tolerance = 1e-4 * max(1.0, abs(float(reference[name][head])))
            assert abs(means[name] - reference[name][head]) <= tolerance, (name, head)
        # the same rows in parts, one after another (the server's turns): the same sums
        parts = HeadStats()
        for rows in ((0, N // 3), (N // 3, N // 3 + 1), (N // 3 + 1, N)):
            heads.head_stats(head, True, special, parts, rows)
        assert parts.rows == N and parts.means() == pytest.approx(means, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("window", [None, 5])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("queries", [9, 4, 1])
def test_a_mask_rule_is_the_mask_the_model_builds(window, padded, queries):
    ids = torch.tensor([[4, 5, 6, 7, 0, 8, 9, 10, 0]])
    valid = (ids[0] != 0) if padded else None
    rule = MaskRule(queries, 9, causal=True, window=window, valid=valid)
    built = decoder_mask(ids if padded else ids + 1, 0, q_len=queries, window=window)[0, 0]
    assert torch.equal(rule.dense(), built)
    for r0, r1 in ((0, queries), (queries - 1, queries)):
        lo, hi = rule.seen(r0, r1)
        assert not built[r0:r1, :lo].any() and not built[r0:r1, hi:].any()
    keys = MaskRule(9, 9, valid=ids[0] != 0).dense()
    assert torch.equal(keys, padding_mask(ids)[0, 0].expand(9, 9))
