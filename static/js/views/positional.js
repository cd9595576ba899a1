// The positional table the model adds, the similarity of positions, a few dims as curves.
import { configFor, escapeText, heatmap, plotly, themed, wrapTitle } from "../plots.js";

async function drawPositional(ctx) {
  const { t, elements, analysis } = ctx;
  const info = ctx.modelInfo();
  const positions = Math.max(16, analysis ? analysis.source_tokens.length : 0);
  const dims = Math.min(info.d_model, 64);
  const pe = await ctx.positional(positions, dims);
  if (ctx.stale()) return;
  const posLabels = Array.from({ length: pe.positions }, (_, i) => String(i));
  const dimLabels = Array.from({ length: pe.dims }, (_, i) => String(i));
  await heatmap(elements.plot, {
    z: pe.table,
    rows: posLabels,
    columns: dimLabels,
    title: t("pe_table"),
    valueLabel: "PE",
  });
  await heatmap(elements.extra, {
    z: pe.similarity,
    rows: posLabels,
    columns: posLabels,
    title: t("pe_similarity"),
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
    name: `${t("dim")} ${d}`,
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
  elements.explain.textContent = `${t("pe_rows_columns")} ${t("pe_explain")} ${pe.formula}`;
}

export const view = {
  id: "positional",
  label: "view_positional",
  controls: [],
  draw: drawPositional,
};
