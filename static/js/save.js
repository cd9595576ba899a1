// "Save view (.html)": the view shown as one HTML file that opens offline, anywhere (as
// BertViz's html_action="return"): the page itself (its files, read as it loads them), the
// answers it has had (api.js records them) and its state, mounted from the file by the
// notebook widget's own code (static/widget/widget.js), which answers the page's requests
// from what the file holds. Every layer of the attention type shown is asked first (within
// SAVED_ENTRIES), so the saved view moves between its heads and layers as the page does.

import { pageFiles, policyOf, requestKey } from "../widget/widget.js";
import { api, recordedAnswers } from "./api.js";

const SAVED_ENTRIES = 3e7; // matrix entries asked for the saved layers (one byte each)
const SAVED_AT_ONCE = 4; // layers asked at once
const WIDGET = "/static/widget/widget.js"; // the code that mounts a saved view

async function text(path) {
  const response = await fetch(path);
  if (!response.ok) throw new Error(`${path}: ${response.status}`);
  return response.text();
}

// JSON that may sit inside a <script> element (no "</script", no "<!--")
function scriptJson(value) {
  return JSON.stringify(value).replace(/</g, "\\u003c");
}

// `layers(l)`: the promise of layer l's block of the type and kind shown; `info`: the
// model's; `tokens`: the input's longest side; `search`: the view's query; `title`: what
// the file is called
export async function saveView({ layers, info, state, tokens, search, title }) {
  const spec = info.attention.find((a) => a.type === state.type);
  if (spec && spec.layers * spec.query_heads * tokens * tokens <= SAVED_ENTRIES) {
    // a few at a time: a client has at most 8 requests in flight (ATTNVIZ_CLIENT_REQUESTS)
    for (let first = 0; first < spec.layers; first += SAVED_AT_ONCE) {
      const some = Math.min(SAVED_AT_ONCE, spec.layers - first);
      await Promise.all(Array.from({ length: some }, (_, k) => layers(first + k)));
    }
  }
  // (the widget's module is among the page's files: this module imports it)
  const files = Object.fromEntries(await pageFiles(text));
  const saved = { files, responses: await recordedAnswers(), search };
  // (a model of text keeps the last picture in its link, unread)
  if (state.img && info.capabilities.pictures) await keepPicture(saved.responses, state.img);
  const code = `
const saved = JSON.parse(document.getElementById("attnviz-saved").textContent);
const code = new Blob([saved.files["${WIDGET}"]], { type: "text/javascript" });
const { mount, replaying } = await import(URL.createObjectURL(code));
const fetchIn = replaying(saved);
const get = fetchIn(window);
const files = async (path) => (await get(path)).text();
await mount(document.body, { fetchIn, read: files, search: saved.search, height: 900 });
`;
  // the file runs this script (by its hash) and the blob: modules it makes, reaches
  // nothing, and its view (an iframe) has a policy of its own (FRAME_CSP)
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(code));
  const hash = btoa(String.fromCharCode(...new Uint8Array(digest)));
  const policy = policyOf(`'sha256-${hash}' blob:`, "'unsafe-inline' blob:");
  const html = `<!doctype html>
<html lang="${state.lang}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="${policy}">
<title>${title.replace(/[<&]/g, (c) => (c === "<" ? "&lt;" : "&amp;"))}</title>
</head>
<body style="margin: 0">
<script id="attnviz-saved" type="application/json">${scriptJson(saved)}</script>
<script type="module">${code}</script>
</body>
</html>
`;
  return new Blob([html], { type: "text/html" });
}

// the picture the view draws on, as the server drew it back (a PNG at most 1,024 pixels a
// side), kept in the file as base64 beside the answers: the saved view draws it offline
async function keepPicture(responses, digest) {
  const blob = await api.imageBlob(digest);
  const bytes = new Uint8Array(await blob.arrayBuffer());
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  responses[requestKey("GET", `/api/v1/images/${digest}`)] = {
    status: 200,
    type: "image/png",
    body: btoa(binary),
    base64: true,
  };
}

// "Cite this view": one line naming what a reader needs to draw it again: the model, where
// its weights come from and their hash (the server's /citation), the head, the text, the
// attnviz version and the day
export function citation(state, cited) {
  const head = state.avg ? "the average of its heads" : `head ${state.head}`;
  const text = JSON.stringify(state.text);
  const day = new Date().toISOString().slice(0, 10);
  return (
    `${cited.title} [${cited.model}; ${cited.source}; weights sha256 ${cited.weights_sha256}], ` +
    `${state.type} layer ${state.layer}, ${head}, ${state.kind}, ${state.view} view, ` +
    `on the text ${text}. attnviz ${cited.attnviz}, ${day}.`
  );
}
