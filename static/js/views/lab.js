// The attention lab: the seed tutorial's claims as experiments on the current input,
// each from its /api/v1/lab route, with a bilingual explanation.
import { heatmap } from "../plots.js";

export const EXPERIMENTS = [
  "scaling", "positions", "masks", "cache", "metrics", "rollout", "ablation", "compare",
];

const TEXT = {
  en: {
    scaling: "Why divide by √d_k",
    scaling_explain: "The scores q·kᵀ grow with the head's width d_k; without dividing by √d_k the softmax saturates: one key takes almost all the weight and the gradients vanish. The same input runs with and without the scaling; lower entropy and higher peaks show the saturation.",
    positions: "Order needs positions",
    positions_explain: "Self-attention treats its input as a set. With the positional encoding switched off, the attention of a permuted input (猫追狗 → 狗追猫) is exactly the permuted attention of the original; with it on, it is not.",
    masks: "Masks at work",
    masks_explain: "The causal mask hides later tokens from the decoder: switched off, the decoder would read the future. The padding mask hides <pad> keys: in a padded batch of two sentences, the shorter one's weights on padding are 0 and equal its weights when run alone.",
    cache: "The KV cache",
    cache_explain: "Decoding one token at a time, the cache keeps every layer's keys and values, so each step computes only the new query's row over the cached keys. The logits match a full recomputation.",
    metrics: "Head metrics",
    metrics_explain: "A number per head: entropy (how spread out), distance (how far it looks), previous-token weight, weight on the first and on special tokens, and for cross-attention how often its strongest key lies on the diagonal (alignment). Click a column to sort.",
    rollout: "Attention rollout",
    rollout_explain: "How much each input token flows into each position through all self-attention layers (Abnar & Zuidema 2020): heads averaged, the residual connection added as the identity, layers multiplied.",
    ablation: "Head ablation",
    ablation_explain: "Switch heads off (their output set to zero) and see what changes: the transcription and the probability of each of its tokens, or for an embedding model the cosine between the embeddings.",
    compare: "Compare",
    compare_explain: "The same head for two inputs, or two models, side by side, and their difference on the tokens found in both.",
    experiment: "Experiment", scaled: "scaled: q·kᵀ/√d_k", unscaled: "unscaled: q·kᵀ",
    mean_entropy: "mean entropy", bits: "bits", max_weight: "mean max weight",
    original: "input", permuted: "permuted input", with_pe: "with positional encoding",
    without_pe: "without positional encoding", max_diff: "max |W(permuted) − P·W·Pᵀ|",
    with_mask: "causal mask on", without_mask: "causal mask off",
    future: "mean weight on later tokens", padding_mask: "padding mask of the batch",
    batch_weights: "the shorter sentence in the batch", pad_weight: "weight on padding",
    alone_diff: "max difference from running it alone", no_decoder: "This model has no decoder: no causal mask.",
    step: "Step", fed: "fed", predicted: "predicts", cache_bytes: "cache per layer",
    cached_diff: "max |cached − uncached logits|", metric: "Metric",
    other_text: "Second text", other_model: "Second model", same_model: "(same model)",
    difference: "difference (first − second)", output: "output", ablated: "with the heads off",
    probability: "probability", cosine: "embedding cosine with/without", apply: "Apply",
    none_selected: "No head switched off: nothing changes.", first: "first", second: "second",
    piece: "decoded", not_ended: "stopped at the length limit, without <eos>",
    second_sentence: "Second sentence (default: the first half)",
  },
  zh: {
    scaling: "为什么除以 √d_k",
    scaling_explain: "分数 q·kᵀ 随头的维度 d_k 增大；不除以 √d_k，softmax 会饱和：几乎所有权重落在一个键上，梯度消失。同一输入分别在缩放与不缩放下运行，更低的熵和更高的峰值说明了饱和。",
    positions: "顺序需要位置编码",
    positions_explain: "自注意力把输入当作集合。关闭位置编码后，打乱顺序的输入（猫追狗 → 狗追猫）的注意力恰好是原注意力按同样方式打乱；打开位置编码则不然。",
    masks: "掩码的作用",
    masks_explain: "因果掩码对解码器隐藏后面的词元：关掉它，解码器就能看到未来。填充掩码隐藏 <pad>：两句话组成的填充批次中，较短那句对填充的权重为 0，且与单独运行时相同。",
    cache: "KV 缓存",
    cache_explain: "逐个词元解码时，缓存保存每层的键和值，每一步只计算新查询对缓存键的那一行。其 logits 与完整重算一致。",
    metrics: "注意力头指标",
    metrics_explain: "每个头的数值：熵（分散程度）、距离（看多远）、前一个词元的权重、第一个词元和特殊词元的权重，以及交叉注意力最强键落在对角线上的比例（对齐）。点击列名排序。",
    rollout: "注意力展开（rollout）",
    rollout_explain: "经过所有自注意力层，每个输入词元流向每个位置的程度（Abnar & Zuidema 2020）：各头平均，残差连接作为单位矩阵加入，各层相乘。",
    ablation: "注意力头消融",
    ablation_explain: "关闭一些头（输出置零），看看有何变化：转写结果及其每个词元的概率；对句向量模型则是前后句向量的余弦。",
    compare: "对比",
    compare_explain: "同一个头在两个输入（或两个模型）上的注意力并排显示，以及两者共有词元上的差。",
    experiment: "实验", scaled: "缩放：q·kᵀ/√d_k", unscaled: "不缩放：q·kᵀ",
    mean_entropy: "平均熵", bits: "比特", max_weight: "平均最大权重",
    original: "原输入", permuted: "打乱后的输入", with_pe: "有位置编码", without_pe: "无位置编码",
    max_diff: "最大 |W(打乱) − P·W·Pᵀ|", with_mask: "开启因果掩码", without_mask: "关闭因果掩码",
    future: "对后面词元的平均权重", padding_mask: "批次的填充掩码",
    batch_weights: "批次中较短的句子", pad_weight: "填充上的权重",
    alone_diff: "与单独运行的最大差", no_decoder: "该模型没有解码器，没有因果掩码。",
    step: "步", fed: "输入", predicted: "预测", cache_bytes: "每层缓存",
    cached_diff: "最大 |缓存 − 非缓存 logits|", metric: "指标",
    other_text: "第二段文本", other_model: "第二个模型", same_model: "（同一模型）",
    difference: "差（第一 − 第二）", output: "输出", ablated: "关闭这些头后",
    probability: "概率", cosine: "前后句向量余弦", apply: "应用",
    none_selected: "没有关闭任何头：没有变化。", first: "第一", second: "第二",
    piece: "解码片段", not_ended: "到达长度上限仍未输出 <eos>",
    second_sentence: "第二句（默认：前一半）",
  },
};

const answers = new Map(); // (route, request) -> promise of the answer

function ask(ctx, route, body) {
  const key = `${route}\u0000${JSON.stringify(body)}`;
  if (!answers.has(key)) {
    const request = ctx.lab(route, body);
    answers.set(key, request);
    request.catch(() => answers.delete(key));
    if (answers.size > 64) answers.delete(answers.keys().next().value);
  }
  return answers.get(key);
}

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, props);
  node.append(...children);
  return node;
}

function plotBox(parent) {
  const box = el("div", { className: "plot" });
  parent.append(box);
  return box;
}

function table(headers, rows) {
  const head = el("tr", {}, ...headers.map((h) => el("th", { scope: "col", textContent: h })));
  const body = rows.map((row) => el("tr", {}, ...row.map((v) => el("td", { textContent: fmt(v) }))));
  return el("table", { className: "lab-table" }, el("thead", {}, head), el("tbody", {}, ...body));
}

function fmt(v) {
  if (v === null || v === undefined) return "–";
  if (typeof v === "number" && !Number.isInteger(v)) return Math.abs(v) < 1e-3 && v !== 0 ? v.toExponential(1) : v.toFixed(3);
  return String(v);
}

export async function renderLab(ctx) {
  const { state, elements, t } = ctx;
  const L = (key) => TEXT[state.lang]?.[key] ?? TEXT.en[key];
  const { focused } = ctx;
  const grid = elements.grid;
  grid.hidden = false;
  grid.replaceChildren();
  const picker = el("select", { id: "lab-experiment" });
  const info = ctx.modelInfo();
  for (const name of EXPERIMENTS) {
    picker.append(el("option", { value: name, textContent: L(name), disabled: unavailable(info, name) }));
  }
  picker.value = state.lab;
  picker.addEventListener("change", () => ctx.update({ lab: picker.value }));
  const bar = el("div", { className: "lab-bar" },
    el("label", { htmlFor: "lab-experiment", textContent: L("experiment") }), picker);
  const explain = el("p", { className: "explain lab-explain", textContent: L(`${state.lab}_explain`) });
  const out = el("div", { className: "lab-out", id: "lab-out" });
  grid.append(bar, explain, out);
  const base = { model: state.model, text: state.text };
  const head = { ...base, type: state.type, layer: state.layer, head: state.head };
  const title = (what) => `${what} · ${t(state.type)} · ${t("layer")} ${state.layer} · ${t("head")} ${state.head}`;
  try {
    await RENDER[state.lab]({ ctx, L, out, base, head, title });
  } catch (err) {
    if (ctx.stale()) return;
    // shown here, under the lab's own controls, so another choice can be made
    const detail = err && err.detail !== undefined ? err.detail : String(err);
    const text = typeof detail === "string" ? detail : JSON.stringify(detail);
    out.append(el("p", { className: "status error", id: "lab-error", textContent: text }));
  }
  if (ctx.stale()) return;
  elements.explain.textContent = "";
  if (focused) document.getElementById(focused)?.focus(); // the control just used
}

// experiments a model cannot run: the KV cache needs a decoder over an encoder's output,
// the permutation an encoder with positional encodings
function unavailable(info, name) {
  if (name === "cache") return info.architecture !== "encoder-decoder";
  if (name === "positions") return info.encoder_layers === 0 || info.positional === "none";
  return false;
}

const RENDER = {
  async scaling({ ctx, L, out, head, title }) {
    const r = await ask(ctx, "scaling", head);
    if (ctx.stale()) return;
    const { rows, columns } = r.matrices;
    const summary = `${L("mean_entropy")}: ${fmt(r.mean_entropy_scaled)} → ${fmt(r.mean_entropy_unscaled)} ${L("bits")} (d_k = ${r.head_dim})`;
    out.append(el("p", { className: "lab-summary", textContent: summary }));
    await heatmap(plotBox(out), { z: r.matrices.first, rows, columns, title: title(L("scaled")), zmin: 0, zmax: 1, valueLabel: "w" });
    await heatmap(plotBox(out), { z: r.matrices.second, rows, columns, title: title(L("unscaled")), zmin: 0, zmax: 1, valueLabel: "w" });
    const layer = r.heads.filter((h) => h.layer === ctx.state.layer);
    out.append(table(
      [ctx.t("head"), `${L("mean_entropy")} (${L("scaled")})`, `${L("mean_entropy")} (${L("unscaled")})`, `${L("max_weight")} (${L("scaled")})`, `${L("max_weight")} (${L("unscaled")})`],
      layer.map((h) => [h.head, h.entropy_scaled, h.entropy_unscaled, h.max_weight_scaled, h.max_weight_unscaled]),
    ));
  },

  async positions({ ctx, L, out, base }) {
    const { state } = ctx;
    const r = await ask(ctx, "positions", { ...base, layer: state.type === "encoder.self" ? state.layer : 0, head: state.head });
    if (ctx.stale()) return;
    const lines = [
      `${L("max_diff")}: ${L("without_pe")} ${fmt(r.without_positions.max_abs_diff)} · ${L("with_pe")} ${fmt(r.with_positions.max_abs_diff)}`,
      `${L("permuted")}: ${r.permuted_tokens.join(" ")}`,
    ];
    for (const line of lines) out.append(el("p", { className: "lab-summary", textContent: line }));
    for (const [key, c] of [["without_pe", r.without_positions], ["with_pe", r.with_positions]]) {
      await heatmap(plotBox(out), { z: c.original, rows: r.tokens, columns: r.tokens, title: `${L(key)} · ${L("original")}`, zmin: 0, zmax: 1, valueLabel: "w" });
      await heatmap(plotBox(out), { z: c.permuted, rows: r.permuted_tokens, columns: r.permuted_tokens, title: `${L(key)} · ${L("permuted")}`, zmin: 0, zmax: 1, valueLabel: "w" });
    }
  },

  async masks({ ctx, L, out, base }) {
    const { state } = ctx;
    const second = el("input", { type: "text", id: "lab-second", value: state.other, maxLength: 8000 });
    const apply = el("button", { type: "button", id: "lab-second-apply", textContent: L("apply") });
    apply.addEventListener("click", () => ctx.update({ other: second.value }));
    second.addEventListener("keydown", (e) => { if (e.key === "Enter") apply.click(); });
    out.append(el("div", { className: "lab-bar" },
      el("label", { htmlFor: "lab-second", textContent: L("second_sentence") }), second, apply));
    const r = await ask(ctx, "masks", { ...base, layer: state.layer, head: state.head, second: state.other.trim() ? state.other : null });
    if (ctx.stale()) return;
    if (r.causal) {
      const c = r.causal;
      out.append(el("p", { className: "lab-summary", textContent: `${L("future")}: ${fmt(c.future_weight_with)} → ${fmt(c.future_weight_without)}` }));
      await heatmap(plotBox(out), { z: c.with_mask, rows: c.rows, columns: c.rows, title: `${ctx.t("decoder.self")} · ${L("with_mask")}`, zmin: 0, zmax: 1, valueLabel: "w" });
      await heatmap(plotBox(out), { z: c.without_mask, rows: c.rows, columns: c.rows, title: `${ctx.t("decoder.self")} · ${L("without_mask")}`, zmin: 0, zmax: 1, valueLabel: "w" });
    } else {
      out.append(el("p", { className: "lab-summary", textContent: L("no_decoder") }));
    }
    const p = r.padding;
    out.append(el("p", { className: "lab-summary", textContent: `${L("pad_weight")}: ${fmt(p.pad_weight)} · ${L("alone_diff")}: ${fmt(p.max_abs_diff_alone)}` }));
    const positions = Array.from({ length: p.length }, (_, i) => String(i));
    await heatmap(plotBox(out), { z: p.mask.map((row) => row.map(Number)), rows: ["1", "2"], columns: positions, title: L("padding_mask"), zmin: 0, zmax: 1, valueLabel: "mask" });
    const tokens = [...p.tokens[p.shorter], ...Array(p.length - p.tokens[p.shorter].length).fill("<pad>")];
    await heatmap(plotBox(out), { z: p.weights, rows: tokens, columns: tokens, title: `${L("batch_weights")} · ${ctx.t("encoder.self")}`, zmin: 0, zmax: 1, valueLabel: "w" });
  },

  async cache({ ctx, L, out, base }) {
    const { state } = ctx;
    const r = await ask(ctx, "kv-cache", base);
    if (ctx.stale()) return;
    const last = r.steps.length - 1;
    const index = Math.min(state.step, last);
    const step = r.steps[index];
    const slider = el("input", { type: "range", id: "lab-step", min: "0", max: String(last), value: String(index) });
    slider.setAttribute("aria-label", L("step"));
    slider.addEventListener("change", () => ctx.update({ step: Number(slider.value) }, { push: false }));
    const prev = el("button", { type: "button", textContent: "←", disabled: index === 0 });
    prev.id = "lab-prev";
    prev.setAttribute("aria-label", `${L("step")} −1`);
    prev.addEventListener("click", () => ctx.update({ step: index - 1 }, { push: false }));
    const next = el("button", { type: "button", textContent: "→", disabled: index === last });
    next.id = "lab-next";
    next.setAttribute("aria-label", `${L("step")} +1`);
    next.addEventListener("click", () => ctx.update({ step: index + 1 }, { push: false }));
    out.append(el("div", { className: "lab-bar" }, prev, slider, next,
      el("span", { id: "lab-step-label", textContent: `${L("step")} ${index} / ${last}` })));
    const lines = [
      `${L("piece")}: ${r.piece}${r.pieces > 1 ? ` (1 / ${r.pieces})` : ""}${r.ended ? "" : ` · ${L("not_ended")}`}`,
      `${L("fed")} ${step.token} → ${L("predicted")} ${step.predicted}`,
      `${L("cache_bytes")}: ${step.cache_bytes.map((b) => `${(b / 1024).toFixed(1)} KiB`).join(" · ")}`,
      `${L("cached_diff")}: ${fmt(step.max_abs_diff)}`,
    ];
    for (const line of lines) out.append(el("p", { className: "lab-summary", textContent: line }));
    const layer = Math.min(state.type === "decoder.self" ? state.layer : 0, step.rows.length - 1);
    const heads = step.rows[layer].map((_, h) => `${ctx.t("head")} ${h}`);
    await heatmap(plotBox(out), { z: step.rows[layer], rows: heads, columns: step.keys, title: `${ctx.t("decoder.self")} · ${ctx.t("layer")} ${layer} · ${L("step")} ${index}`, zmin: 0, zmax: 1, valueLabel: "w" });
  },

  async metrics({ ctx, L, out, base }) {
    const { state } = ctx;
    const r = await ask(ctx, "metrics", base);
    if (ctx.stale()) return;
    const names = Object.keys(r.explain);
    const rows = r.rows.filter((row) => row.type === state.type);
    const metric = el("select", { id: "lab-metric" });
    for (const name of names) metric.append(el("option", { value: name, textContent: name }));
    const box = el("div", { className: "plot" });
    const draw = () => {
      const layers = Math.max(...rows.map((row) => row.layer)) + 1;
      const heads = Math.max(...rows.map((row) => row.head)) + 1;
      const z = Array.from({ length: layers }, (_, l) => Array.from({ length: heads }, (_, h) => rows.find((row) => row.layer === l && row.head === h)?.[metric.value] ?? null));
      return heatmap(box, { z, rows: z.map((_, l) => `L${l}`), columns: Array.from({ length: heads }, (_, h) => `H${h}`), title: `${metric.value} · ${ctx.t(state.type)} — ${r.explain[metric.value]}`, valueLabel: metric.value });
    };
    metric.addEventListener("change", draw);
    out.append(el("div", { className: "lab-bar" }, el("label", { htmlFor: "lab-metric", textContent: L("metric") }), metric), box);
    await draw();
    const columns = ["type", "layer", "head", ...names];
    const sortable = table(columns, rows.map((row) => columns.map((c) => (c === "type" ? ctx.t(row[c]) : row[c]))));
    sortable.id = "lab-metrics-table";
    let order = { column: null, descending: true };
    sortable.querySelectorAll("th").forEach((th, i) => {
      th.tabIndex = 0;
      const sort = () => {
        order = { column: i, descending: order.column === i ? !order.descending : true };
        const body = sortable.tBodies[0];
        const value = (tr) => {
          const v = Number.parseFloat(tr.children[i].textContent);
          return Number.isNaN(v) ? Number.NEGATIVE_INFINITY : v;
        };
        const sorted = [...body.rows].sort((a, b) => (order.descending ? value(b) - value(a) : value(a) - value(b)));
        body.append(...sorted);
        sortable.querySelectorAll("th").forEach((h, j) => h.setAttribute("aria-sort", j === i ? (order.descending ? "descending" : "ascending") : "none"));
      };
      th.addEventListener("click", sort);
      th.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sort(); } });
    });
    out.append(sortable);
  },

  async rollout({ ctx, out, base }) {
    const { state } = ctx;
    const type = state.type.endsWith(".self") ? state.type : ctx.modelInfo().attention_types[0];
    const r = await ask(ctx, "rollout", { ...base, type });
    if (ctx.stale()) return;
    out.append(el("p", { className: "lab-summary", textContent: r.assumes }));
    await heatmap(plotBox(out), { z: r.matrix, rows: r.tokens, columns: r.tokens, title: `rollout · ${ctx.t(r.type)}`, zmin: 0, zmax: 1, valueLabel: "w" });
  },

  async ablation({ ctx, L, out, base }) {
    const { state } = ctx;
    const info = ctx.modelInfo();
    const layers = state.type.startsWith("encoder") ? info.encoder_layers : info.decoder_layers;
    const inRange = (key) => {
      const [l, h] = key.split(".").map(Number);
      return l >= 0 && l < layers && h >= 0 && h < info.heads;
    };
    const chosen = new Set((state.ablate ? state.ablate.split(",") : []).filter(inRange));
    const picker = el("div", { className: "lab-heads", id: "lab-heads" });
    for (let l = 0; l < layers; l++) {
      const row = el("div", { className: "grid-row" }, el("span", { className: "grid-label", textContent: `${ctx.t("layer")} ${l}` }));
      for (let h = 0; h < info.heads; h++) {
        const box = el("input", { type: "checkbox", checked: chosen.has(`${l}.${h}`), value: `${l}.${h}` });
        box.setAttribute("aria-label", `${ctx.t("layer")} ${l} ${ctx.t("head")} ${h}`);
        row.append(el("label", { className: "check" }, box, ` ${h}`));
      }
      picker.append(row);
    }
    const apply = el("button", { type: "button", id: "lab-apply", textContent: L("apply") });
    apply.addEventListener("click", () => {
      const picked = [...picker.querySelectorAll("input:checked")].map((b) => b.value);
      ctx.update({ ablate: picked.join(",") });
    });
    out.append(el("p", { textContent: ctx.t(state.type) }), picker, apply);
    const heads = [...chosen].map((key) => {
      const [layer, head] = key.split(".").map(Number);
      return { type: state.type, layer, head };
    });
    const r = await ask(ctx, "ablation", { ...base, heads });
    if (ctx.stale()) return;
    if (!heads.length) out.append(el("p", { className: "lab-summary", textContent: L("none_selected") }));
    if (r.cosine !== null) {
      out.append(el("p", { className: "lab-summary", id: "lab-ablation-result", textContent: `${L("cosine")}: ${fmt(r.cosine)}` }));
      return;
    }
    out.append(el("p", { className: "lab-summary", id: "lab-ablation-result", textContent: `${L("output")}: ${r.output.join(" ")} → ${L("ablated")}: ${r.ablated_output.join(" ")}` }));
    out.append(table([ctx.t("key"), `${L("probability")}`, `${L("probability")} (${L("ablated")})`],
      r.probability_tokens.map((token, i) => [token, r.probabilities[i], r.ablated_probabilities[i]])));
  },

  async compare({ ctx, L, out, head }) {
    const { state } = ctx;
    const other = el("input", { type: "text", id: "lab-other", value: state.other, maxLength: 8000 });
    const otherLabel = el("label", { htmlFor: "lab-other", textContent: L("other_text") });
    const modelPick = el("select", { id: "lab-other-model" });
    modelPick.append(el("option", { value: "", textContent: L("same_model") }));
    for (const id of ctx.modelIds()) modelPick.append(el("option", { value: id, textContent: id }));
    modelPick.value = ctx.modelIds().includes(state.vs) ? state.vs : "";
    const modelLabel = el("label", { htmlFor: "lab-other-model", textContent: L("other_model") });
    const apply = el("button", { type: "button", id: "lab-compare-apply", textContent: L("apply") });
    apply.addEventListener("click", () => ctx.update({ other: other.value, vs: modelPick.value }));
    other.addEventListener("keydown", (e) => { if (e.key === "Enter") apply.click(); });
    out.append(el("div", { className: "lab-bar" }, otherLabel, other, modelLabel, modelPick, apply));
    const r = await ask(ctx, "compare", { ...head, other_text: state.other.trim() ? state.other : null, other_model: modelPick.value || null });
    if (ctx.stale()) return;
    const tag = (i) => `${L(i ? "second" : "first")}: ${r.models[i]}`;
    await heatmap(plotBox(out), { z: r.first, rows: r.first_rows, columns: r.first_columns, title: tag(0), zmin: 0, zmax: 1, valueLabel: "w" });
    await heatmap(plotBox(out), { z: r.second, rows: r.second_rows, columns: r.second_columns, title: tag(1), zmin: 0, zmax: 1, valueLabel: "w" });
    if (r.aligned_rows.length && r.aligned_columns.length) {
      await heatmap(plotBox(out), { z: r.difference, rows: r.aligned_rows, columns: r.aligned_columns, title: L("difference"), zmin: -1, zmax: 1, valueLabel: "Δ", colorscale: "RdBu" });
    }
  },
};
