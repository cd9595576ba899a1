// The page's controller: state from the URL, requests to the API, one view at a time.
import { ApiError, api, Block } from "./api.js";
import { encodingOf } from "./encodings.js";
import { applyLanguage, LANGS, t as translate } from "./i18n.js";
import { maskedOutput } from "./masked.js";
import { attentionOf } from "./model-info.js";
import { purge } from "./plots.js";
import { LONG_CHARS, watchRun } from "./run-progress.js";
import { readState, writeState } from "./state.js";
import { VIEWS, viewOf } from "./views/index.js";
import { EXPERIMENT_IDS } from "./views/lab/index.js";

const boot = JSON.parse(document.getElementById("boot").textContent);
const models = Object.fromEntries(boot.models.map((m) => [m.id, m]));
// models named to the server that it cannot serve, with why (listed, not selectable)
const refused = Object.fromEntries((boot.refused || []).map((m) => [m.id, m]));
const $ = (id) => document.getElementById(id);
const elements = {
  form: $("input-form"),
  model: $("model"),
  text: $("text"),
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
  view: $("view"),
  plot: $("plot"),
  grid: $("grid"),
  extra: $("extra"),
  explain: $("explain"),
  readout: $("readout"),
  convention: $("convention"),
};

const storedLang = localStorage.getItem("attnviz.lang");
const defaultLang = storedLang || (navigator.language?.startsWith("zh") ? "zh" : "en");
const DEFAULTS = {
  model: boot.default_model,
  text: "",
  compare: "",
  type: "",
  layer: 0,
  head: 0,
  view: VIEWS[0].id,
  lang: defaultLang,
  kind: "weights",
  avg: false,
  words: false,
  hide: false,
  lab: EXPERIMENT_IDS[0],
  step: 0,
  other: "",
  vs: "",
  ablate: "",
  rep: "",
  win: "", // a long input's head zoomed to a window: rows and columns, "r0,r1,c0,c1"
  chat: false,
  cont: "",
  tok: 0,
  q: 0, // the neuron view's query row
  nv: "", // the neuron view's choices: "before" (RoPE), "sorted"
  qk: "", // the query-key space's projection.dims.colour, e.g. "pca.2.position"
  more: "", // the query-key space's further sentences, one per line
  thr: "", // the lines view's weight threshold
  lh: "", // the lines view's heads, e.g. "0,3"
  cr: "", // the corpus view's run id
  cs: "", // the corpus view's statistic shown
  cp: "", // the corpus view's head-search pattern
};
// A link that names no head opens its model's most telling one (its info's start_head:
// the model card's alignment head, or the strongest head the metrics find).
function withStartHead(next) {
  const params = new URLSearchParams(location.search);
  if (params.has("type")) return next;
  const start = (models[next.model] || models[boot.default_model]).start_head;
  return {
    ...next,
    type: start.type,
    layer: params.has("layer") ? next.layer : start.layer,
    head: params.has("head") ? next.head : start.head,
  };
}

let state = withStartHead(readState(DEFAULTS));
let analysis = null; // the analyze answer for (state.model, state.text)
let generation = 0; // bumps on every render; older renders stop when they notice
let streaming = null; // the AbortController of the generation under way
// the watched analysis under way, {key, summary, watch}: a render of the same input waits
// for it (one run on the server, one Cancel); a render of another input aborts it
let pending = null;

// the watched analysis under way stopped, unless it reads `key` (the input now shown)
function supersede(key = null) {
  if (pending && pending.key !== key) {
    pending.watch.abort(); // the server stops reading it at its next layer
    pending = null;
  }
}
// (input, type, layer, kind, ...) -> promise of the Block: each block is asked for once
const blockRequests = new Map();

const t = (key) => translate(state.lang, key);

function modelInfo() {
  return models[state.model] || models[boot.default_model];
}

function continues() {
  return modelInfo().capabilities.generation === true;
}

// What a model that continues a prompt reads besides the text: its chat template (`chat`)
// and the tokens generated after the prompt (the URL's `cont`); nothing for other models.
function promptOf(s = state) {
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

function setStatus(message, kind = "") {
  elements.status.textContent = message;
  elements.status.className = `status ${kind}`;
}

function clearOutput() {
  elements.source.textContent = "";
  elements.output.textContent = "";
  elements.truncated.hidden = true;
  elements.unknown.hidden = true;
  elements.moreTokens.hidden = true;
}

function clearPlots() {
  // (nothing is drawn before plotly.js has loaded)
  for (const el of [elements.plot, elements.extra]) purge(el);
  elements.grid.replaceChildren();
  elements.explain.textContent = "";
}

function showError(err, { keepView = false } = {}) {
  let message;
  if (err instanceof ApiError) {
    const detail =
      typeof err.detail === "string"
        ? err.detail
        : (err.detail || []).map((d) => `${(d.loc || []).slice(1).join(".")}: ${d.msg}`).join("; ");
    if (err.status === 0) message = t("error_network");
    else if ([413, 429, 503].includes(err.status)) message = t(`error_${err.status}`);
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
async function layerBlock(input, type, layer, kind) {
  // the word view and hidden specials apply to the self-attention weights of the models
  // that offer them (capabilities.word_view)
  const reshape = kind === "weights" && type === "encoder.self" && input.wordView;
  const granularity = reshape && input.words ? "word" : "token";
  const hideSpecial = reshape && input.hide;
  const prompt = JSON.stringify(input.prompt);
  const key = [input.model, input.text, prompt, type, layer, kind, granularity, hideSpecial].join(
    "\u0000",
  );
  if (!blockRequests.has(key)) {
    const request = api
      .attention({
        model: input.model,
        text: input.text,
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
    blockRequests.set(key, request);
    request.catch(() => blockRequests.delete(key));
  }
  return blockRequests.get(key);
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

// the example sentences of the model shown (in the languages it reads)
let examplesOf = null;
function showExamples(info) {
  if (examplesOf === info.id) return;
  examplesOf = info.id;
  elements.examples.replaceChildren(
    ...info.examples.map((example) => {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = example;
      button.addEventListener("click", () => update({ text: example }));
      return button;
    }),
  );
}

function syncControls() {
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
  elements.kind.value = state.kind;
  elements.average.checked = state.avg;
  elements.words.checked = state.words;
  elements.hide.checked = state.hide;
  // only the controls the view reads are shown (views/index.js: each view's `controls`)
  const { controls: reads } = viewOf(state.view);
  for (const name of ["type", "layer", "head", "kind", "overlay", "average", "words", "hide"]) {
    const input = elements[name];
    const label = input.closest("label") ?? document.querySelector(`label[for="${input.id}"]`);
    const applies =
      reads.includes(name) &&
      (!label.classList.contains("word-view") || info.capabilities.word_view);
    input.hidden = !applies && input.tagName === "SELECT";
    label.hidden = !applies;
  }
  for (const el of document.querySelectorAll(".compare-only")) {
    el.hidden = !info.capabilities.similarity;
  }
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
  }
  elements.text.maxLength = info.max_text_chars;
  elements.compare.maxLength = info.max_text_chars;
  for (const tab of elements.tabs.querySelectorAll("[data-view]")) {
    tab.setAttribute("aria-selected", String(tab.dataset.view === state.view));
  }
  const { controls } = viewOf(state.view);
  document.getElementById("controls").dataset.view = state.view;
  // a head to choose only where the view reads it, and not while it shows their average
  elements.head.disabled =
    !controls.includes("head") || (state.avg && controls.includes("average"));
  applyLanguage(state.lang);
  // the models' titles in the page's language, where the server has them
  for (const option of elements.model.options) {
    const m = models[option.value];
    if (m) option.textContent = m.titles?.[state.lang] ?? m.title;
    else option.textContent = `${option.value} (${t("model_refused")})`;
  }
  // the tokens "hide" drops are the ones this model's tokenizer adds
  elements.hideLabel.textContent = t("hide").replace("{specials}", info.special_tokens.join("/"));
}

async function render() {
  const mine = ++generation;
  const input = {
    model: state.model,
    text: state.text,
    words: state.words,
    hide: state.hide,
    wordView: modelInfo().capabilities.word_view,
    prompt: promptOf(),
  };
  const ctx = {
    state: { ...state },
    t,
    elements,
    analysis,
    modelInfo,
    layerBlock: (type, layer, kind) => layerBlock(input, type, layer, kind),
    stale: () => mine !== generation,
    focused: document.activeElement?.id, // a view rebuilding its controls puts focus back
    openHead: (layer, head) => update({ view: "head", layer, head }),
    positional: (positions, dims) => api.positional(state.model, positions, dims),
    promptOptions: input.prompt, // a continuing model's chat and continuation, for requests
    lab: (route, body) => api.lab(route, { ...body, ...input.prompt }),
    inspect: (route, body) => api.inspect(route, { ...body, ...input.prompt }),
    api,
    openStep: (tok) => update({ view: "step", tok }),
    update,
    // a choice the view has drawn already, kept in the URL without drawing again
    note: (changes) => {
      state = { ...state, ...changes };
      writeState(state, { replace: true });
    },
    modelIds: () => Object.keys(models),
    modelTitle: (id) => models[id].titles?.[state.lang] ?? models[id].title,
  };
  syncControls();
  writeState(state, { replace: true }); // the clamped choices, so the URL tells the view
  ctx.state = { ...state };
  clearPlots();
  elements.grid.hidden = true;
  elements.readout.textContent = "";
  elements.convention.textContent = "";
  if (!state.text.trim()) {
    supersede();
    analysis = null;
    clearOutput();
    setStatus(t("empty"));
    return;
  }
  let watch = null; // a run that may be long: its progress and Cancel
  try {
    const compare = modelInfo().capabilities.similarity ? state.compare.trim() : "";
    const asked = `${state.text}\u0000${compare}\u0000${JSON.stringify(input.prompt)}`;
    const key = `${state.model}\u0000${asked}`;
    supersede(key);
    if (!analysis || analysis.model !== state.model || analysis.request !== asked) {
      setStatus(t("running"), "busy");
      let summary = pending?.summary;
      watch = pending?.watch ?? null;
      if (watch) watch.render = mine; // its progress now this render's status
      if (!summary) {
        if (state.text.length > LONG_CHARS) {
          const current = () => pending?.watch === watch && watch.render === generation;
          watch = watchRun({ api, t, setStatus, button: elements.cancelRun, current });
          watch.render = mine;
        }
        // the view's first blocks at once, not after the summary: one round trip, and the
        // server runs the model once for both; draw reports their errors, if any. The
        // summary is asked first: the request that runs the model reads its capture
        // whole, and the summary reads every head (a long input's cached capture
        // recomputes them). A run that may be long is the summary's alone, so that
        // Cancel stops it.
        summary = api.analyze(state.model, state.text, compare, input.prompt, watch?.options);
        if (watch) pending = { key, summary, watch };
        else {
          viewOf(state.view)
            .prefetch?.(ctx)
            ?.catch(() => {});
        }
      }
      try {
        analysis = { ...(await summary), request: asked };
      } finally {
        if (pending?.summary === summary) {
          pending.watch.stop();
          pending = null;
        }
      }
      performance.mark("attnviz:analyzed");
      if (mine !== generation) return;
      ctx.analysis = analysis;
    }
    showTokens();
    if (analysis.long && !viewOf(state.view).long) {
      setStatus(t("long_unsupported").replace("{n}", analysis.source_tokens.length), "error");
      return;
    }
    setStatus(t("loading"), "busy");
    // a view may answer what it could not draw, and why (the status line says it)
    const refused = await viewOf(state.view).draw(ctx);
    if (mine === generation && refused) setStatus(refused, "error");
    else if (mine === generation) {
      setStatus(t("ready"));
      // for profilers and the page benchmark: when this view was drawn, from navigation
      performance.mark("attnviz:drawn", { detail: { view: state.view } });
    }
  } catch (err) {
    if (mine !== generation) return;
    if (watch?.cancelled) setStatus(t("run_cancelled"));
    else showError(err);
  }
}

// past this many, the token list shows its first lines and a button for the rest: a long
// input would otherwise push the heatmap below the fold
const TOKENS_SHOWN = 48;

function showTokens() {
  const tokens = analysis.source_tokens;
  const generated = continues() && promptOf().continuation ? analysis.output.length : 0;
  if (generated) {
    // the prompt as text, the generated tokens set apart: each opens its step
    const prompt = tokens.length - generated;
    elements.source.replaceChildren(
      tokens.slice(0, prompt).join(" · "),
      ...tokens.slice(prompt).map((token, i) => {
        const button = document.createElement("button");
        button.type = "button";
        button.className = "generated";
        button.dataset.pos = String(prompt + i);
        button.textContent = token;
        button.title = t("open_step");
        button.setAttribute(
          "aria-pressed",
          String(state.view === "step" && state.tok === prompt + i),
        );
        button.addEventListener("click", () => update({ view: "step", tok: prompt + i }));
        return button;
      }),
    );
  } else {
    elements.source.textContent = tokens.join(" · ");
  }
  const long = tokens.length > TOKENS_SHOWN;
  elements.source.classList.toggle("collapsed", long);
  elements.moreTokens.hidden = !long;
  elements.moreTokens.textContent = t("more_tokens").replace("{n}", tokens.length);
  let output = analysis.output_text;
  if (analysis.embedding) {
    const head = analysis.embedding
      .slice(0, 6)
      .map((v) => v.toFixed(3))
      .join(", ");
    output = `${t("embedding")} (${analysis.embedding.length}): ${head}, …`;
    if (analysis.similarity !== null && analysis.similarity !== undefined) {
      output += ` · ${t("similarity")}: ${analysis.similarity.toFixed(4)}`;
    }
  }
  if (modelInfo().output === "masked")
    elements.output.replaceChildren(...maskedOutput(analysis, t, modelInfo().mask_token));
  else elements.output.textContent = output;
  elements.truncated.hidden = !analysis.truncated;
  // tokens the tokenizer could not read: say so, with the languages the model reads
  const unknown = analysis.unknown_tokens ?? 0;
  elements.unknown.hidden = unknown === 0;
  elements.unknown.textContent = unknown
    ? t("unknown_tokens")
        .replace("{n}", unknown)
        .replace("{total}", analysis.source_tokens.length)
        .replace("{unk}", modelInfo().unknown_token)
        .replace(
          "{languages}",
          modelInfo()
            .languages.map((l) => t(`lang_${l}`))
            .join(", "),
        )
    : "";
}

function update(changes, { push = true } = {}) {
  const inputChanged = ["text", "model", "compare", "chat", "cont"].some(
    (key) => key in changes && changes[key] !== state[key],
  );
  // heads picked for ablation belong to one model and attention type
  const headsChanged =
    ("model" in changes && changes.model !== state.model) ||
    ("type" in changes && changes.type !== state.type);
  if (headsChanged) changes = { ablate: "", ...changes };
  // another prompt, model or chat mode: what was generated for the old one is dropped
  const promptChanged = ["text", "model", "chat"].some(
    (key) => key in changes && changes[key] !== state[key],
  );
  if (promptChanged && !("cont" in changes)) changes = { cont: "", tok: 0, ...changes };
  // a zoomed window is of one input's positions
  if (inputChanged) changes = { win: "", ...changes };
  // another input than the one being generated for: that generation is dropped (and the
  // server stops it)
  if (inputChanged && !("cont" in changes)) streaming?.abort();
  state = { ...state, ...changes };
  if (inputChanged) {
    analysis = null;
    blockRequests.clear();
  }
  writeState(state, { replace: !push });
  return render();
}

// the views' tabs, from the registry, in its order
function makeTabs() {
  elements.tabs.replaceChildren(
    ...VIEWS.map((view) => {
      const tab = document.createElement("button");
      tab.type = "button";
      tab.setAttribute("role", "tab");
      tab.dataset.view = view.id;
      tab.dataset.i18n = view.label;
      tab.textContent = t(view.label);
      tab.addEventListener("click", () => update({ view: view.id }));
      return tab;
    }),
  );
}

function init() {
  makeTabs();
  fillSelect(
    elements.model,
    Object.keys(models),
    Object.values(models).map((m) => m.title),
  );
  for (const m of Object.values(refused)) {
    const option = document.createElement("option");
    option.value = m.id;
    option.disabled = true;
    option.title = m.reason; // the reason on hover
    option.textContent = `${m.id} (${t("model_refused")})`;
    elements.model.append(option);
  }
  // a link to a refused model opens the default one, saying why
  const refusal = refused[state.model];
  if (refusal) state = withStartHead({ ...state, model: boot.default_model });
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
    const { type, layer, head } = models[elements.model.value].start_head;
    update({ model: elements.model.value, text: elements.text.value, type, layer, head });
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
      const { blob, filename } = await api.exportCapture(state.model, state.text, promptOf());
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
    const next = withStartHead(readState(DEFAULTS));
    const inputChanged = ["text", "model", "compare", "chat", "cont"].some(
      (key) => next[key] !== state[key],
    );
    state = next;
    if (inputChanged) {
      streaming?.abort();
      analysis = null;
      blockRequests.clear();
    }
    elements.text.value = state.text;
    elements.compare.value = state.compare;
    render();
  });
  if (!LANGS.includes(state.lang)) state.lang = "en";
  elements.text.value = state.text;
  elements.compare.value = state.compare;
  render().then(() => {
    if (!refusal) return;
    const said = t("model_refused_status").replace("{id}", refusal.id);
    setStatus(said.replace("{reason}", refusal.reason), "error");
  });
}

// A model that continues a prompt: Generate streams the continuation token by token, then
// the views show the prompt and what was generated as one sequence (the URL's `cont`).
async function generate() {
  streaming?.abort(); // a new Generate replaces the one under way (the server stops it)
  performance.mark("attnviz:generate"); // (the page benchmark times from it to each token)
  const controller = new AbortController();
  streaming = controller;
  const model = elements.model.value;
  const text = elements.text.value;
  const chat = elements.chat.checked;
  state = {
    ...state,
    model,
    text,
    chat,
    cont: "",
    ...(state.view === "step" ? { view: "head" } : {}),
  };
  analysis = null;
  blockRequests.clear();
  supersede(); // (a long analysis under way: its prompt is run again here)
  generation++; // a render under way stops drawing
  writeState(state);
  clearPlots();
  clearOutput();
  setStatus(t("generating"), "busy");
  // a long prompt's pass takes seconds: its progress, and Cancel
  const watch =
    text.length > LONG_CHARS
      ? watchRun({
          api,
          t,
          setStatus,
          button: elements.cancelRun,
          current: () => streaming === controller,
          controller,
        })
      : null;
  const made = [];
  const body = {
    model,
    text,
    chat,
    max_new_tokens: Math.min(
      Number(elements.newTokens.value) || 24,
      modelInfo().max_new_tokens ?? Number.POSITIVE_INFINITY,
    ),
    temperature: Number(elements.temperature.value) || 0,
  };
  try {
    const answer = await api.generate(
      body,
      (step) => {
        watch?.stop();
        made.push(step);
        showStreamed(made);
        performance.mark("attnviz:token");
        const of = t("generating_n").replace("{max}", String(body.max_new_tokens));
        setStatus(of.replace("{n}", String(made.length)), "busy");
      },
      controller.signal,
      watch?.options.requestId,
    );
    if (streaming !== controller) return;
    streaming = null;
    await update({ cont: answer.continuation.join(",") }, { push: false });
  } catch (err) {
    if (watch?.cancelled && streaming === controller) {
      streaming = null;
      setStatus(t("run_cancelled"));
      return;
    }
    if (controller.signal.aborted || streaming !== controller) return;
    streaming = null;
    showError(err);
  } finally {
    watch?.stop();
  }
}

// the tokens generated so far, each as it came (set apart as generated tokens are)
function showStreamed(steps) {
  elements.output.replaceChildren(
    ...steps.map((step) => {
      const span = document.createElement("span");
      span.className = "generated";
      span.textContent = step.token;
      return span;
    }),
  );
}

function onKey(event) {
  if (event.target.closest("input, select, textarea") || event.altKey || event.ctrlKey) return;
  const info = modelInfo();
  const { layers, query_heads: heads } = attentionOf(info, state.type);
  const moves = {
    ArrowLeft: { head: (state.head + heads - 1) % heads },
    ArrowRight: { head: (state.head + 1) % heads },
    ArrowUp: { layer: (state.layer + layers - 1) % layers },
    ArrowDown: { layer: (state.layer + 1) % layers },
  };
  if (!(event.key in moves) || !viewOf(state.view).arrowKeys) return;
  event.preventDefault();
  update(moves[event.key]);
}

init();
