// Attention vs. contribution: where a head's weights and its value-weighted norms disagree
// (Kobayashi et al. 2020), per head of the type and key by key for the chosen one.
import { heatmap } from "../../plots.js";
import { ask, fmt, plotBox, summary, table } from "./shared.js";

const SHOWN = 8; // the keys listed, where weight and contribution differ most first

async function draw({ ctx, t, out, head, title }) {
  const r = await ask(ctx, "contribution", head);
  if (ctx.stale()) return;
  const apart = r.distance[r.layer][r.head];
  const top = r.keys[0];
  summary(
    out,
    t("lab_contribution_said")
      .replace("{distance}", fmt(apart))
      .replace("{token}", top.token)
      .replace("{weight}", fmt(top.weight))
      .replace("{share}", fmt(top.norm_share)),
  );
  await heatmap(plotBox(out), {
    z: r.distance,
    rows: r.distance.map((_, l) => `L${l}`),
    columns: r.distance[0].map((_, h) => `H${h}`),
    title: `${t("lab_contribution_apart")} · ${t(r.type)}`,
    zmin: 0,
    zmax: 1,
    valueLabel: t("lab_contribution_distance"),
  });
  out.append(
    table(
      [t("position"), t("key"), t("lab_contribution_weight"), t("lab_contribution_share")],
      r.keys.slice(0, SHOWN).map((k) => [k.position, k.token, k.weight, k.norm_share]),
      ["int", "text", "real", "real"],
    ),
  );
  out.lastChild.id = "lab-contribution-table";
  out.lastChild.setAttribute("aria-label", title(t("lab_contribution")));
}

// its strings, in both languages
const STRINGS = {
  en: {
    lab_contribution: "Attention vs. contribution",
    lab_contribution_explain:
      "Where this head's weights and its value-weighted norms disagree (Kobayashi et al. 2020): a norm is the size of what a key actually adds to the query, its weight times its value vector through the head's output projection. A token that takes much weight but adds little (often [SEP], <s> or a full stop) is where raw attention misleads.",
    lab_contribution_said:
      "This head's weights and norm shares are {distance} apart (total variation, mean over rows; 0: the same, 1: disjoint). Where they differ most: {token}, given {weight} of the weight and adding {share} of the norms.",
    lab_contribution_apart: "weights vs. norm shares, per head",
    lab_contribution_distance: "distance",
    lab_contribution_weight: "mean weight",
    lab_contribution_share: "mean norm share",
  },
  zh: {
    lab_contribution: "注意力与贡献",
    lab_contribution_explain:
      "这个头的权重与按值加权的范数在哪里不一致（Kobayashi 等，2020）：范数是一个键实际加给查询的向量大小，即权重乘以其值向量经该头输出投影后的范数。权重大而贡献小的词元（常见于 [SEP]、<s> 或句号）正是原始注意力误导之处。",
    lab_contribution_said:
      "这个头的权重与范数占比相差 {distance}（总变差距离，各行平均；0 相同，1 互不重叠）。相差最大的是 {token}：得到 {weight} 的权重，只贡献 {share} 的范数。",
    lab_contribution_apart: "各头的权重与范数占比之差",
    lab_contribution_distance: "距离",
    lab_contribution_weight: "平均权重",
    lab_contribution_share: "平均范数占比",
  },
};

export const experiment = {
  id: "contribution",
  label: "lab_contribution",
  explain: "lab_contribution_explain",
  draw,
  strings: STRINGS,
};
