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

// its strings, in both languages
const STRINGS = {
  en: {
    view_masks: "Masks",
    mask_padding:
      "Padding mask: keys that are padding (<pad>) are hidden from every query, so they get weight 0.",
    mask_causal:
      "Causal mask: position t may only attend to positions ≤ t, so the decoder cannot see the future.",
    mask_combined:
      "Combined: the decoder's self-attention applies both, padding and causal, with a logical AND.",
    mask_causal_title: "causal mask (tril)",
    mask_hidden: "hidden",
    mask_visible: "may attend",
    mask_no_padding:
      "This one sentence has no padding, so every key is visible: the lab's Masks experiment pads it in a batch of two.",
    mask_cross:
      "Cross-attention mask: every output position may look at every source token that is not padding.",
  },
  zh: {
    view_masks: "掩码",
    mask_padding: "填充掩码：填充词元（<pad>）对所有查询不可见，权重为 0。",
    mask_causal: "因果掩码：位置 t 只能关注 ≤ t 的位置，解码器看不到未来。",
    mask_combined: "组合：解码器自注意力同时使用填充掩码和因果掩码（逻辑与）。",
    mask_causal_title: "因果掩码（下三角）",
    mask_hidden: "屏蔽",
    mask_visible: "可关注",
    mask_no_padding:
      "这一句没有填充，所以每个键都可见：实验室的“掩码”实验把它和另一句放在一个批次里填充。",
    mask_cross: "交叉注意力掩码：每个输出位置可以关注所有非填充的输入词元。",
  },
};

export const view = {
  id: "masks",
  label: "view_masks",
  controls: [],
  draw: drawMasks,
  strings: STRINGS,
};
