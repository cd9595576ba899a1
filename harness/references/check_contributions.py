"""Self-check of harness/references/contributions.py on tiny random models (no hub):
decomposition residuals (max |sum of parts - module output| / max |output|) and row sums;
alti_decoder on tiny GPT-2 / Llama / Qwen2 (random biases, GQA) at T = 12.

    .venv/bin/python -m harness.references.check_contributions
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import transformers

from harness.checkpoints import tiny
from harness.references.contributions import (
    alti,
    alti_decoder,
    kobayashi2021,
    llm_tt,
    llm_tt_graph,
)


def bert():
    config = transformers.BertConfig(
        vocab_size=320, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=96, attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)
    return model


def norms_random(model):
    """Also make the LayerNorm / RMSNorm gains matter (beyond the brief's random biases)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ("norm" in name.lower() or "ln_" in name) and name.endswith("weight"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
    return model


def rows(t):  # (…, T) row sums -> (min, max)
    return f"[{t.min().item():.12f}, {t.max().item():.12f}]"


def _diff(a, b, key):
    return f"{(a[key] - b[key]).abs().max().item():.2e}"


def main():
    ids = torch.randint(5, 320, (12,), generator=torch.Generator().manual_seed(0))
    start = time.perf_counter()
    for tag, model in (("bert", bert()), ("bert+gains", norms_random(bert()))):
        k = kobayashi2021(model, ids)
        a = alti(model, ids)
        print(
            f"{tag}: kobayashi2021 residual pre-LN {k['residual_pre_ln']:.2e} "
            f"post-LN {k['residual_post_ln']:.2e}; shapes per_head "
            f"{tuple(k['per_head'].shape)} attn_res_ln {tuple(k['attn_res_ln'].shape)}"
        )
        print(
            f"  mixing ratios attn {k['mixing_attn'].mean():.4f} attn_res "
            f"{k['mixing_attn_res'].mean():.4f} attn_res_ln {k['mixing_attn_res_ln'].mean():.4f}"
        )
        print(
            f"  alti residual {a['residual']:.2e}; per-layer row sums "
            f"{rows(a['per_layer'].sum(-1))}; composed row sums {rows(a['composed'].sum(-1))}; "
            f"min entry {a['per_layer'].min().item():.3g}; zero (clipped) entries "
            f"{int((a['per_layer'] == 0).sum())}/{a['per_layer'].numel()}"
        )
        a0 = alti(model, ids, eps=0.0)
        print(f"  alti eps=0 vs 1e-6: per_layer max |diff| {_diff(a0, a, 'per_layer')}")
    cases = (
        ("gpt2", tiny("gpt2")),
        ("llama", tiny("llama")),
        ("llama+bias", tiny("llama", attention_bias=True, mlp_bias=True)),
        ("gpt2+gains", norms_random(tiny("gpt2"))),
        ("llama+gains", norms_random(tiny("llama"))),
    )
    for tag, model in cases:
        c = llm_tt(model, ids)
        attn_rows = c["attn"].sum((-1, -2)) + c["attn_resid"]
        print(
            f"{tag}: llm_tt residual resid_mid {c['residual_mid']:.2e} resid_post "
            f"{c['residual_post']:.2e}; attn+resid row sums {rows(attn_rows)}; ffn+resid "
            f"{rows(c['ffn'] + c['ffn_resid'])}; attn {tuple(c['attn'].shape)}"
        )
        causal = c["attn"][:, torch.triu(torch.ones(12, 12, dtype=torch.bool), 1)]
        print(f"  future-token parts (clip floor) max {causal.max().item():.2e}")
        for renorm in (True, False):
            edges = llm_tt_graph(c, position=11, threshold=0.04, renormalize=renorm)
            inputs = sorted({e["source"] for e in edges if e["source"].startswith("X0_")})
            print(
                f"  graph(position=11, threshold=0.04, renormalize={renorm}): "
                f"{len(edges)} edges, reaches {inputs}"
            )
        quirk = llm_tt_graph(c, 11, 0.04, authors_ffn_quirk=True)
        print(f"  with authors_ffn_quirk: {len(quirk)} edges")
        e = next(e for e in llm_tt_graph(c, 11, 0.04) if e["heads"] is not None)
        print(
            f"  e.g. {e['source']} -> {e['target']} weight {e['weight']:.4f} heads "
            f"{[round(h, 4) for h in e['heads']]} residual {e['residual']:.4f}"
        )
        q = llm_tt(model, ids, authors_bv_quirk=True)
        diff = (q["attn"] - c["attn"]).abs().max()
        print(f"  authors' double-b_V quirk changes attn by {diff:.2e}")
    future = torch.triu(torch.ones(12, 12, dtype=torch.bool), 1)
    for tag, model in (
        ("gpt2", tiny("gpt2")),
        ("llama", tiny("llama")),
        ("qwen2", tiny("qwen2")),
        ("gpt2+gains", norms_random(tiny("gpt2"))),
        ("llama+gains", norms_random(tiny("llama"))),
    ):
        t0 = time.perf_counter()
        a = alti_decoder(model, ids)
        dt = time.perf_counter() - t0
        a6 = alti_decoder(model, ids, eps=1e-6)
        print(
            f"{tag}: alti_decoder residual {a['residual']:.2e}; per-layer row sums "
            f"{rows(a['per_layer'].sum(-1))}; composed row sums {rows(a['composed'].sum(-1))}; "
            f"({dt:.3f} s)"
        )
        print(
            f"  future entries max {a['per_layer'][:, future].abs().max():.1e} (eps=1e-6: "
            f"{a6['per_layer'][:, future].abs().max():.1e}); zero (clipped) past entries "
            f"{int((a['per_layer'][:, ~future] == 0).sum())}/{int((~future).sum()) * 2}; "
            f"eps=0 vs 1e-6 max |diff| {_diff(a, a6, 'per_layer')}; diag C_0 "
            f"{[round(x, 3) for x in a['per_layer'][0].diagonal()[:4].tolist()]}…"
        )
    print(f"total run time {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
