// A run that may read a long prompt (seconds to a minute): its progress, polled by the id
// its request is sent with, shown in the status line (layers read, time left), and a
// Cancel button that aborts its request (the server stops the run at its next layer).

const POLL_MS = 500;
// past this many characters a prompt may run the long path (over 512 tokens: about 2,000
// characters of English, about 500 of Chinese; the fewer is taken)
export const LONG_CHARS = 500;

export function newId() {
  const bytes = crypto.getRandomValues(new Uint8Array(8));
  return `run-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

// { options: {requestId, signal} for api.analyze, cancelled, stop(), abort() } while
// `current()`; Cancel aborts `controller` (default: one of its own, whose signal is in
// `options`); abort() does too, for a run superseded (not cancelled by the person)
export function watchRun({
  api,
  t,
  setStatus,
  button,
  current,
  controller = new AbortController(),
}) {
  const id = newId();
  let timer = null;
  const watch = {
    options: { requestId: id, signal: controller.signal },
    cancelled: false,
    stop() {
      clearTimeout(timer);
      timer = null;
      if (button.onclick === cancel) {
        // (the button is this run's: a newer run's stays)
        button.hidden = true;
        button.onclick = null;
      }
    },
    abort() {
      watch.stop();
      controller.abort();
    },
  };
  const cancel = () => {
    watch.cancelled = true;
    controller.abort();
  };
  const poll = async () => {
    let seen = null;
    try {
      seen = await api.progress(id);
    } catch {
      /* the next poll says */
    }
    if (timer === null || !current()) return;
    if (seen?.tokens && !seen.finished) {
      const line = seen.left_s === null ? t("reading_layers") : t("reading_progress");
      setStatus(
        line
          .replace("{tokens}", seen.tokens.toLocaleString())
          .replace("{done}", seen.layers_done + 1) // (the layer being read)
          .replace("{layers}", seen.layers)
          .replace("{left}", Math.ceil(seen.left_s ?? 0)),
        "busy",
      );
    }
    timer = setTimeout(poll, POLL_MS);
  };
  timer = setTimeout(poll, POLL_MS);
  button.hidden = false;
  button.onclick = cancel;
  return watch;
}

// The watched analysis under way, {key, summary, watch}: a render of the same input waits
// for it (one run on the server, one Cancel); a render of another input aborts it.
export const watched = { pending: null };

// the watched analysis under way stopped, unless it reads `key` (the input now shown)
export function supersede(key = null) {
  if (watched.pending && watched.pending.key !== key) {
    watched.pending.watch.abort(); // the server stops reading it at its next layer
    watched.pending = null;
  }
}
