// Attention flow: how much can flow from each input token to one token after the last
// layer (a maximum flow through the layers' attention graph), beside rollout's row.
import { ask, chart, el, labelled, selfType, summary } from "./shared.js";

async function draw({ ctx, t, out, base }) {
  const { state } = ctx;
  const type = selfType(ctx);
  const tokens = ctx.analysis.source_tokens;
  const picker = el("select", { id: "lab-flow-query" });
  tokens.forEach((token, i) => {
    picker.append(el("option", { value: String(i), textContent: `${i}: ${token}` }));
  });
  const query = Math.min(state.fq, tokens.length - 1);
  picker.value = String(query);
  picker.addEventListener("change", () => ctx.update({ fq: Number(picker.value) }));
  out.append(labelled("lab-flow-query", t("lab_flow_query"), picker));
  const r = await ask(ctx, "flow", { ...base, type, query });
  if (ctx.stale()) return;
  const best = (values) => values.indexOf(Math.max(...values));
  const byFlow = best(r.flow);
  const byRollout = best(r.rollout);
  summary(
    out,
    t("lab_flow_said")
      .replace("{query}", r.tokens[r.query])
      .replace("{flow_token}", r.tokens[byFlow])
      .replace("{flow}", r.flow[byFlow].toFixed(3))
      .replace("{rollout_token}", r.tokens[byRollout])
      .replace("{rollout}", r.rollout[byRollout].toFixed(3)),
    { id: "lab-flow-said" },
  );
  const x = r.tokens.map((token, i) => `${i}: ${token}`);
  await chart(
    out,
    "lab-flow-plot",
    [
      { type: "bar", name: t("lab_flow"), x, y: r.flow },
      { type: "bar", name: t("lab_rollout"), x, y: r.rollout },
    ],
    {
      barmode: "group",
      title: { text: `${t("lab_flow")} → ${r.tokens[r.query]} · ${t(r.type)}` },
      yaxis: { title: { text: t("lab_flow_axis") }, rangemode: "tozero" },
      margin: { t: 50, r: 20, b: 90, l: 60 },
    },
    `attnviz-${state.model}-flow`,
  );
  summary(out, t("lab_flow_assumes"));
}

const STRINGS = {
  en: {
    lab_flow: "Attention flow",
    lab_flow_explain:
      "How much can flow from each input token to one token after the last layer (Abnar & Zuidema 2020): the layers as a graph whose edges carry the attention weights (heads averaged, the residual as the identity, as rollout mixes them), and each input's maximum flow to the token. Unlike rollout, which multiplies every path's weights, a path carries at most its narrowest edge.",
    lab_flow_query: "Flow into",
    lab_flow_said:
      "“{query}” receives most flow from “{flow_token}” ({flow}); rollout's largest share is from “{rollout_token}” ({rollout}).",
    lab_flow_axis: "flow (rollout: its share)",
    lab_flow_assumes:
      "Each input's flow is its own maximum flow, so the flows do not add up to 1 as rollout's row does. Like rollout, flow ignores the values, the output projection, the feed-forward layers and LayerNorm.",
  },
  zh: {
    lab_flow: "注意力流",
    lab_flow_explain:
      "经过最后一层后，每个输入词元最多能向某个词元流入多少（Abnar 与 Zuidema，2020）：把各层看作一张图，边的容量是注意力权重（各头平均，残差作为单位矩阵，与 rollout 的混合方式相同），每个输入到该词元的最大流。rollout 把每条路径的权重相乘，而流中每条路径最多只能承载其最窄的边。",
    lab_flow_query: "流入",
    lab_flow_said:
      "“{query}”从“{flow_token}”得到的流最多（{flow}）；rollout 份额最大的是“{rollout_token}”（{rollout}）。",
    lab_flow_axis: "流（rollout：份额）",
    lab_flow_assumes:
      "每个输入的流是它自己的最大流，所以各流之和不像 rollout 的一行那样为 1。与 rollout 一样，流忽略值向量、输出投影、前馈层和 LayerNorm。",
  },
};

export const experiment = {
  id: "flow",
  label: "lab_flow",
  explain: "lab_flow_explain",
  draw,
  strings: STRINGS,
  state: { fq: 0 }, // the token whose inflow is shown
  clearedOn: { fq: "input" },
};
