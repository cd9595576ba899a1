// Why divide by √d_k: one head with and without the scaling, and the layer's heads' entropy.
import { ask, fmt, summary, table, weights } from "./shared.js";

async function draw({ ctx, t, out, head, title }) {
  const r = await ask(ctx, "scaling", head);
  if (ctx.stale()) return;
  const { rows, columns, first, second, predicted } = r.matrices;
  const labels = { rows, columns, predicted, type: r.type, t };
  // the headline over the heads the table lists: this layer's
  const layer = r.head_stats.filter((h) => h.layer === ctx.state.layer);
  const mean = (key) => layer.reduce((sum, h) => sum + h[key], 0) / layer.length;
  summary(
    out,
    `${t("layer")} ${ctx.state.layer} (${layer.length} × ${t("head")}), ` +
      `${t("lab_mean_entropy")}: ${fmt(mean("entropy_scaled"))} → ` +
      `${fmt(mean("entropy_unscaled"))} ${t("lab_bits")} (d_k = ${r.head_dim})`,
  );
  await weights(out, { z: first, ...labels, title: title(t("lab_scaled")) });
  await weights(out, { z: second, ...labels, title: title(t("lab_unscaled")) });
  const scaled = (key) => `${t(key)} (${t("lab_scaled")})`;
  const unscaled = (key) => `${t(key)} (${t("lab_unscaled")})`;
  out.append(
    table(
      [
        t("head"),
        scaled("lab_mean_entropy"),
        unscaled("lab_mean_entropy"),
        scaled("lab_max_weight"),
        unscaled("lab_max_weight"),
      ],
      layer.map((h) => [
        h.head,
        h.entropy_scaled,
        h.entropy_unscaled,
        h.max_weight_scaled,
        h.max_weight_unscaled,
      ]),
      ["int", "real", "real", "real", "real"],
    ),
  );
}

// its strings, in both languages
const STRINGS = {
  en: {
    lab_scaling: "Why divide by √d_k",
    lab_scaling_explain:
      "The scores q·kᵀ grow with the head's width d_k; without dividing by √d_k the softmax saturates: one key takes almost all the weight and the gradients vanish. The same input runs with and without the scaling; lower entropy and higher peaks show the saturation.",
    lab_scaled: "scaled: q·kᵀ/√d_k",
    lab_unscaled: "unscaled: q·kᵀ",
    lab_mean_entropy: "mean entropy",
    lab_bits: "bits",
    lab_max_weight: "mean max weight",
  },
  zh: {
    lab_scaling: "为什么除以 √d_k",
    lab_scaling_explain:
      "分数 q·kᵀ 随头的维度 d_k 增大；不除以 √d_k，softmax 会饱和：几乎所有权重落在一个键上，梯度消失。同一输入分别在缩放与不缩放下运行，更低的熵和更高的峰值说明了饱和。",
    lab_scaled: "缩放：q·kᵀ/√d_k",
    lab_unscaled: "不缩放：q·kᵀ",
    lab_mean_entropy: "平均熵",
    lab_bits: "比特",
    lab_max_weight: "平均最大权重",
  },
};

export const experiment = {
  id: "scaling",
  label: "lab_scaling",
  explain: "lab_scaling_explain",
  draw,
  strings: STRINGS,
};
