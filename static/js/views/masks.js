// The masks applied to this input, with the seed's explanation of each.
import { heatmap } from "../plots.js";

const EXPLAIN = {
  "encoder.self": "mask_padding",
  "decoder.self": "mask_combined",
  "decoder.cross": "mask_cross",
};

async function drawMasks(ctx) {
  const { t, elements } = ctx;
  const grid = elements.grid;
  grid.hidden = false;
  grid.replaceChildren();
  const types = ctx.modelInfo().attention_types;
  if (types.includes("decoder.self")) {
    // the causal mask alone, before padding is combined into it
    const tokens = ctx.analysis.target_tokens;
    const box = document.createElement("div");
    box.className = "plot mask-plot";
    box.dataset.type = "causal";
    const note = document.createElement("p");
    note.className = "explain";
    note.textContent = t("mask_causal");
    grid.append(box, note);
    await heatmap(box, {
      z: tokens.map((_, i) => tokens.map((_, j) => (j <= i ? 1 : 0))),
      rows: tokens,
      columns: tokens,
      title: t("mask_causal_title"),
      zmin: 0,
      zmax: 1,
      valueLabel: t("kind_mask"),
    });
  }
  for (const type of types) {
    const block = await ctx.layerBlock(type, 0, "mask");
    if (ctx.stale()) return;
    const box = document.createElement("div");
    box.className = "plot mask-plot";
    box.dataset.type = type;
    const note = document.createElement("p");
    note.className = "explain";
    note.textContent = t(EXPLAIN[type]);
    grid.append(box, note);
    await heatmap(box, {
      z: block.matrix(0),
      rows: block.rows,
      columns: block.columns,
      title: `${t(type)} · ${t("kind_mask")}`,
      zmin: 0,
      zmax: 1,
      valueLabel: t("kind_mask"),
    });
  }
  elements.explain.textContent = "";
}

export const view = { id: "masks", label: "view_masks", controls: [], draw: drawMasks };
