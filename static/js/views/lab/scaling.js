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
    ),
  );
}

export const experiment = {
  id: "scaling",
  label: "lab_scaling",
  explain: "lab_scaling_explain",
  draw,
};
