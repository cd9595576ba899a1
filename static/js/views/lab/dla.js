// Direct logit attribution: each head's (and each feed-forward block's) direct push on
// logit[target] − logit[baseline] at a position, as a layer × head heatmap whose cells open
// the head, and the strongest heads listed with a button each.
import { heatmap } from "../../plots.js";
import { ask, el, fmt, plotBox, summary, table } from "./shared.js";

const LISTED = 6; // the heads listed, the strongest (either way) first
// negative (towards the baseline) blue, positive (towards the target) red
const DIVERGING = [
  [0, "#2166ac"],
  [0.5, "#f7f7f7"],
  [1, "#b2182b"],
];

// the URL's `rep`: "position,target,baseline" (each may be empty: the default)
function settings(rep) {
  const [position, target, baseline] = String(rep ?? "")
    .split(",")
    .map((v) => Number.parseInt(v, 10));
  const given = (v) => (Number.isNaN(v) || v === undefined ? undefined : v);
  return { position: given(position), target: given(target), baseline: given(baseline) };
}

function choice(id, label, options, value, onChange) {
  const picker = el("select", { id });
  for (const [v, text] of options)
    picker.append(el("option", { value: String(v), textContent: text }));
  picker.value = String(value);
  picker.addEventListener("change", () => onChange(Number(picker.value)));
  return [el("label", { htmlFor: id, textContent: label }), picker];
}

function signed(v) {
  return `${v >= 0 ? "+" : "−"}${fmt(Math.abs(v))}`;
}

async function draw({ ctx, t, out, base }) {
  const chosen = settings(ctx.state.rep);
  const r = await ask(ctx, "dla", { ...base, ...chosen });
  if (ctx.stale()) return;
  const write = (next) => {
    const s = { position: r.position, target: r.target.id, baseline: r.baseline.id, ...next };
    ctx.update({ rep: [s.position, s.target, s.baseline].join(",") });
  };
  const candidates = r.candidates.map((g) => [g.id, `${g.token} (${fmt(g.probability)})`]);
  for (const g of [r.target, r.baseline]) {
    if (!r.candidates.some((c) => c.id === g.id)) candidates.push([g.id, g.token]);
  }
  out.append(
    el(
      "div",
      { className: "lab-bar" },
      ...choice(
        "lab-dla-position",
        t("position"),
        r.tokens.map((token, i) => [i, `${i}: ${token}`]),
        r.position,
        // another position predicts other tokens: its own defaults
        (position) => ctx.update({ rep: String(position) }),
      ),
      ...choice("lab-dla-target", t("lab_dla_target"), candidates, r.target.id, (target) =>
        write({ target }),
      ),
      ...choice("lab-dla-baseline", t("lab_dla_baseline"), candidates, r.baseline.id, (baseline) =>
        write({ baseline }),
      ),
    ),
  );
  const cells = r.heads.flatMap((row, layer) => row.map((v, head) => ({ layer, head, v })));
  const ranked = [...cells].sort((a, b) => Math.abs(b.v) - Math.abs(a.v));
  const most = cells.reduce((a, b) => (b.v > a.v ? b : a));
  const least = cells.reduce((a, b) => (b.v < a.v ? b : a));
  const heads = cells.reduce((sum, c) => sum + c.v, 0);
  const sum = (values) => values.reduce((a, b) => a + b, 0);
  summary(
    out,
    t("lab_dla_said")
      .replaceAll("{target}", r.target.token)
      .replaceAll("{baseline}", r.baseline.token)
      .replace("{position}", r.position)
      .replace("{diff}", fmt(r.logit_diff))
      .replace("{total}", fmt(r.total))
      .replace("{embeddings}", signed(r.embeddings))
      .replace("{heads}", signed(heads))
      .replace("{bias}", signed(sum(r.attention_bias)))
      .replace("{ffn}", signed(sum(r.feed_forward)))
      .replace("{biases}", signed(r.biases))
      .replace("{most}", `L${most.layer} H${most.head} (${signed(most.v)})`)
      .replace("{least}", `L${least.layer} H${least.head} (${signed(least.v)})`),
    { id: "lab-dla-said" },
  );
  const bound = Math.max(1e-9, ...cells.map((c) => Math.abs(c.v)));
  const box = plotBox(out);
  box.id = "lab-dla-heads";
  await heatmap(box, {
    z: r.heads,
    rows: r.heads.map((_, l) => `L${l}`),
    columns: r.heads[0].map((_, h) => `H${h}`),
    title: t("lab_dla_title")
      .replace("{target}", r.target.token)
      .replace("{baseline}", r.baseline.token),
    zmin: -bound,
    zmax: bound,
    colorscale: DIVERGING,
    valueLabel: t("lab_dla_value"),
  });
  if (ctx.stale()) return;
  box.removeAllListeners?.("plotly_click");
  box.on?.("plotly_click", (event) => {
    const point = event.points[0];
    ctx.openHead(point.y, point.x);
  });
  const listed = table(
    [t("layer"), t("head"), t("lab_dla_value"), ""],
    ranked.slice(0, LISTED).map((c) => [c.layer, c.head, c.v, ""]),
    ["int", "int", "real", "text"],
  );
  listed.id = "lab-dla-top";
  listed.querySelectorAll("tbody tr").forEach((row, i) => {
    const c = ranked[i];
    const open = el("button", {
      type: "button",
      className: "lab-dla-open",
      textContent: t("lab_dla_open").replace("{head}", `L${c.layer} H${c.head}`),
    });
    open.addEventListener("click", () => ctx.openHead(c.layer, c.head));
    row.lastChild.replaceChildren(open);
  });
  out.append(listed);
  out.append(
    table(
      [t("layer"), t("lab_dla_heads_sum"), t("lab_dla_bias"), t("lab_dla_ffn")],
      r.heads.map((row, l) => [l, sum(row), r.attention_bias[l], r.feed_forward[l]]),
      ["int", "real", "real", "real"],
    ),
  );
  out.lastChild.id = "lab-dla-layers";
}

// its strings, in both languages
const STRINGS = {
  en: {
    lab_dla: "Direct logit attribution",
    lab_dla_explain:
      "How much each head, each feed-forward block and the embeddings push the prediction at a position towards one token rather than another: each one's output at the position, through the final norm (its scale held at what the model computed, as TransformerLens does) onto the difference of the two tokens' unembeddings. Only the direct path: what a head does through later layers is not counted. Click a cell to open that head.",
    lab_dla_said:
      "At position {position}, logit[“{target}”] − logit[“{baseline}”] = {diff}; the terms sum to {total}: embeddings {embeddings}, heads {heads}, attention output biases {bias}, feed-forward blocks {ffn}, final biases {biases}. The largest head term: {most}; the smallest: {least}.",
    lab_dla_target: "Towards",
    lab_dla_baseline: "rather than",
    lab_dla_title: "each head's direct effect on logit[“{target}”] − logit[“{baseline}”]",
    lab_dla_value: "logit difference",
    lab_dla_open: "Open {head}",
    lab_dla_heads_sum: "heads",
    lab_dla_bias: "output bias",
    lab_dla_ffn: "feed-forward",
  },
  zh: {
    lab_dla: "直接对数几率归因（DLA）",
    lab_dla_explain:
      "每个头、每个前馈块和嵌入在某个位置上把预测推向一个词元而非另一个词元的程度：各自在该位置的输出，经过最终归一化（其缩放固定为模型实际算出的值，与 TransformerLens 相同），投影到两个词元反嵌入之差上。只算直接路径：一个头经由后续层产生的作用不计在内。点击单元格可打开该头。",
    lab_dla_said:
      "在位置 {position}，logit[“{target}”] − logit[“{baseline}”] = {diff}；各项之和为 {total}：嵌入 {embeddings}，各头 {heads}，注意力输出偏置 {bias}，前馈块 {ffn}，最终偏置 {biases}。最大的头项：{most}；最小的头项：{least}。",
    lab_dla_target: "推向",
    lab_dla_baseline: "而非",
    lab_dla_title: "每个头对 logit[“{target}”] − logit[“{baseline}”] 的直接作用",
    lab_dla_value: "对数几率差",
    lab_dla_open: "打开 {head}",
    lab_dla_heads_sum: "各头",
    lab_dla_bias: "输出偏置",
    lab_dla_ffn: "前馈",
  },
};

export const experiment = {
  id: "dla",
  label: "lab_dla",
  explain: "lab_dla_explain",
  draw,
  strings: STRINGS,
};
