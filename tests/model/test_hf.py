"""The user's own Llama-family folder (model/pretrained/hf.py) on our model code, against
transformers' own classes: tiny random models saved with `save_pretrained`, with a
byte-level BPE tokenizer trained with `tokenizers` (harness/checkpoints.py); and each kind
of bad folder refused with its reason."""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from safetensors.torch import load_file, save_file

from attnviz.model.checkpoints import CheckpointError
from attnviz.model.pretrained.hf import load_folder
from attnviz.model.pretrained.sources import load_origin
from harness.checkpoints import (
    PROMPTS,
    VOCAB,
    saved,
    saved_masked_lm,
    tiny,
    tokenizer,
    wordpiece,
    write_gguf,
)


def matches(ours, theirs, prompt: str) -> list[int]:
    """Our runner's logits and every layer's per-head weights on a prompt equal those of
    the transformers model (1e-4, 1e-5); the prompt's ids."""
    ids, _ = ours.tokenize(prompt)
    batch = torch.tensor([ids])
    with torch.no_grad():
        expected = theirs(batch, output_attentions=True)
    logits, capture = ours.model.run_with_capture(batch)
    assert (logits - expected.logits).abs().max() <= 1e-4
    for i, weights in enumerate(expected.attentions):
        got = capture[f"decoder.{i}.self_attn.hook_weights"]
        assert (got - weights).abs().max() <= 1e-5, (prompt, i)
    return ids


@pytest.mark.parametrize(
    "kind, extra",
    [("llama", {}), ("llama", {"tie_word_embeddings": True, "rope_theta": 500000.0}),
     ("qwen2", {}), ("gpt2", {}), ("mistral", {"sliding_window": 5}),
     ("llama", {"rope_scaling": {"rope_type": "linear", "factor": 4.0}}),
     ("llama", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 64}})],
    ids=["llama", "llama-tied", "qwen2", "gpt2", "mistral", "llama-rope-linear",
         "llama-rope-llama3"],
)  # fmt: skip
def test_a_llama_family_folder_matches_transformers(tmp_path, kind, extra):
    theirs = tiny(kind, **extra)
    ours = load_folder(saved(tmp_path, theirs))
    for prompt in PROMPTS:
        ids = matches(ours, theirs, prompt)
        batch = torch.tensor([ids])
        # the same greedy continuation
        made = theirs.generate(batch, max_new_tokens=8, do_sample=False, eos_token_id=None,
                               pad_token_id=0)[0, len(ids):].tolist()  # fmt: skip
        steps = [s.token_id for s in ours.generate(ids, 8, stop=False)]
        assert steps == made


def test_bf16_and_sharded_weights_are_read_as_float32(tmp_path):
    theirs = tiny("llama").to(torch.bfloat16)
    folder = saved(tmp_path, theirs, max_shard_size="40KB")
    assert (folder / "model.safetensors.index.json").exists()
    ours = load_folder(folder)
    assert all(p.dtype == torch.float32 for p in ours.model.parameters())
    reference = theirs.float()
    ids, _ = ours.tokenize(PROMPTS[0])
    with torch.no_grad():
        assert (
            ours.model(torch.tensor([ids])) - reference(torch.tensor([ids])).logits
        ).abs().max() <= 1e-4


def broken(tmp_path, edit) -> object:
    folder = saved(tmp_path, tiny("llama"))
    edit(folder)
    return folder


def retensor(folder, change):
    tensors = load_file(str(folder / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def set_config(folder, **values):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **values}))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda f: (f / "config.json").unlink(), "has no config.json"),
        (lambda f: set_config(f, model_type="gpt_neox"), "'gpt_neox' does not map onto model/"),
        (lambda f: (f / "tokenizer.json").unlink(), "has no tokenizer.json"),
        (lambda f: retensor(f, lambda t: t.update({"extra.weight": torch.zeros(2)})),
         "extra.weight has no place in the model"),
        (lambda f: retensor(f, lambda t: t.pop("model.norm.weight")), "nothing fills"),
        (lambda f: retensor(f, lambda t: t.update(
            {"model.norm.weight": torch.zeros(3)})), "model.norm.weight (3,) != "),
        (lambda f: (f / "model.safetensors").write_bytes(
            (f / "model.safetensors").read_bytes()[:5000]), "cannot be read"),
        (lambda f: set_config(f, vocab_size=100), "beyond the embedding's 100 rows"),
        (lambda f: set_config(f, rope_scaling={"rope_type": "llama3", "factor": 8.0}),
         "its llama3 RoPE scaling lacks or misstates 'low_freq_factor'"),
        (lambda f: set_config(f, rope_scaling={"rope_type": "yarn", "factor": 8.0}),
         "RoPE scaling 'yarn' is not supported (default, linear and llama3 are)"),
        (lambda f: set_config(f, hidden_act="gelu"), "the activation 'gelu' is not supported"),
        (lambda f: (set_config(f, tie_word_embeddings=True), retensor(f, lambda t: t.update(
            {"lm_head.weight": t["model.embed_tokens.weight"] + 1}))),
         "ties the embeddings, but lm_head.weight differs from model.embed_tokens.weight"),
    ],
)  # fmt: skip
def test_a_bad_folder_is_refused_with_its_reason(tmp_path, edit, message):
    with pytest.raises(CheckpointError, match=None) as refused:
        load_folder(broken(tmp_path, edit))
    assert message in str(refused.value)


def test_pickle_weights_are_refused_with_the_command_that_converts_them(tmp_path):
    model = tiny("llama")
    folder = saved(tmp_path, model)
    (folder / "model.safetensors").unlink()  # the weights as older checkpoints hold them
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    with pytest.raises(CheckpointError) as refused:
        load_folder(folder)
    assert "pytorch_model.bin" in str(refused.value) and "save_pretrained" in str(refused.value)


def test_a_tied_output_saved_as_well_is_read_once(tmp_path):
    folder = saved(tmp_path, tiny("llama", tie_word_embeddings=True))
    retensor(folder, lambda t: t.update({"lm_head.weight": t["model.embed_tokens.weight"].clone()}))
    ours = load_folder(folder)
    assert ours.model.output.weight is ours.model.decoder.tok_embed.weight


def test_a_model_over_the_size_limit_is_refused_unread(tmp_path):
    folder = saved(tmp_path, tiny("llama"))
    size = (folder / "model.safetensors").stat().st_size
    _, origin = load_origin(folder, "mine", max_bytes=size)
    assert (origin.model_type, origin.stored) == ("llama", "float32")
    with pytest.raises(CheckpointError, match="ATTNVIZ_MAX_MODEL_BYTES"):
        load_origin(folder, "mine", max_bytes=size - 1)


def test_a_repo_id_is_found_in_the_hugging_face_cache_without_downloading(tmp_path, monkeypatch):
    import huggingface_hub.constants

    hub = tmp_path / "hub"
    repo = hub / "models--me--tiny-llama"
    saved(repo / "snapshots", tiny("llama")).rename(repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    runner, origin = load_origin("me/tiny-llama", "mine")
    assert origin.path == f"me/tiny-llama (the Hugging Face cache: {repo}/snapshots/0123abcd)"
    assert runner.model.config.n_layers == 2
    with pytest.raises(CheckpointError, match="neither a path nor a model in the Hugging Face"):
        load_origin("me/not-there", "other")


def test_mistrals_window_hides_what_lies_beyond_it(tmp_path):
    """The window (5 here) is in the mask: a query sees itself and the 4 tokens before, as
    transformers' Mistral does (checked against it above), and the cached steps too."""
    ours = load_folder(saved(tmp_path, tiny("mistral", sliding_window=5)))
    ids, _ = ours.tokenize(PROMPTS[2])
    assert len(ids) > 10
    _, capture = ours.model.run_with_capture(torch.tensor([ids]))
    mask = capture["decoder.0.self_attn.hook_mask"][0, 0]
    weights = capture["decoder.1.self_attn.hook_weights"][0]
    for i in range(len(ids)):
        assert mask[i].nonzero().flatten().tolist() == list(range(max(0, i - 4), i + 1))
    assert torch.all(weights[:, 9, :5] == 0) and torch.all(weights[:, 9, 5:10] > 0)
    # step by step through the KV cache, past the window: each step's token is what one
    # uncached pass over the sequence predicts there
    steps = [s.token_id for s in ours.generate(ids[:6], 10, stop=False)]
    sequence = torch.tensor([[*ids[:6], *steps]])
    with torch.no_grad():
        predicted = ours.model(sequence)[0].argmax(-1).tolist()
    assert predicted[5:-1] == steps


def test_a_gguf_file_written_from_the_tiny_llama_matches_it(tmp_path):
    theirs = tiny("llama")
    path = tmp_path / "tiny.gguf"
    write_gguf(theirs, path)
    ours, origin = load_origin(path, "tiny")
    assert origin.model_type == "llama (GGUF)"
    matches(ours, theirs, PROMPTS[0])


def test_embedding_rows_past_the_tokenizer_are_named_not_garbled(tmp_path):
    """Embeddings padded past the tokenizer (as Qwen's are): such an id reads as its name."""
    theirs = tiny("llama", vocab_size=VOCAB + 8)
    ours = load_folder(saved(tmp_path, theirs))
    hello, _ = ours.tokenize("The quick")
    assert ours.vocabulary[VOCAB + 3] == f"<unused {VOCAB + 3}>"
    assert ours.decode([*hello, VOCAB + 3, *hello]) == f"The quick<unused {VOCAB + 3}>The quick"
    assert ours.decode(hello) == "The quick"


def test_a_bert_folder_matches_transformers_bert_model(tmp_path):
    import transformers

    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=96, max_position_embeddings=128, attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    theirs = transformers.BertModel(config).eval()
    folder = tmp_path / "bert"
    theirs.save_pretrained(folder)
    wordpiece().save(str(folder / "tokenizer.json"))
    ours, origin = load_origin(folder, "mine")
    assert (origin.model_type, ours.output_kind) == ("bert", "embedding")
    ids, tokens = ours.tokenize("The quick brown fox")
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    with torch.no_grad():
        expected = theirs(torch.tensor([ids]), output_attentions=True)
    hidden, capture = ours.model.run_with_capture(torch.tensor([ids]))
    assert (hidden - expected.last_hidden_state).abs().max() <= 1e-4
    for i, weights in enumerate(expected.attentions):
        assert (capture[f"encoder.{i}.self_attn.hook_weights"] - weights).abs().max() <= 1e-5
    # a sentence-transformers folder is read where it mean-pools, refused otherwise
    (folder / "1_Pooling").mkdir()
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"}]))  # fmt: skip
    pooling = {"word_embedding_dimension": 64, "pooling_mode_cls_token": False,
               "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False}  # fmt: skip
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    assert load_origin(folder, "mine")[1].model_type == "bert"
    pooling.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    with pytest.raises(CheckpointError, match=r"pooling is \['cls_token'\]"):
        load_origin(folder, "mine")
    # a BERT with another head is refused, naming the ones read
    config.architectures = ["BertForSequenceClassification"]
    transformers.BertForSequenceClassification(config).save_pretrained(tmp_path / "cls")
    wordpiece().save(str(tmp_path / "cls" / "tokenizer.json"))
    with pytest.raises(CheckpointError, match=r"BertForSequenceClassification.*BertForMaskedLM"):
        load_origin(tmp_path / "cls", "cls")


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_a_bert_masked_lm_predicts_each_mask_as_transformers_does(tmp_path, tie):
    theirs = saved_masked_lm(tmp_path / "mlm", tie)
    ours, origin = load_origin(tmp_path / "mlm", "mlm")
    assert (origin.model_type, ours.output_kind) == ("bert", "masked")
    result = ours.run("The quick [MASK] fox jumps over the [MASK] dog.")
    ids = torch.tensor([result.source_ids])
    masks = [i for i, t in enumerate(result.source_tokens) if t == "[MASK]"]
    assert len(masks) == 2 and sorted(result.masked) == masks
    with torch.no_grad():
        expected = theirs(ids, output_attentions=True)
    assert (ours.logits(ids) - expected.logits).abs().max() <= 1e-4
    for i, weights in enumerate(expected.attentions):
        captured = result.capture[f"encoder.{i}.self_attn.hook_weights"]
        assert (captured - weights).abs().max() <= 1e-5
    probs = expected.logits[0].softmax(-1)
    for position, top in result.masked.items():
        want = probs[position].topk(5)
        assert [i for i, _ in top] == want.indices.tolist()
        assert [p for _, p in top] == pytest.approx(want.values.tolist(), abs=1e-6)
    assert result.output_tokens == [ours.token(result.masked[m][0][0]) for m in masks]
    words = result.output_text.split()  # the text with each [MASK] filled by its first
    assert [words[m - 1] for m in masks] == result.output_tokens
    assert words[:2] == ["the", "quick"] and len(words) == len(result.source_tokens) - 2
    assert ours.run("no mask here", capture=False).masked == {}


def test_a_masked_lm_head_that_does_not_map_is_refused(tmp_path):
    from attnviz.model.pretrained.sources import peek_origin

    folder = tmp_path / "mlm"
    saved_masked_lm(folder, tie=False)
    assert peek_origin(folder)[2] == "masked-lm"
    tensors = load_file(str(folder / "model.safetensors"))
    bias = tensors.pop("cls.predictions.bias")
    save_file(tensors, str(folder / "model.safetensors"))
    for check in (peek_origin, load_origin):
        with pytest.raises(CheckpointError, match=r"nothing fills cls\.predictions\.bias"):
            check(folder)
    tensors["cls.predictions.bias"] = bias[:-1].clone()
    tensors["cls.predictions.extra"] = bias
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"extra has no place.*bias \(\d+,\) !="):
        peek_origin(folder)


def test_a_prompt_gets_the_tokens_its_tokenizer_adds_in_front(tmp_path):
    """A Llama-style tokenizer.json that adds <s> (here <|endoftext|>) to a text: our prompt
    ids are transformers' tokenizer's, kept when a long prompt is cut from its start; a
    chat turn's template writes them itself."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    folder = saved(tmp_path, tiny("gpt2"))  # 256 positions
    made = tokenizer()
    made.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", 0)]
    )
    made.save(str(folder / "tokenizer.json"))
    ours = load_folder(folder)
    theirs = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    text = "The quick brown fox"
    assert ours.tokenize(text)[0] == theirs(text)["input_ids"] and ours.tokenize(text)[0][0] == 0
    assert ours.max_tokens == 256  # its positions, under the 512 a prompt keeps
    long = " ".join(["dog"] * 400)
    _, ids, cut, length = ours.prompt(long)
    assert cut and len(ids) == 256 and ids[0] == 0 and length > 256
    assert ids[1:] == theirs(long)["input_ids"][-255:]


def test_the_shipped_minilm_folder_reads_as_a_model_of_yours():
    """all-MiniLM-L6-v2's sentence-transformers folder (modules.json: mean pooling) through
    the path a user's folder takes: the same embedding as the shipped runner's."""
    from attnviz.model.pretrained.bert import BertRunner, package_dir

    ours, origin = load_origin(package_dir(), "minilm-folder")
    assert origin.model_type == "bert" and "float32" in origin.stored
    text = "The animal didn't cross the street because it was too tired."
    shipped = BertRunner.load().run(text, capture=False).embedding
    assert ours.run(text, capture=False).embedding == shipped


def test_the_families_benchmark_prints_each_difference(monkeypatch, capsys):
    """A smoke of `make bench-families`: two of its rows, each within the tests' bounds."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import bench_families

    monkeypatch.setattr(sys, "argv", ["bench_families.py", "--families", "gpt2", "MaskedLM"])
    bench_families.main()
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()[3:]]
    assert [r[0] for r in rows] == ["| gpt2", "| bert (BertForMaskedLM)"]
    for _, attention, output, _ in rows:
        assert float(attention) <= 1e-5 and float(output) <= 1e-4
    assert rows[0][3] == "3/3 identical |" and rows[1][3].startswith("top 5 at 2/2")


def test_a_model_spread_by_a_device_map_equals_the_whole_one(tmp_path):
    """Its embedding in memory and every later layer offloaded to disk by accelerate (a
    device map within `max_memory`, as one larger than its GPUs is spread): every captured
    tensor, the logits, a generation and the long path's probe as the unsplit model's."""
    from attnviz.model.placement import Placement

    folder = saved(tmp_path, tiny("llama"))
    whole, _ = load_origin(folder, backend="transformers")
    split, origin = load_origin(folder, placement=Placement("cpu", "auto", {"cpu": 250_000}))
    assert origin.backend == "transformers"  # (accelerate spreads transformers' models)
    placed = set(split.model.hf.hf_device_map.values())
    assert placed == {"cpu", "disk"}, split.model.hf.hf_device_map
    ids = torch.tensor([whole.tokenize(PROMPTS[2])[0]])
    logits, captured = whole.model.run_with_capture(ids)
    split_logits, split_captured = split.model.run_with_capture(ids)
    assert torch.equal(logits, split_logits)
    assert captured.keys() == split_captured.keys()
    assert all(torch.equal(captured[k], split_captured[k]) for k in captured)
    made = [s.token_id for s in whole.generate(ids[0].tolist(), 6, stop=False)]
    assert [s.token_id for s in split.generate(ids[0].tolist(), 6, stop=False)] == made
    assert split.model.long_refusal is None


GGUF_ARCHITECTURES = {"qwen2": "qwen2", "gemma3_text": "gemma3", "starcoder2": "starcoder2",
                      "stablelm": "stablelm"}  # fmt: skip


@pytest.mark.parametrize("model_type", GGUF_ARCHITECTURES)
def test_a_gguf_of_another_architecture_is_read_by_transformers_gguf_loader(tmp_path, model_type):
    """A .gguf of an architecture model/ does not read, written as llama.cpp's converter
    writes one (gguf's own tensor names, transformers' metadata keys, the byte-level
    tokenizer in its metadata): checked from its header, then read by transformers' GGUF
    loader and modeling code, every weight equal to the tiny model's eager attention."""
    from attnviz.model.pretrained.sources import peek_origin
    from harness.architectures import build_model
    from harness.checkpoints import write_gguf_of

    arch = GGUF_ARCHITECTURES[model_type]
    theirs = build_model(model_type, "decoder-only")
    path = tmp_path / f"{arch}.gguf"
    write_gguf_of(theirs, arch, path)
    config, origin, key, specials = peek_origin(path)
    assert (origin.model_type, origin.backend, key) == (f"{arch} (GGUF)", "transformers",
                                                        "hf-decoder-only")  # fmt: skip
    assert "<|endoftext|>" in specials and config.decoder_layers == 2
    runner, _ = load_origin(path, "mine")
    assert matches(runner, theirs, PROMPTS[2]) == tokenizer().encode(PROMPTS[2]).ids
    # dequantized for real: nothing of it reads as packed, its views that read weights too
    assert runner.model.weights_refusal is None and runner.model.projects_heads


def test_a_gguf_of_an_architecture_transformers_does_not_read_is_refused(tmp_path):
    import gguf

    from harness.checkpoints import finish

    path = tmp_path / "odd.gguf"
    writer = gguf.GGUFWriter(str(path), "rwkv6")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", torch.zeros(4, 4).numpy())
    finish(writer)
    with pytest.raises(CheckpointError, match=r"a GGUF of architecture 'rwkv6': transformers "
                       r"reads GGUF files of .*qwen2"):  # fmt: skip
        load_origin(path)
