"""The names of the earlier release are gone, not read as the new ones: each is refused
plainly (an unknown field, hook or file; a missing attribute). And what model/ does not
implement is refused."""

from __future__ import annotations

import json
import shutil
import warnings

import pytest
import torch

from attnviz.model.checkpoints import CheckpointError
from attnviz.model.config import ModelConfig
from attnviz.model.layers import FeedForward
from attnviz.model.pretrained import BertRunner
from attnviz.model.pronounce import pronouncer
from attnviz.model.pronounce.pronouncer import SHIPPED, Pronouncer

from .conftest import build

OLD = "decoder.1.cross_attn.hook_pattern"  # now decoder.1.cross_attn.hook_weights


def test_the_old_vocabulary_size_names_are_unknown_fields():
    with pytest.raises(TypeError, match="src_vocab_size"):
        ModelConfig(src_vocab_size=11)
    with pytest.raises(ValueError, match=r"unknown fields \['src_vocab_size', 'tgt_vocab_size'\]"):
        ModelConfig.from_dict({"src_vocab_size": 11, "tgt_vocab_size": 12})
    config = ModelConfig(source_vocab_size=11, target_vocab_size=12)
    with pytest.raises(AttributeError, match="tgt_vocab_size"):
        _ = config.tgt_vocab_size
    assert ModelConfig.from_dict(config.to_dict()) == config


def test_a_checkpoint_with_the_old_names_is_refused_saying_what_is_missing(tmp_path):
    old = tmp_path / "ckpt"
    shutil.copytree(SHIPPED, old)
    (old / "source_vocab.json").rename(old / "src_vocab.json")
    with pytest.raises(CheckpointError, match=r"has no source_vocab\.json"):
        Pronouncer.load(old)
    (old / "src_vocab.json").rename(old / "source_vocab.json")
    config = json.loads((old / "config.json").read_text())
    config["src_vocab_size"] = config.pop("source_vocab_size")
    (old / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"bad config.json: .*unknown fields"):
        Pronouncer.load(old)


def test_the_old_hook_names_are_unknown():
    model = build()
    src, target = torch.randint(3, 40, (1, 6)), torch.randint(3, 40, (1, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no DeprecationWarning left on any path
        with pytest.raises(KeyError, match="unknown hook names"):
            model.run_with_capture(src, target, names_filter=OLD)
        with pytest.raises(KeyError, match="unknown hook names"):
            model.run_with_hooks(src, target, fwd_hooks=[(OLD, lambda t, _: t * 0)])
        _, capture = model.run_with_capture(src, target)
        assert OLD not in capture and OLD.replace("pattern", "weights") in capture
        with pytest.raises(KeyError):
            _ = capture[OLD]
        _, none = model.run_with_capture(src, target, names_filter=lambda n: "pattern" in n)
        assert len(none) == 0
    assert not hasattr(model, "run_with_cache")


def test_the_runners_old_names_are_gone():
    loaded = Pronouncer.load()
    result = loaded.run("猫追狗", capture=False)
    assert result.target_tokens == ["<bos>", "mao1", "zhui1", "gou3"]
    assert loaded.max_tokens == 128
    for name in ("transcribe", "max_source_tokens"):
        assert not hasattr(loaded, name)
    assert not hasattr(result, "decoder_tokens")
    assert not hasattr(pronouncer, "Transcription")


@pytest.mark.parametrize(
    "field, value, message",
    [("activation", "tanh", "activation must be one of"), ("norm", "batchnorm", "norm must be")],
)
def test_what_model_does_not_implement_is_refused_not_replaced(field, value, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**{field: value})
    with pytest.raises(ValueError, match="activation 'tanh' is not implemented"):
        FeedForward(8, 16, activation="tanh")  # never quietly another activation


def test_minilms_old_constructor_is_gone():
    with pytest.raises(TypeError):
        BertRunner(trained=False)  # the earlier MiniLM(directory, trained): BertRunner.load now
