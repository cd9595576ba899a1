// A long input's head (over 512 tokens: the server keeps no N x N matrix): an overview of
// the whole head, each cell the max of the exact weights it covers (a sink, a diagonal or
// a stripe stays visible at any length); dragging a box zooms, the window fetched again at
// finer cells until a cell is a token, whose labels then appear; a double-click goes back
// out. Under the map, the row under the pointer over all its keys, on a log scale.
import { Block } from "../api.js";
import { encodingOf } from "../encodings.js";
import { COLORSCALE, configFor, escapeText, plotly, themed } from "../plots.js";

const CELLS = 256; // cells per axis asked for a window (4 px or more each in a 1,100 px plot)
export const TOKEN_LEVEL = 160; // a window at most this many tokens a side is asked exact
const LABELS = 48; // token labels drawn a side at most
const PROFILE_CELLS = 1024; // cells of the row profile

export const strings = {
  en: {
    long_explain:
      "A long input: each cell is the {reduce} of the exact values of the positions it covers ({cells}). Drag a box to zoom in (tokens are named from {level} a side); double-click to go back out.",
    long_cells: "{h} × {w} positions a cell",
    long_tokens: "one token a cell",
    long_reduce_max: "largest",
    long_readout_cell: "queries {r0}–{r1} → keys {c0}–{c1}: {reduce} {value}",
    long_readout_token: "{row} ({r}) → {column} ({c}): {value}",
    long_profile: "Row {r} ({token}): its weight on each key, log scale",
    long_profile_norms: "Row {r} ({token}): its value-weighted norm on each key, log scale",
    long_position: "position",
  },
  zh: {
    long_explain:
      "长输入：每格是它覆盖的位置上精确值的{reduce}（{cells}）。拖出方框放大（每边不超过 {level} 个位置时标出词元）；双击回到全图。",
    long_cells: "每格 {h} × {w} 个位置",
    long_tokens: "每格一个词元",
    long_reduce_max: "最大值",
    long_readout_cell: "查询 {r0}–{r1} → 键 {c0}–{c1}：{reduce} {value}",
    long_readout_token: "{row}（{r}）→ {column}（{c}）：{value}",
    long_profile: "第 {r} 行（{token}）：对每个键的权重，对数坐标",
    long_profile_norms: "第 {r} 行（{token}）：对每个键的按值加权范数，对数坐标",
    long_position: "位置",
  },
};

const fmt = (n) => n.toLocaleString("en-US");

// [start, stop) of the positions an axis range shows (plotly's ranges are cell edges)
function span(range, length) {
  const [a, b] = [Math.min(...range), Math.max(...range)];
  const start = Math.max(0, Math.floor(a));
  return [start, Math.max(start + 1, Math.min(length, Math.ceil(b)))];
}

// the [rows, columns] a link's "r0,r1,c0,c1" names, clamped to the input (else the whole)
export function zoomed(win, n) {
  const v = String(win ?? "")
    .split(",")
    .map((x) => Number.parseInt(x, 10));
  if (v.length !== 4 || v.some(Number.isNaN))
    return [
      [0, n],
      [0, n],
    ];
  const axis = (a, b) => {
    const start = Math.max(0, Math.min(n - 1, a));
    return [start, Math.max(start + 1, Math.min(n, b))];
  };
  return [axis(v[0], v[1]), axis(v[2], v[3])];
}

// A window of this input's attention (POST /api/v1/attention): the text and model of the
// page, one type and layer, and what `asked` adds (heads, kinds, rows, columns, pool).
async function ask(ctx, layer, asked, signal) {
  const { state } = ctx;
  const { type = state.type, ...rest } = asked;
  const body = { model: state.model, text: state.text, ...ctx.promptOptions };
  const request = { ...body, types: [type], layers: [layer], reduce: "max", ...rest };
  return (await ctx.api.attention(request, signal)).blocks[0];
}

// Every head of a layer of a long input, each max-pooled to at most `pool` cells a side (the
// model view's thumbnails): one request a layer.
export async function overviewBlock(ctx, type, layer, pool, kind = "weights") {
  const raw = await ask(ctx, layer, {
    type,
    kinds: [kind],
    encoding: encodingOf(kind),
    pool,
  });
  return new Block(raw);
}

async function windowBlock(ctx, rows, columns, signal) {
  const { state } = ctx;
  const exact = rows[1] - rows[0] <= TOKEN_LEVEL && columns[1] - columns[0] <= TOKEN_LEVEL;
  const asked = { heads: [state.head], kinds: [state.kind], encoding: encodingOf(state.kind) };
  const raw = await ask(
    ctx,
    state.layer,
    { ...asked, rows, columns, ...(exact ? {} : { pool: CELLS }) },
    signal,
  );
  return { block: new Block(raw), raw, exact };
}

export async function drawLongHead(ctx) {
  const { state, t, elements } = ctx;
  const tokens = ctx.analysis.source_tokens;
  const n = tokens.length;
  const el = elements.plot;
  let asking = null; // the window being fetched: a newer one aborts it
  const title = `${t(state.type)} · ${t("layer")} ${state.layer} · ${t("head")} ${state.head}`;
  const Plotly = await plotly;
  // one head, exact weights, scores, mask or norms: the average, the mask overlay and the word
  // view need whole heads (inputs of at most 512 tokens)
  for (const name of ["average", "overlay", "words", "hide"]) {
    const input = elements[name];
    const label = input.closest("label") ?? document.querySelector(`label[for="${input.id}"]`);
    if (label) label.hidden = true;
  }
  elements.head.disabled = false;

  const draw = async (rows, columns) => {
    asking?.abort();
    const mine = new AbortController();
    asking = mine;
    let got;
    try {
      got = await windowBlock(ctx, rows, columns, mine.signal);
    } catch (err) {
      if (mine.signal.aborted || ctx.stale()) return;
      elements.status.textContent = err.message; // e.g. 429: too many requests
      elements.status.className = "status error";
      return;
    }
    if (asking !== mine || ctx.stale()) return;
    const { block, raw, exact } = got;
    const rowEdges = raw.row_edges;
    const colEdges = raw.column_edges;
    const z = block.matrix(0);
    const cells = exact
      ? t("long_tokens")
      : t("long_cells")
          .replace("{h}", fmt(rowEdges[1] - rowEdges[0]))
          .replace("{w}", fmt(colEdges[1] - colEdges[0]));
    const said = t("long_explain")
      .replace("{reduce}", t("long_reduce_max"))
      .replace("{cells}", cells)
      .replace("{level}", String(TOKEN_LEVEL));
    // what a value-weighted cell is, where they are shown
    elements.explain.textContent = state.kind === "norms" ? `${t("norms_said")} ${said}` : said;
    const trace = {
      type: "heatmap",
      z,
      x: colEdges,
      y: rowEdges,
      colorscale: COLORSCALE,
      zmin: state.kind === "scores" ? undefined : 0,
      zmax: state.kind === "scores" || state.kind === "norms" ? undefined : 1, // (norms: own scale)
      hoverinfo: "none",
    };
    // a token window's labels: every token's, or every k-th past LABELS a side (plotly
    // measures each label it draws: 160 a side took a 250 ms task); the readout names all
    const tick = (edges, names) => {
      if (!exact || !names) return { tickformat: ",d", title: { text: t("long_position") } };
      const every = Math.ceil(names.length / LABELS);
      const shown = names.map((_, i) => i).filter((i) => i % every === 0);
      return {
        tickmode: "array",
        tickvals: shown.map((i) => edges[i] + 0.5),
        ticktext: shown.map((i) => escapeText(names[i])),
        tickfont: { size: Math.max(8, Math.min(12, 600 / shown.length)) },
      };
    };
    const height = Math.max(360, Math.min(900, innerHeight - el.getBoundingClientRect().top - 40));
    const layout = {
      ...themed(),
      title: { text: escapeText(title), x: 0, xanchor: "left" },
      margin: { l: 70, r: 20, t: 50, b: 70 },
      height,
      dragmode: "zoom",
      xaxis: { ...tick(colEdges, exact ? block.columns : null), range: [columns[0], columns[1]] },
      yaxis: {
        ...tick(rowEdges, exact ? block.rows : null),
        range: [rows[1], rows[0]], // queries down
      },
    };
    el.attnvizLong = { rowEdges, colEdges, z, exact, rows, columns };
    await Plotly.react(el, [trace], layout, configFor(`attnviz-${state.model}-long-${title}`));
    el.dataset.window = `${rows[0]},${rows[1]},${columns[0]},${columns[1]}`;
    const whole = rows[0] === 0 && rows[1] === n && columns[0] === 0 && columns[1] === n;
    ctx.note({ win: whole ? "" : el.dataset.window }); // a link or a reload comes back here
    performance.mark("attnviz:window"); // (the long-prompt benchmark times to it)
    el.dataset.exact = String(exact);
  };

  const readout = (event) => {
    const now = el.attnvizLong;
    const point = event.points[0];
    if (!now || !point) return;
    const [i, j] = point.pointNumber;
    const value = Number(now.z[i][j]).toFixed(4);
    const [r0, r1, c0, c1] = [
      now.rowEdges[i],
      now.rowEdges[i + 1],
      now.colEdges[j],
      now.colEdges[j + 1],
    ];
    elements.readout.textContent =
      r1 - r0 === 1 && c1 - c0 === 1
        ? t("long_readout_token")
            .replace("{row}", tokens[r0])
            .replace("{r}", fmt(r0))
            .replace("{column}", tokens[c0])
            .replace("{c}", fmt(c0))
            .replace("{value}", value)
        : t("long_readout_cell")
            .replace("{r0}", fmt(r0))
            .replace("{r1}", fmt(r1 - 1))
            .replace("{c0}", fmt(c0))
            .replace("{c1}", fmt(c1 - 1))
            .replace("{reduce}", t("long_reduce_max"))
            .replace("{value}", value);
    profileSoon(r0);
  };

  let profileTimer = null;
  const profiledKind = state.kind === "norms" ? "norms" : "weights"; // (scores: the weights)
  let profiled = null;
  const profileSoon = (row) => {
    clearTimeout(profileTimer);
    el.attnvizPointed = row;
    if (row === profiled) return;
    profileTimer = setTimeout(() => profile(row), 200);
  };
  const profile = async (row) => {
    let raw;
    try {
      const cells = n > PROFILE_CELLS ? { pool: PROFILE_CELLS } : {};
      const asked = { heads: [state.head], kinds: [profiledKind], encoding: "f4" };
      raw = await ask(ctx, state.layer, { ...asked, rows: [row, row + 1], ...cells });
    } catch {
      return; // (the next row pointed at asks again)
    }
    if (ctx.stale() || el.attnvizPointed !== row) return;
    profiled = row;
    const values = new Block(raw).matrix(0)[0];
    const edges = raw.column_edges;
    const x = values.map((_, j) => edges[j]);
    await Plotly.react(
      elements.extra,
      [{ type: "scatter", mode: "lines", x, y: values.map((v) => (v > 0 ? v : null)) }],
      {
        ...themed(),
        title: {
          text: escapeText(
            t(profiledKind === "norms" ? "long_profile_norms" : "long_profile")
              .replace("{r}", fmt(row))
              .replace("{token}", tokens[row]),
          ),
          x: 0,
          xanchor: "left",
        },
        height: 240,
        margin: { l: 70, r: 20, t: 40, b: 40 },
        xaxis: { range: [0, n], tickformat: ",d", title: { text: t("long_position") } },
        yaxis: { type: "log" },
      },
      configFor(`attnviz-${state.model}-row-${row}`),
    );
    elements.extra.dataset.row = String(row);
  };

  await draw(...zoomed(state.win, n));
  el.removeAllListeners?.("plotly_hover");
  el.on("plotly_hover", readout);
  el.removeAllListeners?.("plotly_relayout");
  el.on("plotly_relayout", (change) => {
    if (change["xaxis.autorange"] || change["yaxis.autorange"]) {
      draw([0, n], [0, n]); // a double-click: the whole head again
      return;
    }
    const x =
      change["xaxis.range[0]"] === undefined
        ? null
        : [change["xaxis.range[0]"], change["xaxis.range[1]"]];
    const y =
      change["yaxis.range[0]"] === undefined
        ? null
        : [change["yaxis.range[0]"], change["yaxis.range[1]"]];
    if (!x && !y) return;
    const now = el.attnvizLong;
    draw(y ? span(y, n) : now.rows, x ? span(x, n) : now.columns);
  });
}
