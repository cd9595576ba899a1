// The wire encoding the page asks for each kind of block (POST /api/v1/attention): the one
// table, read wherever blocks are fetched. u1 (a byte a value, x 255) holds [0, 1] only, so
// the server takes it for weights and the mask alone; raw scores are unbounded and keep full
// precision (f4); q, k and v are activations, f2 is enough to draw them, and so are the
// value-weighted norms (unbounded, drawn on their own scale).
export const ENCODINGS = Object.freeze({
  weights: "u1",
  mask: "u1",
  scores: "f4",
  q: "f2",
  k: "f2",
  v: "f2",
  norms: "f2",
});

export function encodingOf(kind) {
  if (!Object.hasOwn(ENCODINGS, kind)) throw new Error(`no wire encoding for the kind ${kind}`);
  return ENCODINGS[kind];
}
