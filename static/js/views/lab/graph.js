// The contribution graph (the LLM Transparency Tool's): the edges that carry more than a
// threshold of the residual stream, from the prediction at a position back to the input
// tokens, drawn token by token (across) and depth by depth (up); an attention edge's hover
// names its heads, and the strongest edges are listed with a button that opens their head.
import { configFor, escapeText, plotly, themed } from "../../plots.js";
import { ask, el, fmt, plotBox, summary, table } from "./shared.js";

const LISTED = 8; // the attention edges listed, the strongest first
const WIDTHS = [1, 2.5, 4.5, 7]; // line widths by share: up to 0.25, 0.5, 0.75, 1

// a node's place: [x (its token; a feed-forward output a little right), y (its depth)]
function place(node) {
  const [, kind, layer, token] = node.match(/^([XAMI])(\d+)_(\d+)$/);
  const l = Number(layer);
  const depth = { X: 0, A: 3 * l + 1, M: 3 * l + 2, I: 3 * l + 3 }[kind];
  return [Number(token) + (kind === "M" ? 0.35 : 0), depth];
}

// what an edge is, for its hover and the table
function described(e, r, t) {
  const [, kind, layer, token] = e.target.match(/^([XAMI])(\d+)_(\d+)$/);
  const at = `“${r.tokens[Number(token)]}”`;
  if (kind === "A") {
    const from = `“${r.tokens[Number(e.source.split("_")[1])]}”`;
    const heads = (e.heads ?? [])
      .map((v, h) => [h, v])
      .filter(([, v]) => v > 0)
      .sort((a, b) => b[1] - a[1])
      .map(([h, v]) => `H${h} ${fmt(v)}`);
    if (e.residual > 0) heads.push(`${t("lab_graph_residual")} ${fmt(e.residual)}`);
    return `L${layer} ${t("lab_graph_attention")}: ${from} → ${at}: ${fmt(e.weight)} (${heads.join(" · ")})`;
  }
  const what = e.source.startsWith("A") && kind === "I" ? "lab_graph_residual" : "lab_graph_ffn";
  return `L${layer} ${t(what)} ${t("lab_graph_at")} ${at}: ${fmt(e.weight)}`;
}

async function drawGraph(box, r, t) {
  const Plotly = await plotly;
  const lines = WIDTHS.map((width) => ({
    type: "scatter",
    mode: "lines",
    x: [],
    y: [],
    line: { width, color: "rgba(70,110,200,0.75)" },
    hoverinfo: "skip",
    showlegend: false,
  }));
  const middles = { type: "scatter", mode: "markers", x: [], y: [], text: [], showlegend: false };
  middles.marker = { size: 7, color: "rgba(70,110,200,0.9)" };
  middles.hovertemplate = "%{text}<extra></extra>";
  const nodes = new Map();
  for (const e of r.edges) {
    const [x0, y0] = place(e.source);
    const [x1, y1] = place(e.target);
    const bin = Math.min(WIDTHS.length - 1, Math.floor(e.weight * WIDTHS.length));
    lines[bin].x.push(x0, x1, null);
    lines[bin].y.push(y0, y1, null);
    middles.x.push((x0 + x1) / 2);
    middles.y.push((y0 + y1) / 2);
    middles.text.push(escapeText(described(e, r, t)));
    nodes.set(e.source, [x0, y0]);
    nodes.set(e.target, [x1, y1]);
  }
  const points = [...nodes.values()];
  const dots = {
    type: "scatter",
    mode: "markers",
    x: points.map((p) => p[0]),
    y: points.map((p) => p[1]),
    marker: { size: 5, color: "rgba(120,120,120,0.9)" },
    hoverinfo: "skip",
    showlegend: false,
  };
  const depths = 3 * r.layers + 1;
  const every = Math.max(1, Math.ceil(r.layers / 16));
  const ticks = [0, ...Array.from({ length: r.layers }, (_, l) => 3 * l + 3)].filter(
    (_, i) => i === 0 || (i - 1) % every === 0 || i === r.layers,
  );
  await Plotly.react(
    box,
    [...lines, dots, middles],
    {
      title: {
        text: escapeText(t("lab_graph_title").replace("{token}", r.predicted)),
        x: 0,
        xanchor: "left",
      },
      ...themed(),
      height: Math.min(1100, Math.max(420, 14 * depths + 160)),
      margin: { l: 90, r: 20, t: 50, b: 110 },
      xaxis: {
        tickmode: "array",
        tickvals: r.tokens.map((_, i) => i),
        ticktext: r.tokens.map((token, i) => escapeText(`${i}: ${token}`)),
        tickangle: r.tokens.length > 12 ? -90 : 0,
        automargin: true,
        range: [-0.6, r.tokens.length - 0.4],
      },
      yaxis: {
        tickmode: "array",
        tickvals: ticks,
        ticktext: ticks.map((y) => (y === 0 ? t("lab_graph_input") : `L${y / 3 - 1}`)),
        range: [-1, depths + 1],
        automargin: true,
      },
    },
    configFor("contribution-graph"),
  );
}

async function draw({ ctx, t, out, base }) {
  const [pos, thr] = String(ctx.state.rep ?? "").split(",");
  const position = Number.parseInt(pos, 10);
  const threshold = Number.parseFloat(thr);
  const body = { ...base };
  if (!Number.isNaN(position)) body.position = position;
  if (!Number.isNaN(threshold)) body.threshold = threshold;
  const r = await ask(ctx, "graph", body);
  if (ctx.stale()) return;
  const picker = el("select", { id: "lab-graph-position" });
  r.tokens.forEach((token, i) => {
    picker.append(el("option", { value: String(i), textContent: `${i}: ${token}` }));
  });
  picker.value = String(r.position);
  const level = el("input", {
    type: "number",
    id: "lab-graph-threshold",
    min: "0.001",
    max: "1",
    step: "any",
    value: String(r.threshold),
  });
  const apply = el("button", {
    type: "button",
    id: "lab-graph-apply",
    textContent: t("lab_apply"),
  });
  apply.addEventListener("click", () => ctx.update({ rep: `${picker.value},${level.value}` }));
  picker.addEventListener("change", () => ctx.update({ rep: `${picker.value},${r.threshold}` }));
  out.append(
    el(
      "div",
      { className: "lab-bar" },
      el("label", { htmlFor: "lab-graph-position", textContent: t("position") }),
      picker,
      el("label", { htmlFor: "lab-graph-threshold", textContent: t("lab_graph_threshold") }),
      level,
      apply,
    ),
  );
  const inputs = [
    ...new Set(r.edges.filter((e) => e.source.startsWith("X0_")).map((e) => e.source)),
  ]
    .map((node) => Number(node.split("_")[1]))
    .sort((a, b) => a - b);
  summary(
    out,
    t("lab_graph_said")
      .replace("{edges}", r.edges.length)
      .replace("{threshold}", fmt(r.threshold))
      .replace("{predicted}", r.predicted)
      .replace("{after}", r.tokens[r.position])
      .replace("{position}", r.position)
      .replace("{inputs}", inputs.map((i) => `“${r.tokens[i]}”`).join(", ")),
    { id: "lab-graph-said" },
  );
  const box = plotBox(out);
  box.id = "lab-graph";
  await drawGraph(box, r, t);
  if (ctx.stale()) return;
  // the edges through heads, by the heads' share (the residual carried over is no head's)
  const through = (e) => e.weight - e.residual;
  const attention = r.edges
    .filter((e) => e.target.startsWith("A") && e.heads?.some((v) => v > 0))
    .sort((a, b) => through(b) - through(a))
    .slice(0, LISTED);
  const strongest = (e) => e.heads.reduce((best, v, h) => (v > e.heads[best] ? h : best), 0);
  const listed = table(
    [t("layer"), t("lab_graph_from"), t("lab_graph_to"), t("lab_graph_share"), t("head"), ""],
    attention.map((e) => {
      const layer = Number(e.target.slice(1).split("_")[0]);
      return [
        layer,
        r.tokens[Number(e.source.split("_")[1])],
        r.tokens[Number(e.target.split("_")[1])],
        through(e),
        strongest(e),
        "",
      ];
    }),
    ["int", "text", "text", "real", "int", "text"],
  );
  listed.id = "lab-graph-edges";
  listed.querySelectorAll("tbody tr").forEach((row, i) => {
    const e = attention[i];
    const layer = Number(e.target.slice(1).split("_")[0]);
    const head = strongest(e);
    const open = el("button", {
      type: "button",
      className: "lab-graph-open",
      textContent: t("lab_dla_open").replace("{head}", `L${layer} H${head}`),
    });
    open.addEventListener("click", () => ctx.openHead(layer, head));
    row.lastChild.replaceChildren(open);
  });
  out.append(listed);
}

// its strings, in both languages
const STRINGS = {
  en: {
    lab_graph: "Contribution graph",
    lab_graph_explain:
      "How the prediction at a position is built from the input tokens (the LLM Transparency Tool's graph): each part of a token's residual stream — a head's output from one token, the residual carried over, a feed-forward block's output — gets a share of the whole by how close it is to it (L1 distance); the parts above the threshold, each row renormalized without the rest, followed back from the position's last layer to the input. Hover an edge's dot for its heads.",
    lab_graph_said:
      "{edges} edges above {threshold} trace the prediction “{predicted}” after “{after}” (position {position}) back to the input tokens {inputs}.",
    lab_graph_title: "how “{token}” is built, layer by layer",
    lab_graph_threshold: "threshold",
    lab_graph_input: "input",
    lab_graph_attention: "attention",
    lab_graph_residual: "residual",
    lab_graph_ffn: "feed-forward",
    lab_graph_at: "at",
    lab_graph_from: "from",
    lab_graph_to: "to",
    lab_graph_share: "share",
  },
  zh: {
    lab_graph: "贡献图",
    lab_graph_explain:
      "某个位置上的预测如何由输入词元构成（LLM Transparency Tool 的图）：词元残差流的每个部分——某个头从某个词元得到的输出、延续下来的残差、前馈块的输出——按其与整体的接近程度（L1 距离）得到一份占比；从该位置的最后一层回溯到输入，保留高于阈值的部分，每行去掉其余部分后重新归一化。悬停在边的圆点上可看到各头。",
    lab_graph_said:
      "{edges} 条高于 {threshold} 的边把“{after}”（位置 {position}）之后的预测“{predicted}”追溯到输入词元 {inputs}。",
    lab_graph_title: "“{token}”是如何逐层构成的",
    lab_graph_threshold: "阈值",
    lab_graph_input: "输入",
    lab_graph_attention: "注意力",
    lab_graph_residual: "残差",
    lab_graph_ffn: "前馈",
    lab_graph_at: "于",
    lab_graph_from: "从",
    lab_graph_to: "到",
    lab_graph_share: "占比",
  },
};

export const experiment = {
  id: "graph",
  label: "lab_graph",
  explain: "lab_graph_explain",
  draw,
  strings: STRINGS,
};
