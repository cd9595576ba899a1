// The attention lab: the seed tutorial's claims as experiments on the current input, each
// from its /api/v1/lab route with a bilingual explanation. An experiment is a module
// exporting `experiment = { id, label, explain, draw }` (label and explain: i18n keys); the
// picker lists them in this order and offers those the model's info lists in
// capabilities.experiments. An experiment may bring its own i18n strings (`strings`,
// {en: {key: text}, zh: {key: text}}) and its own URL keys (`state` and `clearedOn`, as a
// view's: views/index.js), or keep its settings in the URL's `rep`, which a change of
// experiment clears. Adding an experiment is its module and one line in MODULES (and, on
// the server, its module and one line: a LabRoute in app/lab/__init__.py's EXPERIMENTS, or
// `register(LabRoute(...))` from a plugin).
import { canRun } from "../../model-info.js";
import { el } from "./shared.js";

// biome-ignore format: one experiment a line, so that adding one is adding a line
const MODULES = [
  "./scaling.js",
  "./positions.js",
  "./masks.js",
  "./kv-cache.js",
  "./metrics.js",
  "./rollout.js",
  "./flow.js",
  "./distance.js",
  "./alti.js",
  "./contribution.js",
  "./lens.js",
  "./dla.js",
  "./graph.js",
  "./ablation.js",
  "./compare.js",
  "./induction.js",
  "./needle.js",
];

export const EXPERIMENTS = (await Promise.all(MODULES.map((path) => import(path)))).map(
  (m) => m.experiment,
);

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

// the URL keys the experiments keep, with their defaults (one default a key)
function mergedState(experiments) {
  // (lab "": the first experiment the model runs, `experimentOf`)
  const merged = { lab: "", rep: "" };
  for (const e of experiments) {
    for (const [key, value] of Object.entries(e.state ?? {})) {
      if (key in merged && merged[key] !== value) {
        throw new Error(`the URL key ${key} of the experiment ${e.id} has another default`);
      }
      merged[key] = value;
    }
  }
  return merged;
}

// the experiment a link names where this model runs it, else the first it runs (a model
// of pictures runs none of the first few, which read text; another model chosen keeps the
// link's experiment only where it runs it too)
function experimentOf(id, info) {
  return (
    EXPERIMENTS.find((e) => e.id === id && canRun(info, e.id)) ??
    EXPERIMENTS.find((e) => canRun(info, e.id)) ??
    EXPERIMENTS[0]
  );
}

async function drawLab(ctx) {
  const { state, elements, t, focused } = ctx;
  const grid = elements.grid;
  grid.hidden = false;
  grid.replaceChildren();
  const info = ctx.modelInfo();
  const current = experimentOf(state.lab, info);
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
  const base = { model: state.model, ...ctx.inputBody }; // (a picture's digest, for one)
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

// its strings, in both languages
const STRINGS = {
  en: {
    lab_rows_columns:
      "In the heatmaps: rows are the queries, columns the keys; a decoder's cross-attention rows are named by the token each step predicts, its self-attention rows by the token fed in (a cell's hover names both); tables list heads by layer.",
    view_lab: "Lab",
    lab_experiment: "Experiment",
  },
  zh: {
    lab_rows_columns:
      "热力图中：行是查询，列是键；解码器交叉注意力的行以该步预测的词元命名，自注意力的行以输入的词元命名（悬停单元格可见两者）；表格按层列出各头。",
    view_lab: "实验室",
    lab_experiment: "实验",
  },
};

export const view = {
  id: "lab",
  label: "view_lab",
  controls: ["type", "layer", "head"],
  draw: drawLab,
  strings: mergedStrings([{ strings: STRINGS }, ...EXPERIMENTS]),
  // the experiment shown; its settings (a change of experiment clears them); and the
  // experiments' own keys
  state: mergedState(EXPERIMENTS),
  choices: { lab: EXPERIMENT_IDS },
  clearedOn: Object.assign({}, ...EXPERIMENTS.map((e) => e.clearedOn ?? {})),
};
