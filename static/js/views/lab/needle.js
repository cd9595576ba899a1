// Needle in a haystack: a pass key hidden at a depth of a long filler text, the model asked
// for it; each head's retrieval score (the share of the key's tokens it copy-pasted while
// the answer was written), the heads ranked, and the answer with the top heads switched off
// against as many random ones. Its settings live in the URL (rep=length,depth%,digits,
// seed,heads).
import { configFor, escapeText, heatmap, plotly, themed } from "../../plots.js";
import { ask, el, labelled, plotBox, repSettings, settingsBar, summary, table } from "./shared.js";

const ANSWER_ROOM = 16; // tokens the key and the answer after it may take (12 digits + 2)
const FIELDS = [
  {
    key: "length",
    most: (n) => Math.max(128, n - ANSWER_ROOM), // what the server reads, less the answer
    id: "lab-hay-length",
    label: "lab_hay_length",
    min: 128,
    max: 1 << 20,
    value: 1024,
  },
  { key: "depth", id: "lab-hay-depth", label: "lab_hay_depth", min: 0, max: 100, value: 50 },
  { key: "digits", id: "lab-hay-digits", label: "lab_hay_digits", min: 3, max: 12, value: 5 },
  { key: "seed", id: "lab-hay-seed", label: "lab_ind_seed", min: 0, max: 2 ** 31 - 1, value: 0 },
  { key: "ablate", id: "lab-hay-heads", label: "lab_ind_heads", min: 1, max: 32, value: 5 },
];
const TABLE_ROWS = 10;

export const strings = {
  en: {
    lab_needle: "Needle in a haystack",
    lab_needle_explain:
      "A pass key of random digits hidden in a long filler text, and the model asked for it at the end. While it writes the key, a head that copy-pastes it attends, at the step that writes a digit, most strongly to that very digit in the needle (Wu et al. 2024, retrieval heads). A head's retrieval score is the share of the key's tokens it copied this way. Switching the top retrieval heads off should lose the key; switching as many random heads off should not.",
    lab_hay_length: "prompt tokens",
    lab_hay_depth: "needle depth (%)",
    lab_hay_digits: "digits",
    lab_hay_reading:
      "Reading the {n}-token prompt three times (with every head, without the top heads, without random ones)…",
    lab_hay_prompt:
      "The key {key} sits at positions {k0}–{k1} of {n} tokens ({depth} % into the filler). Asked “{question}”, the model answers “{answer}”: {verdict}.",
    lab_hay_recalled: "the key",
    lab_hay_missed: "not the key",
    lab_hay_ablated:
      "With the top {k} retrieval heads off ({heads}): “{answer}”, {verdict}. With {k} random heads off ({control}): “{control_answer}”, {control_verdict}.",
    lab_hay_holds:
      "The key is lost without the top retrieval heads and kept without random ones: the retrieval is theirs.",
    lab_hay_fails:
      "Here the claim does not hold: the model needs to recall the key, keep it without the random heads and lose it without the top retrieval heads.",
    lab_hay_scores: "retrieval score per head (layer × head)",
    lab_hay_score: "retrieval",
    lab_hay_copied: "key tokens copied",
    lab_hay_profile_of: "Head",
    lab_hay_profile:
      "{head} at the step that wrote “{token}”: its weight on each position (log scale); the needle shaded",
    lab_position: "position",
  },
  zh: {
    lab_needle: "大海捞针",
    lab_needle_explain:
      "一个随机数字组成的通行码藏在一段很长的填充文字里，结尾让模型说出它。模型写出通行码时，复制粘贴它的头在写某一位数字的那一步，最强地注意针里的同一个数字（Wu 等 2024，检索头）。一个头的检索得分是它这样复制的通行码词元所占的比例。关闭检索得分最高的头，模型应当丢掉通行码；关闭同样多的随机头则不应。",
    lab_hay_length: "提示词元数",
    lab_hay_depth: "针的深度（%）",
    lab_hay_digits: "位数",
    lab_hay_reading: "读 {n} 个词元的提示三遍（全部的头；去掉得分最高的头；去掉随机的头）……",
    lab_hay_prompt:
      "通行码 {key} 位于 {n} 个词元中的第 {k0}–{k1} 个位置（填充文字的 {depth} % 处）。问“{question}”，模型答“{answer}”：{verdict}。",
    lab_hay_recalled: "答对了",
    lab_hay_missed: "没有答对",
    lab_hay_ablated:
      "关闭检索得分最高的 {k} 个头（{heads}）：“{answer}”，{verdict}。关闭 {k} 个随机头（{control}）：“{control_answer}”，{control_verdict}。",
    lab_hay_holds: "去掉最高的检索头就丢了通行码，去掉随机头则没有：检索是它们做的。",
    lab_hay_fails: "这里结论不成立：需要模型答对通行码、去掉随机头仍答对、去掉最高的检索头则答错。",
    lab_hay_scores: "每个头的检索得分（层 × 头）",
    lab_hay_score: "检索",
    lab_hay_copied: "复制的通行码词元",
    lab_hay_profile_of: "头",
    lab_hay_profile: "{head} 在写出“{token}”的那一步：对每个位置的权重（对数坐标）；阴影为针",
    lab_position: "位置",
  },
};

const named = (ref) => `L${ref.layer} H${ref.head}`;

async function draw({ ctx, t, out, base }) {
  const chosen = repSettings(FIELDS, ctx.state.rep, ctx.modelInfo().max_tokens);
  out.append(settingsBar(ctx, FIELDS, chosen, "lab-hay-apply"));
  const waiting = el("p", {
    className: "status busy",
    id: "lab-hay-waiting",
    textContent: t("lab_hay_reading").replace("{n}", chosen.length.toLocaleString("en-US")),
  });
  out.append(waiting);
  const r = await ask(ctx, "needle", {
    ...base,
    ...chosen,
    depth: chosen.depth / 100,
  }).finally(() => waiting.remove());
  if (ctx.stale()) return;
  const verdict = (a) => t(a.recalled ? "lab_hay_recalled" : "lab_hay_missed");
  const said = (a) => a.text.trim();
  summary(
    out,
    t("lab_hay_prompt")
      .replace("{key}", r.key)
      .replace("{k0}", r.key_positions[0].toLocaleString("en-US"))
      .replace("{k1}", (r.key_positions[1] - 1).toLocaleString("en-US"))
      .replace("{n}", r.length.toLocaleString("en-US"))
      .replace("{depth}", String(Math.round(r.depth * 100)))
      .replace("{question}", r.question)
      .replace("{answer}", said(r.answer))
      .replace("{verdict}", verdict(r.answer)),
    { id: "lab-hay-answer" },
  );
  summary(
    out,
    t("lab_hay_ablated")
      .replaceAll("{k}", String(r.ablated.length))
      .replace("{heads}", r.ablated.map(named).join(", "))
      .replace("{answer}", said(r.answer_ablated))
      .replace("{verdict}", verdict(r.answer_ablated))
      .replace("{control}", r.control.map(named).join(", "))
      .replace("{control_answer}", said(r.answer_control))
      .replace("{control_verdict}", verdict(r.answer_control)),
    { id: "lab-hay-ablated" },
  );
  summary(out, t(r.retrieval_is_theirs ? "lab_hay_holds" : "lab_hay_fails"), {
    id: "lab-hay-verdict",
  });
  // every head's retrieval score, layer x head
  const layers = Math.max(...r.heads.map((h) => h.layer)) + 1;
  const heads = Math.max(...r.heads.map((h) => h.head)) + 1;
  const z = Array.from({ length: layers }, () => Array(heads).fill(null));
  for (const h of r.heads) z[h.layer][h.head] = h.retrieval;
  await heatmap(plotBox(out), {
    z,
    rows: z.map((_, l) => `L${l}`),
    columns: Array.from({ length: heads }, (_, h) => `H${h}`),
    title: t("lab_hay_scores"),
    zmin: 0,
    zmax: 1,
    valueLabel: t("lab_hay_score"),
  });
  if (ctx.stale()) return;
  const keyTokens = r.key_positions[1] - r.key_positions[0];
  const ranked = table(
    ["#", t("layer"), t("head"), t("lab_hay_score"), t("lab_hay_copied")],
    r.heads
      .slice(0, TABLE_ROWS)
      .map((h, i) => [i + 1, h.layer, h.head, h.retrieval, `${h.copied.length} / ${keyTokens}`]),
    ["int", "int", "int", "real", "text"],
  );
  ranked.id = "lab-hay-table";
  out.append(ranked);
  // the top heads' weights over the whole prompt at one step of the answer: a spike on
  // the needle
  const pick = el("select", { id: "lab-hay-profile" });
  r.profiles.forEach((p, i) => {
    pick.append(el("option", { value: String(i), textContent: named(p.head) }));
  });
  const box = plotBox(out);
  box.id = "lab-hay-plot";
  const drawProfile = async () => {
    const p = r.profiles[Number(pick.value)];
    const Plotly = await plotly;
    const x = p.values.map((_, j) => p.edges[j]);
    const title = t("lab_hay_profile")
      .replace("{head}", named(p.head))
      .replace("{token}", r.profile_token);
    await Plotly.react(
      box,
      [
        {
          type: "scatter",
          mode: "lines",
          x,
          y: p.values.map((v) => (v > 0 ? v : null)),
          hovertemplate: `${escapeText(t("lab_position"))} %{x:,d}: %{y:.3g}<extra></extra>`,
        },
      ],
      {
        ...themed(),
        title: { text: escapeText(title), x: 0, xanchor: "left" },
        height: 260,
        margin: { l: 70, r: 20, t: 40, b: 40 },
        xaxis: { range: [0, p.edges.at(-1)], tickformat: ",d", title: { text: t("lab_position") } },
        yaxis: { type: "log" },
        shapes: [
          {
            type: "rect",
            xref: "x",
            yref: "paper",
            x0: r.needle[0],
            x1: r.needle[1],
            y0: 0,
            y1: 1,
            fillcolor: "rgba(255, 140, 0, 0.25)",
            line: { width: 0 },
          },
        ],
      },
      configFor(`attnviz-${r.model}-needle-${named(p.head).replace(" ", "")}`),
    );
    box.dataset.head = named(p.head);
  };
  pick.addEventListener("change", drawProfile);
  out.append(labelled("lab-hay-profile", t("lab_hay_profile_of"), pick));
  out.append(box); // (under its picker)
  await drawProfile();
}

export const experiment = {
  id: "needle",
  label: "lab_needle",
  explain: "lab_needle_explain",
  draw,
  strings,
};
