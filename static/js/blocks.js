// All heads of one (type, layer, kind) of one input as a Block, asked for once and kept
// until the input changes.
import { api, Block } from "./api.js";
import { encodingOf } from "./encodings.js";

// (input, type, layer, kind, ...) -> promise of the Block
const requests = new Map();

// the blocks of inputs no longer shown, forgotten
export function forgetBlocks() {
  requests.clear();
}

// `input`: {model, text, image, body, prompt, words, hide, wordView}, as render() makes
// it (`body`: the run's input as the API takes it, page.js's inputBody)
export async function layerBlock(input, type, layer, kind) {
  // the word view and hidden specials apply to the self-attention weights of the models
  // that offer them (capabilities.word_view)
  const reshape = kind === "weights" && type === "encoder.self" && input.wordView;
  const granularity = reshape && input.words ? "word" : "token";
  const hideSpecial = reshape && input.hide;
  const prompt = JSON.stringify(input.prompt);
  const key = [
    input.model,
    input.text,
    input.image,
    prompt,
    type,
    layer,
    kind,
    granularity,
    hideSpecial,
  ].join("\u0000");
  if (!requests.has(key)) {
    const request = api
      .attention({
        model: input.model,
        ...input.body,
        ...input.prompt,
        types: [type],
        layers: [layer],
        kinds: [kind],
        encoding: encodingOf(kind),
        granularity,
        hide_special: hideSpecial,
      })
      // one block: every head of this layer stacked (a mask is sent once for all heads)
      .then((body) => {
        const block = new Block(body.blocks[0]);
        performance.mark("attnviz:block");
        return block;
      });
    requests.set(key, request);
    request.catch(() => requests.delete(key));
  }
  return requests.get(key);
}
