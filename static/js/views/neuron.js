// The neuron view of a head (BertViz's, for every model): for one query token, each
// key's element-wise product with the query, q_i * k_i / sqrt(d), whose sum is the raw
// score; then the scores and the softmax of the row. RoPE models show the vectors before
// the rotation too. Its choices live in the URL (q: the query row, by default the most
// spread; nv: before, sorted). A long input's are those of the head view's zoomed window
// (win=).
import { configFor, escapeText, heatmap, plotly, themed } from "../plots.js";
import { el, labelled } from "./lab/shared.js";
import { TOKEN_LEVEL, zoomed } from "./long-head.js";

const STRINGS = {
  en: {
    view_neuron: "Neuron view",
    neuron_query: "Query token",
    neuron_before: "before RoPE",
    neuron_sorted: "sort dimensions by contribution",
    neuron_title: "{type} · Layer {layer} · Head {head} · query {pos} “{token}”: q_i·k_i/√d",
    neuron_title_before: " (before RoPE)",
    neuron_rows:
      "Rows: each key the query may see; columns: the head's {d} dimensions. A cell is q_i·k_i/√{d}, that dimension's share of the score: red adds to it, blue takes away. A row's sum is the raw score (hook_scores); the softmax of the scores is the weight.",
    neuron_rope:
      "Before RoPE: q and k as the projections make them, before each is rotated by its position; their sum is what the score would be without positions, not the score.",
    neuron_bars: "The row's scores (the sums) and its weights (their softmax)",
    neuron_score: "score",
    neuron_weight: "weight",
    neuron_explain:
      "Pick the query token above; hovering a cell names the key and the dimension. Sorting puts the dimensions that move the scores most (by the sum of |q_i·k_i| over the keys) first.",
    neuron_dim: "dim",
    neuron_window:
      "A long input: the queries {r0}–{r1} and keys {c0}–{c1} of the head view's zoomed window (of {n}); the weights are those of the whole row.",
    neuron_zoom_first:
      "A long input ({n} tokens): this view reads a window of at most {level} tokens a side. Zoom the head view in to one (its window is kept), then come back.",
  },
  zh: {
    view_neuron: "神经元视图",
    neuron_query: "查询词元",
    neuron_before: "RoPE 旋转前",
    neuron_sorted: "按贡献排序维度",
    neuron_title: "{type} · 层 {layer} · 头 {head} · 查询 {pos}“{token}”：q_i·k_i/√d",
    neuron_title_before: "（RoPE 旋转前）",
    neuron_rows:
      "行：查询能看到的每个键；列：该头的 {d} 个维度。每格是 q_i·k_i/√{d}，即该维度对分数的贡献：红色加分，蓝色减分。一行之和就是原始分数（hook_scores）；分数的 softmax 就是权重。",
    neuron_rope:
      "RoPE 旋转前：投影得到的 q 和 k，尚未按位置旋转；其和是不含位置时的分数，而不是实际分数。",
    neuron_bars: "这一行的分数（各行之和）与权重（其 softmax）",
    neuron_score: "分数",
    neuron_weight: "权重",
    neuron_explain:
      "在上方选择查询词元；悬停某格可看到键与维度。排序把最影响分数的维度（按各键 |q_i·k_i| 之和）放在前面。",
    neuron_dim: "维",
    neuron_window:
      "长输入：头视图放大后的窗口的查询 {r0}–{r1} 与键 {c0}–{c1}（共 {n} 个）；权重是整行的权重。",
    neuron_zoom_first:
      "长输入（{n} 个词元）：本视图读每边不超过 {level} 个词元的窗口。请先在头视图中放大到这样的窗口（窗口会保留），再回来。",
  },
};

const flags = (nv) =>
  new Set(
    String(nv || "")
      .split(",")
      .filter(Boolean),
  );

async function drawNeuron(ctx) {
  const { state, t, elements } = ctx;
  const rowsOf = state.type.startsWith("decoder") ? ctx.analysis.target_tokens : null;
  const queries = rowsOf ?? ctx.analysis.source_tokens;
  // a long input: the head view's zoomed window, its queries and keys (no whole row of
  // 8,192 keys by 64 dimensions)
  const n = queries.length;
  const [rows, columns] = ctx.analysis.long ? zoomed(state.win, n) : [[0, n], null];
  const fmt = (v) => v.toLocaleString("en-US");
  if (columns && (rows[1] - rows[0] > TOKEN_LEVEL || columns[1] - columns[0] > TOKEN_LEVEL)) {
    elements.plot.replaceChildren();
    return t("neuron_zoom_first").replace("{n}", fmt(n)).replace("{level}", String(TOKEN_LEVEL));
  }
  // the query of the link; without one the server opens on the row whose weights are the
  // most spread (app/head_views/neuron.py: row 0 of a causal decoder sees one key), a long
  // input's window on its first
  const asked = Number.parseInt(state.q, 10);
  const named = Number.isNaN(asked) ? (columns ? rows[0] : null) : asked;
  const body = await ctx.headView("neuron", {
    model: state.model,
    text: state.text,
    type: state.type,
    layer: state.layer,
    head: state.head,
    ...(named === null ? {} : { query: Math.max(rows[0], Math.min(named, rows[1] - 1)) }),
    ...(columns ? { keys: columns } : {}),
  });
  if (ctx.stale()) return;
  const query = body.query;
  const chosen = flags(state.nv);
  const before = chosen.has("before") && body.before !== null;
  const side = before ? body.before : body.after;
  const shown = body.keys.map((_, j) => j).filter((j) => body.visible[j]);
  // the dimensions in their order, or by how much they move this row's scores
  let dims = side.query.map((_, i) => i);
  if (chosen.has("sorted")) {
    const weight = dims.map((i) =>
      shown.reduce((sum, j) => sum + Math.abs(side.products[j][i]), 0),
    );
    dims = dims.sort((a, b) => weight[b] - weight[a]);
  }
  const z = shown.map((j) => dims.map((i) => side.products[j][i]));
  const largest = Math.max(1e-12, ...z.flat().map(Math.abs));
  elements.grid.hidden = false;
  elements.grid.replaceChildren(controls(ctx, queries, rows, query, chosen, body.rotary));
  const title = t("neuron_title")
    .replace("{type}", t(body.type))
    .replace("{layer}", String(body.layer))
    .replace("{head}", String(body.head))
    .replace("{pos}", String(query))
    .replace("{token}", body.query_token);
  await heatmap(elements.plot, {
    z,
    rows: shown.map((j) => body.keys[j]),
    rowNames: shown.map(
      (j) => `${body.keys[j]} (${t("neuron_score")} ${side.scores[j].toFixed(3)})`,
    ),
    columns: dims.map((i) => `${t("neuron_dim")} ${i}`),
    title: title + (before ? t("neuron_title_before") : ""),
    zmin: -largest,
    zmax: largest,
    colorscale: "RdBu",
    valueLabel: "q·k/√d",
    colorbar: { title: { text: "q·k/√d" } },
    readout: elements.readout,
    filename: `attnviz-${state.model}-neuron-L${body.layer}-H${body.head}-q${query}`,
  });
  elements.convention.textContent = [
    t("neuron_rows").replaceAll("{d}", String(body.d_head)),
    before ? t("neuron_rope") : "",
  ].join(" ");
  await bars(ctx, body, side, shown);
  const windowed = columns
    ? `${t("neuron_window")
        .replace("{r0}", fmt(rows[0]))
        .replace("{r1}", fmt(rows[1] - 1))
        .replace("{c0}", fmt(columns[0]))
        .replace("{c1}", fmt(columns[1] - 1))
        .replace("{n}", fmt(n))} `
    : "";
  elements.explain.textContent = windowed + t("neuron_explain");
}

// the query picker lists the rows shown: [start, stop) of the queries (a long input's
// window, else every row)
function controls(ctx, queries, rows, query, chosen, rotary) {
  const { t } = ctx;
  const select = el("select", { id: "neuron-query" });
  const positions = Array.from({ length: rows[1] - rows[0] }, (_, i) => rows[0] + i);
  select.append(
    ...positions.map((i) => el("option", { value: String(i), textContent: `${i} ${queries[i]}` })),
  );
  select.value = String(query);
  select.addEventListener("change", () => ctx.update({ q: select.value }));
  const toggle = (id, flag, label) => {
    const box = el("input", { type: "checkbox", id, checked: chosen.has(flag) });
    box.addEventListener("change", () => {
      const next = new Set(chosen);
      if (box.checked) next.add(flag);
      else next.delete(flag);
      ctx.update({ nv: [...next].sort().join(",") });
    });
    return el("label", { htmlFor: id }, box, ` ${t(label)}`);
  };
  const bar = labelled("neuron-query", t("neuron_query"), select);
  bar.append(toggle("neuron-sorted", "sorted", "neuron_sorted"));
  if (rotary) bar.append(toggle("neuron-before", "before", "neuron_before"));
  return bar;
}

async function bars(ctx, body, side, shown) {
  const { t, elements, state } = ctx;
  const keys = shown.map((j) => `${escapeText(body.keys[j])}\u2002#${body.first_key + j}`);
  await (await plotly).react(
    elements.extra,
    [
      {
        type: "bar",
        name: t("neuron_score"),
        x: keys,
        y: shown.map((j) => side.scores[j]),
        offsetgroup: "score",
        hovertemplate: `%{x}: %{y:.4f}<extra>${escapeText(t("neuron_score"))}</extra>`,
      },
      {
        type: "bar",
        name: t("neuron_weight"),
        x: keys,
        y: shown.map((j) => body.weights[j]),
        yaxis: "y2",
        offsetgroup: "weight",
        hovertemplate: `%{x}: %{y:.4f}<extra>${escapeText(t("neuron_weight"))}</extra>`,
      },
    ],
    {
      title: { text: escapeText(t("neuron_bars")) },
      barmode: "group",
      yaxis: { title: { text: t("neuron_score") } },
      yaxis2: {
        title: { text: t("neuron_weight") },
        overlaying: "y",
        side: "right",
        range: [0, 1],
        // its own ticks: synced to the scores' axis they read 0.31, 0.621, 0.932
        tickvals: [0, 0.25, 0.5, 0.75, 1],
      },
      height: 320,
      margin: { l: 60, r: 60, t: 50, b: 90 },
      legend: { orientation: "h", y: 1.12 },
      ...themed(),
    },
    configFor(`attnviz-${state.model}-neuron-scores`),
  );
}

export const view = {
  id: "neuron",
  // a model of text (its query and keys are read from a text's run)
  applies: (info) => info.capabilities.text !== false,
  // the window; the query row ("": the most spread); "before" (RoPE), "sorted"
  state: { win: "", q: "", nv: "" },
  clearedOn: { win: "input" },
  label: "view_neuron",
  controls: ["type", "layer", "head"],
  arrowKeys: true,
  draw: drawNeuron,
  strings: STRINGS,
  long: true, // a long input's zoomed window (drawNeuron says how to get one)
};
