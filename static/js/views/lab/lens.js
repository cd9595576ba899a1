// The logit lens: the residual stream before each layer (and after the last) read through
// the final norm and unembedding; the chosen position's trajectory and a depth × position
// table of the most likely next token.
import { configFor, escapeText, plotly, themed } from "../../plots.js";
import { ask, el, fmt, plotBox, real, summary, table } from "./shared.js";

// the position read, kept in the URL's `rep` ("" : the last)
function positionPicker(ctx, tokens, position, id, label) {
  const picker = el("select", { id });
  tokens.forEach((token, i) => {
    picker.append(el("option", { value: String(i), textContent: `${i}: ${token}` }));
  });
  picker.value = String(position);
  picker.addEventListener("change", () => ctx.update({ rep: picker.value }));
  return el(
    "div",
    { className: "lab-bar" },
    el("label", { htmlFor: id, textContent: label }),
    picker,
  );
}

// a depth's name: 0 the embeddings alone, then after each layer
function depthName(t, depth) {
  return depth === 0 ? t("lab_lens_embeddings") : t("lab_lens_after").replace("{layer}", depth - 1);
}

// A log axis of ranks, rank 1 at the top, ticked at the powers of ten (1, 10, 100, …) up
// to the first at or past the largest rank: plotly.js's own log ticks read "6, 3, 2, 10, 5,
// 3" here, digits of the minor ticks without their decade.
function rankAxis(ranks) {
  const decades = Math.max(1, Math.ceil(Math.log10(Math.max(1, ...ranks))));
  const tickvals = Array.from({ length: decades + 1 }, (_, i) => 10 ** i);
  return {
    type: "log",
    tickvals,
    ticktext: tickvals.map((v) => v.toLocaleString("en-US")),
    // reversed, with a little room past the first and last decade for the markers
    range: [decades + 0.1, -0.1],
  };
}

async function trajectory(box, r, t, names) {
  const Plotly = await plotly;
  const probability = {
    type: "scatter",
    mode: "lines+markers",
    name: t("lab_lens_probability"),
    x: names,
    y: r.rows.map((row) => row.probability),
    hovertemplate: `%{x}: %{y:.3f}<extra>${escapeText(t("lab_lens_probability"))}</extra>`,
  };
  const rank = {
    type: "scatter",
    mode: "lines+markers",
    name: t("lab_lens_rank"),
    x: names,
    y: r.rows.map((row) => row.rank),
    yaxis: "y2",
    line: { dash: "dot" },
    hovertemplate: `%{x}: %{y}<extra>${escapeText(t("lab_lens_rank"))}</extra>`,
  };
  const title = t("lab_lens_trajectory").replace("{token}", r.predicted.token);
  await Plotly.react(
    box,
    [probability, rank],
    {
      title: { text: escapeText(title), x: 0, xanchor: "left" },
      ...themed(),
      height: 360,
      margin: { l: 60, r: 60, t: 50, b: 110 },
      xaxis: { tickangle: -45, automargin: true },
      yaxis: { title: { text: t("lab_lens_probability") }, range: [0, 1] },
      yaxis2: {
        title: { text: t("lab_lens_rank") },
        overlaying: "y",
        side: "right",
        ...rankAxis(r.rows.map((row) => row.rank)),
      },
      legend: { orientation: "h", y: 1.12, x: 1, xanchor: "right" },
    },
    configFor("logit-lens-trajectory"),
  );
}

async function bestTable(box, r, t, names) {
  const Plotly = await plotly;
  const columns = r.rows[0].best.map((_, k) => `${r.first + k}: ${r.tokens[r.first + k]}`);
  const text = r.rows.map((row) => row.best.map((g) => escapeText(g.token)));
  // the hover names each token's raw piece too (a byte-level "Ġthe", shown as "␣the")
  const raw = r.rows.map((row) => row.best.map((g) => escapeText(g.raw ?? g.token)));
  const cells = r.rows.length * columns.length;
  await Plotly.react(
    box,
    [
      {
        type: "heatmap",
        z: r.rows.map((row) => row.best.map((g) => g.probability)),
        x: columns.map(escapeText),
        y: names.map(escapeText),
        text,
        customdata: raw,
        texttemplate: cells <= 400 ? "%{text}" : "",
        zmin: 0,
        zmax: 1,
        colorscale: "Viridis",
        colorbar: { title: { text: escapeText(t("lab_lens_probability")) } },
        hovertemplate: `%{y} · %{x} → %{text} (${escapeText(t("lab_lens_raw"))} “%{customdata}”): %{z:.3f}<extra>${escapeText(t("lab_lens_probability"))}</extra>`,
      },
    ],
    {
      title: { text: escapeText(t("lab_lens_table")), x: 0, xanchor: "left" },
      ...themed(),
      height: Math.min(900, Math.max(320, 22 * r.rows.length + 140)),
      margin: { l: 110, r: 20, t: 50, b: 110 },
      xaxis: { tickangle: -45, automargin: true },
      yaxis: { autorange: "reversed", automargin: true },
    },
    configFor("logit-lens-table"),
  );
}

async function draw({ ctx, t, out, base }) {
  const asked = Number.parseInt(ctx.state.rep, 10);
  const body = Number.isNaN(asked) ? base : { ...base, position: asked };
  const r = await ask(ctx, "lens", body);
  if (ctx.stale()) return;
  const names = r.rows.map((_, depth) => depthName(t, depth));
  out.append(positionPicker(ctx, r.tokens, r.position, "lab-lens-position", t("position")));
  const first = r.rows.findIndex((_, i) => r.rows.slice(i).every((later) => later.rank === 1));
  summary(
    out,
    t("lab_lens_said")
      .replace("{after}", r.tokens[r.position])
      .replace("{position}", r.position)
      .replace("{token}", r.predicted.token)
      .replace("{probability}", fmt(r.predicted.probability))
      .replace("{depth}", names[first])
      .replace("{rank}", r.rows[0].rank),
    { id: "lab-lens-said" },
  );
  await trajectory(plotBox(out), r, t, names);
  if (ctx.stale()) return;
  const rows = r.rows.map((row, depth) => [
    names[depth],
    row.top.map((g) => `${g.token} ${real(g.probability)}`).join(" · "),
    row.rank,
    row.probability,
  ]);
  const top = table(
    [t("lab_lens_depth"), t("lab_lens_top"), t("lab_lens_rank"), t("lab_lens_probability")],
    rows,
    ["text", "text", "int", "real"],
  );
  top.id = "lab-lens-rows";
  out.append(top);
  await bestTable(plotBox(out), r, t, names);
}

// its strings, in both languages
const STRINGS = {
  en: {
    lab_lens: "Logit lens",
    lab_lens_explain:
      "The residual stream before each layer, and after the last, read through the model's final norm and unembedding as if the model ended there (nostalgebraist 2020): what the model would predict at each depth. The last row is the model's own prediction.",
    lab_lens_said:
      "After “{after}” (position {position}) the model predicts “{token}” ({probability}). It is the most likely token from {depth} on; read from the embeddings alone it ranks {rank}.",
    lab_lens_embeddings: "embeddings",
    lab_lens_after: "after layer {layer}",
    lab_lens_probability: "probability",
    lab_lens_rank: "rank",
    lab_lens_depth: "depth",
    lab_lens_top: "top tokens",
    lab_lens_raw: "raw",
    lab_lens_trajectory: "“{token}” through the layers",
    lab_lens_table: "the most likely next token at each depth and position",
  },
  zh: {
    lab_lens: "logit 透镜（logit lens）",
    lab_lens_explain:
      "把每层之前（以及最后一层之后）的残差流送入模型的最终归一化和反嵌入，仿佛模型到此为止（nostalgebraist 2020）：看模型在每个深度会预测什么。最后一行就是模型自己的预测。",
    lab_lens_said:
      "在“{after}”（位置 {position}）之后，模型预测“{token}”（{probability}）。从{depth}起它是最可能的词元；仅从嵌入读出时它排第 {rank} 位。",
    lab_lens_embeddings: "嵌入",
    lab_lens_after: "第 {layer} 层之后",
    lab_lens_probability: "概率",
    lab_lens_rank: "排名",
    lab_lens_depth: "深度",
    lab_lens_top: "最可能的词元",
    lab_lens_raw: "原始",
    lab_lens_trajectory: "“{token}”在各层的变化",
    lab_lens_table: "每个深度、每个位置最可能的下一个词元",
  },
};

export const experiment = {
  id: "lens",
  label: "lab_lens",
  explain: "lab_lens_explain",
  draw,
  strings: STRINGS,
};
