// The page's controller: state from the URL, requests to the API, one view at a time.
import { api, forgetRecorded, onPictureGone } from "./api.js";
import { forgetBlocks, layerBlock } from "./blocks.js";
import { bindControls, fillSelect, makeTabs, syncControls } from "./controls.js";
import { generate } from "./generate.js";
import { LANGS } from "./i18n.js";
import { attentionOf, pickerLabel } from "./model-info.js";
import { clearOutput, clearPlots, setStatus, showError, showTokens } from "./output.js";
import {
  boot,
  download,
  elements,
  inputBody,
  modelInfo,
  models,
  page,
  promptOf,
  readsPictures,
  readsText,
  refused,
  t,
} from "./page.js";
import { bindPictures, pictureSource } from "./pictures.js";
import { LONG_CHARS, supersede, watched, watchRun } from "./run-progress.js";
import { citation, saveView } from "./save.js";
import { changes, currentSearch, DEFAULTS, readState, withCleared, writeState } from "./state.js";
import { VIEWS, viewOf } from "./views/index.js";

const storedLang = localStorage.getItem("attnviz.lang");
const PAGE_DEFAULTS = {
  ...DEFAULTS,
  model: boot.default_model,
  view: VIEWS[0].id,
  lang: storedLang || (navigator.language?.startsWith("zh") ? "zh" : "en"),
};

// A link that names no head opens its model's most telling one (its info's start_head:
// the model card's alignment head, or the strongest head the metrics find).
function withStartHead(next) {
  const params = new URLSearchParams(currentSearch());
  const info = models[next.model] || models[boot.default_model];
  // a model of pictures opens on its picture, where the link names no view
  if (!params.has("view") && readsPictures(info)) next = { ...next, view: "picture" };
  if (params.has("type")) return next;
  const start = info.start_head;
  return {
    ...next,
    type: start.type,
    layer: params.has("layer") ? next.layer : start.layer,
    head: params.has("head") ? next.head : start.head,
  };
}

// the input shown changed: what was read of the old one goes
function forgetInput() {
  page.analysis = null;
  forgetBlocks();
  forgetRecorded();
}

// what the view reads: the input and how its tokens are shown (blocks.js's `input`)
function inputOf(state) {
  return {
    model: state.model,
    text: readsText() ? state.text : "",
    image: readsPictures() ? state.img : "",
    body: inputBody(state),
    words: state.words,
    hide: state.hide,
    wordView: modelInfo().capabilities.word_view,
    prompt: promptOf(state),
  };
}

// a picture the server no longer holds (another replica, or dropped) is sent again by the
// API's requests where this page has it (api.js); where it has not, the status says so
onPictureGone(async (digest) => {
  const file = page.pictures.get(digest);
  if (!file) return false;
  await api.uploadImage(file);
  return true;
});

// a 404 for the input's picture: the server does not hold it
function pictureGone(err) {
  return err?.status === 404 && page.state.img && String(err.detail).includes("picture");
}

// "Save view (.html)": the view as one file that opens offline (save.js)
async function saveShown() {
  const { state } = page;
  const input = inputOf(state);
  const analysis = page.analysis;
  try {
    if (!analysis) throw new Error(t("empty"));
    const blob = await saveView({
      layers: (layer) => layerBlock(input, state.type, layer, state.kind),
      info: modelInfo(),
      state,
      tokens: Math.max(analysis.source_tokens.length, analysis.target_tokens?.length ?? 0),
      search: currentSearch(),
      title: `attnviz · ${modelInfo().title} · ${state.view}`,
    });
    download(blob, `attnviz-${state.model}-${state.view}.html`);
  } catch (err) {
    showError(err, { keepView: true });
  }
}

async function render() {
  const mine = ++page.generation;
  const { state } = page;
  const input = inputOf(state);
  const ctx = {
    state: { ...state },
    t,
    elements,
    analysis: page.analysis,
    modelInfo,
    layerBlock: (type, layer, kind) => layerBlock(input, type, layer, kind),
    stale: () => mine !== page.generation,
    focused: document.activeElement?.id, // a view rebuilding its controls puts focus back
    openHead: (layer, head) => update({ view: "head", layer, head }),
    positional: (positions, dims) => api.positional(state.model, positions, dims),
    promptOptions: input.prompt, // a continuing model's chat and continuation, for requests
    inputBody: input.body, // the run's input as the API takes it (text, image)
    pictureUrl: (digest) => pictureSource(digest),
    lab: (route, body) => api.lab(route, { ...body, ...input.prompt }),
    headView: (route, body) => api.headView(route, { ...body, ...input.prompt }),
    api,
    openStep: (tok) => update({ view: "step", tok }),
    update,
    // a choice the view has drawn already, kept in the URL without drawing again
    note: (choices) => {
      page.state = { ...page.state, ...choices };
      writeState(page.state, { replace: true });
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
  // nothing to read yet: a model of text's sentence, a model of pictures' picture
  if (readsText() ? !state.text.trim() : !state.img) {
    supersede();
    page.analysis = null;
    clearOutput();
    setStatus(t(readsText() ? "empty" : "no_picture"));
    return;
  }
  let watch = null; // a run that may be long: its progress and Cancel
  try {
    const compare = modelInfo().capabilities.similarity ? state.compare.trim() : "";
    const asked = `${input.text}\u0000${input.image}\u0000${compare}\u0000${JSON.stringify(input.prompt)}`;
    const key = `${state.model}\u0000${asked}`;
    supersede(key);
    const known = page.analysis;
    if (!known || known.model !== state.model || known.request !== asked) {
      setStatus(t("running"), "busy");
      let summary = watched.pending?.summary;
      watch = watched.pending?.watch ?? null;
      if (watch) watch.render = mine; // its progress now this render's status
      if (!summary) {
        // (a picture a language model reads may make hundreds to thousands of tokens)
        const pictured = Boolean(input.body.image) && modelInfo().capabilities.generation;
        if (state.text.length > LONG_CHARS || pictured) {
          const current = () =>
            watched.pending?.watch === watch && watch.render === page.generation;
          watch = watchRun({ api, t, setStatus, button: elements.cancelRun, current });
          watch.render = mine;
        }
        // the view's first blocks at once, not after the summary: one round trip, and the
        // server runs the model once for both; draw reports their errors, if any. The
        // summary is asked first: the request that runs the model reads its capture
        // whole, and the summary reads every head (a long input's cached capture
        // recomputes them). A run that may be long is the summary's alone, so that
        // Cancel stops it.
        summary = api.analyze(state.model, input.body, compare, input.prompt, watch?.options);
        if (watch) watched.pending = { key, summary, watch };
        else {
          viewOf(state.view)
            .prefetch?.(ctx)
            ?.catch(() => {});
        }
      }
      try {
        page.analysis = { ...(await summary), request: asked };
      } finally {
        if (watched.pending?.summary === summary) {
          watched.pending.watch.stop();
          watched.pending = null;
        }
      }
      performance.mark("attnviz:analyzed");
      if (mine !== page.generation) return;
      ctx.analysis = page.analysis;
    }
    showTokens();
    if (page.analysis.long && !viewOf(state.view).long) {
      const n = page.analysis.source_tokens.length;
      setStatus(t("long_unsupported").replace("{n}", n), "error");
      return;
    }
    setStatus(t("loading"), "busy");
    // a view may answer what it could not draw, and why (the status line says it)
    const refusal = await viewOf(state.view).draw(ctx);
    if (mine === page.generation && refusal) setStatus(refusal, "error");
    else if (mine === page.generation) {
      setStatus(t("ready"));
      // for profilers and the page benchmark: when this view was drawn, from navigation
      performance.mark("attnviz:drawn", { detail: { view: state.view } });
    }
  } catch (err) {
    if (mine !== page.generation) return;
    if (watch?.cancelled) setStatus(t("run_cancelled"));
    else if (pictureGone(err)) setStatus(t("picture_gone"), "error");
    else showError(err);
  }
}

// The one way the view changes: the state, the URL (a history entry unless `push` is
// false), and a render. What belonged to the old input goes (state.js: `withCleared`).
function update(next, { push = true } = {}) {
  const inputChanged = changes("input", next, page.state);
  // another input than the one being generated for: that generation is dropped (and the
  // server stops it)
  if (inputChanged && !("cont" in next)) page.streaming?.abort();
  page.state = { ...page.state, ...withCleared(next, page.state) };
  if (inputChanged) forgetInput();
  writeState(page.state, { replace: !push });
  return render();
}
page.update = update;

// ←/→ move the head and ↑/↓ the layer, in the views that say so (views/index.js)
function onKey(event) {
  if (event.target.closest("input, select, textarea") || event.altKey || event.ctrlKey) return;
  const { state } = page;
  const { layers, query_heads: heads } = attentionOf(modelInfo(), state.type);
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

// back and forward: the state the URL holds
function onHistory() {
  const next = withStartHead(readState(PAGE_DEFAULTS));
  const inputChanged = changes("input", next, page.state);
  page.state = next;
  if (inputChanged) {
    page.streaming?.abort();
    forgetInput();
  }
  elements.text.value = next.text;
  elements.compare.value = next.compare;
  render();
}

function init() {
  page.state = withStartHead(readState(PAGE_DEFAULTS));
  makeTabs();
  fillSelect(
    elements.model,
    Object.keys(models),
    Object.values(models).map((m) => pickerLabel(m, page.state.lang)),
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
  const refusal = refused[page.state.model];
  if (refusal) page.state = withStartHead({ ...page.state, model: boot.default_model });
  bindControls({ generate, render });
  bindPictures();
  elements.saveView.addEventListener("click", saveShown);
  elements.citeView.addEventListener("click", async () => {
    try {
      const line = citation(page.state, await api.citation(page.state.model));
      elements.cite.textContent = line;
      elements.cite.hidden = false;
      // its box under the controls (the sidebar scrolls, where taller than the screen)
      elements.cite.scrollIntoView({ block: "nearest" });
      await navigator.clipboard?.writeText(line).catch(() => {}); // (where the page may)
    } catch (err) {
      showError(err, { keepView: true });
    }
  });
  document.addEventListener("keydown", onKey);
  window.addEventListener("popstate", onHistory);
  if (!LANGS.includes(page.state.lang)) page.state.lang = "en";
  // a first load with no text opens drawn, on the model's first example (in the box), unless
  // something was typed before the page was ready
  const first = modelInfo().examples?.[0];
  if (!page.state.text && !elements.text.value && first && !refusal) {
    page.state = { ...page.state, text: first };
  }
  // what was typed before the page was ready stays, unless the link brings a text
  if (page.state.text || !elements.text.value) elements.text.value = page.state.text;
  if (page.state.compare || !elements.compare.value) elements.compare.value = page.state.compare;
  render().then(() => {
    if (!refusal) return;
    const said = t("model_refused_status").replace("{id}", refusal.id);
    setStatus(said.replace("{reason}", refusal.reason), "error");
  });
}

init();
