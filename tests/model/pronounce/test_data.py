"""The generated training data: labels, determinism, and the held-out split."""

from __future__ import annotations

from attnviz.model.pronounce.data import ENGLISH_WORD, Generator, label, normalize
from attnviz.model.pronounce.tokenizers import SourceTokenizer, TargetTokenizer


def test_polyphonic_characters_are_labelled_by_context(lexicon):
    assert label("银行", lexicon)[0] == ("yin2", "hang2")
    assert label("行走", lexicon)[0] == ("xing2", "zou3")
    assert label("好的", lexicon)[0] == ("hao3", "de5")  # neutral tone as 5


def test_english_digits_punctuation_and_spaces(lexicon):
    target, index = label("hello world, 2024年！", lexicon)
    assert target == (
        "HH", "AH0", "L", "OW1", "|", "W", "ER1", "L", "D", ",", "|",
        "2", "0", "2", "4", "nian2", "！",
    )  # fmt: skip
    assert index == (0, 0, 0, 0, 5, 6, 6, 6, 6, 11, 12, 13, 14, 15, 16, 17, 18)


def test_characters_outside_the_vocabulary_become_unk(lexicon):
    assert label("猫🙂齉", lexicon)[0] == ("mao1", "<unk>", "<unk>")


def test_normalize_collapses_whitespace_and_folds_case():
    assert normalize("  The\tCat \n sat  ") == "the cat sat"


def test_batches_are_a_pure_function_of_seed_and_step(lexicon):
    a, b = Generator(lexicon, seed=1), Generator(lexicon, seed=1)
    assert a.batch(7, 16) == b.batch(7, 16)
    assert a.batch(7, 16) != a.batch(8, 16)
    assert Generator(lexicon, seed=2).batch(7, 16) != a.batch(7, 16)


def test_mix_and_lengths(lexicon):
    examples = Generator(lexicon, seed=0).batch(0, 400)
    kinds = {k: sum(e.category == k for e in examples) for k in ("zh", "en", "mixed")}
    assert 180 < kinds["zh"] < 300 and 90 < kinds["en"] < 190 and 15 < kinds["mixed"] < 70
    assert all(1 <= len(e.text) <= 40 for e in examples)
    assert all(len(e.target) == len(e.source_index) for e in examples)


def test_held_out_sentences_are_never_generated_for_training(lexicon):
    first = Generator(lexicon, seed=3).batch(0, 1)[0].text
    again = Generator(lexicon, seed=3, held_out=frozenset([first])).batch(0, 1)[0].text
    assert again != first


def test_held_out_english_words_never_appear_in_training(lexicon, split):
    test_words = set(split["en_test_words"])
    assert len(test_words) > 5000 and not test_words & set(split["en_train_words"])
    gen = Generator(lexicon, seed=0)
    seen = {
        w
        for step in range(20)
        for e in gen.batch(step, 64)
        if e.category != "zh"
        for w in ENGLISH_WORD.findall(e.text)
    }
    assert len(seen) > 500 and not seen & test_words


def test_source_tokenizer_survives_hostile_text(lexicon):
    tok = SourceTokenizer.build(lexicon, max_tokens=20)
    encoded = tok.encode("A\x00b👩‍👩‍👧 c\u202e" + "长" * 50)
    assert encoded.truncated and encoded.original_length == 61 and len(encoded.ids) == 20
    assert encoded.tokens[:8] == ["a", "<unk>", "b", "<unk>", "<unk>", "<unk>", "<unk>", "<unk>"]
    assert encoded.tokens[-1] == "长"


def test_target_vocabulary_covers_every_label(lexicon):
    target_tok = TargetTokenizer.build(lexicon)
    assert (target_tok.pad_id, target_tok.bos_id, target_tok.eos_id) == (0, 1, 2)
    for e in Generator(lexicon, seed=0).batch(1, 256):
        assert target_tok.encode(e.target).count(target_tok.unk_id) == e.target.count("<unk>"), (
            e.text
        )
    assert target_tok.decode([1, *target_tok.encode(["ni3", "hao3"]), 2, 5, 5]) == ["ni3", "hao3"]
