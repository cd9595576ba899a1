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
  });
}

export const experiment = { id: "masks", label: "lab_masks", explain: "lab_masks_explain", draw };
