// One step of a generation (a model that continues a prompt): the step fed one token and
// predicted the next. Every head of a layer as a heads x keys heatmap of that step's
// attention over the tokens before, and the step's next-token distribution as bars.
import { attentionOf } from "../model-info.js";
import { configFor, escapeText, heatmap, plotly, themed } from "../plots.js";

// the position of the token a step predicts: the link's `tok`, else the first generated
// token, else the token after the prompt (the next one)
function predictedAt(ctx) {
  const n = ctx.analysis.target_tokens.length;
  const steps = ctx.analysis.next_tokens.map((s) => s.position + 1);
  if (steps.includes(ctx.state.tok)) return ctx.state.tok;
  return steps[0] ?? n;
}

async function drawStep(ctx) {
  const { state, t, elements, analysis } = ctx;
  const tokens = analysis.target_tokens;
  const at = predictedAt(ctx);
  const fed = at - 1; // the step's query position
  const spec = attentionOf(ctx.modelInfo(), "decoder.self");
  const group = spec.query_heads / spec.kv_heads;
  const block = await ctx.layerBlock("decoder.self", state.layer, "weights");
  if (ctx.stale()) return;
  const z = block.heads.map((_, h) => block.matrix(h)[fed].slice(0, fed + 1));
  const rows = block.heads.map((h) => `H${h} · KV${Math.floor(h / group)}`);
  const next = analysis.next_tokens.find((s) => s.position === fed);
  const chosen = at < tokens.length ? tokens[at] : null; // the token generated there
  // its id (the link's continuation): the bars name tokens alone, the axes in context
  const continuation = (state.cont || "")
    .split(",")
    .filter((id) => id !== "")
    .map(Number);
  const chosenId = continuation[at - (tokens.length - continuation.length)];
  const step = t("step_title")
    .replace("{i}", String(fed))
    .replace("{fed}", tokens[fed])
    .replace("{predicts}", chosen ?? next?.top[0].token ?? "");
  await heatmap(elements.plot, {
    z,
    rows,
    columns: tokens.slice(0, fed + 1),
    title: `${step} · ${t("layer")} ${state.layer}`,
    zmin: 0,
    zmax: 1,
    valueLabel: t("weight"),
    readout: elements.readout,
    filename: `attnviz-${state.model}-step${fed}-L${state.layer}`,
  });
  elements.convention.textContent = t("step_rows").replace("{group}", String(group));
  if (next) {
    const bars = next.top.slice().reverse(); // the likeliest on top
    const accent = getComputedStyle(document.documentElement).getPropertyValue("--accent");
    await (await plotly).react(
      elements.extra,
      [
        {
          type: "bar",
          orientation: "h",
          x: bars.map((a) => a.probability),
          y: bars.map((a, i) => `${escapeText(a.token)}\u2003#${bars.length - i}`),
          marker: { color: bars.map((a) => (a.id === chosenId ? accent.trim() : "#9aa0a6")) },
          hovertemplate: "%{y}: %{x:.3f}<extra></extra>",
        },
      ],
      {
        title: { text: escapeText(t("step_bars").replace("{i}", String(fed))) },
        xaxis: { title: { text: t("probability") }, range: [0, 1] },
        height: 360,
        margin: { l: 140, r: 20, t: 50, b: 50 },
        ...themed(),
      },
      configFor(`attnviz-${state.model}-step${fed}-next`),
    );
  }
  elements.explain.textContent = t(next ? "step_explain" : "step_no_distribution");
}

export const view = {
  id: "step",
  label: "view_step",
  controls: ["layer"],
  applies: (info) => info.capabilities.generation === true,
  draw: drawStep,
};
