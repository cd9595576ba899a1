"""Tiny random checkpoints made with transformers, as a user's own folder holds them: Llama-
family (and GPT-2) models in float32 with eager attention, saved with `save_pretrained`
beside a byte-level BPE tokenizer trained here with `tokenizers`; a BERT masked LM with a
WordPiece tokenizer; a Llama written as a .gguf file with the `gguf` library. Nothing is
fetched from a hub (HF_HUB_OFFLINE=1).

Used by tests/model/test_hf.py (and the other tests of models of yours), the architecture
matrix (harness/matrix.py) and bench/bench_families.py, bench_own_memory.py, bench_long.py."""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB = 320
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "def add(a, b):\n    return a + b",
    "猫追狗，狗追猫。",
    "Attention heads look back at every token they have seen.",
] * 20
PROMPTS = ["The quick brown fox", "def add(a, b):", "猫追狗 and the lazy dog " * 6]


def tokenizer(specials: tuple[str, ...] = ("<|endoftext|>",)) -> Tokenizer:
    made = Tokenizer(models.BPE())
    made.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    made.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    made.train_from_iterator(CORPUS, trainer)
    return made


def tiny(kind: str, **extra):
    """A tiny random transformers model of a Llama-family kind, in float32, eager."""
    import transformers

    classes = {"llama": ("LlamaConfig", "LlamaForCausalLM"),
               "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
               "mistral": ("MistralConfig", "MistralForCausalLM"),
               "gpt2": ("GPT2Config", "GPT2LMHeadModel")}  # fmt: skip
    config_class, model_class = (getattr(transformers, n) for n in classes[kind])
    shape = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-5,
    )  # fmt: skip
    if kind == "gpt2":
        shape = dict(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=256)
    config = config_class(
        **{**shape, **extra}, eos_token_id=0, bos_token_id=0, attn_implementation="eager"
    )
    torch.manual_seed(0)
    model = model_class(config).eval()
    with torch.no_grad():  # biases (Qwen2's Q/K/V) start at zero: make them count
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)
    return model


def spread(model) -> None:
    """Every matrix of a seeded random model drawn again from N(0, 0.15²), in its
    parameters' order: away from the initialisation's near-uniform attention."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.15)


def saved(tmp_path, model, **save) -> object:
    folder = tmp_path / "model"
    model.save_pretrained(folder, **save)
    tokenizer().save(str(folder / "tokenizer.json"))
    return folder


def read_back(folder, backend: str = "ours"):
    """A saved checkpoint read back as the server reads it: by our model code ("ours") or
    by transformers' code ("transformers")."""
    from attnviz.model.pretrained.hf import load_folder
    from attnviz.model.pretrained.sources import load_origin

    if backend == "transformers":
        return load_origin(folder, backend="transformers")[0]
    return load_folder(folder)


def permuted(weight, heads: int):
    """Q or K rows in llama.cpp's rotary layout, as its converter writes them."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def gguf_tokenizer(writer) -> None:
    """The byte-level BPE tokenizer (`tokenizer()`) in a GGUF file's metadata, as
    llama.cpp's converter writes a GPT-2-style one (320 tokens, <|endoftext|> 0)."""
    made = tokenizer()
    spec = json.loads(made.to_str())["model"]
    tokens = [t for t, _ in sorted(spec["vocab"].items(), key=lambda kv: kv[1])]
    tokens += [f"<pad{i}>" for i in range(VOCAB - len(tokens))]
    merges = [" ".join(m) if isinstance(m, list) else m for m in spec["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_merges(merges)
    writer.add_token_types([3 if t == "<|endoftext|>" else 1 for t in tokens])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(0)


def finish(writer) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_gguf(theirs, path) -> None:
    """A Llama .gguf written with the `gguf` library (float32 tensors, llama.cpp's names
    and Q/K layout, the tokenizer in its metadata) from a tiny transformers Llama."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    cfg = theirs.config
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    gguf_tokenizer(writer)
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}  # fmt: skip
    for name, tensor in theirs.state_dict().items():
        values = tensor.float().numpy()
        if name.startswith("model.layers."):
            _, _, layer, *inner, leaf = name.split(".")
            part = names[".".join(inner)]
            if part == "attn_q":
                values = permuted(values, cfg.num_attention_heads)
            elif part == "attn_k":
                values = permuted(values, cfg.num_key_value_heads)
            out = f"blk.{layer}.{part}.{leaf}"
        else:
            out = {"model.embed_tokens.weight": "token_embd.weight",
                   "model.norm.weight": "output_norm.weight",
                   "lm_head.weight": "output.weight"}[name]  # fmt: skip
        writer.add_tensor(out, values)
    finish(writer)


def write_gguf_of(theirs, arch: str, path) -> None:
    """A .gguf of another architecture transformers reads from GGUF, written as llama.cpp's
    converter writes it, from a tiny transformers model of it: the config under the keys
    transformers reads (its GGUF_CONFIG_MAPPING), each tensor under the name gguf's own
    table gives it (float32; Gemma's norms stored as llama.cpp stores them, plus one;
    GPT-2's Conv1D matrices transposed), the tokenizer in its metadata."""
    import gguf
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    writer = gguf.GGUFWriter(str(path), arch)
    cfg = theirs.config
    rope = getattr(cfg, "rope_parameters", None) or {}
    for key, attr in GGUF_CONFIG_MAPPING[arch].items():
        value = getattr(cfg, attr, None) if attr else None
        value = rope.get(attr) if value is None and attr else value
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        put = writer.add_float32 if isinstance(value, float) else writer.add_uint32
        put(f"{arch}.{key}", value)
    gguf_tokenizer(writer)
    kind = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[arch]
    names = gguf.get_tensor_name_map(kind, cfg.num_hidden_layers)
    for name, tensor in theirs.state_dict().items():
        out = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if out is None:
            raise KeyError(f"gguf names no tensor {name} of {arch}")
        values = tensor.float()
        if arch.startswith("gemma") and "norm" in name and values.dim() == 1:
            values = values + 1  # (llama.cpp's Gemma norms: transformers takes one away)
        if arch == "gpt2" and values.dim() == 2 and ".h." in name:
            values = values.T.contiguous()  # (Conv1D's (in, out) as llama.cpp's (out, in))
        writer.add_tensor(out, values.numpy())
    finish(writer)


def wordpiece() -> Tokenizer:
    from tokenizers import normalizers, processors

    made = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    made.normalizer = normalizers.BertNormalizer(lowercase=True)
    made.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    made.train_from_iterator(
        CORPUS, trainers.WordPieceTrainer(vocab_size=VOCAB, special_tokens=specials)
    )
    made.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return made


def saved_masked_lm(folder, tie: bool = True):
    """A tiny random BertForMaskedLM saved with its WordPiece tokenizer (the embedding
    exactly the tokenizer's size), and the transformers model."""
    import transformers

    made = wordpiece()
    config = transformers.BertConfig(
        vocab_size=made.get_vocab_size(), hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=96, max_position_embeddings=128,
        attn_implementation="eager", tie_word_embeddings=tie,
    )  # fmt: skip
    torch.manual_seed(1)
    theirs = transformers.BertForMaskedLM(config).eval()
    theirs.save_pretrained(folder)
    made.save(str(folder / "tokenizer.json"))
    return theirs


def saved_llava(folder, image_size: int = 32, patch_size: int = 8, strategy: str = "default"):
    """A tiny seeded random LLaVA (a Llama language model over a CLIP vision tower) saved
    with its processor: CLIP's image processor (its shortest side to `image_size`, the
    centre cropped square) and the byte-level BPE tokenizer with an "<image>" token, which
    the processor repeats once per patch of the vision tower's grid. Returns the folder."""
    import transformers

    made = tokenizer(("<|endoftext|>", "<image>"))
    text = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        eos_token_id=0, bos_token_id=0,
    )  # fmt: skip
    vision = transformers.CLIPVisionConfig(
        image_size=image_size, patch_size=patch_size, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64,
    )  # fmt: skip
    config = transformers.LlavaConfig(
        vision_config=vision, text_config=text, image_token_index=made.token_to_id("<image>"),
        vision_feature_layer=-1, vision_feature_select_strategy=strategy,
        attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlavaForConditionalGeneration(config).eval()
    spread(model)
    processor = transformers.LlavaProcessor(
        image_processor=transformers.CLIPImageProcessorPil(
            size={"shortest_edge": image_size},
            crop_size={"height": image_size, "width": image_size},
        ),
        tokenizer=transformers.PreTrainedTokenizerFast(
            tokenizer_object=made, eos_token="<|endoftext|>", bos_token="<|endoftext|>"
        ),
        patch_size=patch_size, vision_feature_select_strategy=strategy, image_token="<image>",
        num_additional_image_tokens=1,
    )  # fmt: skip
    model.generation_config.pad_token_id = 0
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


IDEFICS3_SPECIALS = (
    "<|endoftext|>", "<image>", "<fake_token_around_image>", "<global-img>",
    *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)),
)  # fmt: skip


def saved_idefics3(folder, tile: int = 32, patch_size: int = 8, scale: int = 2, size: int = 64):
    """A tiny seeded random Idefics3 (a Llama language model over a SigLIP vision tower,
    each tile's patches merged `scale` x `scale` into one token) saved with its processor:
    the picture's longest side resized to `size`, cut into `tile` x `tile` tiles, and the
    whole picture as one more tile. Returns the folder."""
    import transformers

    made = tokenizer(IDEFICS3_SPECIALS)
    config = transformers.Idefics3Config(
        text_config=dict(
            model_type="llama", vocab_size=VOCAB + len(IDEFICS3_SPECIALS), hidden_size=64,
            intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, eos_token_id=0, bos_token_id=0,
        ),
        vision_config=dict(image_size=tile, patch_size=patch_size, hidden_size=32,
                           num_hidden_layers=2, num_attention_heads=4, intermediate_size=64),
        scale_factor=scale, image_token_id=made.token_to_id("<image>"),
        attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Idefics3ForConditionalGeneration(config).eval()
    spread(model)
    processor = transformers.Idefics3Processor(
        image_processor=transformers.Idefics3ImageProcessorPil(
            size={"longest_edge": size}, max_image_size={"longest_edge": tile},
            do_image_splitting=True,
        ),
        tokenizer=transformers.PreTrainedTokenizerFast(
            tokenizer_object=made, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
        ),
        image_seq_len=(tile // patch_size // scale) ** 2,
    )  # fmt: skip
    model.generation_config.pad_token_id = 0
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


QWEN2_VL_SPECIALS = (
    "<|endoftext|>", "<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>",
)  # fmt: skip


def saved_qwen2_vl(
    folder, patch_size: int = 14, merge: int = 2, most_tokens: int = 16, context: int = 512
):
    """A tiny seeded random Qwen2-VL (its own language model with rotary positions over
    the picture's rows and columns, its own vision tower, a context of `context` tokens)
    saved as a Qwen2-VL folder is: its image processor (each picture resized to its own
    multiple of a merged token's side, at least 4 and at most `most_tokens` tokens) and
    tokenizer, and a processor_config.json naming Qwen2VLProcessor. Returns the folder."""
    import transformers

    made = tokenizer(QWEN2_VL_SPECIALS)
    ids = {t: made.token_to_id(t) for t in QWEN2_VL_SPECIALS}
    config = transformers.Qwen2VLConfig(
        text_config=dict(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=context,
            eos_token_id=0, bos_token_id=0,
            rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3],
                             "rope_theta": 10000.0},
        ),
        vision_config=dict(depth=2, embed_dim=32, hidden_size=64, num_heads=4, mlp_ratio=2,
                           patch_size=patch_size, spatial_merge_size=merge,
                           temporal_patch_size=2, in_channels=3),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Qwen2VLForConditionalGeneration(config).eval()
    spread(model)
    side = patch_size * merge
    transformers.Qwen2VLImageProcessorPil(
        min_pixels=side * side * 4, max_pixels=side * side * most_tokens,
        patch_size=patch_size, merge_size=merge, temporal_patch_size=2,
    ).save_pretrained(folder)  # fmt: skip
    model.generation_config.pad_token_id = 0
    model.save_pretrained(folder)
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=made, eos_token="<|endoftext|>"
    ).save_pretrained(folder)
    (folder / "processor_config.json").write_text(
        json.dumps({"processor_class": "Qwen2VLProcessor"}), encoding="utf-8"
    )
    return folder
