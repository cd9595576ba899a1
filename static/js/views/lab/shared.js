// What the lab's experiments share: their answers kept per request, and small DOM helpers.
import { heatmap } from "../../plots.js";
import { rowLabels } from "../head.js";

const answers = new Map(); // (route, request) -> promise of the answer

// the experiment's answer from POST /api/v1/lab/<route>, asked once per request
export function ask(ctx, route, body) {
  const key = `${route}\u0000${JSON.stringify(body)}`;
  if (!answers.has(key)) {
    const request = ctx.lab(route, body);
    answers.set(key, request);
    request.catch(() => answers.delete(key));
    if (answers.size > 64) answers.delete(answers.keys().next().value);
  }
  return answers.get(key);
}

// an element with its properties and children (text children stay text)
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, props);
  node.append(...children);
  return node;
}

// a text box of the lab's own (a second sentence, a second text), holding what the server
// accepts
export function textBox(ctx, id, value) {
  return el("input", { type: "text", id, value, maxLength: ctx.modelInfo().max_text_chars });
}

// a new plot box at the end of `parent`
export function plotBox(parent) {
  const box = el("div", { className: "plot" });
  parent.append(box);
  return box;
}

// A lab plot's row labels and hover names: where its rows are decoder steps (the answer
// gave `predicted`), as in the head view: cross-attention rows by the token each step
// predicts, self-attention rows by the token fed in, every hover naming both.
export function stepRows({ rows, predicted, type, t }) {
  if (!predicted || predicted.length !== rows.length || !type) return { rows, rowNames: rows };
  const labels = rowLabels({ rows, predicted }, type, t);
  return { rows: labels.rows, rowNames: labels.rowNames };
}

// a weights heatmap ([0, 1]) in a new plot box
export function weights(parent, { z, rows, columns, title, predicted, type, t }) {
  return heatmap(plotBox(parent), {
    z,
    ...stepRows({ rows, predicted, type, t }),
    columns,
    title,
    zmin: 0,
    zmax: 1,
    valueLabel: "w",
  });
}

// a bar of one labelled control (a select above the plot it redraws)
export function labelled(id, text, control) {
  return el(
    "div",
    { className: "lab-bar" },
    el("label", { htmlFor: id, textContent: text }),
    control,
  );
}

// a line of the experiment's summary
export function summary(parent, text, props = {}) {
  parent.append(el("p", { className: "lab-summary", textContent: text, ...props }));
}

export function table(headers, rows) {
  const head = el("tr", {}, ...headers.map((h) => el("th", { scope: "col", textContent: h })));
  const body = rows.map((row) =>
    el("tr", {}, ...row.map((v) => el("td", { textContent: fmt(v) }))),
  );
  return el("table", { className: "lab-table" }, el("thead", {}, head), el("tbody", {}, ...body));
}

export function fmt(v) {
  if (v === null || v === undefined) return "–";
  if (typeof v === "number" && !Number.isInteger(v)) {
    return Math.abs(v) < 1e-3 && v !== 0 ? v.toExponential(1) : v.toFixed(3);
  }
  return String(v);
}

// An experiment's numeric settings, kept in the URL's `rep` (comma-separated, in `fields`'
// order): {key, id, label, min, max, value, most?}; `most(maxTokens)`, where given, bounds
// the field by what the server reads of the model.
export function repSettings(fields, rep, maxTokens) {
  const given = String(rep ?? "").split(",");
  return Object.fromEntries(
    fields.map((f, i) => {
      const n = Number.parseInt(given[i], 10);
      const max = f.most ? f.most(maxTokens) : f.max;
      return [f.key, Number.isNaN(n) ? Math.min(f.value, max) : Math.max(f.min, Math.min(max, n))];
    }),
  );
}

// the bar of those settings' inputs and an Apply button that writes them to the link
export function settingsBar(ctx, fields, chosen, applyId) {
  const { t } = ctx;
  const inputs = fields.map((f) =>
    el("input", { type: "number", id: f.id, min: String(f.min), value: String(chosen[f.key]) }),
  );
  const apply = el("button", { type: "button", id: applyId, textContent: t("lab_apply") });
  apply.addEventListener("click", () => {
    ctx.update({ rep: inputs.map((input) => input.value).join(",") });
  });
  return el(
    "div",
    { className: "lab-bar" },
    ...fields.flatMap((f, i) => [
      el("label", { htmlFor: f.id, textContent: t(f.label) }),
      inputs[i],
    ]),
    apply,
  );
}

// the self-attention type a stack-wide experiment reads (queries and keys the same tokens):
// the chosen type where it is one, else the model's first
export function selfType(ctx) {
  const types = ctx
    .modelInfo()
    .attention.filter((a) => a.rows === a.columns)
    .map((a) => a.type);
  return types.includes(ctx.state.type) ? ctx.state.type : types[0];
}
