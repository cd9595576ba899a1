// The KV cache: decoding step by step, each step's new query row over the cached keys.
import { ask, el, fmt, summary, weights } from "./shared.js";

function stepButton(id, text, label, disabled, onClick) {
  const button = el("button", { type: "button", id, textContent: text, disabled });
  button.setAttribute("aria-label", label);
  button.addEventListener("click", onClick);
  return button;
}

const fmtRatio = (x) => (Number.isInteger(x) ? String(x) : x.toFixed(1));

async function draw({ ctx, t, out, base }) {
  const { state } = ctx;
  const info = ctx.modelInfo();
  const decoder = info.attention.find((a) => a.type === "decoder.self");
  // one layer's rows: the lab's layer where its type is the decoder's self-attention
  const wanted = state.type === "decoder.self" ? state.layer : 0;
  const layer = Math.min(wanted, (decoder?.layers ?? 1) - 1);
  const r = await ask(ctx, "kv-cache", { ...base, layer });
  if (ctx.stale()) return;
  const last = r.steps.length - 1;
  const index = Math.min(state.step, last);
  const step = r.steps[index];
  const goTo = (i) => ctx.update({ step: i }, { push: false });
  const slider = el("input", {
    type: "range",
    id: "lab-step",
    min: "0",
    max: String(last),
    value: String(index),
  });
  slider.setAttribute("aria-label", t("lab_step"));
  slider.addEventListener("change", () => goTo(Number(slider.value)));
  const prev = stepButton("lab-prev", "←", `${t("lab_step")} −1`, index === 0, () =>
    goTo(index - 1),
  );
  const next = stepButton("lab-next", "→", `${t("lab_step")} +1`, index === last, () =>
    goTo(index + 1),
  );
  out.append(
    el(
      "div",
      { className: "lab-bar" },
      prev,
      slider,
      next,
      el("span", { id: "lab-step-label", textContent: `${t("lab_step")} ${index} / ${last}` }),
    ),
  );
  const pieces = r.pieces > 1 ? ` (1 / ${r.pieces})` : "";
  const ended = r.ended ? "" : ` · ${t("lab_not_ended")}`;
  const output = r.output_text ?? r.output.join(" ");
  summary(out, `${t("lab_piece")}: ${r.piece}${pieces} → ${output}${ended}`);
  const fed =
    step.fed_tokens > 1
      ? t("lab_prompt_pass").replace("{n}", String(step.fed_tokens)).replace("{token}", step.token)
      : `${t("lab_fed")} ${step.token}`;
  summary(out, `${fed} → ${t("lab_predicted")} ${step.predicted}`, { id: "lab-step-fed" });
  // the cache of every layer is the same size: one layer's, and all of them together
  const total = step.cache_bytes.reduce((a, b) => a + b, 0);
  const kib = (b) => `${(b / 1024).toFixed(1)} KiB`;
  const sizes = `${kib(step.cache_bytes[0])} × ${step.cache_bytes.length} = ${kib(total)}`;
  summary(out, `${t("lab_kv_cache_bytes")}: ${sizes}`, { id: "lab-cache-bytes" });
  if (r.kv_heads < r.query_heads) {
    const shared = t("lab_kv_shared")
      .replace("{kv}", String(r.kv_heads))
      .replace("{q}", String(r.query_heads))
      .replace("{ratio}", fmtRatio(r.query_heads / r.kv_heads));
    summary(out, shared, { id: "lab-kv-shared" });
  }
  summary(out, `${t("lab_cached_diff")}: ${fmt(step.max_abs_diff)}`);
  const rows = step.rows[0];
  await weights(out, {
    z: rows,
    rows: rows.map((_, h) => `${t("head")} ${h}`),
    columns: step.keys,
    title: `${t("decoder.self")} · ${t("layer")} ${r.layers[0]} · ${t("lab_step")} ${index}`,
    t,
  });
}

// its strings, in both languages
const STRINGS = {
  en: {
    lab_kv_cache: "The KV cache",
    lab_kv_cache_explain:
      "Decoding one token at a time, the cache keeps every layer's keys and values, so each step computes only the new query's row over the cached keys. The logits match a full recomputation.",
    lab_step: "Step",
    lab_fed: "fed",
    lab_predicted: "predicts",
    lab_kv_cache_bytes: "cache per layer",
    lab_cached_diff: "max |cached − uncached logits|",
    lab_prompt_pass: "the prompt's {n} tokens read into the cache in one pass; its last, {token},",
    lab_kv_shared:
      "grouped-query attention: the cache holds {kv} key/value heads per layer for its {q} query heads: {ratio}× smaller than one per query head",
    lab_piece: "decoded (input → output)",
    lab_not_ended: "stopped at the length limit, before an end token",
  },
  zh: {
    lab_kv_cache: "KV 缓存",
    lab_kv_cache_explain:
      "逐个词元解码时，缓存保存每层的键和值，每一步只计算新查询对缓存键的那一行。其 logits 与完整重算一致。",
    lab_step: "步",
    lab_fed: "输入",
    lab_predicted: "预测",
    lab_kv_cache_bytes: "每层缓存",
    lab_cached_diff: "最大 |缓存 − 非缓存 logits|",
    lab_prompt_pass: "提示的 {n} 个词元一次读入缓存；最后一个 {token}",
    lab_kv_shared:
      "分组查询注意力：每层缓存 {kv} 个键/值头，供 {q} 个查询头共用：是每个查询头各存一份的 1/{ratio}",
    lab_piece: "解码（输入 → 输出）",
    lab_not_ended: "到达长度上限，仍未输出结束词元",
  },
};

export const experiment = {
  id: "kv-cache",
  state: { step: 0 }, // the decoding step shown
  label: "lab_kv_cache",
  explain: "lab_kv_cache_explain",
  draw,
  strings: STRINGS,
};
