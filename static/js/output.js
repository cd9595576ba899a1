// The status line and the output panel: the input's tokens, what the model made of them,
// and what went wrong.
import { ApiError } from "./api.js";
import { OUTPUTS } from "./output-kinds.js";
import { continues, elements, modelInfo, page, promptOf, setStatus, t } from "./page.js";
import { purge } from "./plots.js";

export { setStatus };

export function clearOutput() {
  elements.source.textContent = "";
  elements.output.textContent = "";
  elements.truncated.hidden = true;
  elements.pieces.hidden = true;
  elements.stopped.hidden = true;
  elements.unknown.hidden = true;
  elements.moreTokens.hidden = true;
}

export function clearPlots() {
  // (nothing is drawn before plotly.js has loaded)
  for (const el of [elements.plot, elements.extra]) purge(el);
  elements.grid.replaceChildren();
  elements.explain.textContent = "";
}

export function showError(err, { keepView = false } = {}) {
  let message;
  if (err instanceof ApiError) {
    const detail =
      typeof err.detail === "string"
        ? err.detail
        : (err.detail || []).map((d) => `${(d.loc || []).slice(1).join(".")}: ${d.msg}`).join("; ");
    if (err.status === 0) message = t("error_network");
    else if ([413, 429, 503].includes(err.status)) message = t(`error_${err.status}`);
    else if (err.status === 422 || err.status === 404) message = t(`error_${err.status}`) + detail;
    else message = t("error_other") + detail;
  } else {
    message = t("error_other") + String(err);
  }
  setStatus(message, "error");
  if (keepView) return;
  clearPlots();
  clearOutput();
}

// past this many, the token list shows its first lines and a button for the rest: a long
// input would otherwise push the heatmap below the fold
const TOKENS_SHOWN = 48;

// the input's tokens (a continuation's set apart, each opening its step) and the output
export function showTokens() {
  const { analysis, state } = page;
  const tokens = analysis.source_tokens;
  const generated = continues() && promptOf().continuation ? analysis.output.length : 0;
  if (generated) {
    // the prompt as text, the generated tokens set apart: each opens its step
    const prompt = tokens.length - generated;
    elements.source.replaceChildren(
      tokens.slice(0, prompt).join(" · "),
      ...tokens.slice(prompt).map((token, i) => {
        const button = document.createElement("button");
        button.type = "button";
        button.className = "generated";
        button.dataset.pos = String(prompt + i);
        button.textContent = token;
        button.title = t("open_step");
        button.setAttribute(
          "aria-pressed",
          String(state.view === "step" && state.tok === prompt + i),
        );
        button.addEventListener("click", () => page.update({ view: "step", tok: prompt + i }));
        return button;
      }),
    );
  } else {
    elements.source.textContent = tokens.join(" · ");
  }
  const long = tokens.length > TOKENS_SHOWN;
  elements.source.classList.toggle("collapsed", long);
  elements.moreTokens.hidden = !long;
  elements.moreTokens.textContent = t("more_tokens").replace("{n}", tokens.length);
  // what the model made of it, as its output kind shows it (output-kinds.js)
  const info = modelInfo();
  const shown = OUTPUTS[info.output] ?? OUTPUTS.transcription; // (a kind it does not know: the text)
  elements.output.replaceChildren(...shown(analysis, t, info));
  elements.truncated.hidden = !analysis.truncated;
  elements.truncated.textContent = t("truncated")
    .replace("{read}", analysis.source_tokens.length)
    .replace("{length}", analysis.source_length);
  showPieces(analysis);
  // tokens the tokenizer could not read: say so, with the languages the model reads
  const unknown = analysis.unknown_tokens ?? 0;
  elements.unknown.hidden = unknown === 0;
  elements.unknown.textContent = unknown
    ? t("unknown_tokens")
        .replace("{n}", unknown)
        .replace("{total}", analysis.source_tokens.length)
        .replace("{unk}", modelInfo().unknown_token)
        .replace(
          "{languages}",
          modelInfo()
            .languages.map((l) => t(`lang_${l}`))
            .join(", "),
        )
    : "";
}

// a text decoded in pieces: say so, and which pieces' outputs were stopped at their limit
function showPieces(analysis) {
  const pieces = analysis.pieces ?? [];
  elements.pieces.hidden = pieces.length < 2;
  elements.pieces.textContent = t("read_in_pieces").replace("{n}", pieces.length);
  const stopped = pieces
    .map((piece, i) => ({ n: i + 1, steps: piece.target[1] - piece.target[0] - 1, piece }))
    .filter(({ piece }) => !piece.ended)
    .map(({ n, steps }) =>
      t(pieces.length > 1 ? "stopped_piece" : "stopped_at")
        .replace("{n}", n)
        .replace("{steps}", steps),
    );
  elements.stopped.hidden = stopped.length === 0;
  elements.stopped.textContent = stopped.length
    ? t("output_stopped").replace("{where}", stopped.join(t("list_comma")))
    : "";
}

// the tokens generated so far, each as it came (set apart as generated tokens are), read
// as the text they make (as the output line reads once the generation ends: "the copy",
// never the tokenizer's "ĠtheĠcopy"); each token's own form (␣the) on hover. A token that
// ends a character split between tokens shows it whole (each step's text is decoded
// afresh); where a step's text does not continue the one before, the token's shown form.
export function showStreamed(steps) {
  elements.output.replaceChildren(
    ...steps.map((step, i) => {
      const before = i > 0 ? steps[i - 1].text : "";
      const span = document.createElement("span");
      span.className = "generated";
      span.textContent =
        typeof step.text === "string" && step.text.startsWith(before)
          ? step.text.slice(before.length)
          : step.token;
      span.title = step.token;
      return span;
    }),
  );
}
