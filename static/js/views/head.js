// One head (or the mean of a layer's heads) as a heatmap: queries down, keys across.
import { heatmap } from "../plots.js";

export async function renderHead(ctx) {
  const { state, t } = ctx;
  const kind = state.kind;
  const items = await ctx.layerItems(state.type, state.layer, kind);
  const masks = ctx.elements.overlay.checked && kind !== "mask"
    ? await ctx.layerItems(state.type, state.layer, "mask")
    : null;
  if (ctx.stale()) return; // a newer choice is being drawn
  const first = items[0];
  const z = state.avg ? mean(items.map((i) => i.z)) : items[state.head].z;
  const who = state.avg ? t("average") : `${t("head")} ${state.head}`;
  await heatmap(ctx.elements.plot, {
    z,
    rows: first.rows,
    columns: first.columns,
    title: `${t(state.type)} · ${t("layer")} ${state.layer} · ${who}`,
    zmin: kind === "scores" ? undefined : 0,
    zmax: kind === "scores" ? undefined : 1,
    valueLabel: kind === "scores" ? t("score") : t("weight"),
    overlay: masks && masks[0].z.length === z.length ? masks[0].z : null,
    readout: ctx.elements.readout,
  });
  ctx.elements.explain.textContent = t("hint");
}

function mean(matrices) {
  return matrices[0].map((row, i) =>
    row.map((_, j) => matrices.reduce((sum, m) => sum + m[i][j], 0) / matrices.length),
  );
}
