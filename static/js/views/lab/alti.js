// ALTI (Ferrando et al. 2022): token-to-token contributions of every attention block, its
// residual and layer norm included, composed over the layers; beside rollout on the same
// input, the chosen layer's own contributions and its terms' norms (Kobayashi et al. 2021).
import { heatmap } from "../../plots.js";
import { ask, fmt, plotBox, selfType, summary } from "./shared.js";

async function draw({ ctx, t, out, base }) {
  const type = selfType(ctx);
  const r = await ask(ctx, "alti", { ...base, type, layer: ctx.state.layer });
  if (ctx.stale()) return;
  const last = r.tokens.length - 1;
  const row = r.composed[last];
  const top = row.indexOf(Math.max(...row));
  summary(
    out,
    t("lab_alti_said")
      .replace("{token}", r.tokens[last])
      .replace("{source}", r.tokens[top])
      .replace("{share}", fmt(row[top]))
      .replace("{rollout}", fmt(r.rollout[last][top])),
    { id: "lab-alti-said" },
  );
  const plots = [
    [r.composed, `${t("lab_alti_composed")} · ${t(r.type)}`, "lab-alti-composed"],
    [r.rollout, `${t("lab_alti_rollout")} · ${t(r.type)}`, "lab-alti-rollout"],
    [
      r.layer_contributions,
      `${t("lab_alti_layer")} · ${t(r.type)} · ${t("layer")} ${r.layer}`,
      "lab-alti-layer",
    ],
  ];
  // the layer's norms of the same terms (Kobayashi et al. 2021), on their own scale
  let largest = 0;
  for (const row of r.norms) for (const v of row) if (v > largest) largest = v;
  plots.push([
    r.norms,
    `${t("lab_alti_norms")} · ${t(r.type)} · ${t("layer")} ${r.layer}`,
    "lab-alti-norms",
    largest,
    t("lab_alti_norm"),
  ]);
  for (const [z, title, id, zmax = 1, valueLabel = t("lab_alti_value")] of plots) {
    const box = plotBox(out);
    box.id = id;
    await heatmap(box, { z, rows: r.tokens, columns: r.tokens, title, zmin: 0, zmax, valueLabel });
    if (ctx.stale()) return;
  }
}

// its strings, in both languages
const STRINGS = {
  en: {
    lab_alti: "ALTI: contributions through the layers",
    lab_alti_explain:
      "How much each token contributes to each token's output of every attention block (Ferrando et al. 2022, ALTI): each token's term — its value vectors through the heads, plus the residual for the token itself, through the layer norm after a post-norm block — measured by how close it is to the whole (L1 distance), rows summing to 1, and the layers composed as rollout composes them. Unlike rollout it reads the values, the output projection, the residual and the layer norm; the feed-forward blocks, which mix no tokens, are left out.",
    lab_alti_said:
      "After every layer, “{token}” (the last token) draws most on “{source}”: {share} of its contributions by ALTI, where rollout gives {rollout}.",
    lab_alti_composed: "ALTI through every layer",
    lab_alti_rollout: "rollout (raw weights)",
    lab_alti_layer: "this layer's own ALTI",
    lab_alti_value: "contribution",
    lab_alti_norms:
      "this layer's ‖T_i(x_j)‖: heads, residual and layer norm (Kobayashi et al. 2021)",
    lab_alti_norm: "norm",
  },
  zh: {
    lab_alti: "ALTI：逐层贡献",
    lab_alti_explain:
      "每个词元对每个注意力块中每个词元输出的贡献（Ferrando 等，2022，ALTI）：每个词元的项——经过各头的值向量，本词元再加上残差，后归一化的块还要经过层归一化——以其与整体的接近程度（L1 距离）衡量，各行之和为 1，并像 rollout 那样逐层相乘。与 rollout 不同，它读取值向量、输出投影、残差和层归一化；前馈块不混合词元，不计在内。",
    lab_alti_said:
      "经过所有层后，“{token}”（最后一个词元）最依赖“{source}”：按 ALTI 占其贡献的 {share}，而 rollout 给出 {rollout}。",
    lab_alti_composed: "经过所有层的 ALTI",
    lab_alti_rollout: "rollout（原始权重）",
    lab_alti_layer: "本层自身的 ALTI",
    lab_alti_value: "贡献",
    lab_alti_norms: "本层的 ‖T_i(x_j)‖：各头与残差，后归一化的块还含层归一化（Kobayashi 等，2021）",
    lab_alti_norm: "范数",
  },
};

export const experiment = {
  id: "alti",
  label: "lab_alti",
  explain: "lab_alti_explain",
  draw,
  strings: STRINGS,
};
