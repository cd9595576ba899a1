// The whole view lives in the URL: reload or share a link and the same view comes back.
import { LANGS } from "./i18n.js";
import { VIEW_IDS } from "./views/index.js";
import { EXPERIMENT_IDS } from "./views/lab/index.js";

const KEYS = [
  "model",
  "text",
  "compare",
  "type",
  "layer",
  "head",
  "view",
  "lang",
  "kind",
  "avg",
  "words",
  "hide",
  "lab",
  "step",
  "other",
  "vs",
  "ablate",
  "rep",
  "chat",
  "cont",
  "tok",
  "q",
  "nv",
  "qk",
  "more",
  "thr",
  "lh",
  "cr",
  "cs",
  "cp",
  "win",
];
const FLAGS = ["avg", "words", "hide", "chat"];
const NUMBERS = new Set(["layer", "head", "step", "tok", "q"]);
// values a link may carry (the views and the lab's experiments from their registries);
// anything else falls back to the default
const CHOICES = {
  view: VIEW_IDS,
  lab: EXPERIMENT_IDS,
  kind: ["weights", "scores", "mask"],
  lang: LANGS,
};

// `defaults` are the page's own, never the current state: a key missing from the URL
// means its default, so back and forward restore every part of the view.
export function readState(defaults) {
  const params = new URLSearchParams(location.search);
  const state = { ...defaults };
  for (const key of KEYS) {
    if (!params.has(key)) continue;
    const value = params.get(key);
    if (key in CHOICES && !CHOICES[key].includes(value)) continue;
    state[key] = NUMBERS.has(key) ? Math.max(0, Number.parseInt(value, 10) || 0) : value;
  }
  for (const flag of FLAGS) state[flag] = state[flag] === "1" || state[flag] === true;
  return state;
}

export function writeState(state, { replace = false } = {}) {
  const params = new URLSearchParams();
  for (const key of KEYS) {
    const value = FLAGS.includes(key) ? (state[key] ? "1" : "") : state[key];
    if (value !== undefined && value !== null && value !== "") params.set(key, String(value));
  }
  const url = `${location.pathname}?${params}`;
  if (url === `${location.pathname}${location.search}`) return;
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
}
