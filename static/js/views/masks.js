// The masks applied to this input, with the seed's explanation of each.
import { heatmap } from "../plots.js";

// a mask is yes/no: two colours and a legend, not a colour bar of values in between
function maskStyle(t) {
  return {
    zmin: 0,
    zmax: 1,
    valueLabel: t("kind_mask"),
    colorscale: [
      [0, "#d9d9d9"],
      [0.5, "#d9d9d9"],
      [0.5, "#2b6cb0"],
      [1, "#2b6cb0"],
    ],
    colorbar: { tickvals: [0.25, 0.75], ticktext: [t("mask_hidden"), t("mask_visible")] },
  };
}

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
      ...maskStyle(t),
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
    const z = block.matrix(0);
    // one sentence has no padding: say so rather than show a block of one colour alone
    const padded = z.some((row) => row.some((v) => v < 0.5));
    const none = type === "decoder.self" ? "" : ` ${t("mask_no_padding")}`;
    note.textContent = t(EXPLAIN[type]) + (padded ? "" : none);
    grid.append(box, note);
    await heatmap(box, {
      z,
      rows: block.rows,
      columns: block.columns,
      title: `${t(type)} · ${t("kind_mask")}`,
      ...maskStyle(t),
    });
  }
  elements.explain.textContent = "";
}

export const view = { id: "masks", label: "view_masks", controls: [], draw: drawMasks };
