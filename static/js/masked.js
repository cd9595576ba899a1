// A masked-language model's output: at each mask token of the text ([MASK], RoBERTa's
// <mask>, as the model's tokenizer writes it), its 5 likeliest tokens.
import { addStrings } from "./i18n.js";

addStrings({
  en: {
    masked_filled: "filled in",
    masked_at: "{mask} {n}:",
    masked_none:
      "The text has no {mask}: write {mask} where a word is missing and the model predicts it (its 5 likeliest).",
  },
  zh: {
    masked_filled: "填入后",
    masked_at: "第 {n} 个 {mask}：",
    masked_none: "文本中没有 {mask}：在缺词处写 {mask}，模型会预测它（给出最可能的 5 个）。",
  },
});

const percent = (p) => `${(100 * p).toFixed(p >= 0.1 ? 1 : 2)}%`;

// The output line's nodes for a masked-LM analysis: the filled-in text, then one line per
// mask token with its predictions (token and probability), most likely first.
export function maskedOutput(analysis, t, mask) {
  const said = (key) => t(key).replaceAll("{mask}", mask || "[MASK]");
  if (!analysis.masked.length) return [said("masked_none")];
  const lines = analysis.masked.map((m, i) => {
    const line = document.createElement("div");
    line.className = "masked";
    line.dataset.pos = String(m.position);
    const label = document.createElement("span");
    label.className = "label";
    label.textContent = said("masked_at").replace("{n}", i + 1);
    line.append(
      label,
      " ",
      m.top.map((alt) => `${alt.token} ${percent(alt.probability)}`).join(" · "),
    );
    return line;
  });
  return [`${t("masked_filled")}: ${analysis.output_text}`, ...lines];
}
