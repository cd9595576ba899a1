// The positional table the model adds, the similarity of positions, a few dims as curves.
import { configFor, escapeText, heatmap, plotly, themed, wrapTitle } from "../plots.js";

const SHOWN = 512;

async function drawPositional(ctx) {
  const { t, elements, analysis } = ctx;
  const info = ctx.modelInfo();
  // the text's positions; of a long input the first SHOWN (a position x position map of
  // thousands is more than a page draws usefully)
  const tokens = analysis ? analysis.source_tokens.length : 0;
  const positions = Math.min(SHOWN, Math.max(16, tokens));
  // what the encoding has per position: d_model values added, or RoPE's angle per pair of
  // a head's dims (head_dim / 2)
  const rotary = info.positional === "rotary";
  // T5's relative bias: a value per head and distance, added to the scores
  const relative = info.positional === "relative";
  const width = rotary
    ? info.attention[0].head_dim / 2
    : relative
      ? info.attention[0].query_heads
      : info.d_model;
  const dims = Math.min(width, 64);
  const suffix = rotary ? "_rotary" : relative ? "_relative" : "";
  const said = (key) => t(`${key}${suffix}`); // what the plots show, by encoding
  const pe = await ctx.positional(positions, dims);
  if (ctx.stale()) return;
  const posLabels = Array.from({ length: pe.positions }, (_, i) => String(i));
  const dimLabels = Array.from({ length: pe.dims }, (_, i) => String(i));
  await heatmap(elements.plot, {
    z: pe.table,
    rows: posLabels,
    columns: dimLabels,
    title: said("pe_table"),
    valueLabel: rotary ? "rad" : relative ? "bias" : "PE",
  });
  await heatmap(elements.extra, {
    z: pe.similarity,
    rows: posLabels,
    columns: posLabels,
    title: said("pe_similarity"),
    zmin: -1,
    zmax: 1,
    valueLabel: "cos",
  });
  const grid = elements.grid;
  grid.hidden = false;
  grid.replaceChildren();
  const curves = document.createElement("div");
  curves.className = "plot";
  grid.append(curves);
  const shown = [0, 1, 2, 3, 8, 9].filter((d) => d < pe.dims);
  const traces = shown.map((d) => ({
    type: "scatter",
    mode: "lines",
    name: relative ? `${t("head")} ${d}` : `${t(rotary ? "pair" : "dim")} ${d}`,
    x: posLabels.map(Number),
    y: pe.table.map((row) => row[d]),
  }));
  // what the curves are depends on the encoding: only sinusoidal ones are sines
  const title = t(pe.kind === "sinusoidal" ? "pe_curves" : `pe_curves_${pe.kind}`);
  const lines = wrapTitle(title, Math.max(120, (curves.clientWidth || 900) - 40));
  await (await plotly).react(
    curves,
    traces,
    {
      title: { text: lines.map(escapeText).join("<br>") },
      xaxis: { title: { text: t("position") } },
      height: 320 + 22 * (lines.length - 1),
      margin: { l: 50, r: 20, t: 40 + 22 * (lines.length - 1), b: 40 },
      ...themed(),
    },
    configFor(`attnviz-${ctx.state.model}-positional`),
  );
  const first =
    tokens > SHOWN ? `${t("pe_first").replace("{n}", SHOWN).replace("{total}", tokens)} ` : "";
  elements.explain.textContent = `${first}${said("pe_rows_columns")} ${said("pe_explain")} ${pe.formula}`;
}

// its strings, in both languages
const STRINGS = {
  en: {
    pe_first: "The first {n} of the text's {total} positions.",
    pe_rows_columns:
      "Table: rows are positions, columns dimensions. Similarity: positions against positions.",
    view_positional: "Positional encoding",
    pe_table: "The vector added to each position (positions × dims)",
    pe_similarity: "Cosine similarity of positions: nearby positions look alike",
    pe_table_relative:
      "Each head's bias on the score, by distance from the first key (distances × heads)",
    pe_similarity_relative: "Cosine similarity of distances, by their biases across heads",
    pe_rows_columns_relative:
      "Table: rows are distances from the first key, columns heads. Similarity: distances against distances.",
    pe_explain_relative: "Nothing is added to the tokens:",
    pe_curves: "A few dimensions across positions: sines and cosines of different frequencies",
    pe_curves_learned: "A few dimensions across positions: learned values, no formula behind them",
    pe_curves_rotary:
      "A few pairs across positions: each rotates at its own rate (angles wrapped to ±π)",
    pe_table_rotary:
      "The angle RoPE rotates each pair of a head's dims by, per position (radians, wrapped to ±π)",
    pe_similarity_rotary:
      "How alike RoPE makes two positions: the mean cosine of their angle differences (it depends on their distance only)",
    pe_rows_columns_rotary:
      "Table: rows are positions, columns the pairs of a head's dims (i and i + d_head/2). Similarity: positions against positions.",
    pe_explain_rotary:
      "Self-attention alone does not see order; RoPE adds nothing to the embeddings but rotates each query and key by its position, so q · k depends on how far apart two tokens are.",
    pe_curves_none: "This model adds no positional encoding",
    pe_curves_relative:
      "No vector is added: each head's learned bias on the score, by distance from the first key",
    pair: "pair",
    pe_explain:
      "Self-attention alone does not see order (猫追狗 and 狗追猫 would look the same); the positional encoding adds each position's vector to the token embeddings.",
  },
  zh: {
    pe_first: "文本 {total} 个位置中的前 {n} 个。",
    pe_rows_columns: "表：行是位置，列是维度。相似度：位置对位置。",
    view_positional: "位置编码",
    pe_table: "每个位置加上的向量（位置 × 维度）",
    pe_similarity: "位置之间的余弦相似度：相邻位置更相似",
    pe_table_relative: "每个头按到第一个键的距离给分数加的偏置（距离 × 头）",
    pe_similarity_relative: "距离之间的余弦相似度（按各头的偏置）",
    pe_rows_columns_relative: "表：行是到第一个键的距离，列是头。相似度：距离对距离。",
    pe_explain_relative: "不给词元加任何向量：",
    pe_curves: "几个维度随位置的变化：不同频率的正弦和余弦",
    pe_curves_learned: "几个维度随位置的变化：训练学到的数值，没有公式",
    pe_curves_rotary: "几对维度随位置的变化：每对以自己的速率旋转（角度折回到 ±π）",
    pe_table_rotary: "RoPE 在每个位置把头的每对维度旋转的角度（弧度，折回到 ±π）",
    pe_similarity_rotary: "RoPE 眼中两个位置的相似度：角度差的平均余弦（只取决于两者的距离）",
    pe_rows_columns_rotary:
      "表：行是位置，列是头的维度对（i 与 i + d_head/2）。相似度：位置对位置。",
    pe_explain_rotary:
      "自注意力本身感知不到顺序；RoPE 不往嵌入上加任何东西，而是按位置旋转每个查询和键，于是 q · k 取决于两个词元相距多远。",
    pe_curves_none: "该模型不加位置编码",
    pe_curves_relative: "不加位置向量：每个头按到第一个键的距离给分数加上学到的偏置",
    pair: "维度对",
    pe_explain:
      "自注意力本身感知不到顺序（“猫追狗”和“狗追猫”看起来一样）；位置编码把每个位置的向量加到词嵌入上。",
  },
};

export const view = {
  id: "positional",
  // a model of text (a picture's positions are 2-D: this view draws a text's 1-D positions)
  // (a model of pictures: its positions are a picture's rows and columns, not a text's)
  applies: (info) => info.capabilities.text !== false && info.capabilities.pictures !== true,
  long: true,
  label: "view_positional",
  controls: [],
  draw: drawPositional,
  strings: STRINGS,
};
