// The views registry: the page's views in the order of their tabs. The tabs, the URL's
// `view` values, main.js's dispatch and the tabs' labels all come from this list.
//
// A view is a module exporting `view = { id, label, draw, controls, arrowKeys, strings }`:
//   id        its name in the URL (?view=id) and its tab's data-view
//   label     the i18n key of its tab's label (defined in i18n.js, or in `strings`)
//   draw      async draw(ctx): draws the view (main.js's render() says what ctx holds)
//             and may answer a string: what it could not draw and why (the status line)
//   controls  the selectors of #controls it reads ("type", "layer", "head", "kind",
//             "overlay", "average", "words", "hide"); the head selector is disabled where a
//             view does not read it, or reads "average" while the average is on
//   arrowKeys optional: true where ←/→ move the head and ↑/↓ the layer
//   prefetch  optional: prefetch(ctx) asks for the blocks draw will read first (ctx has
//             no analysis yet), so that they load while the text's summary does
//   applies   optional: applies(info) says whether a model has this view (its tab is
//             hidden, and a link to it opens the first view, where it does not)
//   strings   optional: i18n strings it brings, {en: {key: text}, zh: {key: text}}
//   long      optional: true where it reads a long input (over 512 tokens: no whole head
//             is kept, model/long/) by windows; the other views say to shorten it
//   state     optional: the URL keys it keeps, {key: default} (state.js: a number default
//             reads a number, a boolean one a flag); views may share a key and its default
//   choices   optional: {key: [values]} a link may carry (anything else: the default)
//   clearedOn optional: {key: "input" | "prompt" | "heads"}: the change after which its key
//             goes back to its default (state.js says what each means)
// Adding a view is its module and one line here: its tab, its URL keys, its strings and
// whether the arrow keys move its head all come from its module.
import { addStrings, hasString } from "../i18n.js";

// biome-ignore format: one view a line, so that adding one is adding a line
const MODULES = [
  "./head.js",
  "./picture.js",
  "./model.js",
  "./masks.js",
  "./positional.js",
  "./lab/index.js",
  "./step.js",
  "./neuron.js",
  "./qk.js",
  "./lines.js",
  "./corpus.js",
];

export const VIEWS = (await Promise.all(MODULES.map((path) => import(path)))).map((m) => m.view);

for (const view of VIEWS) {
  if (view.strings) addStrings(view.strings);
  if (!hasString(view.label)) throw new Error(`the view ${view.id} has no label ${view.label}`);
}
if (new Set(VIEWS.map((view) => view.id)).size !== VIEWS.length) {
  throw new Error("two views share an id");
}

export const VIEW_IDS = VIEWS.map((view) => view.id);

// the view of an id (the first view for an unknown one)
export function viewOf(id) {
  return VIEWS.find((view) => view.id === id) ?? VIEWS[0];
}
