// attnviz.show's widget (anywidget): the page itself, in an iframe of the cell's output.
// Every request the page makes (the page, its modules, Plotly, the API) goes through the
// widget's channel to the kernel, where the server's app answers it (attnviz/notebook.py):
// nothing is served on a port and nothing leaves the machine. The page's ES modules are read
// through the same channel and linked here, each relative import made the blob URL of its
// module (dependencies first: the modules' graph has no cycle), so the page runs unchanged;
// the iframe keeps its ids, its keys and its styles apart from the notebook's.

// a module's relative imports, static or dynamic ("./x.js", "../y.js" as string literals)
const IMPORTED = /(["'])(\.{1,2}\/[\w./-]+\.js)\1/g;

// the page's first script: its fetch answered through the channel, and its state (the query
// its URL would hold, which an about:srcdoc iframe's cannot: static/js/state.js)
const PRELUDE = `window.fetch = window.frameElement.attnvizFetch(window);
window.attnvizEmbedded = { search: window.frameElement.attnvizSearch };`;

// fetch(input, init), answered by the kernel through the widget's channel; its Response
// made in `realm` (the window that reads it)
function channel(model) {
  const pending = new Map();
  let next = 0;
  const onMessage = (msg, buffers) => {
    const call = pending.get(msg?.id);
    if (!call) return;
    if (msg.type === "start") call.start(msg);
    else if (msg.type === "chunk") call.chunk(buffers[0]);
    else {
      pending.delete(msg.id);
      if (msg.type === "end") call.end();
      else call.fail(new Error(msg.message ?? "the kernel could not answer"));
    }
  };
  model.on("msg:custom", onMessage);
  const fetchIn =
    (realm) =>
    async (input, init = {}) => {
      const request = new realm.Request(
        new URL(input.url ?? input, "http://attnviz.notebook"),
        init,
      );
      const body = ["GET", "HEAD"].includes(request.method) ? null : await request.arrayBuffer();
      const id = `${++next}`;
      return new Promise((resolve, reject) => {
        let stream;
        let started = false;
        const gone = (err) => {
          if (!started) reject(err);
          else
            try {
              stream.error(err);
            } catch {
              /* already closed */
            }
        };
        const readable = new realm.ReadableStream({
          start: (controller) => {
            stream = controller;
          },
        });
        pending.set(id, {
          start: (msg) => {
            started = true;
            const empty = [101, 204, 205, 304].includes(msg.status) || request.method === "HEAD";
            resolve(
              new realm.Response(empty ? null : readable, {
                status: msg.status,
                headers: msg.headers,
              }),
            );
          },
          chunk: (data) =>
            stream.enqueue(
              new Uint8Array(data.buffer ?? data, data.byteOffset ?? 0, data.byteLength),
            ),
          end: () => stream.close(),
          fail: (err) => gone(new realm.TypeError(`attnviz kernel: ${err.message}`)),
        });
        if (init.signal) {
          const abort = () => {
            if (!pending.has(id)) return;
            pending.delete(id);
            model.send({ type: "abort", id });
            gone(new realm.DOMException("The request was aborted.", "AbortError"));
          };
          if (init.signal.aborted) return abort();
          init.signal.addEventListener("abort", abort, { once: true });
        }
        const { pathname, search } = new URL(request.url);
        const headers = Object.fromEntries(request.headers.entries());
        const content = {
          type: "request",
          id,
          method: request.method,
          url: pathname + search,
          headers,
        };
        model.send(content, undefined, body ? [body] : []);
      });
    };
  return { fetchIn, close: () => model.off("msg:custom", onMessage) };
}

// the blob URL of a module and of every module it imports, each import made its module's
async function linked(entry, read, urls) {
  const sources = new Map();
  const load = (path) => {
    if (!sources.has(path)) {
      sources.set(
        path,
        read(path).then(async (text) => {
          const imports = [...text.matchAll(IMPORTED)].map(
            (m) => new URL(m[2], `http://x${path}`).pathname,
          );
          await Promise.all(imports.map(load));
          return text;
        }),
      );
    }
    return sources.get(path);
  };
  await load(entry);
  const texts = new Map();
  for (const [path, promise] of sources) texts.set(path, await promise);
  const made = new Map();
  const visiting = new Set();
  const make = (path) => {
    if (made.has(path)) return made.get(path);
    if (visiting.has(path))
      throw new Error(`the page's modules import each other in a cycle at ${path}`);
    visiting.add(path);
    const text = texts.get(path).replace(IMPORTED, (_, quote, rel) => {
      return `${quote}${make(new URL(rel, `http://x${path}`).pathname)}${quote}`;
    });
    const url = urls(text, "text/javascript");
    made.set(path, url);
    return url;
  };
  return make(entry);
}

async function render({ model, el }) {
  const made = [];
  const blobUrl = (text, type) => {
    const url = URL.createObjectURL(new Blob([text], { type }));
    made.push(url);
    return url;
  };
  const { fetchIn, close } = channel(model);
  const fetchHere = fetchIn(window);
  const read = async (path) => {
    const response = await fetchHere(path);
    if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
    return response.text();
  };
  const status = document.createElement("div");
  status.className = "attnviz-loading";
  status.textContent = "attnviz: loading the page from the kernel…";
  el.append(status);
  const iframe = document.createElement("iframe");
  iframe.title = "attnviz";
  iframe.style.cssText = `width: 100%; border: 0; height: ${model.get("height")}px;`;
  let observer = null;
  try {
    const doc = new DOMParser().parseFromString(await read("/"), "text/html");
    for (const link of doc.querySelectorAll('link[rel="modulepreload"]')) link.remove();
    doc.querySelector(".docs-link")?.remove(); // (the API's docs are the server's pages)
    for (const link of doc.querySelectorAll('link[rel="stylesheet"]')) {
      link.href = blobUrl(await read(link.getAttribute("href")), "text/css");
    }
    for (const script of doc.querySelectorAll("script[src]")) {
      const src = script.getAttribute("src");
      script.src =
        script.type === "module"
          ? await linked(src, read, blobUrl)
          : blobUrl(await read(src), "text/javascript");
    }
    const prelude = doc.createElement("script");
    prelude.src = blobUrl(PRELUDE, "text/javascript");
    doc.head.prepend(prelude);
    iframe.attnvizFetch = fetchIn;
    iframe.attnvizSearch = model.get("search");
    iframe.addEventListener("load", () => {
      // the iframe as tall as the page it holds, so the cell scrolls, not the iframe
      const root = iframe.contentDocument?.documentElement;
      if (!root) return;
      observer = new ResizeObserver(() => {
        iframe.style.height = `${Math.max(root.scrollHeight, 200)}px`;
      });
      observer.observe(root);
    });
    iframe.srcdoc = `<!doctype html>\n${doc.documentElement.outerHTML}`;
    status.remove();
    el.append(iframe);
  } catch (err) {
    status.textContent = `attnviz could not draw this view: ${err.message}`;
  }
  return () => {
    observer?.disconnect();
    close();
    for (const url of made) URL.revokeObjectURL(url);
  };
}

export default { render };
