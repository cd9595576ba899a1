// The query-key space of a head (AttentionViz's view): every token's query and key as one
// point cloud, made faithful (keys moved onto the queries' centroid and both scaled to
// one mean norm: no softmax changes), projected by PCA, UMAP or t-SNE, in 2-D or 3-D.
// Clicking a query marks the keys it attends most. Its choices live in the URL
// (qk=projection.dims.colour; more=further sentences, one per line).
import { configFor, escapeText, plotlyGl, themed } from "../plots.js";
import { el, labelled } from "./lab/shared.js";

const PROJECTIONS = ["pca", "umap", "tsne"];
const COLOURS = ["position", "sentence", "token"];
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
  "#7f7f7f", "#bcbd22", "#17becf"]; // biome-ignore format: a palette a line

const STRINGS = {
  en: {
    view_qk: "Query–key space",
    qk_projection: "Projection",
    qk_pca: "PCA",
    qk_umap: "UMAP",
    qk_tsne: "t-SNE",
    qk_dims: "Dimensions",
    qk_colour: "Colour by",
    qk_position: "position",
    qk_sentence: "sentence",
    qk_token: "token",
    qk_more: "More sentences (one per line) join the cloud:",
    qk_apply: "Apply",
    qk_query: "query",
    qk_key: "key",
    qk_title: "{type} · Layer {layer} · Head {head} · {nq} queries and {nk} keys ({projection})",
    qk_faith:
      "Dot product against distance within each query's row, over the keys it may see: r = {before} for the raw vectors, r = {after} as drawn (−1: the nearer a key, the more the query attends it). The keys were moved by |t| = {shift} onto the queries' centroid, queries × {c} and keys ÷ {c}: no weight changes.",
    qk_variance: "The PCA axes explain {share} of the variance.",
    qk_gqa: "These are the keys of key/value head {kv}, which query heads {heads} share.",
    qk_clicked: "Query {pos} “{token}” attends most to: {keys}",
    qk_no_corpus:
      "The corpus run in the link kept no vectors of this head of this model: the cloud is the text's (and the sentences below) alone.",
    qk_explain:
      "Circles are queries, diamonds keys; hover one to name its token and sentence, click a query to mark the keys it attends most.",
  },
  zh: {
    view_qk: "查询–键空间",
    qk_projection: "投影",
    qk_pca: "PCA",
    qk_umap: "UMAP",
    qk_tsne: "t-SNE",
    qk_dims: "维数",
    qk_colour: "着色依据",
    qk_position: "位置",
    qk_sentence: "句子",
    qk_token: "词元",
    qk_more: "更多句子（每行一句）加入点云：",
    qk_apply: "应用",
    qk_query: "查询",
    qk_key: "键",
    qk_title: "{type} · 层 {layer} · 头 {head} · {nq} 个查询与 {nk} 个键（{projection}）",
    qk_faith:
      "在每个查询可见的键上，点积与距离的行内相关：原始向量 r = {before}，图中 r = {after}（−1 表示键越近，查询越关注它）。键被平移 |t| = {shift} 到查询的质心，查询 × {c}、键 ÷ {c}：所有权重不变。",
    qk_variance: "PCA 的坐标轴解释了 {share} 的方差。",
    qk_gqa: "这些是键/值头 {kv} 的键，查询头 {heads} 共用它们。",
    qk_clicked: "查询 {pos}“{token}”最关注：{keys}",
    qk_no_corpus: "链接中的语料库运行没有保留此模型这个头的向量：点云只含本文本（及下方句子）。",
    qk_explain: "圆点是查询，菱形是键；悬停可看词元与句子，点击查询可标出它最关注的键。",
  },
};

export function settings(qk) {
  const [projection, dims, colour] = String(qk || "").split(".");
  return {
    projection: PROJECTIONS.includes(projection) ? projection : "pca",
    dims: dims === "3" ? 3 : 2,
    colour: COLOURS.includes(colour) ? colour : "position",
  };
}

const fixed = (v, digits = 2) => (v === null || v === undefined ? "—" : v.toFixed(digits));

// a point's colour; positions on one scale for queries and keys, [0, last]
function colours(cloud, colour, last) {
  if (colour === "position") {
    return { color: cloud.positions, colorscale: "Viridis", cmin: 0, cmax: Math.max(1, last) };
  }
  if (colour === "sentence") return { color: cloud.sentences.map((s) => PALETTE[s % 10]) };
  const hue = (token) => [...token].reduce((h, c) => (h * 31 + c.codePointAt(0)) % 360, 7);
  return { color: cloud.tokens.map((tok) => `hsl(${hue(tok)}, 65%, 45%)`) };
}

function trace(body, cloud, role, chosen, t) {
  const last = Math.max(...body.queries.positions, ...body.keys.positions);
  const name = t(role === "query" ? "qk_query" : "qk_key");
  const at = (axis) => cloud.coords.map((p) => p[axis]);
  const text = cloud.tokens.map(
    (tok, i) =>
      `${name} “${escapeText(tok)}” · ${cloud.positions[i]} · ${escapeText(body.sentences[cloud.sentences[i]].slice(0, 60))}`,
  );
  const marker = {
    size: chosen.dims === 3 ? 4 : 7,
    symbol: role === "query" ? "circle" : "diamond",
    opacity: 0.8,
    ...colours(cloud, chosen.colour, last),
  };
  // a colour that is a number has its scale, drawn once (the queries'; the keys share it)
  if (chosen.colour === "position" && role === "query") {
    marker.showscale = true;
    marker.colorbar = { title: { text: escapeText(t("qk_position")) }, thickness: 14 };
  }
  return {
    type: chosen.dims === 3 ? "scatter3d" : "scattergl",
    mode: "markers",
    name,
    x: at(0),
    y: at(1),
    ...(chosen.dims === 3 ? { z: at(2) } : {}),
    text,
    hovertemplate: "%{text}<extra></extra>",
    marker,
  };
}

async function drawQk(ctx) {
  const { state, t, elements } = ctx;
  const chosen = settings(state.qk);
  const more = String(state.more || "")
    .split("\n")
    .map((s) => s.trim())
    .filter(Boolean);
  elements.grid.hidden = false;
  elements.grid.replaceChildren(controls(ctx, chosen));
  performance.mark("attnviz:qk-asked");
  const run = await keptRun(ctx);
  const [body, Plotly] = await Promise.all([
    prepared(ctx, {
      model: state.model,
      text: state.text,
      type: state.type,
      layer: state.layer,
      head: state.head,
      projection: chosen.projection,
      dims: chosen.dims,
      texts: more,
      // a corpus run that kept this head's vectors (the corpus view's): its sentences too
      ...(run ? { corpus_run: run.id } : {}),
    }),
    plotlyGl(),
  ]);
  performance.mark("attnviz:qk-answered");
  if (ctx.stale()) return;
  const n = body.queries.tokens.length;
  const title = t("qk_title")
    .replace("{type}", t(body.type))
    .replace("{layer}", String(body.layer))
    .replace("{head}", String(body.head))
    .replace("{nq}", String(n))
    .replace("{nk}", String(body.keys.tokens.length))
    .replace("{projection}", t(`qk_${body.projection}`));
  const data = [
    trace(body, body.queries, "query", chosen, t),
    trace(body, body.keys, "key", chosen, t),
  ];
  const layout = {
    title: { text: escapeText(title), x: 0, xanchor: "left" },
    height: 620,
    margin: { l: 50, r: 20, t: 60, b: 40 },
    legend: { orientation: "h", y: -0.05 },
    ...themed(),
  };
  const plot = elements.plot;
  plot.attnvizGl = Plotly;
  await Plotly.react(
    plot,
    data,
    layout,
    configFor(`attnviz-${state.model}-qk-L${body.layer}-H${body.head}`),
  );
  performance.mark("attnviz:qk-drawn");
  plot.removeAllListeners?.("plotly_click");
  plot.on("plotly_click", (event) => {
    const point = event.points.find((p) => p.curveNumber === 0);
    if (point) mark(ctx, Plotly, body, point.pointNumber, chosen);
  });
  const lines = [
    t("qk_faith")
      .replace("{before}", fixed(body.correlation_before))
      .replace("{after}", fixed(body.correlation_after))
      .replace("{shift}", fixed(body.shift_norm))
      .replaceAll("{c}", fixed(body.scale, 3)),
  ];
  if (body.explained_variance.length) {
    const share = body.explained_variance.map((v) => `${(100 * v).toFixed(1)}%`).join(" + ");
    lines.push(t("qk_variance").replace("{share}", share));
  }
  if (body.shared_with.length > 1) {
    lines.push(
      t("qk_gqa")
        .replace("{kv}", String(body.kv_head))
        .replace("{heads}", body.shared_with.join(", ")),
    );
  }
  if (ctx.corpusLeftOut) lines.push(t("qk_no_corpus"));
  elements.convention.textContent = lines.join(" ");
  elements.explain.textContent = t("qk_explain");
}

// The link's corpus run (cr), where it read this model and kept this head's vectors:
// its sentences join the cloud; any other run is left out (and the page says so).
async function keptRun(ctx) {
  const { state } = ctx;
  if (!state.cr) return null;
  const run = await ctx.api.corpusGet(state.cr).catch(() => null);
  const kept = run?.vectors.some(
    (v) => v.type === state.type && v.layer === state.layer && v.head === state.head,
  );
  ctx.corpusLeftOut = !(run?.model === state.model && kept);
  return ctx.corpusLeftOut ? null : run;
}

// the answer; while UMAP or t-SNE warms up (a 503 on its first use), said and asked again
async function prepared(ctx, body) {
  for (let tries = 0; ; tries++) {
    try {
      return await ctx.headView("qk-space", body);
    } catch (err) {
      if (err.status !== 503 || tries >= 20 || ctx.stale()) throw err;
      ctx.elements.convention.textContent = err.message;
      await new Promise((resolve) => setTimeout(resolve, 3000));
    }
  }
}

// the keys a clicked query attends most, marked in a trace of their own, and named
function mark(ctx, Plotly, body, index, chosen) {
  const { t, elements } = ctx;
  const keys = body.top_keys[index];
  const weights = body.top_weights[index];
  const at = (axis) => keys.map((k) => body.keys.coords[k][axis]);
  const marked = {
    type: chosen.dims === 3 ? "scatter3d" : "scattergl",
    mode: "markers",
    name: t("qk_key"),
    showlegend: false,
    x: at(0),
    y: at(1),
    ...(chosen.dims === 3 ? { z: at(2) } : {}),
    hoverinfo: "skip",
    marker: {
      size: weights.map((w) => 10 + 20 * w),
      symbol: "diamond-open",
      color: "#d62728",
      line: { width: 2, color: "#d62728" },
    },
  };
  const plot = elements.plot;
  const traces = plot.data.length > 2 ? [2] : [];
  if (traces.length) Plotly.deleteTraces(plot, traces);
  Plotly.addTraces(plot, marked);
  const named = keys.map((k, i) => `“${body.keys.tokens[k]}” ${weights[i].toFixed(3)}`).join(", ");
  elements.readout.textContent = t("qk_clicked")
    .replace("{pos}", String(body.queries.positions[index]))
    .replace("{token}", body.queries.tokens[index])
    .replace("{keys}", named);
}

function controls(ctx, chosen) {
  const { t, state } = ctx;
  const choose = (id, values, label, current, key) => {
    const select = el("select", { id });
    select.append(...values.map((v) => el("option", { value: String(v), textContent: label(v) })));
    select.value = String(current);
    select.addEventListener("change", () => {
      const next = { ...chosen, [key]: key === "dims" ? Number(select.value) : select.value };
      ctx.update({ qk: `${next.projection}.${next.dims}.${next.colour}` });
    });
    return select;
  };
  const bar = labelled(
    "qk-projection",
    t("qk_projection"),
    choose("qk-projection", PROJECTIONS, (v) => t(`qk_${v}`), chosen.projection, "projection"),
  );
  bar.append(
    el("label", { htmlFor: "qk-dims", textContent: t("qk_dims") }),
    choose("qk-dims", [2, 3], String, chosen.dims, "dims"),
    el("label", { htmlFor: "qk-colour", textContent: t("qk_colour") }),
    choose("qk-colour", COLOURS, (v) => t(`qk_${v}`), chosen.colour, "colour"),
  );
  const more = el("textarea", { id: "qk-more", rows: 3, value: state.more || "" });
  const apply = el("button", { type: "button", id: "qk-apply", textContent: t("qk_apply") });
  apply.addEventListener("click", () => ctx.update({ more: more.value.trim() }));
  const box = el(
    "div",
    { className: "qk-more" },
    el("label", { htmlFor: "qk-more", textContent: t("qk_more") }),
    more,
    apply,
  );
  return el("div", {}, bar, box);
}

export const view = {
  id: "qk",
  // a model of text (its further sentences are texts)
  applies: (info) => info.capabilities.text !== false,
  // the projection.dims.colour, e.g. "pca.2.position"; further sentences, one a line; a
  // corpus run to read
  state: { qk: "", more: "", cr: "" },
  label: "view_qk",
  controls: ["type", "layer", "head"],
  arrowKeys: true,
  draw: drawQk,
  strings: STRINGS,
};
