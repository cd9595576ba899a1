// A model that continues a prompt: Generate streams the continuation token by token, then
// the views show the prompt and what was generated as one sequence (the URL's `cont`).
import { api } from "./api.js";
import { forgetBlocks } from "./blocks.js";
import { clearOutput, clearPlots, setStatus, showError, showStreamed } from "./output.js";
import { elements, inputBody, modelInfo, page, t } from "./page.js";
import { LONG_CHARS, newId, supersede, watchRun } from "./run-progress.js";
import { writeState } from "./state.js";

export async function generate() {
  page.streaming?.abort(); // a new Generate replaces the one under way (the server stops it)
  performance.mark("attnviz:generate"); // (the page benchmark times from it to each token)
  const controller = new AbortController();
  page.streaming = controller;
  const model = elements.model.value;
  const text = elements.text.value;
  const chat = elements.chat.checked;
  page.state = {
    ...page.state,
    model,
    text,
    chat,
    cont: "",
    ...(page.state.view === "step" ? { view: "head" } : {}),
  };
  page.analysis = null;
  forgetBlocks();
  supersede(); // (a long analysis under way: its prompt is run again here)
  page.generation++; // a render under way stops drawing
  writeState(page.state);
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
          current: () => page.streaming === controller,
          controller,
        })
      : null;
  // Stop, from the request to the last token (a long prompt's read: Cancel until its
  // first token): the server makes no step more and answers the tokens so far, whose view
  // follows as after any generation
  const requestId = watch?.options.requestId ?? newId();
  const button = elements.cancelRun;
  const stop = async () => {
    button.disabled = true;
    setStatus(t("stopping"), "busy");
    // (none under way any more: its answer is on its way)
    await api.stopGeneration(requestId).catch(() => {});
  };
  const offerStop = () => {
    button.textContent = t("stop_generation");
    button.disabled = false;
    button.hidden = false;
    button.onclick = stop;
  };
  const closeStop = () => {
    if (button.onclick !== stop) return; // (a newer run's button)
    button.hidden = true;
    button.onclick = null;
    button.disabled = false;
    button.textContent = t("cancel_run");
  };
  if (!watch) offerStop();
  const made = [];
  const body = {
    model,
    ...inputBody(),
    text, // (a vision-language model: its picture too, inputBody's image)
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
        if (watch && made.length === 0) {
          watch.stop();
          offerStop();
        }
        made.push(step);
        showStreamed(made);
        performance.mark("attnviz:token");
        const of = t("generating_n").replace("{max}", String(body.max_new_tokens));
        setStatus(of.replace("{n}", String(made.length)), "busy");
      },
      controller.signal,
      requestId,
    );
    closeStop();
    if (page.streaming !== controller) return;
    page.streaming = null;
    await page.update({ cont: answer.continuation.join(",") }, { push: false });
  } catch (err) {
    if (watch?.cancelled && page.streaming === controller) {
      page.streaming = null;
      setStatus(t("run_cancelled"));
      return;
    }
    if (controller.signal.aborted || page.streaming !== controller) return;
    page.streaming = null;
    showError(err);
  } finally {
    watch?.stop();
    closeStop();
  }
}
