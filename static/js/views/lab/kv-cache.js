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
  });
}

export const experiment = {
  id: "kv-cache",
  label: "lab_kv_cache",
  explain: "lab_kv_cache_explain",
  draw,
};
