// What the output panel shows of each output kind (the model info's `output`, one object
// per kind in model/outputs.py): a function of (analysis, t, info) answering the panel's
// children. Adding a kind is a line here; the panel keeps no branch of its own.
import { maskedOutput } from "./masked.js";
import { namesOf } from "./views/picture-labels.js";

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

// the output's text; where it draws nothing (a predicted line break), its tokens as shown
// (↵, ␣): an empty line would read as no output
function text(analysis) {
  const said = analysis.output_text ?? "";
  return [said.trim() ? said : (analysis.output ?? []).join("")];
}

// a transcription decoded in pieces: each piece's output, the pieces set apart by a mark
// that says where the next one starts afresh (its own <bos>)
function transcription(analysis, t) {
  const pieces = analysis.pieces ?? [];
  if (pieces.length < 2) return text(analysis);
  return pieces.flatMap((piece, i) => {
    const said = analysis.target_tokens.slice(piece.target[0] + 1, piece.target[1]).join(" ");
    if (i === 0) return [said];
    const mark = document.createElement("span");
    mark.className = "piece-mark";
    mark.textContent = " ‖ ";
    mark.title = t("piece_mark").replace("{n}", i + 1);
    return [mark, said];
  });
}

// a picture's reading: what its positions are (its output is their last hidden states);
// the others than patches named as the picture view names them (many of a kind counted)
function features(analysis, t) {
  const image = analysis.image;
  if (!image) return [""];
  const others = namesOf(t, image);
  const kept = image.positions.filter((p) => p.kind === "patch").length;
  const [rows, columns] = image.grid;
  const said = t(kept < rows * columns ? "features_said_kept" : "features_said")
    .replace("{n}", image.positions.length)
    .replace("{kept}", kept)
    .replace("{rows}", rows)
    .replace("{columns}", columns)
    .replace("{others}", others.length ? others.join("; ") : t("features_none"));
  return [said];
}

export const OUTPUTS = {
  transcription,
  continuation: text,
  embedding,
  masked: (analysis, t, info) => maskedOutput(analysis, t, info.mask_token),
  features,
};
