// The positional table the model adds, the similarity of positions, a few dims as curves.
import { configFor, escapeText, heatmap, plotly, themed, wrapTitle } from "../plots.js";

const SHOWN = 512;

async function drawPositional(ctx) {
  const { t, elements, analysis } = ctx;
  const info = ctx.modelInfo();
  // the text's positions; of a long input the first SHOWN (a position x position map of
  // thousands is more than a page draws usefully)
  const tokens = analysis ? analysis.source_tokens.length : 0;
  const positions = Math.min(SHOWN, Math.max(16, tokens));
  // what the encoding has per position: d_model values added, or RoPE's angle per pair of
  // a head's dims (head_dim / 2)
  const rotary = info.positional === "rotary";
  // T5's relative bias: a value per head and distance, added to the scores
  const relative = info.positional === "relative";
  const width = rotary
    ? info.attention[0].head_dim / 2
    : relative
      ? info.attention[0].query_heads
      : info.d_model;
  const dims = Math.min(width, 64);
  const suffix = rotary ? "_rotary" : relative ? "_relative" : "";
  const kind = (key) => t(`${key}${suffix}`); // what the plots show, by kind
  const pe = await ctx.positional(positions, dims);
  if (ctx.stale()) return;
  const posLabels = Array.from({ length: pe.positions }, (_, i) => String(i));
  const dimLabels = Array.from({ length: pe.dims }, (_, i) => String(i));
  await heatmap(elements.plot, {
    z: pe.table,
    rows: posLabels,
    columns: dimLabels,
    title: kind("pe_table"),
    valueLabel: rotary ? "rad" : relative ? "bias" : "PE",
  });
  await heatmap(elements.extra, {
    z: pe.similarity,
    rows: posLabels,
    columns: posLabels,
    title: kind("pe_similarity"),
    zmin: -1,
    zmax: 1,
    valueLabel: "cos",
  });
  const grid = elements.grid;
  grid.hidden = false;
  grid.replaceChildren();
  const curves = document.createElement("div");
  curves.className = "plot";
  grid.append(curves);
  const shown = [0, 1, 2, 3, 8, 9].filter((d) => d < pe.dims);
  const traces = shown.map((d) => ({
    type: "scatter",
    mode: "lines",
    name: relative ? `${t("head")} ${d}` : `${t(rotary ? "pair" : "dim")} ${d}`,
    x: posLabels.map(Number),
    y: pe.table.map((row) => row[d]),
  }));
  // what the curves are depends on the encoding: only sinusoidal ones are sines
  const title = t(pe.kind === "sinusoidal" ? "pe_curves" : `pe_curves_${pe.kind}`);
  const lines = wrapTitle(title, Math.max(120, (curves.clientWidth || 900) - 40));
  await (await plotly).react(
    curves,
    traces,
    {
      title: { text: lines.map(escapeText).join("<br>") },
      xaxis: { title: { text: t("position") } },
      height: 320 + 22 * (lines.length - 1),
      margin: { l: 50, r: 20, t: 40 + 22 * (lines.length - 1), b: 40 },
      ...themed(),
    },
    configFor(`attnviz-${ctx.state.model}-positional`),
  );
  const first =
    tokens > SHOWN ? `${t("pe_first").replace("{n}", SHOWN).replace("{total}", tokens)} ` : "";
  elements.explain.textContent = `${first}${kind("pe_rows_columns")} ${kind("pe_explain")} ${pe.formula}`;
}

export const view = {
  id: "positional",
  long: true,
  label: "view_positional",
  controls: [],
  draw: drawPositional,
  strings: {
    en: { pe_first: "The first {n} of the text's {total} positions." },
    zh: { pe_first: "文本 {total} 个位置中的前 {n} 个。" },
  },
};
