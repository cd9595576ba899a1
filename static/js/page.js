// What the page's modules share: the server's boot data, the page's elements, and the view
// shown (`page`: its state, the URL's; the summary of its input; the renders under way).
import { t as translate } from "./i18n.js";

export const boot = JSON.parse(document.getElementById("boot").textContent);
export const models = Object.fromEntries(boot.models.map((m) => [m.id, m]));
// models named to the server that it cannot serve, with why (listed, not selectable)
export const refused = Object.fromEntries((boot.refused || []).map((m) => [m.id, m]));

const $ = (id) => document.getElementById(id);
export const elements = {
  form: $("input-form"),
  model: $("model"),
  text: $("text"),
  picture: $("picture"),
  pictureName: $("picture-name"),
  compare: $("compare"),
  chat: $("chat"),
  newTokens: $("new-tokens"),
  temperature: $("temperature"),
  run: $("run"),
  examples: $("examples"),
  source: $("source-tokens"),
  moreTokens: $("more-tokens"),
  output: $("output-text"),
  truncated: $("truncated"),
  pieces: $("pieces"),
  stopped: $("stopped"),
  unknown: $("unknown"),
  status: $("status"),
  cancelRun: $("cancel-run"),
  tabs: $("views"),
  type: $("type"),
  layer: $("layer"),
  head: $("head"),
  kind: $("kind"),
  overlay: $("overlay"),
  average: $("average"),
  words: $("words"),
  hide: $("hide"),
  hideLabel: document.querySelector("[data-i18n='hide']"),
  exportButton: $("export"),
  saveView: $("save-view"),
  citeView: $("cite-view"),
  cite: $("cite"),
  view: $("view"),
  plot: $("plot"),
  grid: $("grid"),
  extra: $("extra"),
  explain: $("explain"),
  readout: $("readout"),
  convention: $("convention"),
};

export const page = {
  state: null, // the view shown, as the URL has it (main.js reads it)
  analysis: null, // the analyze answer for (state.model, state.text, state.img)
  pictures: new Map(), // the pictures this page sent, by digest: sent again where not held
  generation: 0, // bumps on every render; older renders stop when they notice
  streaming: null, // the AbortController of the generation under way
  update: null, // main.js's update(changes, {push}): the one way the view changes
};

export const t = (key) => translate(page.state.lang, key);

// the status line: what the page is doing, or (tone "error") what went wrong
export function setStatus(message, tone = "") {
  elements.status.textContent = message;
  elements.status.className = `status ${tone}`;
}

// a file the page made, downloaded under its name (its object URL freed a minute later)
export function download(blob, filename) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = filename;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
}

export function modelInfo() {
  return models[page.state.model] || models[boot.default_model];
}

// what the model shown reads: a text, a picture (an image encoder: a picture alone), or both
export function readsText(info = modelInfo()) {
  return info.capabilities.text !== false;
}

export function readsPictures(info = modelInfo()) {
  return info.capabilities.pictures === true;
}

// a run's input as the API takes it: its text where the model reads one, its picture's
// digest where it reads pictures
export function inputBody(s = page.state, info = modelInfo()) {
  return {
    ...(readsText(info) ? { text: s.text } : {}),
    ...(readsPictures(info) && s.img ? { image: s.img } : {}),
  };
}

export function continues() {
  return modelInfo().capabilities.generation === true;
}

// What a model that continues a prompt reads besides the text: its chat template (`chat`)
// and the tokens generated after the prompt (the URL's `cont`); nothing for other models.
export function promptOf(s = page.state) {
  if (!continues()) return {};
  const continuation = s.cont
    ? s.cont
        .split(",")
        .filter((id) => id.trim() !== "")
        .map(Number)
        .filter((id) => Number.isInteger(id) && id >= 0)
    : [];
  return { ...(s.chat ? { chat: true } : {}), ...(continuation.length ? { continuation } : {}) };
}
