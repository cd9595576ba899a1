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

// its strings, in both languages
const STRINGS = {
  en: {
    view_step: "Generation step",
    probability: "probability",
    step_title: "Step {i}: fed {fed}, predicts {predicts}",
    step_bars: "What step {i} predicts: the 10 likeliest tokens (the chosen one in colour)",
    step_rows:
      "Rows: every query head of the layer (heads sharing a key/value head are {group} in a row: KV n). Columns: the tokens this step sees, itself the last.",
    step_explain:
      "Click a generated token above to see its step; the layer picker shows another layer.",
    step_no_distribution:
      "This step generated no token of the continuation: Generate to see the distributions.",
  },
  zh: {
    view_step: "生成步骤",
    probability: "概率",
    step_title: "第 {i} 步：输入 {fed}，预测 {predicts}",
    step_bars: "第 {i} 步预测的下一个词元：概率最高的 10 个（选中的那个着色）",
    step_rows:
      "行：该层每个查询头（共享同一个键/值头的 {group} 个头相邻：KV n）。列：这一步看到的词元，最后一个是它自己。",
    step_explain: "点击上方生成的词元查看它的那一步。层选择器：换一层。",
    step_no_distribution: "这一步没有生成续写的词元：先点“生成”再看分布。",
  },
};

export const view = {
  id: "step",
  state: { tok: 0 }, // the generated token whose step is shown
  clearedOn: { tok: "prompt" },
  label: "view_step",
  controls: ["layer"],
  applies: (info) => info.capabilities.generation === true,
  draw: drawStep,
  strings: STRINGS,
};
