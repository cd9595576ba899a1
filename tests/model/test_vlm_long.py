"""A picture and a text past 512 tokens, read by the long path (model/hf/long.py with the
picture's pixels): a tiny seeded Qwen2-VL whose processor reads a 208 x 168 picture as 546
tokens. No (T, T) matrix is kept; every head's weights, recomputed from its kept queries
and keys, are transformers' own eager attention on the processor's input, the predictions
its logits', and a continuation read with the picture too. Without a capture budget the
same picture is refused, saying why."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers as T
from PIL import Image

from attnviz.model.long import LongCapture
from attnviz.model.long.reading import LONG_FROM, PromptTooLong
from attnviz.model.pretrained.sources import load_origin
from harness.checkpoints import saved_qwen2_vl

SIZE = (208, 168)  # 26 x 21 tokens of 8 pixels (4-pixel patches merged 2 x 2)
TEXT = "What is in the picture?"


@pytest.fixture(scope="module")
def read(tmp_path_factory):
    folder = saved_qwen2_vl(
        tmp_path_factory.mktemp("qwen2-vl-long"), patch_size=4, most_tokens=1024, context=2048
    )
    short = load_origin(folder)[0]
    runner = short.read_long(1 << 30)
    rng = np.random.default_rng(5)
    picture = Image.fromarray(rng.integers(0, 256, (SIZE[1], SIZE[0], 3), dtype=np.uint8))
    model = T.AutoModelForImageTextToText.from_pretrained(
        folder, attn_implementation="eager"
    ).eval()
    return short, runner, picture, model


def eager(model, prompt, ids):
    """transformers' eager forward over `ids`: the prompt's, and what follows as text (its
    token types, text's 0, padded over it)."""
    inputs = dict(prompt.inputs)
    types = inputs.get("mm_token_type_ids")
    if types is not None:
        grown = (0, len(ids) - len(prompt.ids))
        inputs["mm_token_type_ids"] = torch.nn.functional.pad(types, grown)
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), **inputs, output_attentions=True)


def test_a_long_picture_keeps_no_square_matrix_and_its_heads_are_transformers_eager(read):
    _, runner, picture, model = read
    assert runner.reads_long_prompts
    prompt = runner.read_prompt(picture, TEXT)
    patches = [p for p in prompt.positions if p.kind == "patch"]
    assert len(patches) == 26 * 21 and len(prompt.ids) > LONG_FROM
    result = runner.read_picture(picture, "0" * 64, TEXT)
    capture = result.capture
    assert isinstance(capture, LongCapture)
    n = len(prompt.ids)
    assert max(t.numel() for name in capture for t in capture.all(name)) < n * n / 4
    expected = eager(model, prompt, prompt.ids)
    vocabulary = runner.target_vocabulary()
    assert result.predicted_tokens == [vocabulary[int(i)] for i in expected.logits[0].argmax(-1)]
    for layer, weights in enumerate(expected.attentions):
        heads = capture.attention[f"decoder.{layer}.self_attn"]
        for head in range(weights.size(1)):
            got, _, _ = heads.window("weights", head, (0, n), (0, n))
            assert float((got - weights[0, head]).abs().max()) <= 1e-5, (layer, head)
    # each position is still named by what it is: the patches by their place
    assert result.image is not None and result.image.positions == prompt.positions
    assert result.source_tokens[prompt.ids.index(runner.image_token_id)] == "▦ 0,0"


def test_a_long_pictures_continuation_is_transformers_and_read_with_it(read):
    _, runner, picture, model = read
    prompt = runner.read_prompt(picture, TEXT)
    ours = [s.token_id for s in runner.generate(prompt.ids, 4, stop=False, inputs=prompt.inputs)]
    with torch.no_grad():
        theirs = model.generate(input_ids=torch.tensor([prompt.ids]), **prompt.inputs,
                                max_new_tokens=4, do_sample=False, eos_token_id=None,
                                pad_token_id=0)  # fmt: skip
    assert ours == theirs[0, len(prompt.ids) :].tolist()
    result = runner.read_picture(picture, "0" * 64, TEXT, continuation=ours)
    assert isinstance(result.capture, LongCapture)
    ids = [*prompt.ids, *ours]
    expected = eager(model, prompt, ids)
    n = len(ids)
    last = expected.attentions[-1]
    heads = result.capture.attention[f"decoder.{len(expected.attentions) - 1}.self_attn"]
    for head in range(last.size(1)):  # the generated tokens' rows
        got, _, _ = heads.window("weights", head, (len(prompt.ids), n), (0, n))
        assert float((got - last[0, head, len(prompt.ids) :]).abs().max()) <= 1e-5, head


def test_without_a_capture_budget_a_long_picture_is_refused_saying_why(read):
    short, _, picture, _ = read
    assert not short.reads_long_prompts
    with pytest.raises(PromptTooLong, match=r"reads at most 512 of this model: no capture budget"):
        short.read_picture(picture, "0" * 64, TEXT)


def test_without_a_budget_a_short_pictures_continuation_past_512_is_read_whole(read):
    """As a text's: a runner that keeps 512 reads a continuation past them in one pass that
    keeps whole matrices (the page asks for the run of what it generated)."""
    short, _, _, model = read
    small = Image.fromarray(np.full((16, 16, 3), 200, dtype=np.uint8))
    prompt = short.read_prompt(small, TEXT)
    continuation = [7 + i % 50 for i in range(LONG_FROM + 8 - len(prompt.ids))]
    result = short.read_picture(small, "0" * 64, TEXT, continuation=continuation)
    assert not isinstance(result.capture, LongCapture)
    ids = [*prompt.ids, *continuation]
    expected = eager(model, prompt, ids).attentions[0][0]
    got = result.capture["decoder.0.self_attn.hook_weights"][0]
    assert got.shape == expected.shape == (expected.size(0), len(ids), len(ids))
    assert float((got - expected).abs().max()) <= 1e-5
