// Order needs positions: a permuted input's attention with the positional encoding off and on.
import { ask, fmt, summary, weights } from "./shared.js";

async function draw({ ctx, t, out, base }) {
  const { state } = ctx;
  const layer = state.type === "encoder.self" ? state.layer : 0;
  const r = await ask(ctx, "positions", { ...base, layer, head: state.head });
  if (ctx.stale()) return;
  summary(
    out,
    `${t("lab_max_diff")}: ${t("lab_without_pe")} ${fmt(r.without_positions.max_abs_diff)} · ` +
      `${t("lab_with_pe")} ${fmt(r.with_positions.max_abs_diff)}`,
  );
  summary(out, `${t("lab_permuted")}: ${r.permuted_tokens.join(" ")}`);
  for (const [key, c] of [
    ["lab_without_pe", r.without_positions],
    ["lab_with_pe", r.with_positions],
  ]) {
    await weights(out, {
      z: c.original,
      rows: r.tokens,
      columns: r.tokens,
      title: `${t(key)} · ${t("lab_original")}`,
    });
    await weights(out, {
      z: c.permuted,
      rows: r.permuted_tokens,
      columns: r.permuted_tokens,
      title: `${t(key)} · ${t("lab_permuted")}`,
    });
  }
}

export const experiment = {
  id: "positions",
  label: "lab_positions",
  explain: "lab_positions_explain",
  draw,
};
