// The KV cache: decoding step by step, each step's new query row over the cached keys.
import { ask, el, fmt, summary, weights } from "./shared.js";

function stepButton(id, text, label, disabled, onClick) {
  const button = el("button", { type: "button", id, textContent: text, disabled });
  button.setAttribute("aria-label", label);
  button.addEventListener("click", onClick);
  return button;
}

async function draw({ ctx, t, out, base }) {
  const { state } = ctx;
  const r = await ask(ctx, "kv-cache", base);
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
  const kib = step.cache_bytes.map((b) => `${(b / 1024).toFixed(1)} KiB`).join(" · ");
  summary(out, `${t("lab_piece")}: ${r.piece}${pieces} → ${r.output.join(" ")}${ended}`);
  summary(out, `${t("lab_fed")} ${step.token} → ${t("lab_predicted")} ${step.predicted}`);
  summary(out, `${t("lab_kv_cache_bytes")}: ${kib}`);
  summary(out, `${t("lab_cached_diff")}: ${fmt(step.max_abs_diff)}`);
  const layer = Math.min(state.type === "decoder.self" ? state.layer : 0, step.rows.length - 1);
  await weights(out, {
    z: step.rows[layer],
    rows: step.rows[layer].map((_, h) => `${t("head")} ${h}`),
    columns: step.keys,
    title: `${t("decoder.self")} · ${t("layer")} ${layer} · ${t("lab_step")} ${index}`,
  });
}

export const experiment = {
  id: "kv-cache",
  aliases: ["cache"], // its id in links from before the rename
  label: "lab_kv_cache",
  explain: "lab_kv_cache_explain",
  draw,
};
