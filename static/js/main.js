// The page's controller: state from the URL, requests to the API, one view at a time.
import { ApiError, Block, api } from "./api.js";
import { LANGS, applyLanguage, t as translate } from "./i18n.js";
import { readState, writeState } from "./state.js";
import { renderHead } from "./views/head.js";
import { EXPERIMENTS, renderLab } from "./views/lab.js";
import { renderMasks } from "./views/masks.js";
import { renderModel } from "./views/model.js";
import { renderPositional } from "./views/positional.js";

const EXAMPLES = [
  "苹果公司发布了新款手机，它采用了最新的芯片",
  "猫追狗",
  "狗追猫",
  "银行的人在街上行走",
  "The animal didn't cross the street because it was too tired.",
  "我用 python 写代码",
];
const VIEWS = {
  head: renderHead, model: renderModel, masks: renderMasks, positional: renderPositional,
  lab: renderLab,
};

const boot = JSON.parse(document.getElementById("boot").textContent);
const models = Object.fromEntries(boot.models.map((m) => [m.id, m]));
const $ = (id) => document.getElementById(id);
const elements = {
  form: $("input-form"), model: $("model"), text: $("text"), compare: $("compare"),
  examples: $("examples"),
  source: $("source-tokens"), output: $("output-text"), truncated: $("truncated"),
  status: $("status"), type: $("type"), layer: $("layer"), head: $("head"), kind: $("kind"),
  overlay: $("overlay"), average: $("average"), words: $("words"), hide: $("hide"),
  exportButton: $("export"),
  view: $("view"), plot: $("plot"), grid: $("grid"), extra: $("extra"),
  explain: $("explain"), readout: $("readout"),
};

const storedLang = localStorage.getItem("attnviz.lang");
const defaultLang = storedLang || (navigator.language?.startsWith("zh") ? "zh" : "en");
const DEFAULTS = {
  model: boot.default_model, text: "", compare: "", type: "", layer: 0, head: 0, view: "head",
  lang: defaultLang, kind: "weights", avg: false, words: false, hide: false,
  lab: EXPERIMENTS[0], step: 0, other: "", vs: "", ablate: "",
};
let state = readState(DEFAULTS);
let analysis = null; // the analyze answer for (state.model, state.text)
let generation = 0; // bumps on every render; older renders stop when they notice
const layerCache = new Map();

const t = (key) => translate(state.lang, key);

function modelInfo() {
  return models[state.model] || models[boot.default_model];
}

function setStatus(message, kind = "") {
  elements.status.textContent = message;
  elements.status.className = `status ${kind}`;
}

function clearOutput() {
  elements.source.textContent = "";
  elements.output.textContent = "";
  elements.truncated.hidden = true;
}

function clearPlots() {
  for (const el of [elements.plot, elements.extra]) window.Plotly?.purge(el); // none drawn before it loads
  elements.grid.replaceChildren();
  elements.explain.textContent = "";
}

function showError(err, { keepView = false } = {}) {
  let message;
  if (err instanceof ApiError) {
    const detail = typeof err.detail === "string"
      ? err.detail
      : (err.detail || []).map((d) => `${(d.loc || []).slice(1).join(".")}: ${d.msg}`).join("; ");
    if (err.status === 0) message = t("error_network");
    else if (err.status === 413 || err.status === 503) message = t(`error_${err.status}`);
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

// All heads of one (type, layer, kind) of one input as a Block, decoded once and kept.
async function layerItems(input, type, layer, kind) {
  // the word view and hidden specials apply to self-attention weights of WordPiece models
  const reshape = kind === "weights" && type === "encoder.self" && input.wordpiece;
  const granularity = reshape && input.words ? "word" : "token";
  const hideSpecial = reshape && input.hide;
  const key = [input.model, input.text, type, layer, kind, granularity, hideSpecial].join("\u0000");
  if (!layerCache.has(key)) {
    const encoding = kind === "scores" ? "f4" : "u1";
    const request = api
      .attention({
        model: input.model, text: input.text, types: [type], layers: [layer], kinds: [kind],
        encoding, granularity, hide_special: hideSpecial,
      })
      // one block: every head of this layer stacked (a mask is sent once for all heads)
      .then((body) => new Block(body.items[0]));
    layerCache.set(key, request);
    request.catch(() => layerCache.delete(key));
  }
  return layerCache.get(key);
}

function fillSelect(select, values, labels) {
  select.replaceChildren(
    ...values.map((value, i) => {
      const option = document.createElement("option");
      option.value = String(value);
      option.textContent = labels ? labels[i] : String(value);
      return option;
    }),
  );
}

function syncControls() {
  const info = modelInfo();
  if (!info.attention_types.includes(state.type)) state.type = info.attention_types.at(-1);
  const layers = state.type.startsWith("encoder") ? info.encoder_layers : info.decoder_layers;
  state.layer = Math.min(Math.max(0, state.layer), layers - 1);
  state.head = Math.min(Math.max(0, state.head), info.heads - 1);
  elements.model.value = state.model;
  fillSelect(elements.type, info.attention_types, info.attention_types.map(t));
  elements.type.value = state.type;
  fillSelect(elements.layer, [...Array(layers).keys()]);
  elements.layer.value = String(state.layer);
  fillSelect(elements.head, [...Array(info.heads).keys()]);
  elements.head.value = String(state.head);
  elements.kind.value = state.kind;
  elements.average.checked = state.avg;
  elements.words.checked = state.words;
  elements.hide.checked = state.hide;
  for (const el of document.querySelectorAll(".wordpiece")) {
    el.hidden = info.tokens !== "wordpiece";
  }
  for (const el of document.querySelectorAll(".embedding-only")) {
    el.hidden = info.output !== "embedding";
  }
  for (const tab of document.querySelectorAll("[data-view]")) {
    tab.setAttribute("aria-selected", String(tab.dataset.view === state.view));
  }
  const showHeadControls = ["head", "model", "lab"].includes(state.view);
  document.getElementById("controls").dataset.view = state.view;
  elements.head.disabled = !showHeadControls || state.view === "model"
    || (state.avg && state.view === "head");
  applyLanguage(state.lang);
}

async function render() {
  const mine = ++generation;
  const input = {
    model: state.model, text: state.text, words: state.words, hide: state.hide,
    wordpiece: modelInfo().tokens === "wordpiece",
  };
  const ctx = {
    state: { ...state }, t, elements, analysis, modelInfo,
    layerItems: (type, layer, kind) => layerItems(input, type, layer, kind),
    stale: () => mine !== generation,
    focused: document.activeElement?.id, // a view rebuilding its controls puts focus back
    openHead: (layer, head) => update({ view: "head", layer, head }),
    positional: (positions, dims) => api.positional(state.model, positions, dims),
    lab: (route, body) => api.lab(route, body),
    update,
    modelIds: () => Object.keys(models),
  };
  syncControls();
  writeState(state, { replace: true }); // the clamped choices, so the URL tells the view
  ctx.state = { ...state };
  clearPlots();
  elements.grid.hidden = true;
  elements.readout.textContent = "";
  if (!state.text.trim()) {
    analysis = null;
    clearOutput();
    setStatus(t("empty"));
    return;
  }
  try {
    const compare = modelInfo().output === "embedding" ? state.compare.trim() : "";
    const asked = `${state.text}\u0000${compare}`;
    if (!analysis || analysis.model !== state.model || analysis.request !== asked) {
      setStatus(t("running"), "busy");
      analysis = { ...(await api.analyze(state.model, state.text, compare)), request: asked };
      if (mine !== generation) return;
      ctx.analysis = analysis;
    }
    showTokens();
    setStatus(t("loading"), "busy");
    await VIEWS[state.view](ctx);
    if (mine === generation) {
      setStatus(t("ready"));
      // for profilers and the page benchmark: when this view was drawn, from navigation
      performance.mark("attnviz:drawn", { detail: { view: state.view } });
    }
  } catch (err) {
    if (mine === generation) showError(err);
  }
}

function showTokens() {
  elements.source.textContent = analysis.source_tokens.join(" · ");
  let output = analysis.output_text;
  if (analysis.embedding) {
    const head = analysis.embedding.slice(0, 6).map((v) => v.toFixed(3)).join(", ");
    output = `${t("embedding")} (${analysis.embedding.length}): ${head}, …`;
    if (analysis.similarity !== null && analysis.similarity !== undefined) {
      output += ` · ${t("similarity")}: ${analysis.similarity.toFixed(4)}`;
    }
  }
  elements.output.textContent = output;
  elements.truncated.hidden = !analysis.truncated;
}

function update(changes, { push = true } = {}) {
  const inputChanged = ("text" in changes && changes.text !== state.text)
    || ("model" in changes && changes.model !== state.model)
    || ("compare" in changes && changes.compare !== state.compare);
  // heads picked for ablation belong to one model and attention type
  if (("model" in changes && changes.model !== state.model)
    || ("type" in changes && changes.type !== state.type)) changes = { ablate: "", ...changes };
  state = { ...state, ...changes };
  if (inputChanged) {
    analysis = null;
    layerCache.clear();
  }
  writeState(state, { replace: !push });
  return render();
}

function init() {
  fillSelect(elements.model, Object.keys(models), Object.values(models).map((m) => m.title));
  for (const example of EXAMPLES) {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = example;
    button.addEventListener("click", () => update({ text: example }));
    elements.examples.append(button);
  }
  elements.form.addEventListener("submit", (event) => {
    event.preventDefault();
    update({
      text: elements.text.value, model: elements.model.value, compare: elements.compare.value,
    });
  });
  elements.model.addEventListener("change", () =>
    update({ model: elements.model.value, text: elements.text.value }),
  );
  elements.type.addEventListener("change", () => update({ type: elements.type.value }));
  elements.layer.addEventListener("change", () => update({ layer: Number(elements.layer.value) }));
  elements.head.addEventListener("change", () => update({ head: Number(elements.head.value) }));
  elements.kind.addEventListener("change", () => update({ kind: elements.kind.value }));
  elements.average.addEventListener("change", () => update({ avg: elements.average.checked }));
  elements.words.addEventListener("change", () => update({ words: elements.words.checked }));
  elements.hide.addEventListener("change", () => update({ hide: elements.hide.checked }));
  elements.overlay.addEventListener("change", () => render());
  for (const tab of document.querySelectorAll("[data-view]")) {
    tab.addEventListener("click", () => update({ view: tab.dataset.view }));
  }
  for (const button of document.querySelectorAll("[data-lang]")) {
    button.addEventListener("click", () => {
      localStorage.setItem("attnviz.lang", button.dataset.lang);
      update({ lang: button.dataset.lang }, { push: false });
    });
  }
  elements.exportButton.addEventListener("click", async () => {
    try {
      const { blob, filename } = await api.exportCapture(state.model, state.text);
      const link = document.createElement("a");
      link.href = URL.createObjectURL(blob);
      link.download = filename;
      link.click();
      URL.revokeObjectURL(link.href);
    } catch (err) {
      showError(err, { keepView: true });
    }
  });
  document.addEventListener("keydown", onKey);
  window.addEventListener("popstate", () => {
    const next = readState(DEFAULTS);
    const inputChanged = next.text !== state.text || next.model !== state.model;
    state = next;
    if (inputChanged) {
      analysis = null;
      layerCache.clear();
    }
    elements.text.value = state.text;
    elements.compare.value = state.compare;
    render();
  });
  if (!LANGS.includes(state.lang)) state.lang = "en";
  elements.text.value = state.text;
  elements.compare.value = state.compare;
  render();
}

function onKey(event) {
  if (event.target.closest("input, select, textarea") || event.altKey || event.ctrlKey) return;
  const info = modelInfo();
  const layers = state.type.startsWith("encoder") ? info.encoder_layers : info.decoder_layers;
  const moves = {
    ArrowLeft: { head: (state.head + info.heads - 1) % info.heads },
    ArrowRight: { head: (state.head + 1) % info.heads },
    ArrowUp: { layer: (state.layer + layers - 1) % layers },
    ArrowDown: { layer: (state.layer + 1) % layers },
  };
  if (!(event.key in moves) || state.view !== "head") return;
  event.preventDefault();
  update(moves[event.key]);
}

init();
