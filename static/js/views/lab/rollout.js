// Attention rollout: how much each input token flows into each position through the layers.
import { ask, selfType, summary, weights } from "./shared.js";

async function draw({ ctx, t, out, base }) {
  // rollout multiplies layers of self-attention: queries and keys are the same tokens
  const type = selfType(ctx);
  const r = await ask(ctx, "rollout", { ...base, type });
  if (ctx.stale()) return;
  // what rollout assumes, in the page's language (the API states it in English)
  summary(out, t("lab_rollout_assumes").replace("{residual}", r.residual));
  const sink = sinkOf(r.matrix);
  if (sink) {
    // most of the flow on one token reads as "everything comes from there": say why
    summary(
      out,
      t("lab_rollout_sink")
        .replace("{share}", `${Math.round(100 * sink.share)}%`)
        .replace("{token}", r.tokens[sink.column])
        .replace("{position}", String(sink.column)),
      { id: "lab-rollout-sink" },
    );
  }
  await weights(out, {
    z: r.matrix,
    rows: r.tokens,
    columns: r.tokens,
    title: `rollout · ${t(r.type)}`,
    t,
  });
}

// The column holding most of the flow (over half, the mean of the rows' shares), or null.
function sinkOf(matrix) {
  const n = matrix.length;
  const shares = matrix[0].map((_, j) => matrix.reduce((sum, row) => sum + row[j], 0) / n);
  const column = shares.indexOf(Math.max(...shares));
  return shares[column] > 0.5 ? { column, share: shares[column] } : null;
}

// its strings, in both languages
const STRINGS = {
  en: {
    lab_rollout_assumes:
      "Each layer's heads are averaged and mixed with the identity (residual {residual}) for the residual connection, rows renormalised, and the layers multiplied (Abnar & Zuidema 2020): information is assumed to move linearly along attention weights and the residual stream only, ignoring values, the output projection, the feed-forward layers and LayerNorm. A heuristic of where information comes from, not an attribution.",
    lab_rollout_sink:
      "{share} of the flow, averaged over the rows, ends on “{token}” (position {position}), an attention sink: in every layer many heads park their weight on one token when nothing else is worth attending to, the first token in a causal decoder, which every query sees (Xiao et al. 2023), or [CLS] and [SEP] in BERT (Clark et al. 2019). Rollout multiplies the layers, so the sink's share compounds through the residual mix layer after layer until it takes nearly everything: the plot shows where weight rests, not where the information comes from.",
    lab_rollout: "Attention rollout",
    lab_rollout_explain:
      "How much each input token flows into each position through all self-attention layers (Abnar & Zuidema 2020): heads averaged, the residual connection added as the identity, layers multiplied.",
  },
  zh: {
    lab_rollout_assumes:
      "每层各头取平均，再按残差连接与单位矩阵混合（残差 {residual}），各行重新归一化，然后逐层相乘（Abnar 与 Zuidema，2020）：假定信息只沿注意力权重和残差流线性传递，忽略值向量、输出投影、前馈层和 LayerNorm。这是一种估计信息来源的启发式方法，不是归因。",
    lab_rollout_sink:
      "按各行平均，{share} 的流量落在“{token}”（位置 {position}）上，这是一个注意力汇点（attention sink）：每一层都有许多头在没有值得关注的词元时把权重停放在同一个词元上，在因果解码器中是每个查询都看得到的第一个词元（Xiao 等，2023），在 BERT 中是 [CLS] 和 [SEP]（Clark 等，2019）。rollout 把各层相乘，汇点的份额经过与残差的混合逐层累积，直到几乎占据全部：图中显示的是权重停在哪里，而不是信息来自哪里。",
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
