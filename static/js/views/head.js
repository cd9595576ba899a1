// One head (or the mean of a layer's heads) as a heatmap: queries down, keys across.
import { heatmap } from "../plots.js";
import { drawLongHead, strings } from "./long-head.js";

async function drawHead(ctx) {
  // a long input is read by windows, no whole matrix
  if (ctx.analysis.long) return drawLongHead(ctx);
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
  const { rows, rowNames, convention } = rowLabels(block, state.type, t, rawRows(ctx, block));
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
    columnNames: rawNames(block.columns, rawOf(ctx, block.columns, columnSide(state.type)), t),
    title: `${t(state.type)} · ${t("layer")} ${state.layer} · ${who}`,
    zmin: kind === "scores" ? undefined : 0,
    zmax: kind === "scores" || kind === "norms" ? undefined : 1, // (norms: their own scale)
    valueLabel: { scores: t("score"), norms: t("norm") }[kind] ?? t("weight"),
    overlay: masks && masks.height === z.length ? masks.matrix(0) : null,
    readout: ctx.elements.readout,
    fill: true,
    axes: { x: t("axis_keys"), y: t("axis_queries") },
    // exported images say what they show
    filename: `attnviz-${state.model}-${state.type}-L${state.layer}-${state.avg ? "mean" : `H${state.head}`}-${kind}`,
  });
  // what a value-weighted cell is, where they are shown
  ctx.elements.explain.textContent =
    kind === "norms" ? `${t("norms_said")} ${t("hint")}` : t("hint");
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

// The tokenizer's own piece of each row's token (the analysis's source_raw or target_raw:
// a byte-level "Ġthe" shown as "␣the"), where the rows are that side's whole token list;
// null otherwise (pooled or windowed rows, an older answer without them).
function rawRows(ctx, block) {
  return rawOf(ctx, block.rows, ctx.state.type.startsWith("decoder") ? "target" : "source");
}

// the same for a list of a side's tokens (a plot's rows or columns)
function rawOf(ctx, labels, side) {
  const raw = ctx.analysis?.[`${side}_raw`];
  const tokens = ctx.analysis?.[`${side}_tokens`];
  if (!raw || !tokens || raw.length !== labels.length) return null;
  return labels.every((label, i) => label === tokens[i]) ? raw : null;
}

// the side a type's columns (its keys) come from: the source but for decoder self-attention
function columnSide(type) {
  return type === "decoder.self" ? "target" : "source";
}

// labels named with their raw pieces, where there are some
function rawNames(labels, raw, t) {
  return raw ? labels.map((label, i) => withRaw(label, raw[i], t)) : labels;
}

// A token as hovers name it: as shown, and as the tokenizer spells it where that differs
// ("␣the (raw “Ġthe”)"), so the piece itself can be read.
export function withRaw(token, raw, t) {
  if (raw === undefined || raw === null || raw === token) return token;
  return t("raw_token").replace("{token}", token).replace("{raw}", raw);
}

// What a plot's rows are. A decoder row is a step: fed one token, it predicts the next.
// Cross-attention, where people read alignment, labels each row by the token its step
// predicts (the row of "hang2" looks at 行); self-attention keeps the tokens fed in on
// both axes (the diagonal is a token itself). Hovers and the readout name both, and the
// raw piece of each row's token where `raw` gives them.
export function rowLabels(block, type, t, raw = null) {
  const predicted = block.predicted;
  const named = (token, i) => (raw ? withRaw(token, raw[i], t) : token);
  if (!predicted) {
    const convention = type.startsWith("decoder") ? "" : t("rows_encoder");
    return { rows: block.rows, rowNames: block.rows.map(named), convention };
  }
  const rowNames = block.rows.map((fed, i) =>
    t("step_row")
      .replace("{i}", String(i))
      .replace("{fed}", named(fed, i))
      .replace("{predicts}", predicted[i]),
  );
  if (type === "decoder.cross") {
    return { rows: predicted, rowNames, convention: t("rows_predicted") };
  }
  return { rows: block.rows, rowNames, convention: t("rows_fed") };
}

// its strings, in both languages
const STRINGS = {
  en: {
    norm: "norm",
    norms_said:
      "Value-weighted (Kobayashi et al. 2020): each cell is ‖α f(x)‖, the size of what the key adds to the query through this head, its weight times the norm of its value vector carried through the head's output projection. A large weight on a key whose value is small adds little.",
    words_weights_only:
      "The word view and hidden special tokens apply to weights: these are the tokens' own.",
    view_head: "Head view",
    hint: "Arrow keys: ←/→ head, ↑/↓ layer.",
    step_row: "step {i}: fed {fed}, predicts {predicts}",
    raw_token: "{token} (raw “{raw}”)",
    rows_predicted:
      "Rows: the token each decoder step predicts (that step was fed the token before it). Columns: the source tokens.",
    rows_fed:
      "Rows and columns: the tokens fed to the decoder, so the diagonal is a token itself; each row's step predicts the next token (hover a cell).",
    rows_encoder: "Rows: each token as a query. Columns: the tokens it attends to.",
    role_none: "the most focused head",
    start_model_card: "Opened on the head the model card names, {role}.",
    start_metrics: "Opened on this model's strongest head of its kind, {role}.",
    start_trained_model:
      "Opened on the head the trained model opens on (there, {role}). Compare what it does before training.",
    start_focused:
      "Opened on this model's most focused head (lowest entropy on its first example).",
    start_first_head:
      "Opened on its first head: this model of yours had not been read when the page loaded, so no head was chosen for it.",
  },
  zh: {
    norm: "范数",
    norms_said:
      "按值加权（Kobayashi 等，2020）：每个单元是 ‖α f(x)‖，即这个键经由该头加给查询的向量大小：权重乘以其值向量经该头输出投影后的范数。权重大而值向量小的键，贡献也小。",
    words_weights_only: "词视图和隐藏特殊词元只作用于权重：这里显示的是词元本身的数值。",
    view_head: "单头视图",
    hint: "方向键：←/→ 切换头，↑/↓ 切换层。",
    step_row: "第 {i} 步：输入 {fed}，预测 {predicts}",
    raw_token: "{token}（原始“{raw}”）",
    rows_predicted: "行：解码器每一步预测的词元（这一步输入的是它前面的词元）。列：源词元。",
    rows_fed:
      "行和列：输入解码器的词元，对角线即词元自身；每一行这一步预测的是下一个词元（悬停查看）。",
    rows_encoder: "行：作为查询的每个词元。列：它所关注的词元。",
    role_none: "最集中的头",
    start_model_card: "打开的是模型卡所指的头，{role}。",
    start_metrics: "打开的是该模型中同类最强的头，{role}。",
    start_trained_model:
      "打开的是训练后模型所打开的同一个头（在那里，{role}）。对比它训练前的样子。",
    start_focused: "打开的是该模型最集中的头（在它第一个示例上熵最低）。",
    start_first_head: "打开的是它的第一个头：页面加载时你的这个模型尚未读入，所以没有为它挑选头。",
  },
};

export const view = {
  id: "head",
  state: { win: "" }, // a long input's head zoomed to a window: "r0,r1,c0,c1"
  clearedOn: { win: "input" },
  long: true,
  label: "view_head",
  controls: ["type", "layer", "head", "kind", "overlay", "average", "words", "hide"],
  arrowKeys: true,
  strings: { en: { ...strings.en, ...STRINGS.en }, zh: { ...strings.zh, ...STRINGS.zh } },
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
