// Induction heads: a random sequence twice; each head's induction and previous-token
// scores, the heads ranked, and the second copy's loss with the top heads switched off
// against as many random ones. Its settings live in the URL (rep=length,seed,heads).
import { heatmap } from "../../plots.js";
import {
  ask,
  el,
  fmt,
  labelled,
  plotBox,
  repSettings,
  settingsBar,
  summary,
  table,
  weights,
} from "./shared.js";

// the route's bounds: tokens per copy, seed, heads switched off
const FIELDS = [
  {
    key: "length",
    most: (n) => Math.min(256, Math.floor(n / 2)),
    id: "lab-ind-length",
    label: "lab_ind_length",
    min: 8,
    max: 256,
    value: 50,
  },
  { key: "seed", id: "lab-ind-seed", label: "lab_ind_seed", min: 0, max: 2 ** 31 - 1, value: 0 },
  { key: "ablate", id: "lab-ind-heads", label: "lab_ind_heads", min: 1, max: 32, value: 5 },
];
const TABLE_ROWS = 10;

const named = (ref) => `L${ref.layer} H${ref.head}`;

async function draw({ ctx, t, out, base }) {
  const { state } = ctx;
  const chosen = repSettings(FIELDS, state.rep, ctx.modelInfo().max_tokens);
  out.append(settingsBar(ctx, FIELDS, chosen, "lab-ind-apply"));
  const r = await ask(ctx, "induction", { model: base.model, text: base.text, ...chosen });
  if (ctx.stale()) return;
  const nats = (x) => `${fmt(x)} ${t("lab_nats")}`;
  summary(
    out,
    t("lab_ind_losses")
      .replace("{first}", nats(r.loss_first))
      .replace("{second}", nats(r.loss_second))
      .replace("{chance}", nats(r.chance_loss)),
    { id: "lab-ind-loss" },
  );
  const off = r.ablated.map(named).join(", ");
  const control = r.control.map(named).join(", ");
  summary(
    out,
    t("lab_ind_ablated")
      .replaceAll("{k}", String(r.ablated.length))
      .replace("{heads}", off)
      .replace("{loss}", nats(r.loss_second_ablated))
      .replace("{control}", control)
      .replace("{control_loss}", nats(r.loss_second_control)),
    { id: "lab-ind-ablated" },
  );
  // the measured claim, said as measured: it holds (the server's criterion: over 1 nat
  // and over twice the random heads' raise) or it does not
  const raised = r.loss_second_ablated - r.loss_second;
  const controlRaised = r.loss_second_control - r.loss_second;
  summary(
    out,
    t(r.copying_is_theirs ? "lab_ind_holds" : "lab_ind_fails")
      .replace("{raised}", nats(raised))
      .replace("{control}", nats(controlRaised)),
    { id: "lab-ind-verdict" },
  );
  // every head's induction score, layer x head
  const layers = Math.max(...r.heads.map((h) => h.layer)) + 1;
  const heads = Math.max(...r.heads.map((h) => h.head)) + 1;
  const z = Array.from({ length: layers }, () => Array(heads).fill(null));
  for (const h of r.heads) z[h.layer][h.head] = h.induction;
  await heatmap(plotBox(out), {
    z,
    rows: z.map((_, l) => `L${l}`),
    columns: Array.from({ length: heads }, (_, h) => `H${h}`),
    title: t("lab_ind_scores"),
    zmin: 0,
    zmax: 1,
    valueLabel: t("lab_ind_score"),
  });
  if (ctx.stale()) return;
  const top = r.heads.slice(0, TABLE_ROWS);
  const ranked = table(
    ["#", t("layer"), t("head"), t("lab_ind_score"), t("lab_ind_previous")],
    top.map((h, i) => [i + 1, h.layer, h.head, h.induction, h.previous]),
    ["int", "int", "int", "real", "real"],
  );
  ranked.id = "lab-ind-table";
  out.append(ranked);
  // the top heads' weights on the sequence: the stripe one token right of the diagonal
  // of the copy
  const pick = el("select", { id: "lab-ind-pattern" });
  r.patterns.forEach((_, i) => {
    pick.append(el("option", { value: String(i), textContent: named(r.ablated[i]) }));
  });
  const box = el("div");
  const tokens = r.tokens.map((tok, i) => `${tok} (${i < r.length ? 1 : 2})`);
  const drawPattern = () => {
    box.replaceChildren();
    const i = Number(pick.value);
    return weights(box, {
      z: r.patterns[i],
      rows: tokens,
      columns: tokens,
      title: `${t("lab_ind_pattern")} · ${named(r.ablated[i])}`,
      t,
    });
  };
  pick.addEventListener("change", drawPattern);
  out.append(labelled("lab-ind-pattern", t("lab_ind_pattern_of"), pick), box);
  await drawPattern();
}

// its strings, in both languages
const STRINGS = {
  en: {
    lab_induction: "Induction heads",
    lab_induction_explain:
      "A sequence of random tokens, repeated. The first copy cannot be predicted; in the second, a model can find where the current token occurred before and copy the token that came after it. An induction head attends from a token of the second copy to that next token: in its pattern, the diagonal of the lower-left block (second copy over first) moved one column right. Its score is the mean of that weight. Switching the top induction heads off should make the second copy as hard as the first: the loss is measured, against as many heads chosen at random.",
    lab_ind_length: "tokens per copy",
    lab_nats: "nats",
    lab_ind_losses:
      "next-token loss: first copy {first}, second copy {second} (a uniform guess: {chance})",
    lab_ind_ablated:
      "second copy with the top {k} induction heads off ({heads}): {loss}; with {k} random heads off ({control}): {control_loss}",
    lab_ind_holds:
      "Switching the induction heads off raises the second copy's loss by {raised}; the random heads by {control} (under half that): the copying is theirs.",
    lab_ind_fails:
      "Here switching the top induction heads off raises the second copy's loss by {raised}, the random heads by {control}: not by over 1 nat and over twice the random heads' raise, so this sequence does not show the copying to be theirs.",
    lab_ind_scores: "induction score per head (layer × head)",
    lab_ind_score: "induction",
    lab_ind_previous: "previous token",
    lab_ind_pattern: "attention on the repeated sequence (1, 2: which copy)",
    lab_ind_pattern_of: "Head",
  },
  zh: {
    lab_induction: "归纳头",
    lab_induction_explain:
      "一段随机词元，重复两遍。第一遍无法预测；第二遍里，模型可以找到当前词元上次出现的位置，照抄它后面的那个词元。归纳头从第二遍的词元注意到那个“下一个”词元：在注意力图上，是左下块（第二遍对第一遍）的对角线右移一列。其得分就是这部分权重的均值。关闭得分最高的归纳头，第二遍应该变得和第一遍一样难：这里测量损失，并与随机关闭同样多个头对照。",
    lab_ind_length: "每遍词元数",
    lab_nats: "奈特",
    lab_ind_losses: "下一词元损失：第一遍 {first}，第二遍 {second}（均匀猜测：{chance}）",
    lab_ind_ablated:
      "关闭得分最高的 {k} 个归纳头（{heads}）后第二遍：{loss}；随机关闭 {k} 个头（{control}）：{control_loss}",
    lab_ind_holds:
      "关闭归纳头使第二遍的损失升高 {raised}；关闭随机的头升高 {control}（不到其一半）：照抄靠的是它们。",
    lab_ind_fails:
      "这里关闭归纳头使第二遍的损失升高 {raised}，关闭随机的头升高 {control}：没有超过 1 奈特且超过随机头的两倍，这段序列没能说明照抄靠的是它们。",
    lab_ind_scores: "每个头的归纳得分（层 × 头）",
    lab_ind_score: "归纳",
    lab_ind_previous: "前一个词元",
    lab_ind_pattern: "在重复序列上的注意力（1、2：第几遍）",
    lab_ind_pattern_of: "头",
  },
};

export const experiment = {
  id: "induction",
  label: "lab_induction",
  explain: "lab_induction_explain",
  draw,
  strings: STRINGS,
};
