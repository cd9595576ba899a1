// Head ablation: switch heads off and see what changes in the output.
import { attentionOf } from "../../model-info.js";
import { ask, el, fmt, summary, table } from "./shared.js";

// the layer x head checkboxes of one attention type, `chosen` ("layer.head" keys) checked
function headPicker(t, layers, heads, chosen) {
  const picker = el("div", { className: "lab-heads", id: "lab-heads" });
  for (let l = 0; l < layers; l++) {
    const label = el("span", { className: "grid-label", textContent: `${t("layer")} ${l}` });
    const row = el("div", { className: "grid-row" }, label);
    for (let h = 0; h < heads; h++) {
      const key = `${l}.${h}`;
      const box = el("input", { type: "checkbox", checked: chosen.has(key), value: key });
      box.setAttribute("aria-label", `${t("layer")} ${l} ${t("head")} ${h}`);
      row.append(el("label", { className: "check" }, box, ` ${h}`));
    }
    picker.append(row);
  }
  return picker;
}

async function draw({ ctx, t, out, base }) {
  const { state } = ctx;
  const { layers, query_heads: heads } = attentionOf(ctx.modelInfo(), state.type);
  const inRange = (key) => {
    const [l, h] = key.split(".").map(Number);
    return l >= 0 && l < layers && h >= 0 && h < heads;
  };
  const chosen = new Set((state.ablate ? state.ablate.split(",") : []).filter(inRange));
  const picker = headPicker(t, layers, heads, chosen);
  const apply = el("button", { type: "button", id: "lab-apply", textContent: t("lab_apply") });
  apply.addEventListener("click", () => {
    const picked = [...picker.querySelectorAll("input:checked")].map((b) => b.value);
    ctx.update({ ablate: picked.join(",") });
  });
  out.append(el("p", { textContent: t(state.type) }), picker, apply);
  const ablate = [...chosen].map((key) => {
    const [layer, head] = key.split(".").map(Number);
    return { type: state.type, layer, head };
  });
  const r = await ask(ctx, "ablation", { ...base, ablate });
  if (ctx.stale()) return;
  if (!r.ablated.length) summary(out, t("lab_none_selected"));
  const result = { id: "lab-ablation-result" };
  if (r.cosine !== null) {
    summary(out, `${t("lab_cosine")}: ${fmt(r.cosine)}`, result);
    return;
  }
  summary(
    out,
    `${t("lab_output")}: ${r.output.join(" ")} → ${t("lab_ablated")}: ${r.ablated_output.join(" ")}`,
    result,
  );
  const probability = t("lab_probability");
  out.append(
    table(
      [t("lab_output_token"), probability, `${probability} (${t("lab_ablated")})`],
      r.probability_tokens.map((token, i) => [
        token,
        r.probabilities[i],
        r.ablated_probabilities[i],
      ]),
      ["text", "real", "real"],
    ),
  );
}

// its strings, in both languages
const STRINGS = {
  en: {
    lab_ablation: "Head ablation",
    lab_ablation_explain:
      "Switch heads off (their output set to zero) and see what changes: the transcription and the probability of each of its tokens, or for an embedding model the cosine between the embeddings.",
    lab_output: "output",
    lab_ablated: "with the heads off",
    lab_probability: "probability",
    lab_cosine: "embedding cosine with/without",
    lab_none_selected: "No head switched off: nothing changes.",
    lab_output_token: "output token",
  },
  zh: {
    lab_ablation: "注意力头消融",
    lab_ablation_explain:
      "关闭一些头（输出置零），看看有何变化：转写结果及其每个词元的概率；对句向量模型则是前后句向量的余弦。",
    lab_output: "输出",
    lab_ablated: "关闭这些头后",
    lab_probability: "概率",
    lab_cosine: "前后句向量余弦",
    lab_none_selected: "没有关闭任何头：没有变化。",
    lab_output_token: "输出词元",
  },
};

export const experiment = {
  id: "ablation",
  state: { ablate: "" }, // the heads switched off, "0,3" (of one model and type)
  clearedOn: { ablate: "heads" },
  label: "lab_ablation",
  explain: "lab_ablation_explain",
  draw,
  strings: STRINGS,
};
