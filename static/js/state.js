// The whole view lives in the URL: reload or share a link and the same view comes back.
// The page's own keys are here; every other key is a view's (its `state` in
// views/index.js) or a lab experiment's (views/lab/index.js gathers theirs), so that a view
// adding a key adds it in its own module.
import { LANGS } from "./i18n.js";
import { VIEW_IDS, VIEWS } from "./views/index.js";

// The page's keys and their defaults (main.js sets the model's, the view's and the
// language's from the server and the browser). A default's type is the key's: a number
// is read as a number, a boolean as a flag ("1" or absent).
const PAGE = {
  model: "",
  text: "",
  img: "", // a picture's digest (the server holds the picture, the link its key)
  compare: "",
  chat: false,
  cont: "", // the tokens generated after the prompt, ids "12,7,9"
  type: "",
  layer: 0,
  head: 0,
  view: "",
  lang: "en",
  kind: "weights",
  avg: false,
  words: false,
  hide: false,
};

// What a view's key may be cleared by (its `clearedOn`): the keys whose change makes it
// belong to something no longer shown.
//   input   another text, picture, model, second text, chat mode or continuation (e.g. a
//           window)
//   prompt  another text, model or chat mode: what was generated for it goes
//   heads   another model or attention type (e.g. the heads picked for an ablation)
const EVENTS = {
  input: ["text", "img", "model", "compare", "chat", "cont"],
  prompt: ["text", "model", "chat"],
  heads: ["model", "type"],
};

export const DEFAULTS = { ...PAGE };
// values a link may carry; anything else falls back to the default
const CHOICES = { view: VIEW_IDS, kind: ["weights", "scores", "mask", "norms"], lang: LANGS };
// values a link's key must match (a picture's digest: 64 hex digits)
const PATTERNS = { img: /^[0-9a-f]{64}$/ };
const CLEARED = { input: [], prompt: ["cont"], heads: [] };
for (const view of VIEWS) {
  for (const [key, value] of Object.entries(view.state ?? {})) {
    if (key in DEFAULTS && DEFAULTS[key] !== value) {
      throw new Error(`the URL key ${key} of the view ${view.id} has another default elsewhere`);
    }
    DEFAULTS[key] = value;
  }
  Object.assign(CHOICES, view.choices);
  for (const [key, event] of Object.entries(view.clearedOn ?? {})) {
    if (!(event in EVENTS)) throw new Error(`the view ${view.id} clears ${key} on ${event}`);
    if (!CLEARED[event].includes(key)) CLEARED[event].push(key);
  }
}
const KEYS = Object.keys(DEFAULTS);

// A page embedded in a notebook (attnviz.show: an about:srcdoc iframe, whose URL cannot
// change) keeps its query here instead: the widget's prelude sets where it starts.
const embedded = window.attnvizEmbedded ?? null;

// the query that holds the view: the URL's, or an embedded page's own
export function currentSearch() {
  return embedded ? embedded.search : location.search;
}
const FLAGS = KEYS.filter((key) => typeof DEFAULTS[key] === "boolean");
const NUMBERS = new Set(KEYS.filter((key) => typeof DEFAULTS[key] === "number"));

// whether `changes` changes one of the keys an event names
export function changes(event, next, state) {
  return EVENTS[event].some((key) => key in next && next[key] !== state[key]);
}

// `next` with the keys it clears at their defaults (unless it sets them itself): what
// belonged to the old input, prompt or heads. A change that brings its own continuation
// keeps the generated token shown.
export function withCleared(next, state) {
  const cleared = {};
  for (const [event, keys] of Object.entries(CLEARED)) {
    if (!changes(event, next, state) || (event === "prompt" && "cont" in next)) continue;
    for (const key of keys) cleared[key] = DEFAULTS[key];
  }
  return { ...cleared, ...next };
}

// `defaults` are the page's own, never the current state: a key missing from the URL
// means its default, so back and forward restore every part of the view.
export function readState(defaults) {
  const params = new URLSearchParams(currentSearch());
  const state = { ...defaults };
  for (const key of KEYS) {
    if (!params.has(key)) continue;
    const value = params.get(key);
    if (key in CHOICES && !CHOICES[key].includes(value)) continue;
    if (key in PATTERNS && !PATTERNS[key].test(value)) continue;
    // (a number is 0 or more, or its default where that is below: a view's "none kept")
    const least = Math.min(0, DEFAULTS[key]);
    state[key] = NUMBERS.has(key) ? Math.max(least, Number.parseInt(value, 10) || 0) : value;
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
  if (embedded) {
    embedded.search = `?${params}`;
    return;
  }
  const url = `${location.pathname}?${params}`;
  if (url === `${location.pathname}${location.search}`) return;
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
}
