// Masks at work: the decoder with and without its causal mask, and a padded batch of two.
import { heatmap } from "../../plots.js";
import { ask, el, fmt, plotBox, summary, textBox, weights } from "./shared.js";

async function draw({ ctx, t, out, base }) {
  const { state } = ctx;
  const second = textBox(ctx, "lab-second", state.other);
  const apply = el("button", {
    type: "button",
    id: "lab-second-apply",
    textContent: t("lab_apply"),
  });
  apply.addEventListener("click", () => ctx.update({ other: second.value }));
  second.addEventListener("keydown", (e) => {
    if (e.key === "Enter") apply.click();
  });
  out.append(
    el(
      "div",
      { className: "lab-bar" },
      el("label", { htmlFor: "lab-second", textContent: t("lab_second_sentence") }),
      second,
      apply,
    ),
  );
  const r = await ask(ctx, "masks", {
    ...base,
    layer: state.layer,
    head: state.head,
    second: state.other.trim() ? state.other : null,
  });
  if (ctx.stale()) return;
  if (r.causal) {
    const c = r.causal;
    summary(
      out,
      `${t("lab_future")}: ${fmt(c.future_weight_with)} → ${fmt(c.future_weight_without)}`,
    );
    const best = c.most_future;
    if (best.layer !== state.layer || best.head !== state.head) {
      // this head barely looks ahead even unmasked: point to the one that does most
      const go = el("button", {
        type: "button",
        id: "lab-masks-best",
        textContent: t("lab_most_future")
          .replace("{layer}", best.layer)
          .replace("{head}", best.head)
          .replace("{weight}", fmt(best.weight)),
      });
      go.addEventListener("click", () => ctx.update({ layer: best.layer, head: best.head }));
      out.append(el("div", { className: "lab-bar" }, go));
    }
    const self = t("decoder.self");
    await weights(out, {
      z: c.with_mask,
      rows: c.rows,
      predicted: c.predicted,
      type: "decoder.self",
      t,
      columns: c.rows,
      title: `${self} · ${t("lab_with_mask")}`,
    });
    await weights(out, {
      z: c.without_mask,
      rows: c.rows,
      predicted: c.predicted,
      type: "decoder.self",
      t,
      columns: c.rows,
      title: `${self} · ${t("lab_without_mask")}`,
    });
  } else {
    summary(out, t("lab_no_decoder"));
  }
  const p = r.padding;
  summary(
    out,
    `${t("lab_pad_weight")}: ${fmt(p.pad_weight)} · ${t("lab_alone_diff")}: ${fmt(p.max_abs_diff_alone)}`,
  );
  await heatmap(plotBox(out), {
    z: p.mask.map((row) => row.map(Number)),
    rows: ["1", "2"],
    columns: Array.from({ length: p.length }, (_, i) => String(i)),
    title: t("lab_padding_mask"),
    zmin: 0,
    zmax: 1,
    valueLabel: "mask",
  });
  const shorter = p.tokens[p.shorter];
  const tokens = [...shorter, ...Array(p.length - shorter.length).fill("<pad>")];
  await weights(out, {
    z: p.weights,
    rows: tokens,
    columns: tokens,
    title: `${t("lab_batch_weights")} · ${t("encoder.self")}`,
    t,
  });
}

// its strings, in both languages
const STRINGS = {
  en: {
    lab_masks: "Masks at work",
    lab_masks_explain:
      "The causal mask hides later tokens from the decoder: switched off, the decoder would read the future. The padding mask hides <pad> keys: in a padded batch of two sentences, the shorter one's weights on padding are 0 and equal its weights when run alone.",
    lab_with_mask: "causal mask on",
    lab_without_mask: "causal mask off",
    lab_future: "mean weight on later tokens",
    lab_padding_mask: "padding mask of the batch",
    lab_batch_weights: "the shorter sentence in the batch",
    lab_pad_weight: "weight on padding",
    lab_alone_diff: "max difference from running it alone",
    lab_no_decoder: "This model has no decoder: no causal mask.",
    lab_most_future:
      "Without the mask, layer {layer} head {head} looks ahead most ({weight} of its weight on later tokens): show it",
    lab_second_sentence: "Second sentence (default: the first half)",
  },
  zh: {
    lab_masks: "掩码的作用",
    lab_masks_explain:
      "因果掩码对解码器隐藏后面的词元：关掉它，解码器就能看到未来。填充掩码隐藏 <pad>：两句话组成的填充批次中，较短那句对填充的权重为 0，且与单独运行时相同。",
    lab_with_mask: "开启因果掩码",
    lab_without_mask: "关闭因果掩码",
    lab_future: "对后面词元的平均权重",
    lab_padding_mask: "批次的填充掩码",
    lab_batch_weights: "批次中较短的句子",
    lab_pad_weight: "填充上的权重",
    lab_alone_diff: "与单独运行的最大差",
    lab_no_decoder: "该模型没有解码器，没有因果掩码。",
    lab_most_future:
      "去掉掩码后，第 {layer} 层第 {head} 个头最爱看后面的词元（{weight} 的权重在后面）：查看它",
    lab_second_sentence: "第二句（默认：前一半）",
  },
};

export const experiment = {
  id: "masks",
  state: { other: "" }, // the second sentence
  label: "lab_masks",
  explain: "lab_masks_explain",
  draw,
  strings: STRINGS,
};
