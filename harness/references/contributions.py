"""Independent float64 references for three token-contribution measures (ALTI for post- and
pre-LN models), read from a transformers model's own modules (forward hooks on a float64
deepcopy; never app/ or model/).

Conventions everywhere: batch of one; matrices are (Tq, Tk) with rows = the receiving
token i (query) and columns = the source token j (key); L = layers, H = heads, d = width;
δ_ij = 1 if i == j; cen(t) = t - mean(t) over d; ‖·‖₂ is torch.norm, ‖·‖₁ the L1 norm.
dist_p(a, b) is torch.nn.functional.pairwise_distance = ‖a - b + eps‖_p, eps = 1e-6 its
default, kept because the authors of ALTI (both paths) and of the LLM-TT call it so; alti
and alti_decoder take `eps` (0.0 = the plain L1 distance). Per layer (post-LN BERT), x = layer
input, α^h = attention probabilities, v^h_j = x_j W_V^h + b_V^h (value incl. its bias),
f^h(x_j) = v^h_j W_O^h (dense weight only, no b_O), y_i = Σ_h Σ_j α^h_ij f^h(x_j) + b_O + x_i
(input of the attention block's LayerNorm), s_i = sqrt(var(y_i) + eps) (biased variance).

(a) kobayashi2021 — Kobayashi et al. 2021, gorokoba560/norm-analysis-of-transformer @5dc8fb3,
    emnlp2021/transformers/src/transformers/modeling_bert.py, class BertNormOutput, l.299-389:
    per_head[l,h,i,j] = ‖α^h_ij f^h(x_j)‖₂                                 (l.318-324)
    attn[l,i,j]       = ‖Σ_h α^h_ij f^h(x_j)‖₂                 "ATTN-N"   (l.328-329)
    attn_res[l,i,j]   = ‖Σ_h α^h_ij f^h(x_j) + δ_ij x_i‖₂      "ATTNRES-N" (l.335-339)
    attn_res_ln[l,i,j]= ‖γ ⊙ cen(Σ_h α^h_ij f^h(x_j) + δ_ij x_i) / s_i‖₂  "ATTNRESLN-N" (l.346-358)
    mixing_*[l,i] = ‖m_i‖₂ / (‖m_i‖₂ + ‖p_i‖₂), p_i = term(i,i), m_i = Σ_{j≠i} term(i,j)
    (vector sums, then norms), for each of the three term kinds               (l.361-379)
    b_O and LN β are assigned to no token (b_O only enters s_i through y_i); the residual
    is folded into the j = i term. Exactly: LN(y_i) = Σ_j lnterm_ij + γ⊙cen(b_O)/s_i + β.
(b) alti — Ferrando et al. 2022, mt-upc/transformer-contributions @4f89039,
    src/contributions.py ModelWrapper.get_contributions l.149-223 (bert config: pre_layer_norm
    False) and src/utils_contributions.py normalize_contributions 'min_sum' l.284-286,
    compute_joint_attention l.455-470 (called as in attributions.py l.59-61):
    T_i(x_j) = γ ⊙ cen(Σ_h α^h_ij f^h(x_j) + δ_ij x_i) / s_i      (= the (a) LN term; l.195,208)
    ŷ_i = Σ_j T_i(x_j) + γ ⊙ cen(b_O) / s_i + β  (= LN output; b_O and β in ŷ only; l.204-207)
    c_ij = max(0, ‖ŷ_i‖₁ - dist_1(T_i(x_j), ŷ_i)),  C_l[i,j] = c_ij / Σ_k c_ik     (l.222)
    rollout[0] = C_0, rollout[l] = C_l @ rollout[l-1]; composed = C_{L-1} ··· C_0 (rows =
    top-layer token). The residual lives inside C (j = i), nothing is added when composing.
    Their code takes s_i = std(y_i + eps) (= std(y_i): eps ignored, l.206); we use the
    module's sqrt(var + eps) — a 1e-12 difference for BERT.
    alti(eps=1e-6) is their distance (the default); eps=0.0 gives the plain L1 distance.
(d) alti_decoder — ALTI for pre-LN decoders, the authors' own pre-LN path: same file @4f89039,
    get_contributions with pre_layer_norm True: l.196-197 (T = residual_weighted_layer, no LN
    transform), l.210-214 (resultant = Σ_j T + dense bias; checked against the input of ln2,
    l.140-142, l.217), l.222 (-pairwise_distance(T, resultant, p=1): eps 1e-6), then min_sum
    and rollout as in (b). Values are the `values` module's output (l.135) on LN1(x), so
    b_V is in v; the residual is the block input hidden_states[l] (l.127, l.166-171). With
    (c)'s notation (r_pre, r_mid, a_ijh, g(h), the Conv1D / Llama W_O^h):
    T_i(x_j) = Σ_h a_ijh + δ_ij r_pre_i = Σ_h α^h_ij f^h(LN1(x_j)) + δ_ij x_i   (x = r_pre)
    r̂_i = Σ_j T_i(x_j) + b_O  (b_O in the whole only; 0 for Llama/Qwen2 without o_proj bias)
    c_ij = max(0, ‖r̂_i‖₁ - ‖T_i(x_j) - r̂_i + eps‖₁), C_l[i,j] = c_ij / Σ_k c_ik,
    rollout / composed = C_{L-1} ··· C_0 as in (b). Causal: j > i gives T_i(x_j) = 0, so
    c_ij = 0 exactly at eps = 0 (at eps = 1e-6 it is ≈ 1e-6·(#r̂_id>0 - #r̂_id<0), may be > 0).
    eps defaults to 0.0 here (the authors: 1e-6). residual = max_l max|r̂ - r_mid| / max|r_mid|
    with r_mid hooked at the input of ln_2 / post_attention_layernorm.
    Their config.yaml configures the branch for no model (only bert, roberta, distilbert, all
    pre_layer_norm 'False'), and their code could not run these decoders as is: GPT-2's
    `values` would be the fused c_attn output and Conv1D's (in, out) weight is viewed as
    Linear's (out, in) (l.151); GQA (transpose_for_scores assumes H value heads, l.53-56);
    RMSNorm (no .eps / .bias, read by their LN2 part l.236-240). Carried over as in (c):
    Conv1D slices, repeat_interleave of the KV heads, v incl. b_V (Qwen2), no RMSNorm term.
(c) llm_tt — facebookresearch/llm-transparency-tool @f1340f0, routes/contributions.py
    get_contributions l.17-52, get_contributions_with_one_off_part l.57-89,
    get_attention_contributions l.94-124, get_mlp_contributions l.129-142,
    apply_threshold_and_renormalize l.168-201; models/tlens_model.py decomposed_attn l.287-315;
    routes/graph.py build_full_graph l.79-133, build_paths_to_predictions l.136-163; the app
    (server/app.py l.533-554, l.584) builds the graph with renormalizing threshold t and
    keeps edges of weight > 0 (or, "renormalize" unticked, renormalizes at 0 — a no-op but
    for the FFN quirk below — and keeps edges of weight > t).
    For a pre-LN decoder block: r_pre = block input, r_mid = r_pre + attn_out (input of ln_2 /
    post_attention_layernorm), r_post = r_mid + ffn_out.
    a_ijh = α^h_ij v^{g(h)}_j W_O^h with v_j = value of norm1(x_j) incl. b_V, g(h) = h // (H/KV)
    (GQA; = HF repeat_kv = TL repeat_interleave), so r_mid_i = r_pre_i + Σ_{j,h} a_ijh + b_O
    (b_O belongs to no part, it is only in the whole). GPT-2 Conv1D: y = x W + b with W (in,
    out), so W_O^h = c_proj.weight[h·dh:(h+1)·dh, :] and v = c_attn(·)[:, 2d:3d]; Llama:
    W_O^h = o_proj.weight.T[h·dh:(h+1)·dh, :]. RMSNorm only enters through v_j (per token).
    contrib(parts P_k, whole w) = clip(‖w‖₁ - dist_1(P_k, w), min=1e-5) / Σ_k (same clip)
    attn[l,i,j,h], attn_resid[l,i] = contrib({a_ijh for all j,h} ∪ {r_pre_i}, r_mid_i)
    (future j > i give zero vectors, hence 1e-5/Σ, not 0); ffn[l,i], ffn_resid[l,i] =
    contrib({ffn_out_i, r_mid_i}, r_post_i). Rows sum to 1 over (j, h) + residual.
    The authors' decomposed_attn adds b_V a second time (TL's hook_v already has it; issue
    #35, open): authors_bv_quirk=True reproduces that, the default does not.
    Graph: nodes X0_j, A{l}_i (r_mid), M{l}_i (ffn), I{l}_i (r_post). With renormalizing
    threshold t each row's parts ≤ t are zeroed and the rest divided by their sum (the
    released code divides FFN rows by c_resid_i + Σ_all-tokens c_ffn instead: .sum(dim=())
    reduces all dims, PR #33, open; authors_ffn_quirk=True reproduces it); edges:
    (I{l-1}_j | X0_j) -> A{l}_i weight Σ_h attn[l,i,j,h] (+ attn_resid[l,i] when j = i: the
    two are merged into one edge), A{l}_i -> M{l}_i and M{l}_i -> I{l}_i weight ffn[l,i],
    A{l}_i -> I{l}_i weight ffn_resid[l,i]. Kept: every edge of weight > cut reachable
    backwards from I{L-1}_position along kept edges. The heads are not in the authors' edges
    (the app shows per-head contributions of a clicked edge); each edge here carries them
    ("heads": the per-head parts, after thresholding, that sum to the attention share).

Cross-checked once against the authors' own functions run from their sources on the same
tensors (float64): (a) max |diff| 3e-15, (b) 2e-13 (their eps), (c) contributions exact and
graph edge sets/weights identical with authors_ffn_quirk=True, t in {0.01, 0.04, 0.1}, (d)
their ModelWrapper (pre_layer_norm 'True', zero biases / .eps patched onto the RMSNorms and
a missing o_proj bias) + min_sum + compute_joint_attention on tiny Llama (KV = H, with and
without attention_bias) and Qwen2 (KV = H): per_layer and rollout max |diff| 1.6e-14 with
eps=1e-6 (1e-4 with eps=0.0); GPT-2 and GQA (their code cannot run) by the residual only.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F


def _f64(model):
    return copy.deepcopy(model).to(torch.float64).eval()


def _capture(model, input_ids, taps: dict) -> dict:
    """Run once; taps = {name: (module, "in" | "out")} -> {name: batch-0 tensor}, + "attn"."""
    got, handles = {}, []
    first = lambda o: o[0] if isinstance(o, (tuple, list)) else o  # noqa: E731
    for name, (mod, where) in taps.items():
        if where == "in":

            def hook(m, args, kwargs, name=name):
                got[name] = (args[0] if args else kwargs["hidden_states"])[0].detach()

            handles.append(mod.register_forward_pre_hook(hook, with_kwargs=True))
        else:

            def hook(m, args, out, name=name):
                got[name] = first(out)[0].detach()

            handles.append(mod.register_forward_hook(hook))
    try:
        with torch.no_grad():
            out = model(input_ids=torch.as_tensor(input_ids).view(1, -1), output_attentions=True)
    finally:
        for h in handles:
            h.remove()
    assert out.attentions is not None and out.attentions[0] is not None, "needs eager attention"
    got["attn"] = [a[0].detach() for a in out.attentions]
    return got


def _rel(a, b) -> float:
    """max |a - b| relative to the largest |b|."""
    return ((a - b).abs().max() / b.abs().max()).item()


def _cen(t):
    return t - t.mean(-1, keepdim=True)


@torch.no_grad()
def _bert_terms(bert, input_ids) -> list[dict]:
    m = _f64(bert)
    enc = getattr(m, "bert", m).encoder
    taps = {}
    for n, layer in enumerate(enc.layer):
        taps |= {f"x{n}": (layer, "in"), f"v{n}": (layer.attention.self.value, "out"),
                 f"y{n}": (layer.attention.output.LayerNorm, "in"),
                 f"out{n}": (layer.attention.output.LayerNorm, "out")}  # fmt: skip
    got = _capture(m, input_ids, taps)
    H = m.config.num_attention_heads
    layers = []
    for n, layer in enumerate(enc.layer):
        x, v, y, A = got[f"x{n}"], got[f"v{n}"], got[f"y{n}"], got["attn"][n]
        T, D = x.shape
        dense, ln = layer.attention.output.dense, layer.attention.output.LayerNorm
        f = torch.einsum("jhv,dhv->hjd", v.view(T, H, -1), dense.weight.view(D, H, -1))
        per_head = A[..., None] * f[:, None]  # (H, i, j, D): α^h_ij f^h(x_j)
        attn = per_head.sum(0)
        res = attn + torch.diag_embed(x.T).permute(1, 2, 0)  # + δ_ij x_i
        s = (y.var(-1, unbiased=False) + ln.eps).sqrt()
        lnt = ln.weight * _cen(res) / s[:, None, None]
        bias = ln.weight * _cen(dense.bias) / s[:, None] + ln.bias
        layers.append(dict(per_head=per_head, attn=attn, res=res, ln=lnt, bias=bias,
                           resid_pre_ln=_rel(res.sum(1) + dense.bias, y),
                           resid_post_ln=_rel(lnt.sum(1) + bias, got[f"out{n}"])))  # fmt: skip
    return layers


def _mixing(terms):  # (i, j, D) -> (i,): ‖Σ_{j≠i}‖ / (‖Σ_{j≠i}‖ + ‖term_ii‖)
    p = torch.diagonal(terms, dim1=0, dim2=1).T
    mix = (terms.sum(1) - p).norm(dim=-1)
    return mix / (mix + p.norm(dim=-1))


def kobayashi2021(bert_model, input_ids) -> dict:
    """Norms of Kobayashi et al. 2021 (BertNormOutput's outputs), float64, per layer."""
    layers = _bert_terms(bert_model, input_ids)
    stack = lambda k: torch.stack([d[k] for d in layers])  # noqa: E731
    return {
        "per_head": torch.stack([d["per_head"].norm(dim=-1) for d in layers]),  # (L,H,T,T)
        "attn": stack("attn").norm(dim=-1),  # (L,T,T)
        "attn_res": stack("res").norm(dim=-1),
        "attn_res_ln": stack("ln").norm(dim=-1),
        "mixing_attn": torch.stack([_mixing(d["attn"]) for d in layers]),  # (L,T)
        "mixing_attn_res": torch.stack([_mixing(d["res"]) for d in layers]),
        "mixing_attn_res_ln": torch.stack([_mixing(d["ln"]) for d in layers]),
        "residual_pre_ln": max(d["resid_pre_ln"] for d in layers),
        "residual_post_ln": max(d["resid_post_ln"] for d in layers),
    }


def _alti_rows(terms, whole, eps):
    """terms (i, j, D), whole (i, D) -> c_ij = max(0, ‖w_i‖₁ - ‖T_ij - w_i + eps‖₁), rows / Σ."""
    dist = F.pairwise_distance(terms, whole[:, None].expand_as(terms), p=1, eps=eps)
    c = (whole.norm(p=1, dim=-1)[:, None] - dist).clamp(min=0)
    return c / c.sum(-1, keepdim=True)


def _compose(per_layer):
    rollout = [per_layer[0]]
    for c in per_layer[1:]:
        rollout.append(c @ rollout[-1])
    return {"per_layer": torch.stack(per_layer), "rollout": torch.stack(rollout),
            "composed": rollout[-1]}  # fmt: skip


def alti(bert_model, input_ids, eps: float = 1e-6) -> dict:
    """ALTI (Ferrando et al. 2022): per-layer C_l (L,T,T), rollout (L,T,T), composed (T,T).
    eps: pairwise_distance's (1e-6 as the authors call it; 0.0 = plain L1 distance)."""
    layers = _bert_terms(bert_model, input_ids)
    per_layer = [_alti_rows(d["ln"], d["ln"].sum(1) + d["bias"], eps) for d in layers]
    return _compose(per_layer) | {"residual": max(d["resid_post_ln"] for d in layers)}


def _tt_contrib(parts, whole):
    """LLM-TT get_contributions: parts (P, T, D), whole (T, D) -> (P, T), columns sum to 1."""
    dist = F.pairwise_distance(parts, whole.expand_as(parts), p=1)
    c = (whole.norm(p=1, dim=-1) - dist).clip(min=1e-5)
    return c / c.sum(0, keepdim=True)


@torch.no_grad()
def _decoder_layers(model, input_ids, bv_quirk: bool = False) -> list[dict]:
    """Per block of a GPT-2 / Llama-family pre-LN decoder (float64): pre, mid, post, ffn
    (T, D), dec (i, j, h, D) = α^h_ij v^{g(h)}_j W_O^h, bO (tensor or 0.0)."""
    m = _f64(model)
    cfg = m.config
    base = m.transformer if hasattr(m, "transformer") else m.model
    gpt2 = hasattr(base, "h")
    blocks = base.h if gpt2 else base.layers
    D, H = cfg.hidden_size, cfg.num_attention_heads
    KV = getattr(cfg, "num_key_value_heads", None) or H
    dh = getattr(cfg, "head_dim", None) or D // H
    taps = {}
    for n, b in enumerate(blocks):
        taps |= {f"pre{n}": (b, "in"), f"post{n}": (b, "out"), f"ffn{n}": (b.mlp, "out"),
                 f"mid{n}": (b.ln_2 if gpt2 else b.post_attention_layernorm, "in"),
                 f"v{n}": (b.attn.c_attn if gpt2 else b.self_attn.v_proj, "out")}  # fmt: skip
    got = _capture(m, input_ids, taps)
    layers = []
    for n, b in enumerate(blocks):
        pre, A = got[f"pre{n}"], got["attn"][n]
        T = pre.shape[0]
        if gpt2:
            v, bv = got[f"v{n}"][:, 2 * D :], b.attn.c_attn.bias[2 * D :]
            WO, bO = b.attn.c_proj.weight.view(H, dh, D), b.attn.c_proj.bias
        else:
            o, vp = b.self_attn.o_proj, b.self_attn.v_proj
            v, WO = got[f"v{n}"], o.weight.T.reshape(H, dh, D)
            bv = vp.bias if vp.bias is not None else torch.zeros_like(vp.weight[:, 0])
            bO = o.bias if o.bias is not None else 0.0
        if bv_quirk:
            v = v + bv
        v = v.view(T, KV, dh).repeat_interleave(H // KV, dim=1)  # (j, h, dh)
        dec = torch.einsum("hij,jhe,hed->ijhd", A, v, WO)  # (i, j, h, D)
        layers.append(dict(pre=pre, mid=got[f"mid{n}"], post=got[f"post{n}"],
                           ffn=got[f"ffn{n}"], dec=dec, bO=bO))  # fmt: skip
    return layers


def llm_tt(model, input_ids, authors_bv_quirk: bool = False) -> dict:
    """LLM-TT contributions for a GPT-2 or Llama-family pre-LN decoder, float64."""
    out = {k: [] for k in ("attn", "attn_resid", "ffn", "ffn_resid", "decomposed")}
    res_mid = res_post = 0.0
    for d in _decoder_layers(model, input_ids, authors_bv_quirk):
        pre, mid, post, ffn, dec = d["pre"], d["mid"], d["post"], d["ffn"], d["dec"]
        T, _, H, D = dec.shape
        parts = torch.cat([dec.permute(1, 2, 0, 3).reshape(T * H, T, D), pre[None]])
        c = _tt_contrib(parts, mid)
        out["attn"].append(c[:-1].view(T, H, T).permute(2, 0, 1))  # (i, j, h)
        out["attn_resid"].append(c[-1])
        cf = _tt_contrib(torch.stack([ffn, mid]), post)
        out["ffn"].append(cf[0])
        out["ffn_resid"].append(cf[1])
        out["decomposed"].append(dec)
        if not authors_bv_quirk:
            res_mid = max(res_mid, _rel(dec.sum((1, 2)) + pre + d["bO"], mid))
        res_post = max(res_post, _rel(mid + ffn, post))
    out = {k: torch.stack(v) for k, v in out.items()}
    return out | {"residual_mid": res_mid, "residual_post": res_post}


def alti_decoder(model, input_ids, eps: float = 0.0) -> dict:
    """ALTI for a GPT-2 / Llama / Qwen2 pre-LN decoder (the authors' pre_layer_norm
    branch, see (d)): per_layer C_l (L,T,T), rollout (L,T,T), composed (T,T), residual."""
    per_layer, residual = [], 0.0
    for d in _decoder_layers(model, input_ids):
        pre, dec = d["pre"], d["dec"]
        terms = dec.sum(2) + torch.diag_embed(pre.T).permute(1, 2, 0)  # T_i(x_j), (i, j, D)
        whole = terms.sum(1) + d["bO"]  # r_mid_i as decomposed
        residual = max(residual, _rel(whole, d["mid"]))
        per_layer.append(_alti_rows(terms, whole, eps))
    return _compose(per_layer) | {"residual": residual}


def _renorm(t, blocks, resid, quirk=False):  # apply_threshold_and_renormalize; rows = resid
    blocks, resid = blocks * (blocks > t), resid * (resid > t)
    extra = blocks.dim() - resid.dim()
    if extra:  # attention: sum each row's (j, h) parts
        denom = resid + blocks.flatten(resid.dim()).sum(-1)
    else:  # FFN: one block per row (quirk: the sum over every token)
        denom = resid + (blocks.sum() if quirk else blocks)
    return blocks / denom.view(denom.shape + (1,) * extra), resid / denom


def llm_tt_graph(contribs: dict, position: int, threshold: float, renormalize: bool = True,
                 authors_ffn_quirk: bool = False):  # fmt: skip
    """Edges of the LLM-TT graph from I{L-1}_position back to the input tokens, as dicts
    {source, target, weight, heads (per-head parts or None), residual}, sorted.
    authors_ffn_quirk: renormalize FFN rows as the released code does (denominator
    c_resid_i + Σ_{all tokens} c_ffn, from .sum(dim=()) reducing everything; PR #33)."""
    L, T = contribs["attn_resid"].shape
    edges: dict = {}

    def add(u, v, w, heads=None, residual=0.0):
        e = edges.setdefault((u, v), {"source": u, "target": v, "weight": 0.0,
                                      "heads": None, "residual": 0.0})  # fmt: skip
        e["weight"] += float(w)
        e["residual"] += float(residual)
        if heads is not None:
            e["heads"] = [float(h) for h in heads]

    def src(n, j):  # the residual state token j enters layer n with
        return f"I{n - 1}_{j}" if n else f"X0_{j}"

    for n in range(L):
        ca, cr = contribs["attn"][n], contribs["attn_resid"][n]
        cf, cfr = contribs["ffn"][n], contribs["ffn_resid"][n]
        t = threshold if renormalize else 0.0  # the app renormalizes at 0 when unticked
        ca, cr = _renorm(t, ca, cr)
        cf, cfr = _renorm(t, cf, cfr, authors_ffn_quirk)
        for i in range(T):
            for j in range(T):
                add(src(n, j), f"A{n}_{i}", ca[i, j].sum(), heads=ca[i, j])
            add(src(n, i), f"A{n}_{i}", cr[i], residual=cr[i])
            add(f"A{n}_{i}", f"M{n}_{i}", cf[i])
            add(f"M{n}_{i}", f"I{n}_{i}", cf[i])
            add(f"A{n}_{i}", f"I{n}_{i}", cfr[i])
    cut = 0.0 if renormalize else threshold
    into: dict = {}
    for (_, v), e in edges.items():
        if e["weight"] > cut:
            into.setdefault(v, []).append(e)
    kept, todo, seen = [], [f"I{L - 1}_{position}"], set()
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        for e in into.get(node, []):
            kept.append(e)
            todo.append(e["source"])
    return sorted(kept, key=lambda e: (e["target"], e["source"]))
