// The page's controls: the model, the examples, the views' tabs and the selectors, kept in
// step with the state, and what each does when used.
import { api } from "./api.js";
import { applyLanguage } from "./i18n.js";
import { attentionOf, pickerLabel } from "./model-info.js";
import { showError } from "./output.js";
import {
  download,
  elements,
  inputBody,
  modelInfo,
  models,
  page,
  promptOf,
  readsPictures,
  readsText,
  t,
} from "./page.js";
import { sampleButtons } from "./pictures.js";
import { VIEWS, viewOf } from "./views/index.js";

// the selectors a view may read (views/index.js: each view's `controls`)
const SELECTORS = ["type", "layer", "head", "kind", "overlay", "average", "words", "hide"];

export function fillSelect(select, values, labels) {
  select.replaceChildren(
    ...values.map((value, i) => {
      const option = document.createElement("option");
      option.value = String(value);
      option.textContent = labels ? labels[i] : String(value);
      return option;
    }),
  );
}

// the example sentences of the model shown (in the languages it reads)
let examplesOf = null;
function showExamples(info) {
  if (examplesOf === info.id) return;
  examplesOf = info.id;
  if (readsPictures(info)) {
    elements.examples.replaceChildren(...sampleButtons());
    return;
  }
  elements.examples.replaceChildren(
    ...info.examples.map((example) => {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = example;
      // as if typed and Enter pressed: the text in the box, and what Enter does (a model
      // that continues a prompt generates)
      button.addEventListener("click", () => {
        elements.text.value = example;
        elements.form.requestSubmit();
      });
      return button;
    }),
  );
}

// the views' tabs, from the registry, in its order
export function makeTabs() {
  elements.tabs.replaceChildren(
    ...VIEWS.map((view) => {
      const tab = document.createElement("button");
      tab.type = "button";
      tab.setAttribute("role", "tab");
      tab.dataset.view = view.id;
      tab.dataset.i18n = view.label;
      tab.textContent = t(view.label);
      tab.addEventListener("click", () => page.update({ view: view.id }));
      return tab;
    }),
  );
}

// The controls as the state says, the state clamped to what the model has.
export function syncControls() {
  const { state } = page;
  const info = modelInfo();
  if (!(viewOf(state.view).applies?.(info) ?? true)) state.view = VIEWS[0].id;
  showExamples(info);
  if (!info.attention_types.includes(state.type)) state.type = info.attention_types.at(-1);
  const { layers, query_heads: heads } = attentionOf(info, state.type);
  state.layer = Math.min(Math.max(0, state.layer), layers - 1);
  state.head = Math.min(Math.max(0, state.head), heads - 1);
  elements.model.value = state.model;
  fillSelect(elements.type, info.attention_types, info.attention_types.map(t));
  elements.type.value = state.type;
  fillSelect(elements.layer, [...Array(layers).keys()]);
  elements.layer.value = String(state.layer);
  fillSelect(elements.head, [...Array(heads).keys()]);
  elements.head.value = String(state.head);
  // value-weighted norms where the model serves them (info's capabilities): elsewhere the
  // choice is not offered, and a link's falls back to weights; a view that draws only some
  // kinds (its `kinds`) offers those, showing weights for the others it does not draw
  const norms = elements.kind.querySelector("option[value=norms]");
  norms.hidden = norms.disabled = !info.capabilities.value_norms;
  if (norms.disabled && state.kind === "norms") state.kind = "weights";
  const drawn = viewOf(state.view).kinds;
  for (const option of elements.kind.options) {
    const offered = !drawn || drawn.includes(option.value);
    option.hidden = option.disabled = !offered || (option === norms && norms.disabled);
  }
  elements.kind.value = !drawn || drawn.includes(state.kind) ? state.kind : "weights";
  elements.average.checked = state.avg;
  elements.words.checked = state.words;
  elements.hide.checked = state.hide;
  // only the controls the view reads are shown
  const { controls } = viewOf(state.view);
  for (const name of SELECTORS) {
    const input = elements[name];
    const label = input.closest("label") ?? document.querySelector(`label[for="${input.id}"]`);
    const applies =
      controls.includes(name) &&
      (!label.classList.contains("word-view") || info.capabilities.word_view);
    input.hidden = !applies && input.tagName === "SELECT";
    label.hidden = !applies;
  }
  for (const el of document.querySelectorAll(".compare-only")) {
    el.hidden = !info.capabilities.similarity;
  }
  // a model of pictures: the picture's chooser; one of pictures alone: no text box
  for (const el of document.querySelectorAll(".picture-only")) el.hidden = !readsPictures(info);
  elements.text.hidden = !readsText(info);
  elements.run.hidden = !readsText(info); // (a picture is read as soon as it is chosen)
  // a model that continues a prompt: its options, and Generate for Run
  const continuation = info.capabilities.generation === true;
  for (const el of document.querySelectorAll(".continuation-only")) el.hidden = !continuation;
  elements.chat.checked = state.chat;
  if (info.max_new_tokens) {
    elements.newTokens.max = String(info.max_new_tokens);
    const asked = Number(elements.newTokens.value) || 24;
    elements.newTokens.value = String(Math.min(Math.max(1, asked), info.max_new_tokens));
  }
  elements.run.dataset.i18n = continuation ? "generate" : "run";
  // the views this model has (a view may apply to some models only)
  for (const tab of elements.tabs.querySelectorAll("[data-view]")) {
    tab.hidden = !(viewOf(tab.dataset.view).applies?.(info) ?? true);
    tab.setAttribute("aria-selected", String(tab.dataset.view === state.view));
  }
  elements.text.maxLength = info.max_text_chars;
  elements.compare.maxLength = info.max_text_chars;
  document.getElementById("controls").dataset.view = state.view;
  // a head to choose only where the view reads it, and not while it shows their average
  elements.head.disabled =
    !controls.includes("head") || (state.avg && controls.includes("average"));
  applyLanguage(state.lang);
  // the models' titles in the page's language, where the server has them
  for (const option of elements.model.options) {
    const m = models[option.value];
    if (m) option.textContent = pickerLabel(m, state.lang);
    else option.textContent = `${option.value} (${t("model_refused")})`;
  }
  // the tokens "hide" drops are the ones this model's tokenizer adds
  elements.hideLabel.textContent = t("hide").replace("{specials}", info.special_tokens.join("/"));
}

// What each control does: Run (or Generate, for a model that continues a prompt), the
// selectors, the languages and the export.
export function bindControls({ generate, render }) {
  const { update } = page;
  elements.moreTokens.addEventListener("click", () => {
    elements.source.classList.remove("collapsed");
    elements.moreTokens.hidden = true;
  });
  elements.form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (models[elements.model.value]?.capabilities.generation) {
      generate();
      return;
    }
    update({
      text: elements.text.value,
      model: elements.model.value,
      compare: elements.compare.value,
    });
  });
  elements.model.addEventListener("change", () => {
    const info = models[elements.model.value];
    const { type, layer, head } = info.start_head;
    // a model of pictures opens on its picture; the picture view is theirs alone
    const shown = page.state.view;
    const view = readsPictures(info) ? "picture" : shown === "picture" ? VIEWS[0].id : shown;
    update({ model: elements.model.value, text: elements.text.value, type, layer, head, view });
  });
  elements.type.addEventListener("change", () => update({ type: elements.type.value }));
  elements.layer.addEventListener("change", () => update({ layer: Number(elements.layer.value) }));
  elements.head.addEventListener("change", () => update({ head: Number(elements.head.value) }));
  elements.kind.addEventListener("change", () => update({ kind: elements.kind.value }));
  elements.average.addEventListener("change", () => update({ avg: elements.average.checked }));
  elements.words.addEventListener("change", () => update({ words: elements.words.checked }));
  elements.hide.addEventListener("change", () => update({ hide: elements.hide.checked }));
  elements.overlay.addEventListener("change", () => render());
  // chat mode is part of the input: another prompt, read again (what was generated goes)
  elements.chat.addEventListener("change", () =>
    update({ chat: elements.chat.checked, text: elements.text.value }),
  );
  for (const button of document.querySelectorAll("[data-lang]")) {
    button.addEventListener("click", () => {
      localStorage.setItem("attnviz.lang", button.dataset.lang);
      update({ lang: button.dataset.lang }, { push: false });
    });
  }
  elements.exportButton.addEventListener("click", async () => {
    try {
      const { state } = page;
      const { blob, filename } = await api.exportCapture(state.model, inputBody(state), promptOf());
      download(blob, filename);
    } catch (err) {
      showError(err, { keepView: true });
    }
  });
}
