// BertViz's lines view, drawn with plotly.js: the tokens in two columns, queries on the
// left and keys on the right, a line from each query to each key it attends to with its
// opacity by weight, one colour per head, several heads at once. Only the weights at or
// above a threshold are drawn (the page says how many), so that 512 tokens stay legible;
// hovering a token shows its lines alone. Its choices live in the URL (lh=heads, thr=). A
// long input's lines are those of the head view's zoomed window (win=).
import { Block } from "../api.js";
import { encodingOf } from "../encodings.js";
import { attentionOf } from "../model-info.js";
import {
  configFor,
  escapeText,
  plotly,
  TITLE_FONT,
  themed,
  titleAbove,
  wrapTitle,
} from "../plots.js";
import { FONT_FAMILY, textWidths } from "../ticks.js";
import { el, labelled } from "./lab/shared.js";
import { TOKEN_LEVEL, zoomed } from "./long-head.js";

const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
  "#7f7f7f", "#bcbd22", "#17becf"]; // biome-ignore format: a palette a line
const BINS = [0.25, 0.5, 0.75, 1.01]; // opacity steps: a line's weight falls in one
const DEFAULT_THRESHOLD = 0.1;
const LABEL_SIZE = 12; // px, the tokens' (plotly.js's default text size)
const LABEL_PAD = 14; // px between a label and the figure's edge, and its offset from its end

const STRINGS = {
  en: {
    view_lines: "Lines",
    lines_heads: "Heads",
    lines_threshold: "Draw weights at or above",
    lines_title: "{type} · Layer {layer} · queries (left) → keys (right)",
    lines_count:
      "{drawn} lines drawn: the weights ≥ {thr} of {heads} ({all} query–key pairs in all). A line's opacity is its weight; a colour is a head.",
    lines_explain:
      "Hover a token to see its lines alone; tick heads to draw several at once; lower the threshold to see fainter weights.",
    lines_none: "No weight reaches {thr}: lower the threshold.",
    lines_count_norms:
      "{drawn} lines drawn: the value-weighted norms ≥ {thr} of {of}, of {heads} ({all} query–key pairs in all). A line's opacity is its norm over that largest; a colour is a head.",
    lines_norms:
      "Value-weighted norms ‖α f(x)‖: what each key adds to the query, as a fraction of {of}.",
    lines_of_layer: "this layer's largest",
    lines_of_window: "the largest of the heads drawn in this window",
    lines_window:
      "A long input: the lines of the head view's zoomed window, queries {r0}–{r1} → keys {c0}–{c1} of {n} (a query's weights on keys outside it are not drawn).",
    lines_zoom_first:
      "A long input ({n} tokens): this view draws a window of at most {level} tokens a side. Zoom the head view in to one (its window is kept), then come back.",
  },
  zh: {
    view_lines: "连线视图",
    lines_heads: "头",
    lines_threshold: "绘制权重不低于",
    lines_title: "{type} · 层 {layer} · 查询（左）→ 键（右）",
    lines_count:
      "绘制了 {drawn} 条线：{heads} 中权重 ≥ {thr} 的（共 {all} 个查询–键对）。线的不透明度即权重；每种颜色是一个头。",
    lines_explain: "悬停某个词元只看它的连线；勾选多个头可同时绘制；降低阈值可看到更弱的权重。",
    lines_none: "没有权重达到 {thr}：请降低阈值。",
    lines_count_norms:
      "绘制了 {drawn} 条线：{heads} 中按值加权的范数不低于{of} {thr} 倍的（共 {all} 个查询–键对）。线的不透明度即范数与该最大值之比；每种颜色是一个头。",
    lines_norms: "按值加权的范数 ‖α f(x)‖：每个键加给查询的量，以{of}的比例表示。",
    lines_of_layer: "本层最大值",
    lines_of_window: "本窗口中所画各头的最大值",
    lines_window:
      "长输入：头视图放大后的窗口的连线，查询 {r0}–{r1} → 键 {c0}–{c1}（共 {n} 个）（查询对窗口外的键的权重不画）。",
    lines_zoom_first:
      "长输入（{n} 个词元）：本视图画每边不超过 {level} 个词元的窗口。请先在头视图中放大到这样的窗口（窗口会保留），再回来。",
  },
};

export function chosenHeads(lh, head, count) {
  const heads = String(lh || "")
    .split(",")
    .map((v) => Number.parseInt(v, 10))
    .filter((h) => Number.isInteger(h) && h >= 0 && h < count);
  return heads.length ? [...new Set(heads)].sort((a, b) => a - b) : [Math.min(head, count - 1)];
}

export function threshold(thr) {
  const v = Number.parseFloat(thr);
  return Number.isFinite(v) && v > 0 && v <= 1 ? v : DEFAULT_THRESHOLD;
}

// every drawn line: {head, query, key, weight} (a block of the chosen heads alone holds
// them in order; a layer's block every head)
// scale: what a value is read as a fraction of (value-weighted norms: the layer's largest)
function linesOf(block, heads, thr, chosenOnly, scale = 1) {
  const out = [];
  for (const [i, head] of heads.entries()) {
    const z = block.matrix(chosenOnly ? i : head);
    z.forEach((row, i) => {
      row.forEach((value, j) => {
        const w = value / scale;
        if (w >= thr) out.push({ head, query: i, key: j, weight: w });
      });
    });
  }
  return out;
}

// the largest value of a block (of every head)
function largestOf(block) {
  let largest = 0;
  for (const v of block.values) if (v > largest) largest = v;
  return largest || 1;
}

function segments(lines, yLeft, yRight, style) {
  const x = [];
  const y = [];
  for (const l of lines) {
    x.push(0, 1, null);
    y.push(yLeft(l.query), yRight(l.key), null);
  }
  return { type: "scatter", mode: "lines", x, y, hoverinfo: "skip", showlegend: false, ...style };
}

// one trace per head and opacity step (a trace has one opacity)
function lineTraces(lines, heads, yLeft, yRight) {
  const traces = [];
  for (const head of heads) {
    let low = 0;
    for (const high of BINS) {
      const mine = lines.filter((l) => l.head === head && l.weight >= low && l.weight < high);
      if (mine.length) {
        traces.push(
          segments(mine, yLeft, yRight, {
            line: { color: PALETTE[head % 10], width: 1.5 },
            opacity: Math.min(1, (low + high) / 2),
          }),
        );
      }
      low = high;
    }
  }
  return traces;
}

// A long input keeps no whole head (model/long/): the chosen heads' exact weights in the
// head view's zoomed window, where it is at most TOKEN_LEVEL tokens a side; else what the
// page says instead (how to get one).
async function windowBlock(ctx, heads, kind) {
  const { state, t, elements } = ctx;
  const n = ctx.analysis.source_tokens.length;
  const [rows, columns] = zoomed(state.win, n);
  const fmt = (v) => v.toLocaleString("en-US");
  if (rows[1] - rows[0] > TOKEN_LEVEL || columns[1] - columns[0] > TOKEN_LEVEL) {
    elements.plot.replaceChildren();
    return {
      refused: t("lines_zoom_first").replace("{n}", fmt(n)).replace("{level}", String(TOKEN_LEVEL)),
    };
  }
  const body = { model: state.model, text: state.text, ...ctx.promptOptions };
  const answer = await ctx.api.attention({
    ...body,
    types: [state.type],
    layers: [state.layer],
    heads,
    kinds: [kind],
    encoding: encodingOf(kind),
    rows,
    columns,
  });
  elements.explain.dataset.window = `${rows[0]},${rows[1]},${columns[0]},${columns[1]}`;
  const said = t("lines_window")
    .replace("{r0}", fmt(rows[0]))
    .replace("{r1}", fmt(rows[1] - 1))
    .replace("{c0}", fmt(columns[0]))
    .replace("{c1}", fmt(columns[1] - 1))
    .replace("{n}", fmt(n));
  return { block: new Block(answer.blocks[0]), said };
}

async function drawLines(ctx) {
  const { state, t, elements } = ctx;
  const long = ctx.analysis.long;
  const count = attentionOf(ctx.modelInfo(), state.type).query_heads;
  const heads = chosenHeads(state.lh, state.head, count);
  // value-weighted norms where chosen, each read as a fraction of the layer's largest (a
  // long input's window: of the heads drawn there)
  const norms = state.kind === "norms";
  const windowed = long ? await windowBlock(ctx, heads, norms ? "norms" : "weights") : null;
  if (ctx.stale()) return;
  if (windowed?.refused) return windowed.refused; // (the page's status says it)
  // a window's block holds the chosen heads alone, in order; a layer's every head
  const block =
    windowed?.block ?? (await ctx.layerBlock(state.type, state.layer, norms ? "norms" : "weights"));
  if (ctx.stale()) return;
  const thr = threshold(state.thr);
  const rows = block.predicted && state.type === "decoder.cross" ? block.predicted : block.rows;
  const columns = block.columns;
  const span = Math.max(rows.length, columns.length) - 1 || 1;
  const yLeft = (i) => -(i * span) / Math.max(1, rows.length - 1);
  const yRight = (j) => -(j * span) / Math.max(1, columns.length - 1);
  const lines = linesOf(block, heads, thr, windowed !== null, norms ? largestOf(block) : 1);
  elements.grid.hidden = false;
  elements.grid.replaceChildren(controls(ctx, count, heads, thr));
  const base = lineTraces(lines, heads, yLeft, yRight);
  // the labels in the margins, each as wide as its column's widest label (clipped to the
  // plot area they lost their first letters), at most 30 % of the width a side: a longer
  // token is cut short with "…", whole on hover
  const width = elements.plot.clientWidth || 900;
  const most = Math.max(60, 0.3 * width - LABEL_PAD);
  const rowLabels = shortened(rows, most);
  const columnLabels = shortened(columns, most);
  const label = (tokens, shown, x, y, side) => ({
    type: "scatter",
    mode: "text",
    x: tokens.map(() => x),
    y: tokens.map((_, i) => y(i)),
    text: shown.labels.map(escapeText),
    customdata: tokens.map(escapeText),
    textposition: side === "left" ? "middle left" : "middle right",
    textfont: { size: LABEL_SIZE },
    cliponaxis: false,
    hovertemplate: "%{customdata}<extra></extra>",
    showlegend: false,
    meta: side,
  });
  const labels = [
    label(rows, rowLabels, 0, yLeft, "left"),
    label(columns, columnLabels, 1, yRight, "right"),
  ];
  // the heads' colours on lines of the title (a legend of plotly.js's sat on the labels)
  const title = t("lines_title")
    .replace("{type}", t(state.type))
    .replace("{layer}", String(state.layer));
  // (the title starts at the plot's left, past the queries' labels)
  const room = Math.max(120, width - rowLabels.widest - LABEL_PAD - 20);
  const titled = [...wrapTitle(title, room).map(escapeText), ...key(heads, t("head"), room)];
  const more = 22 * (titled.length - 1);
  const height = Math.min(4000, Math.max(360, 16 * (span + 1) + 120)) + more;
  const layout = {
    // as the heatmap's: left-aligned just above the plot, under the toolbar
    title: titleAbove(titled.join("<br>"), more),
    height,
    margin: {
      l: rowLabels.widest + LABEL_PAD,
      r: columnLabels.widest + LABEL_PAD,
      t: 62 + more,
      b: 30,
    },
    xaxis: { visible: false, range: [-0.01, 1.01], fixedrange: true },
    yaxis: { visible: false, range: [-span - 0.5, 0.5] },
    hovermode: "closest",
    showlegend: false,
    ...themed(),
  };
  const config = configFor(`attnviz-${state.model}-lines-L${state.layer}`);
  const Plotly = await plotly;
  const plot = elements.plot;
  await Plotly.react(plot, [...base, ...labels], layout, config);
  const first = base.length; // the labels' traces follow the lines'
  plot.removeAllListeners?.("plotly_hover");
  plot.removeAllListeners?.("plotly_unhover");
  plot.on("plotly_hover", (event) => {
    const point = event.points.find((p) => p.curveNumber === first || p.curveNumber === first + 1);
    if (!point) return;
    const side = point.curveNumber === first ? "query" : "key";
    const mine = lines.filter((l) => l[side] === point.pointNumber);
    const isolated = lineTraces(mine, heads, yLeft, yRight).map((tr) => ({
      ...tr,
      opacity: Math.max(0.35, tr.opacity),
    }));
    Plotly.react(
      plot,
      [...base.map((tr) => ({ ...tr, opacity: 0.04 })), ...labels, ...isolated],
      layout,
      config,
    );
    elements.readout.textContent = `${side === "query" ? rows[point.pointNumber] : columns[point.pointNumber]}: ${mine.length}`;
  });
  plot.on("plotly_unhover", () => {
    Plotly.react(plot, [...base, ...labels], layout, config);
  });
  const all = rows.length * columns.length * heads.length;
  const headsNamed = heads.map((h) => `${t("head")} ${h}`).join(", ");
  const of = t(windowed ? "lines_of_window" : "lines_of_layer");
  elements.convention.textContent = lines.length
    ? t(norms ? "lines_count_norms" : "lines_count")
        .replace("{drawn}", String(lines.length))
        .replace("{thr}", String(thr))
        .replace("{heads}", headsNamed)
        .replace("{all}", String(all))
        .replace("{of}", of)
    : t("lines_none").replace("{thr}", String(thr));
  const said = [windowed?.said, norms ? t("lines_norms").replace("{of}", of) : ""];
  elements.explain.textContent = [...said, t("lines_explain")].filter(Boolean).join(" ");
}

// Tokens as labels at most `most` px wide in the labels' font (a longer one cut, with "…"),
// and the widest label's width.
function shortened(tokens, most) {
  const font = `${LABEL_SIZE}px ${FONT_FAMILY}`;
  const widths = textWidths(tokens, font);
  const labels = tokens.map((token, i) => {
    if (widths[i] <= most) return token;
    let cut = [...token];
    while (cut.length > 1 && textWidths([`${cut.join("")}…`], font)[0] > most)
      cut = cut.slice(0, -1);
    return `${cut.join("")}…`;
  });
  const widest = textWidths(labels, font).reduce((a, b) => Math.max(a, b), 0);
  return { labels, widest: Math.ceil(widest) };
}

// The heads' key, as title lines of at most `room` px: a stroke of each head's colour and
// its name, packed a few to a line.
function key(heads, named, room) {
  // (measured with em dashes: beside CJK text the swatch takes a CJK font's glyphs, an em
  // wide each, where the canvas measures the Latin font's narrower ones)
  const entry = (h) => `\u2014\u2014 ${named} ${h}`;
  const lines = [];
  let line = [];
  for (const h of heads) {
    const next = [...line, h];
    const text = next.map(entry).join("\u2003");
    if (line.length && textWidths([text], TITLE_FONT)[0] > room) {
      lines.push(line);
      line = [h];
    } else {
      line = next;
    }
  }
  if (line.length) lines.push(line);
  const colored = (h) =>
    `<span style="color:${PALETTE[h % 10]}">━━</span> ${escapeText(named)} ${h}`;
  return lines.map((hs) => hs.map(colored).join("\u2003"));
}

function controls(ctx, count, heads, thr) {
  const { t } = ctx;
  const input = el("input", {
    type: "number",
    id: "lines-threshold",
    min: "0.001",
    max: "1",
    step: "0.01",
    value: String(thr),
  });
  input.addEventListener("change", () => ctx.update({ thr: String(threshold(input.value)) }));
  const bar = labelled("lines-threshold", t("lines_threshold"), input);
  const boxes = el("div", { className: "lines-heads", role: "group", ariaLabel: t("lines_heads") });
  boxes.append(t("lines_heads"), " ");
  for (let h = 0; h < count; h++) {
    const box = el("input", {
      type: "checkbox",
      id: `lines-head-${h}`,
      checked: heads.includes(h),
    });
    box.addEventListener("change", () => {
      const next = box.checked ? [...heads, h] : heads.filter((x) => x !== h);
      if (next.length) ctx.update({ lh: next.sort((a, b) => a - b).join(",") });
      else box.checked = true; // at least one head
    });
    boxes.append(el("label", { htmlFor: box.id }, box, String(h)), " ");
  }
  return el("div", {}, bar, boxes);
}

export const view = {
  id: "lines",
  state: { win: "", thr: "", lh: "" }, // the window; the weight threshold; the heads, "0,3"
  clearedOn: { win: "input" },
  label: "view_lines",
  controls: ["type", "layer", "kind"],
  kinds: ["weights", "norms"], // (of the Show choices: what its lines draw)
  draw: drawLines,
  strings: STRINGS,
  long: true, // a long input's zoomed window (drawLines says how to get one)
};
