// One head (or the mean of a layer's heads) as a heatmap: queries down, keys across.
import { heatmap } from "../plots.js";

async function drawHead(ctx) {
  const { state, t } = ctx;
  const kind = state.kind;
  const block = await ctx.layerBlock(state.type, state.layer, kind);
  const masks =
    ctx.elements.overlay.checked && kind !== "mask"
      ? await ctx.layerBlock(state.type, state.layer, "mask")
      : null;
  if (ctx.stale()) return; // a newer choice is being drawn
  // a mask is one matrix for every head
  const z = state.avg ? block.mean() : block.matrix(Math.min(state.head, block.count - 1));
  const who = state.avg ? t("average") : `${t("head")} ${state.head}`;
  await heatmap(ctx.elements.plot, {
    z,
    rows: block.rows,
    columns: block.columns,
    title: `${t(state.type)} · ${t("layer")} ${state.layer} · ${who}`,
    zmin: kind === "scores" ? undefined : 0,
    zmax: kind === "scores" ? undefined : 1,
    valueLabel: kind === "scores" ? t("score") : t("weight"),
    overlay: masks && masks.height === z.length ? masks.matrix(0) : null,
    readout: ctx.elements.readout,
  });
  ctx.elements.explain.textContent = t("hint");
}

export const view = {
  id: "head",
  label: "view_head",
  controls: ["type", "layer", "head", "kind", "overlay", "average", "words", "hide"],
  arrowKeys: true,
  draw: drawHead,
  prefetch: (ctx) => {
    const { type, layer, kind } = ctx.state;
    const asked = [ctx.layerBlock(type, layer, kind)];
    if (ctx.elements.overlay.checked && kind !== "mask") {
      asked.push(ctx.layerBlock(type, layer, "mask"));
    }
    return Promise.all(asked);
  },
};
