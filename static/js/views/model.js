// Every layer x head of one attention type as thumbnails, loaded a layer at a time,
// and the heads' entropy as a layer x head heatmap.
import { attentionOf } from "../model-info.js";
import { drawThumbnail, heatmap } from "../plots.js";
import { overviewBlock } from "./long-head.js";

const THUMB_CELLS = 96; // a long input's thumbnail: cells a side (its canvas's pixels)

async function drawModel(ctx) {
  const { state, t, elements, analysis } = ctx;
  const { layers, query_heads: heads, kv_heads: kv } = attentionOf(ctx.modelInfo(), state.type);
  const group = heads / kv; // query heads sharing a key/value head (grouped-query attention)
  const grid = elements.grid;
  grid.hidden = false;
  grid.replaceChildren();
  grid.style.setProperty("--heads", heads);
  const roles = new Map(
    analysis.summaries
      .filter((s) => s.type === state.type && s.role)
      .map((s) => [`${s.layer}/${s.head}`, s.role]),
  );
  // the arrow keys move between thumbnails (Enter opens one), from the first layer drawn
  grid.onkeydown = (event) => {
    const at = event.target.closest?.(".thumb");
    if (!at) return;
    const layer = Number(at.dataset.layer);
    const head = Number(at.dataset.head);
    const moves = {
      ArrowLeft: [layer, (head + heads - 1) % heads],
      ArrowRight: [layer, (head + 1) % heads],
      ArrowUp: [(layer + layers - 1) % layers, head],
      ArrowDown: [(layer + 1) % layers, head],
    };
    if (!(event.key in moves)) return;
    event.preventDefault();
    grid.querySelector(thumbAt(...moves[event.key]))?.focus();
  };
  await drawEntropy(ctx, analysis, layers, heads);
  // value-weighted norms where chosen (a long input's: their max-pooled overviews)
  const norms = state.kind === "norms";
  if (group > 1) grid.append(groupHeader(kv, group, t));
  for (let layer = 0; layer < layers; layer++) {
    if (ctx.stale()) return;
    const row = document.createElement("div");
    row.className = "grid-row";
    const label = document.createElement("span");
    label.className = "grid-label";
    label.textContent = `${t("layer")} ${layer}`;
    row.append(label);
    grid.append(row);
    // a long input's heads: max-pooled overviews (no whole matrix is kept)
    const block = analysis.long
      ? await overviewBlock(ctx, state.type, layer, THUMB_CELLS, norms ? "norms" : "weights")
      : await ctx.layerBlock(state.type, layer, norms ? "norms" : "weights");
    if (ctx.stale()) return;
    // norms have no fixed range: each layer's on its own scale, its largest the brightest
    let largest = 0;
    for (let i = 0; norms && i < block.heads.length; i++) {
      for (const v of block.flat(i)) if (v > largest) largest = v;
    }
    largest ||= 1;
    block.heads.forEach((head, i) => {
      const button = document.createElement("button");
      button.type = "button";
      button.className =
        group > 1 && head % group === 0 && head > 0 ? "thumb group-start" : "thumb";
      button.dataset.layer = String(layer);
      button.dataset.head = String(head);
      const canvas = document.createElement("canvas");
      const values = norms ? block.flat(i).map((v) => v / largest) : block.flat(i);
      drawThumbnail(canvas, values, block.height, block.width);
      const caption = document.createElement("span");
      caption.className = "thumb-caption";
      button.append(canvas, caption);
      // what the metrics call this head on this input (analyze's summaries)
      named(button, roles.get(`${layer}/${head}`), t);
      button.addEventListener("click", () => ctx.openHead(layer, head));
      row.append(button);
    });
  }
  // the current head is marked
  grid.querySelector(thumbAt(state.layer, state.head))?.classList.add("current");
  const said = norms ? `${t("norms_model")} ${t("hint_model")}` : t("hint_model");
  elements.explain.textContent = said;
  if (analysis.long) await followSummaries(ctx, analysis, layers, heads, said);
}

// A thumbnail's name and caption: its layer, head and role.
function named(button, role, t) {
  const { layer, head } = button.dataset;
  const said = role ? ` · ${t(`role_${role}`)}` : "";
  button.title = `${t("layer")} ${layer} · ${t("head")} ${head}${said}`;
  button.setAttribute("aria-label", button.title);
  const caption = button.querySelector(".thumb-caption");
  caption.textContent = `H${head}${role ? ` ${t(`role_short_${role}`)}` : ""}`;
  if (role) caption.dataset.role = role;
  else delete caption.dataset.role;
}

// every head's mean entropy, a layer x head map (a head not summarised yet: blank)
async function drawEntropy(ctx, analysis, layers, heads) {
  const { state, t, elements } = ctx;
  const entropy = Array.from({ length: layers }, () => Array(heads).fill(null));
  for (const s of analysis.summaries) {
    if (s.type === state.type) entropy[s.layer][s.head] = s.entropy;
  }
  await heatmap(elements.extra, {
    z: entropy,
    rows: entropy.map((_, l) => `L${l}`),
    columns: Array.from({ length: heads }, (_, h) => `H${h}`),
    title: t("entropy"),
    valueLabel: "bits",
  });
}

// A long input's head summaries come in the background: asked for again until every head
// has one, the entropy map and the thumbnails' roles redrawn as they come; what the view
// `said` is kept before the count.
async function followSummaries(ctx, first, layers, heads, said) {
  const { state, t, elements } = ctx;
  let now = first;
  while (now.summaries_done < now.summaries_total) {
    elements.explain.textContent = `${said} ${t("summaries_progress")
      .replace("{done}", now.summaries_done)
      .replace("{total}", now.summaries_total)}`;
    await new Promise((resolve) => setTimeout(resolve, 2000));
    if (ctx.stale()) return;
    now = await ctx.api.analyze(state.model, ctx.inputBody, "", ctx.promptOptions);
    if (ctx.stale()) return;
    await drawEntropy(ctx, now, layers, heads);
    const roles = new Map(
      now.summaries
        .filter((s) => s.type === state.type)
        .map((s) => [`${s.layer}/${s.head}`, s.role]),
    );
    for (const button of elements.grid.querySelectorAll(".thumb")) {
      named(button, roles.get(`${button.dataset.layer}/${button.dataset.head}`), t);
    }
  }
  elements.explain.textContent = said;
}

// a row over the thumbnails naming each key/value head over the query heads that share it
function groupHeader(kv, group, t) {
  const row = document.createElement("div");
  row.className = "grid-row kv-header";
  row.style.setProperty("--group", group);
  const blank = document.createElement("span");
  blank.className = "grid-label";
  row.append(blank);
  for (let g = 0; g < kv; g++) {
    const label = document.createElement("span");
    label.className = "kv-label";
    const names = { g, first: g * group, last: (g + 1) * group - 1 };
    const fill = (key) =>
      Object.entries(names).reduce((s, [k, v]) => s.replace(`{${k}}`, v), t(key));
    label.textContent = fill("kv_group");
    label.title = fill("kv_group_title");
    row.append(label);
  }
  return row;
}

function thumbAt(layer, head) {
  return `.thumb[data-layer="${layer}"][data-head="${head}"]`;
}

// its strings, in both languages
const STRINGS = {
  en: {
    summaries_progress: "Head summaries of this long input: {done} of {total} so far.",
    view_model: "Model view",
    hint_model:
      "Rows: layers; columns: heads. Arrow keys move between thumbnails (Tab into them first); Enter or a click opens one.",
    kv_group: "KV {g}: H{first}–H{last}",
    kv_group_title: "Query heads {first}–{last} share key/value head {g}",
    norms_model:
      "Value-weighted norms ‖α f(x)‖: what each key adds, each layer's thumbnails on its own scale (its largest brightest).",
  },
  zh: {
    summaries_progress: "这段长输入的注意力头摘要：已算出 {done} / {total}。",
    view_model: "全模型视图",
    hint_model: "行：层；列：头。方向键在缩略图之间移动（先用 Tab 进入）；回车或点击打开该头。",
    kv_group: "KV {g}：H{first}–H{last}",
    kv_group_title: "查询头 {first}–{last} 共享键/值头 {g}",
    norms_model:
      "按值加权的范数 ‖α f(x)‖：每个键实际加入的量；每层缩略图使用各自的刻度（该层最大者最亮）。",
  },
};

export const view = {
  id: "model",
  long: true,
  label: "view_model",
  controls: ["type", "kind", "words", "hide"],
  kinds: ["weights", "norms"], // (of the Show choices: what its thumbnails draw)
  draw: drawModel,
  strings: STRINGS,
  prefetch: (ctx) => ctx.layerBlock(ctx.state.type, 0, "weights"),
};
