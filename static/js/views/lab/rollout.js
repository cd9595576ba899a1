// Attention rollout: how much each input token flows into each position through the layers.
import { ask, selfType, summary, weights } from "./shared.js";

async function draw({ ctx, t, out, base }) {
  // rollout multiplies layers of self-attention: queries and keys are the same tokens
  const type = selfType(ctx);
  const r = await ask(ctx, "rollout", { ...base, type });
  if (ctx.stale()) return;
  // what rollout assumes, in the page's language (the API states it in English)
  summary(out, t("lab_rollout_assumes").replace("{residual}", r.residual));
  await weights(out, {
    z: r.matrix,
    rows: r.tokens,
    columns: r.tokens,
    title: `rollout · ${t(r.type)}`,
  });
}

// its strings, in both languages
const STRINGS = {
  en: {
    lab_rollout_assumes:
      "Each layer's heads are averaged and mixed with the identity (residual {residual}) for the residual connection, rows renormalised, and the layers multiplied (Abnar & Zuidema 2020): information is assumed to move linearly along attention weights and the residual stream only, ignoring values, the output projection, the feed-forward layers and LayerNorm. A heuristic of where information comes from, not an attribution.",
    lab_rollout: "Attention rollout",
    lab_rollout_explain:
      "How much each input token flows into each position through all self-attention layers (Abnar & Zuidema 2020): heads averaged, the residual connection added as the identity, layers multiplied.",
  },
  zh: {
    lab_rollout_assumes:
      "每层各头取平均，再按残差连接与单位矩阵混合（残差 {residual}），各行重新归一化，然后逐层相乘（Abnar 与 Zuidema，2020）：假定信息只沿注意力权重和残差流线性传递，忽略值向量、输出投影、前馈层和 LayerNorm。这是一种估计信息来源的启发式方法，不是归因。",
    lab_rollout: "注意力展开（rollout）",
    lab_rollout_explain:
      "经过所有自注意力层，每个输入词元流向每个位置的程度（Abnar & Zuidema 2020）：各头平均，残差连接作为单位矩阵加入，各层相乘。",
  },
};

export const experiment = {
  id: "rollout",
  label: "lab_rollout",
  explain: "lab_rollout_explain",
  draw,
  strings: STRINGS,
};
