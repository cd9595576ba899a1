// One head (or the mean of a layer's heads) as a heatmap: queries down, keys across.
import { heatmap } from "../plots.js";
import { drawLongHead, strings } from "./long-head.js";

async function drawHead(ctx) {
  if (ctx.analysis.long) return drawLongHead(ctx); // read by windows, no whole matrix
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
  const { rows, rowNames, convention } = rowLabels(block, state.type, t);
  // the word view and hidden specials reshape weights only (the API refuses them for the
  // rest): say so where they are on
  const reshaped = state.words || state.hide;
  const ignored =
    reshaped && kind !== "weights" && ctx.modelInfo().capabilities.word_view
      ? t("words_weights_only")
      : "";
  ctx.elements.convention.textContent = [startLine(ctx), convention, ignored].join(" ").trim();
  await heatmap(ctx.elements.plot, {
    z,
    rows,
    rowNames,
    columns: block.columns,
    title: `${t(state.type)} · ${t("layer")} ${state.layer} · ${who}`,
    zmin: kind === "scores" ? undefined : 0,
    zmax: kind === "scores" ? undefined : 1,
    valueLabel: kind === "scores" ? t("score") : t("weight"),
    overlay: masks && masks.height === z.length ? masks.matrix(0) : null,
    readout: ctx.elements.readout,
    fill: true,
    // exported images say what they show
    filename: `attnviz-${state.model}-${state.type}-L${state.layer}-${state.avg ? "mean" : `H${state.head}`}-${kind}`,
  });
  ctx.elements.explain.textContent = t("hint");
}

// What the head a model opens on shows (its info's start_head), while it is the one drawn.
function startLine(ctx) {
  const { state, t } = ctx;
  const start = ctx.modelInfo().start_head;
  const shown = !state.avg && state.type === start.type && state.layer === start.layer;
  if (!shown || state.head !== start.head) return "";
  const role = start.role ? t(`role_${start.role}`) : t("role_none");
  // a model whose metrics found no head of a telling kind opens on its most focused one
  const source = start.source === "metrics" && !start.role ? "focused" : start.source;
  return t(`start_${source.replace(" ", "_")}`).replace("{role}", role);
}

// What a plot's rows are. A decoder row is a step: fed one token, it predicts the next.
// Cross-attention, where people read alignment, labels each row by the token its step
// predicts (the row of "hang2" looks at 行); self-attention keeps the tokens fed in on
// both axes (the diagonal is a token itself). Hovers and the readout name both.
export function rowLabels(block, type, t) {
  const predicted = block.predicted;
  if (!predicted) {
    const convention = type.startsWith("decoder") ? "" : t("rows_encoder");
    return { rows: block.rows, rowNames: block.rows, convention };
  }
  const rowNames = block.rows.map((fed, i) =>
    t("step_row")
      .replace("{i}", String(i))
      .replace("{fed}", fed)
      .replace("{predicts}", predicted[i]),
  );
  if (type === "decoder.cross") {
    return { rows: predicted, rowNames, convention: t("rows_predicted") };
  }
  return { rows: block.rows, rowNames, convention: t("rows_fed") };
}

export const view = {
  id: "head",
  long: true,
  label: "view_head",
  controls: ["type", "layer", "head", "kind", "overlay", "average", "words", "hide"],
  arrowKeys: true,
  strings,
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
