// Attention rollout: how much each input token flows into each position through the layers.
import { ask, summary, weights } from "./shared.js";

async function draw({ ctx, t, out, base }) {
  const { state } = ctx;
  // rollout multiplies layers of self-attention: queries and keys are the same tokens
  const selfTypes = ctx
    .modelInfo()
    .attention.filter((a) => a.rows === a.columns)
    .map((a) => a.type);
  const type = selfTypes.includes(state.type) ? state.type : selfTypes[0];
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

export const experiment = {
  id: "rollout",
  label: "lab_rollout",
  explain: "lab_rollout_explain",
  draw,
};
