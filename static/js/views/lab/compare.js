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

export const experiment = {
  id: "compare",
  label: "lab_compare",
  explain: "lab_compare_explain",
  draw,
};
