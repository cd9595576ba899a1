// The attention lab: the seed tutorial's claims as experiments on the current input, each
// from its /api/v1/lab route with a bilingual explanation. An experiment is a module
// exporting `experiment = { id, label, explain, draw }` (label and explain: i18n keys); the
// picker lists them in this order and offers those the model's info lists in
// capabilities.experiments. An experiment may bring its own i18n strings (`strings`,
// {en: {key: text}, zh: {key: text}}), and keeps its settings in the URL's `rep`, which a
// change of experiment clears.
import { canRun } from "../../model-info.js";
import { experiment as ablation } from "./ablation.js";
import { experiment as compare } from "./compare.js";
import { experiment as induction } from "./induction.js";
import { experiment as kvCache } from "./kv-cache.js";
import { experiment as masks } from "./masks.js";
import { experiment as metrics } from "./metrics.js";
import { experiment as needle } from "./needle.js";
import { experiment as positions } from "./positions.js";
import { experiment as rollout } from "./rollout.js";
import { experiment as scaling } from "./scaling.js";
import { el } from "./shared.js";

export const EXPERIMENTS = [
  scaling,
  positions,
  masks,
  kvCache,
  metrics,
  rollout,
  ablation,
  compare,
  induction,
  needle,
];

export const EXPERIMENT_IDS = EXPERIMENTS.map((e) => e.id);

// the strings the experiments bring, as one table per language
function mergedStrings(experiments) {
  const merged = {};
  for (const e of experiments) {
    for (const [lang, table] of Object.entries(e.strings ?? {})) {
      merged[lang] = { ...merged[lang], ...table };
    }
  }
  return merged;
}

function experimentOf(id) {
  return EXPERIMENTS.find((e) => e.id === id) ?? EXPERIMENTS[0];
}

async function drawLab(ctx) {
  const { state, elements, t, focused } = ctx;
  const grid = elements.grid;
  grid.hidden = false;
  grid.replaceChildren();
  const info = ctx.modelInfo();
  const current = experimentOf(state.lab);
  const picker = el("select", { id: "lab-experiment" });
  for (const e of EXPERIMENTS) {
    picker.append(
      el("option", { value: e.id, textContent: t(e.label), disabled: !canRun(info, e.id) }),
    );
  }
  picker.value = current.id;
  picker.addEventListener("change", () => ctx.update({ lab: picker.value, rep: "" }));
  const bar = el(
    "div",
    { className: "lab-bar" },
    el("label", { htmlFor: "lab-experiment", textContent: t("lab_experiment") }),
    picker,
  );
  const explain = el("p", { className: "explain lab-explain", textContent: t(current.explain) });
  const out = el("div", { className: "lab-out", id: "lab-out" });
  grid.append(bar, explain, out);
  const base = { model: state.model, text: state.text };
  const head = { ...base, type: state.type, layer: state.layer, head: state.head };
  const title = (what) =>
    `${what} · ${t(state.type)} · ${t("layer")} ${state.layer} · ${t("head")} ${state.head}`;
  try {
    await current.draw({ ctx, t, out, base, head, title });
  } catch (err) {
    if (ctx.stale()) return;
    // shown here, under the lab's own controls, so another choice can be made
    const detail = err && err.detail !== undefined ? err.detail : String(err);
    const text = typeof detail === "string" ? detail : JSON.stringify(detail);
    out.append(el("p", { className: "status error", id: "lab-error", textContent: text }));
  }
  if (ctx.stale()) return;
  // what the rows and columns of the lab's heatmaps are
  elements.explain.textContent = t("lab_rows_columns");
  if (focused) document.getElementById(focused)?.focus(); // the control just used
}

export const view = {
  id: "lab",
  label: "view_lab",
  controls: ["type", "layer", "head"],
  draw: drawLab,
  strings: mergedStrings(EXPERIMENTS),
};
