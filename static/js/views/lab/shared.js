// What the lab's experiments share: their answers kept per request, and small DOM helpers.
import { configFor, heatmap, plotly, themed } from "../../plots.js";
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

// a weights heatmap ([0, 1]) in a new plot box, its colour scale titled (in the page's
// language where the caller gives `t`)
export function weights(parent, { z, rows, columns, title, predicted, type, t }) {
  return heatmap(plotBox(parent), {
    z,
    ...stepRows({ rows, predicted, type, t }),
    columns,
    title,
    zmin: 0,
    zmax: 1,
    valueLabel: "w",
    colorbar: { title: { text: t ? t("weight") : "w" } },
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

// A table whose every column reads one way (FORMATS: a column's cells in one format, never
// "1", "1.000" and "1.3e-4" together); `formats` names each column's, by default whole
// numbers where every number of the column is one, else reals.
export function table(headers, rows, formats = headers.map((_, i) => guessed(rows, i))) {
  const writers = formats.map((format, i) => FORMATS[format](rows.map((row) => row[i])));
  const head = el("tr", {}, ...headers.map((h) => el("th", { scope: "col", textContent: h })));
  const body = rows.map((row) =>
    el("tr", {}, ...row.map((v, i) => el("td", { textContent: missing(v) ?? writers[i](v) }))),
  );
  return el("table", { className: "lab-table" }, el("thead", {}, head), el("tbody", {}, ...body));
}

const missing = (v) => (v === null || v === undefined ? "–" : null);

// a column's writer, given the column: `real` three decimals, or where every value is
// under 0.0005 (a column that would read all zeros, and is not) two significant digits
// in scientific notation
const FORMATS = {
  int: () => (v) => (typeof v === "number" ? String(Math.round(v)) : String(v)),
  real: (column) => {
    const numbers = column.filter((v) => typeof v === "number" && v !== 0);
    const tiny = numbers.length > 0 && numbers.every((v) => Math.abs(v) < 5e-4);
    return (v) => (typeof v !== "number" ? String(v) : tiny ? v.toExponential(1) : real(v));
  },
  text: () => (v) => String(v),
};

function guessed(rows, i) {
  const numbers = rows.map((row) => row[i]).filter((v) => typeof v === "number");
  if (!numbers.length) return "text";
  return numbers.every(Number.isInteger) ? "int" : "real";
}

// a real with three decimals, as tables write them ("0.000", not "-0.000")
export function real(v) {
  const text = v.toFixed(3);
  return Number(text) === 0 ? (0).toFixed(3) : text;
}

// one number in a sentence: three decimals, a small one (under 0.001) in scientific notation
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

// a plot of the lab's own that is no heatmap (points, bars): plotly's traces in a box of
// `id` appended to `out`, in the page's colours
export async function chart(out, id, traces, layout, filename) {
  const box = el("div", { className: "plot", id });
  out.append(box);
  const Plotly = await plotly;
  const base = { ...themed(), margin: { t: 50, r: 20, b: 50, l: 60 }, height: 380 };
  await Plotly.react(box, traces, { ...base, ...layout }, configFor(filename));
  return box;
}
