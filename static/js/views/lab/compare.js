// Compare: the same head for two inputs, or two models, and their difference.
import { heatmap } from "../../plots.js";
import { ask, el, plotBox, stepRows, textBox, weights } from "./shared.js";

async function draw({ ctx, t, out, head }) {
  const { state } = ctx;
  const other = textBox(ctx, "lab-other", state.other);
  const otherLabel = el("label", { htmlFor: "lab-other", textContent: t("lab_other_text") });
  const modelPick = el("select", { id: "lab-other-model" });
  modelPick.append(el("option", { value: "", textContent: t("lab_same_model") }));
  for (const id of ctx.modelIds()) {
    modelPick.append(el("option", { value: id, textContent: ctx.modelTitle(id) }));
  }
  // with nothing chosen yet, the same text on the model's twin (trained against
  // untrained): comparing the input with itself would show no difference at all
  const twin = state.model.endsWith("-untrained")
    ? state.model.slice(0, -"-untrained".length)
    : `${state.model}-untrained`;
  const chosen = state.vs || (state.other.trim() ? "" : twin);
  modelPick.value = ctx.modelIds().includes(chosen) ? chosen : "";
  const modelLabel = el("label", { htmlFor: "lab-other-model", textContent: t("lab_other_model") });
  const apply = el("button", {
    type: "button",
    id: "lab-compare-apply",
    textContent: t("lab_apply"),
  });
  apply.addEventListener("click", () => ctx.update({ other: other.value, vs: modelPick.value }));
  other.addEventListener("keydown", (e) => {
    if (e.key === "Enter") apply.click();
  });
  out.append(el("div", { className: "lab-bar" }, otherLabel, other, modelLabel, modelPick, apply));
  const r = await ask(ctx, "compare", {
    ...head,
    other_text: state.other.trim() ? state.other : null,
    other_model: modelPick.value || null,
  });
  if (ctx.stale()) return;
  const tag = (i) => `${t(i ? "lab_second" : "lab_first")}: ${r.models[i]}`;
  const { type } = r;
  await weights(out, {
    z: r.first,
    rows: r.first_rows,
    predicted: r.first_predicted,
    columns: r.first_columns,
    title: tag(0),
    type,
    t,
  });
  await weights(out, {
    z: r.second,
    rows: r.second_rows,
    predicted: r.second_predicted,
    columns: r.second_columns,
    title: tag(1),
    type,
    t,
  });
  if (r.aligned_rows.length && r.aligned_columns.length) {
    const rows = { rows: r.aligned_rows, predicted: r.aligned_predicted, type, t };
    await heatmap(plotBox(out), {
      z: r.difference,
      ...stepRows(rows),
      columns: r.aligned_columns,
      title: t("lab_difference"),
      zmin: -1,
      zmax: 1,
      valueLabel: "Δ",
      colorscale: "RdBu",
    });
  }
}

// its strings, in both languages
const STRINGS = {
  en: {
    lab_compare: "Compare",
    lab_compare_explain:
      "The same head for two inputs, or two models, side by side, and their difference on the tokens found in both.",
    lab_other_text: "Second text",
    lab_other_model: "Second model",
    lab_same_model: "(same model)",
    lab_difference: "difference (first − second)",
    lab_first: "first",
    lab_second: "second",
  },
  zh: {
    lab_compare: "对比",
    lab_compare_explain:
      "同一个头在两个输入（或两个模型）上的注意力并排显示，以及两者共有词元上的差。",
    lab_other_text: "第二段文本",
    lab_other_model: "第二个模型",
    lab_same_model: "（同一模型）",
    lab_difference: "差（第一 − 第二）",
    lab_first: "第一",
    lab_second: "第二",
  },
};

export const experiment = {
  id: "compare",
  state: { other: "", vs: "" }, // the second text; the second model
  label: "lab_compare",
  explain: "lab_compare_explain",
  draw,
  strings: STRINGS,
};
