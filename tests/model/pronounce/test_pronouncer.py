"""The shipped checkpoint: it loads, reads text aloud, and its cross-attention aligns."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch

from attnviz.model.checkpoints import CheckpointError
from attnviz.model.pronounce.data import label
from attnviz.model.pronounce.evaluate import alignment_by_head, error_rate, is_syllable
from attnviz.model.pronounce.pronouncer import SHIPPED, Pronouncer, pieces


def test_shipped_files_are_small_and_safetensors_only():
    names = sorted(p.name for p in SHIPPED.iterdir())
    assert {"config.json", "model.safetensors", "source_vocab.json", "target_vocab.json"} <= set(
        names
    )
    assert "MODEL_CARD.md" in names and "metrics.json" in names
    assert not [n for n in names if n.endswith((".pt", ".pth", ".bin", ".pkl", ".ckpt"))]
    assert sum(p.stat().st_size for p in SHIPPED.iterdir()) <= 20 * 1024 * 1024


@pytest.mark.parametrize(
    "text, expected",
    [
        ("银行", ["yin2", "hang2"]),
        ("行走", ["xing2", "zou3"]),
        ("猫追狗", ["mao1", "zhui1", "gou3"]),
        ("狗追猫", ["gou3", "zhui1", "mao1"]),
    ],
)
def test_reads_chinese_in_context(shipped, text, expected):
    assert shipped.run(text, capture=False).output_tokens == expected


def test_reads_the_seed_sentence_like_pypinyin(shipped, lexicon):
    text = "苹果公司发布了新款手机，它采用了最新的芯片"
    result = shipped.run(text, capture=False)
    assert result.output_tokens == list(label(text, lexicon)[0])


def test_capture_covers_every_source_and_decoder_token(shipped):
    result = shipped.run("我爱 python 3！")
    assert result.source_tokens == list("我爱␣python␣3！")  # the space token shown as ␣
    assert result.source_raw == list("我爱 python 3！")  # and as the vocabulary spells it
    assert result.target_tokens[0] == "<bos>"
    assert result.target_tokens[1:] == result.output_tokens
    n_src, n_dec = len(result.source_tokens), len(result.target_tokens)
    cap = result.capture
    assert cap["decoder.2.cross_attn.hook_weights"].shape == (1, 8, n_dec, n_src)
    assert cap["encoder.0.self_attn.hook_weights"].shape == (1, 8, n_src, n_src)
    causal = torch.ones(n_dec, n_dec, dtype=torch.bool).tril()
    assert torch.equal(cap["decoder.0.self_attn.hook_mask"][0, 0], causal)
    assert cap["encoder.hook_pos"].shape == (n_src, 256)


def test_hostile_and_long_text_is_handled(shipped):
    result = shipped.run("🙂\x00\u202e" + "长" * 400, capture=False)
    assert result.truncated and result.source_length == 403
    assert len(result.source_tokens) == shipped.max_tokens == 128
    assert result.source_tokens[:3] == ["<unk>", "<unk>", "<unk>"]
    with pytest.raises(ValueError, match="empty"):
        shipped.run(" \n\t ")


def test_the_untrained_twin_is_fixed_and_different():
    a, b = Pronouncer.untrained(), Pronouncer.untrained()
    trained = Pronouncer.load()
    assert a.model.config == trained.model.config
    for (name, p), q in zip(
        a.model.state_dict().items(), b.model.state_dict().values(), strict=True
    ):
        assert torch.equal(p, q), name
    assert not torch.equal(a.model.output.weight, trained.model.output.weight)


def test_vocabularies_that_do_not_fit_the_weights_are_refused(tmp_path):
    shutil.copytree(SHIPPED, tmp_path / "ckpt")
    vocab_path = tmp_path / "ckpt" / "target_vocab.json"
    vocab_path.write_text(json.dumps(json.loads(vocab_path.read_text())[:-1]))
    with pytest.raises(CheckpointError, match="target_vocab_size 2213 != 2212 target tokens"):
        Pronouncer.load(tmp_path / "ckpt")


def test_the_card_alignment_head_aligns_on_held_out_sentences(shipped, lexicon, split):
    head_name = shipped.card["alignment_head"]  # "decoder.{layer}.cross_attn head {h}"
    layer, head = map(int, re.fullmatch(r"decoder\.(\d)\.cross_attn head (\d)", head_name).groups())
    scores = alignment_by_head(
        shipped.model, shipped.source, shipped.target, lexicon, split["zh"][:80]
    )
    assert scores[layer, head] >= 0.85


def test_chinese_accuracy_on_a_held_out_sample(shipped, lexicon, split):
    pairs = []
    for text in split["zh"][:60]:
        predicted = shipped.run(text, capture=False).output_tokens
        reference = label(text, lexicon)[0]
        pairs.append(
            ([t for t in predicted if is_syllable(t)], [t for t in reference if is_syllable(t)])
        )
    assert 1 - error_rate(pairs) >= 0.95


def test_text_longer_than_training_is_read_piece_by_piece(shipped, lexicon, split):
    text = "，".join(split["zh"][100:106])[:128]
    result = shipped.run(text)
    reference = [t for t in label(text, lexicon)[0] if is_syllable(t)]
    predicted = [t for t in result.output_tokens if is_syllable(t)]
    assert len(reference) > 60 and 1 - error_rate([(predicted, reference)]) >= 0.95
    n_dec, n_src = len(result.target_tokens), len(result.source_tokens)
    assert result.capture["decoder.2.cross_attn.hook_weights"].shape == (1, 8, n_dec, n_src)


def test_pieces_cut_after_spaces_and_punctuation():
    text = "aaaa bbbb，cccc dddd"
    assert pieces(text, limit=8) == [(0, 5), (5, 10), (10, 15), (15, 19)]
    assert pieces("x" * 20, limit=8) == [(0, 8), (8, 16), (16, 20)]
    assert pieces("short", limit=8) == [(0, 5)]


LONG_SENTENCES = [
    "The quick brown fox jumps over the lazy dog because it was tired.",
    "银行行长在行人道上行走，他说这一行的工作很辛苦，但是他很喜欢自己的工作，每天都很开心。",
]


@pytest.mark.parametrize("text", LONG_SENTENCES)
def test_a_long_texts_rows_predict_what_each_piece_decoded_alone(shipped, text):
    """Each row of the captured pass predicts the token the decoding made at that step:
    the reference is each piece decoded alone by the model's plain greedy decoding (one
    piece, no other in its batch), and its own plain forward pass over that piece."""
    result = shipped.run(text)
    spans = pieces(result.text[: len(result.source_ids)])
    assert len(spans) > 1 and len(result.pieces) == len(spans)
    vocab, cap = shipped.target.vocab.tokens, result.captured
    expected, row, src_at = [], 0, 0
    for start, end in spans:
        alone = torch.tensor([result.source_ids[start:end]])
        made = shipped.model.greedy_decode(alone, max_new_tokens=3 * (end - start) + 10)
        ids = made.tokens[0].tolist()
        ids = ids[: ids.index(shipped.target.eos_id) + 1]  # <bos> ... <eos>
        expected += [vocab[i] for i in ids[1:]]
        fed = torch.tensor([ids[:-1]])
        # this piece's block of the one captured pass is its own plain pass's weights
        _, plain = shipped.model.run_with_capture(
            alone, fed, names_filter="decoder.2.cross_attn.hook_weights"
        )
        n = fed.size(1)
        block = cap["decoder.2.cross_attn.hook_weights"][0, :, row : row + n]
        torch.testing.assert_close(
            block[..., src_at : src_at + end - start], plain["decoder.2.cross_attn.hook_weights"][0]
        )
        outside = torch.cat([block[..., :src_at], block[..., src_at + end - start :]], -1)
        assert not outside.any()  # no weight on another piece's characters
        assert result.target_tokens[row] == "<bos>"
        row, src_at = row + n, src_at + end - start
    assert result.predicted_tokens == expected
    assert result.output_tokens == [t for t in expected if t != "<eos>"]
    assert not result.truncated and all(piece.ended for piece in result.pieces)


def test_the_untrained_twins_output_stops_at_each_pieces_limit_not_its_input():
    twin = Pronouncer.untrained()
    result = twin.run("a" * 100)  # pieces of 40, 40 and 20: each babbles to 3 × n + 10 tokens
    assert not result.truncated and len(result.source_tokens) == 100
    assert [len(p.target_ids) for p in result.pieces] == [131, 131, 71]
    assert not any(piece.ended for piece in result.pieces)
    assert len(result.target_tokens) == 333 and result.target_tokens.count("<bos>") == 3
    # the shorter piece stops where it would have alone: its own limit, not the batch's
    alone = twin.model.greedy_decode(torch.tensor([twin.tokenize("a" * 20)[0]]), max_new_tokens=70)
    assert result.pieces[2].target_ids == alone.tokens[0].tolist()
