// What the output panel shows of each output kind (the model info's `output`, one object
// per kind in model/outputs.py): a function of (analysis, t, info) answering the panel's
// children. Adding a kind is a line here; the panel keeps no branch of its own.
import { maskedOutput } from "./masked.js";

// a sentence embedding's first values, and its similarity to the second text, if any
function embedding(analysis, t) {
  const head = analysis.embedding
    .slice(0, 6)
    .map((v) => v.toFixed(3))
    .join(", ");
  let said = `${t("embedding")} (${analysis.embedding.length}): ${head}, …`;
  if (analysis.similarity !== null && analysis.similarity !== undefined) {
    said += ` · ${t("similarity")}: ${analysis.similarity.toFixed(4)}`;
  }
  return [said];
}

const text = (analysis) => [analysis.output_text ?? ""];

export const OUTPUTS = {
  transcription: text,
  continuation: text,
  embedding,
  masked: (analysis, t, info) => maskedOutput(analysis, t, info.mask_token),
};
