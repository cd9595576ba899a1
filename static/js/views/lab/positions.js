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
      t,
    });
    await weights(out, {
      z: c.permuted,
      rows: r.permuted_tokens,
      columns: r.permuted_tokens,
      title: `${t(key)} · ${t("lab_permuted")}`,
      t,
    });
  }
}

// its strings, in both languages
const STRINGS = {
  en: {
    lab_positions: "Order needs positions",
    lab_positions_explain:
      "Self-attention treats its input as a set. With the positional encoding switched off, the attention of a permuted input (猫追狗 → 狗追猫) is exactly the permuted attention of the original; with it on, it is not.",
    lab_original: "input",
    lab_permuted: "permuted input",
    lab_with_pe: "with positional encoding",
    lab_without_pe: "without positional encoding",
    lab_max_diff: "max |W(permuted) − P·W·Pᵀ|",
  },
  zh: {
    lab_positions: "顺序需要位置编码",
    lab_positions_explain:
      "自注意力把输入当作集合。关闭位置编码后，打乱顺序的输入（猫追狗 → 狗追猫）的注意力恰好是原注意力按同样方式打乱；打开位置编码则不然。",
    lab_original: "原输入",
    lab_permuted: "打乱后的输入",
    lab_with_pe: "有位置编码",
    lab_without_pe: "无位置编码",
    lab_max_diff: "最大 |W(打乱) − P·W·Pᵀ|",
  },
};

export const experiment = {
  id: "positions",
  label: "lab_positions",
  explain: "lab_positions_explain",
  draw,
  strings: STRINGS,
};
