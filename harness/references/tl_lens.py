"""An independent reference for the logit lens and direct logit attribution (DLA), computed
with TransformerLens 4.3.0 in its own environment (.venv/ref: `make ref-env`,
harness/references/ref-env.mk), so that a test in the main environment can run it as a
subprocess and compare with our own implementation (model/methods/lens.py):

    .venv/ref/bin/python harness/references/tl_lens.py IN.json OUT.npz

IN.json: {"model": "<folder of a transformers checkpoint saved with save_pretrained>",
          "ids": [token ids], "position": int (negative counts from the end),
          "tokens": [a, b] or null, "atol": float (optional, default 1e-4)}
Nothing is fetched (HF_HUB_OFFLINE=1). The model runs unbatched and unpadded on `ids` as
given (no BOS is added), in float32 on the CPU with eager attention: three forward passes
(transformers' own, the raw bridge's, the processed bridge's; see below).

How. TransformerLens 4 has no HookedTransformer (its `from_pretrained_no_processing` is
gone): the model is `TransformerBridge.boot_transformers(folder, hf_model=<the transformers
model loaded from the folder>, tokenizer=<its tokenizer.json; never used to encode>)`. A bridge
booted so is *unprocessed* ("raw"): the checkpoint's own weights, its logits those of
transformers. Then:
  1. raw: `logits, cache = bridge.run_with_cache(ids)`. The logit lens and the "unfolded"
     DLA terms are read from this cache.
  2. `bridge.enable_compatibility_mode(center_unembed=False)`: TransformerLens's weight
     processing (fold_ln, center_writing_weights, fold_value_biases; the defaults of
     HookedTransformer) on the same weights, and a second `run_with_cache`. The DLA terms
     are read from this cache, as TransformerLens's own `direct_logit_attribution` demands
     (it refuses a bridge whose final norm is not folded). center_unembed is left off so
     that these logits are still transformers' own (with it on they move by a constant per
     position, and no logit *difference* changes: W_U[:, a] - W_U[:, b] and b_U[a] - b_U[b]
     are the same with and without it).

OUT.npz (float32 arrays unless said; L = layers, H = query heads, T = len(ids), V = vocab):
  final_logits (T, V)        the raw bridge's logits == transformers' logits
  final_logit_max_abs_diff   max |final_logits - transformers' own logits| (float64 scalar)
  compat_logit_max_abs_diff  the same for the processed (compatibility-mode) bridge
  lens_logits (L+1, T, V)    the logit lens: `cache.accumulated_resid(apply_ln=True)` of the
                             raw cache (labels 0_pre .. {L-1}_pre, final_post) @ W_U + b_U.
                             Row 0: the embeddings (token + learned positions, where the model
                             has them) = resid_pre of block 0; row k (1..L-1): resid_pre of
                             block k = the residual after block k-1; row L: resid_post of the
                             last block, the input of the final norm. In TL 4.3,
                             accumulated_resid(apply_ln=True) up to the unembed passes
                             recompute_ln=True to apply_ln_to_stack: every row goes through
                             the real final norm module (ln_final / RMSNorm, its weight and
                             bias) with statistics RECOMPUTED from that row itself -- NOT
                             through the final norm's scale cached from the real run (that
                             was TL <= 3's behaviour, and is the variant below). Row L equals
                             final_logits.
  lens_logits_cached_scale (L+1, T, V)  the other convention: the same rows through
                             `cache.apply_ln_to_stack(rows, layer=-1)` with the cached final
                             scale of the real run at each position (centred first for
                             LayerNorm), on the processed bridge (LN weight and bias folded
                             into W_U, b_U), @ W_U + b_U. Row L equals final_logits too;
                             other rows differ from lens_logits.
  lens_final_row_max_abs_diff  max |lens_logits[L] - final_logits|
  a, b, position (int64)     the tokens compared and the position (made non-negative); with
                             tokens null: a = argmax of final_logits[position], b = runner-up
  logit_diff (float64)       final_logits[position, a] - final_logits[position, b]
  DLA: every term is TL's recipe at `position` on the direction d = W_U[:, a] - W_U[:, b]
  of the processed bridge (= g * (W_U_raw[:, a] - W_U_raw[:, b]) with g the final norm's
  weight, minus its mean over d_model for LayerNorm, which the centring makes moot):
    term(c) = cache.apply_ln_to_stack(c, layer=-1, pos_slice=position) . d
  i.e. (c - mean(c)) / s . d for LayerNorm, c / s . d for RMSNorm, s = the final norm's
  scale cached from the real run at that position (sqrt(var + eps), or sqrt(mean(x^2) + eps)).
  head_dla (L, H)            processed: `cache.stack_head_results(layer=-1, pos_slice=position)`
                             through apply_ln_to_stack, on d. fold_ln folds the block norm's
                             bias into the value bias and fold_value_biases then moves it to
                             b_O: each head's constant share (b_V^h + beta_1 W_V^h) W_O^h
                             (GPT-2; Llama has neither) is in bias_dla, not here. So
                             head_dla = head_dla_unfolded - that share.
  head_dla_unfolded (L, H)   the same TL calls on the raw cache: each head's output
                             sum_j A_hij (x_j W_V^h + b_V^h) W_O^h, value bias included (what
                             a hook on transformers' modules gives). GQA: K/V heads are
                             shared, the H query heads are counted one by one.
  mlp_dla (L,)               rows "{l}_mlp_out" of `cache.get_full_resid_decomposition(
                             layer=-1, expand_neurons=False, apply_ln=True, pos_slice=position)`
                             on d: each MLP block's output, its output bias included (the
                             same raw or processed)
  embed_dla                  rows "embed" + "pos_embed" (the token embedding and, for GPT-2,
                             the learned positions); token_embed_dla, pos_embed_dla apart
  bias_dla                   row "bias" (processed): `bridge.accumulated_bias(L)`, the sum of
                             every attention block's output bias b_O, after fold_value_biases:
                             sum_l (b_O + sum_h (b_V^h + beta_1 W_V^h) W_O^h); MLP biases are in
                             mlp_dla
  bias_dla_unfolded          the raw "bias" row: sum of the raw b_O only
  attn_bias_dla_unfolded (L,)  the raw b_O of each layer alone (sum = bias_dla_unfolded; 0
                             where the projection has no bias)
  final_bias_dla             b_U[a] - b_U[b] of the processed bridge = the final norm's bias
                             on the raw direction (folded into b_U by fold_ln) plus the raw
                             unembedding bias difference. Not a row of TL's decomposition
                             (which stops at the residual stream), but part of the logit.
  decomposition_sum (float64)  sum(head_dla) + sum(mlp_dla) + embed_dla + bias_dla +
                             final_bias_dla; equal to logit_diff up to float32 rounding:
                             the cached-scale norm is linear in the stream, and TL handles
                             LayerNorm's centring by centring every term in apply_ln_to_stack
                             and the norm's bias by folding it into b_U, so nothing is left
                             over (no "remainder").
  decomposition_error        decomposition_sum - logit_diff
  decomposition_sum_unfolded, decomposition_error_unfolded  the same with head_dla_unfolded
                             and bias_dla_unfolded
  decomposition_labels (str) TL's labels of the decomposition rows, in order
  n_layers, n_heads, d_model, vocab (int64); tl_version, torch_version (str)
  seconds_import, seconds_load, seconds_compute (float64)

Exit status 0; 2 where a check fails (final_logit_max_abs_diff, compat_logit_max_abs_diff,
lens_final_row_max_abs_diff or |decomposition_error| over atol, scaled by the largest
|logit| where that is above 1); OUT.npz is written either way. A one-line JSON summary goes
to stdout.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

_start = time.perf_counter()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformer_lens.model_bridge import TransformerBridge  # noqa: E402

_imported = time.perf_counter()


def _tokenizer(folder: str, vocab_size: int):
    """A tokenizer for the bridge, which wants one though the ids are given (it never
    encodes here): the folder's tokenizer.json as a fast tokenizer; else whatever
    AutoTokenizer finds in the folder; else a stand-in naming each id."""
    path = os.path.join(folder, "tokenizer.json")
    if os.path.exists(path):
        return transformers.PreTrainedTokenizerFast(tokenizer_file=path)
    try:
        return transformers.AutoTokenizer.from_pretrained(folder)
    except Exception:  # none there, or one that needs what is not installed
        from tokenizers import Tokenizer, models

        vocab = {f"<{i}>": i for i in range(vocab_size)}
        return transformers.PreTrainedTokenizerFast(
            tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<0>"))
        )


def _on(stack: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
    """Rows of an LN-applied stack at one position ([n, batch=1, d]) on a direction: [n]."""
    return (stack[:, 0, :] @ direction).double()


def warm_up() -> int:
    """Import what a run imports, then stop. ref-env.mk runs `tl_lens.py --warm-up` once with
    bytecode writing on, so that these modules' .pyc files exist: this machine sets
    PYTHONDONTWRITEBYTECODE=1, and without them every run compiles them again (~5 s)."""
    import importlib

    for name in (
        "einops._torch_specific",
        "transformer_lens.weight_processing",
        "transformer_lens.utilities.architectures",
        "transformer_lens.utilities.bridge_components",
        "transformer_lens.model_bridge.sources.transformers",
        "transformer_lens.model_bridge.sources.transformers_driver",
        *(f"transformers.models.{k}.modeling_{k}" for k in ("gpt2", "llama", "mistral", "qwen2")),
    ):
        importlib.import_module(name)
    return 0


def main(argv: list[str]) -> int:
    if argv[1:] == ["--warm-up"]:
        return warm_up()
    if len(argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 64
    with open(argv[1]) as f:
        spec = json.load(f)
    folder, ids = spec["model"], [int(i) for i in spec["ids"]]
    atol = float(spec.get("atol", 1e-4))
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()

    hf = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    tokens = torch.tensor([ids], dtype=torch.long)
    with torch.no_grad():
        theirs = hf(tokens).logits[0].detach().clone()  # before the bridge touches anything
    bridge = TransformerBridge.boot_transformers(
        folder,
        hf_model=hf,
        device="cpu",
        dtype=torch.float32,
        tokenizer=_tokenizer(folder, hf.config.get_text_config().vocab_size),
    )
    bridge.eval()
    loaded = time.perf_counter()

    cfg = bridge.cfg
    n_layers, n_heads, T = cfg.n_layers, cfg.n_heads, len(ids)
    position = int(spec["position"])
    if not -T <= position < T:
        raise SystemExit(f"position {position} is outside the {T} tokens")
    position %= T

    out: dict[str, object] = {}
    with torch.no_grad():
        # 1. the raw (unprocessed) bridge: logits, the logit lens, the unfolded DLA stacks
        logits, cache = bridge.run_with_cache(tokens)
        final = logits[0]
        out["final_logits"] = final.numpy()
        out["final_logit_max_abs_diff"] = float((final - theirs).abs().max())
        rows, _ = cache.accumulated_resid(apply_ln=True, return_labels=True)  # L+1, 1, T, d
        lens = rows[:, 0] @ bridge.W_U + bridge.b_U
        out["lens_logits"] = lens.numpy()
        out["lens_final_row_max_abs_diff"] = float((lens[-1] - final).abs().max())

        if spec.get("tokens") is None:
            a, b = (int(i) for i in final[position].topk(2).indices)
        else:
            a, b = (int(i) for i in spec["tokens"])
        out["logit_diff"] = float(final[position, a].double() - final[position, b].double())

        # TL's stacks must be read before weight processing changes W_O (hook_result is
        # computed from hook_z and the model's current W_O)
        heads_raw = cache.apply_ln_to_stack(
            cache.stack_head_results(layer=-1, pos_slice=position), layer=-1, pos_slice=position
        )
        full_raw, labels_raw = cache.get_full_resid_decomposition(
            layer=-1, expand_neurons=False, apply_ln=True, pos_slice=position, return_labels=True
        )
        attn_bias_raw = []  # each layer's raw b_O, as a stack term at every position
        for layer in range(n_layers):
            b_O = bridge._get_block_variant_bias(bridge.blocks[layer])
            if b_O is None:
                attn_bias_raw.append(torch.zeros(1, 1, cfg.d_model))
            else:
                stack = b_O.detach().clone().expand(1, 1, T, cfg.d_model)
                attn_bias_raw.append(cache.apply_ln_to_stack(stack, layer=-1)[:, :, position])
        attn_bias_raw = torch.cat(attn_bias_raw, dim=0)  # L, 1, d

        # 2. the processed bridge (TL's fold_ln etc.): the DLA terms as TL computes them
        bridge.enable_compatibility_mode(disable_warnings=True, center_unembed=False)
        logits_c, cache_c = bridge.run_with_cache(tokens)
        out["compat_logit_max_abs_diff"] = float((logits_c[0] - theirs).abs().max())
        W_U, b_U = bridge.W_U, bridge.b_U
        direction = W_U[:, a] - W_U[:, b]

        cached = cache_c.apply_ln_to_stack(cache_c.accumulated_resid(apply_ln=False), layer=-1)
        out["lens_logits_cached_scale"] = (cached[:, 0] @ W_U + b_U).numpy()

        heads = cache_c.apply_ln_to_stack(
            cache_c.stack_head_results(layer=-1, pos_slice=position),
            layer=-1,
            pos_slice=position,
        )
        head_dla = _on(heads, direction)
        full, labels = cache_c.get_full_resid_decomposition(
            layer=-1, expand_neurons=False, apply_ln=True, pos_slice=position, return_labels=True
        )
        terms = dict(zip(labels, _on(full, direction).tolist(), strict=True))
        terms_raw = dict(zip(labels_raw, _on(full_raw, direction).tolist(), strict=True))
        head_labels = [f"L{i}H{h}" for i in range(n_layers) for h in range(n_heads)]
        assert np.allclose([terms[k] for k in head_labels], head_dla.numpy(), atol=1e-6)

        out["a"], out["b"], out["position"] = np.int64(a), np.int64(b), np.int64(position)
        out["head_dla"] = head_dla.numpy().reshape(n_layers, n_heads).astype(np.float32)
        out["head_dla_unfolded"] = (
            _on(heads_raw, direction).numpy().reshape(n_layers, n_heads).astype(np.float32)
        )
        out["mlp_dla"] = np.array(
            [terms.get(f"{i}_mlp_out", 0.0) for i in range(n_layers)], dtype=np.float32
        )
        out["token_embed_dla"] = terms.get("embed", 0.0)
        out["pos_embed_dla"] = terms.get("pos_embed", 0.0)
        out["embed_dla"] = terms.get("embed", 0.0) + terms.get("pos_embed", 0.0)
        out["bias_dla"] = terms.get("bias", 0.0)
        out["bias_dla_unfolded"] = terms_raw.get("bias", 0.0)
        out["attn_bias_dla_unfolded"] = _on(attn_bias_raw, direction).numpy().astype(np.float32)
        out["final_bias_dla"] = float(b_U[a].double() - b_U[b].double())
        total = sum(terms.values()) + out["final_bias_dla"]
        total_raw = sum(terms_raw.values()) + out["final_bias_dla"]
        out["decomposition_sum"] = total
        out["decomposition_error"] = total - out["logit_diff"]
        out["decomposition_sum_unfolded"] = total_raw
        out["decomposition_error_unfolded"] = total_raw - out["logit_diff"]
        out["decomposition_labels"] = np.array(labels)

    out.update(
        n_layers=np.int64(n_layers),
        n_heads=np.int64(n_heads),
        d_model=np.int64(cfg.d_model),
        vocab=np.int64(W_U.shape[1]),
        tl_version=np.array(_version("transformer-lens")),
        torch_version=np.array(torch.__version__),
        seconds_import=_imported - _start,
        seconds_load=loaded - _imported,
        seconds_compute=time.perf_counter() - loaded,
    )
    np.savez(argv[2], **{k: np.asarray(v) for k, v in out.items()})

    tol = atol * max(1.0, float(theirs.abs().max()))
    checks = {
        "final_logit_max_abs_diff": out["final_logit_max_abs_diff"],
        "compat_logit_max_abs_diff": out["compat_logit_max_abs_diff"],
        "lens_final_row_max_abs_diff": out["lens_final_row_max_abs_diff"],
        "decomposition_error": abs(out["decomposition_error"]),
        "decomposition_error_unfolded": abs(out["decomposition_error_unfolded"]),
    }
    failed = [k for k, v in checks.items() if not v <= tol]
    summary = {
        **checks,
        "a": a,
        "b": b,
        "position": position,
        "logit_diff": out["logit_diff"],
        "tolerance": tol,
        "failed": failed,
        "seconds": {k: round(float(out[f"seconds_{k}"]), 3) for k in ("import", "load", "compute")},
    }
    print(json.dumps(summary))
    return 2 if failed else 0


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
