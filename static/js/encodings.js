// The wire encoding the page asks for each kind of block (POST /api/v1/attention): the
// server's one table (app/payloads/blocks.py's ENCODING_OF_KIND), sent in the boot JSON
// and read wherever blocks are fetched.
import { boot } from "./page.js";

export const ENCODINGS = Object.freeze({ ...boot.encodings });

export function encodingOf(kind) {
  if (!Object.hasOwn(ENCODINGS, kind)) throw new Error(`no wire encoding for the kind ${kind}`);
  return ENCODINGS[kind];
}
