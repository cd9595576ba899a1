// attnviz.show's widget (anywidget): the page itself, in an iframe of the cell's output.
// Every request the page makes (the page, its modules, Plotly, the API) goes through the
// widget's channel to the kernel, where the server's app answers it (attnviz/notebook.py):
// nothing is served on a port and nothing leaves the machine. The page's ES modules are read
// through the same channel and linked here, each relative import made the blob URL of its
// module (dependencies first: the modules' graph has no cycle), so the page runs unchanged;
// the iframe keeps its ids, its keys and its styles apart from the notebook's.

// a module's relative imports, static or dynamic: every quoted relative path of a .js file
// (tests/test_house.py checks that each one in static/ names a module there)
const IMPORTED = /(["'])(\.{1,2}\/[\w./-]+\.js)\1/g;

// the page's first script: its fetch answered through the channel, and its state (the query
// its URL would hold, which an about:srcdoc iframe's cannot: static/js/state.js)
const PRELUDE = `window.fetch = window.frameElement.attnvizFetch(window);
window.attnvizEmbedded = { search: window.frameElement.attnvizSearch };`;

// A Content-Security-Policy for a page whose scripts and styles come from the `scripts`
// and `styles` sources: its images data: and blob: (the heatmap's PNG, plotly's exports),
// and it reaches nothing (its requests go through the kernel's channel, or a saved view's
// answers: `fetchIn`); no plugin, no <base>, no form. FRAME_CSP is the page's mounted in
// an iframe (its own, in a <meta>: a srcdoc document otherwise inherits the notebook's,
// or none): the blob: URLs `mount` makes.
export function policyOf(scripts, styles) {
  return [
    "default-src 'none'",
    `script-src ${scripts}`,
    `style-src ${styles}`,
    "img-src data: blob:",
    "connect-src 'none'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
  ].join("; ");
}
export const FRAME_CSP = policyOf("blob:", "blob: 'unsafe-inline'");

// fetch(input, init), answered by the kernel through the widget's channel; its Response
// made in `realm` (the window that reads it)
function channel(model) {
  const pending = new Map();
  // ids unique to this view: a widget's replies reach each of its views (a second view of
  // one output, "New View for Output"), and each view keeps only its own
  const prefix = Math.random().toString(36).slice(2);
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
      const id = `${prefix}-${++next}`;
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
        const stop = () => {
          if (!pending.has(id)) return false;
          pending.delete(id);
          model.send({ type: "abort", id }); // (the app reads its client gone)
          return true;
        };
        const readable = new realm.ReadableStream({
          start: (controller) => {
            stream = controller;
          },
          cancel: stop, // the page stopped reading the body
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
            if (stop()) gone(new realm.DOMException("The request was aborted.", "AbortError"));
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

// The page's files, read with `read(path)` as the page loads them: the page ("/"), its
// stylesheets, its classic scripts (Plotly) and every module main.js imports, by path.
export async function pageFiles(read) {
  const files = new Map([["/", await read("/")]]);
  const doc = new DOMParser().parseFromString(files.get("/"), "text/html");
  const paths = [
    ...[...doc.querySelectorAll('link[rel="stylesheet"]')].map((l) => l.getAttribute("href")),
    ...[...doc.querySelectorAll("script[src]")].map((s) => s.getAttribute("src")),
  ];
  await Promise.all(paths.map(async (path) => files.set(path, await read(path))));
  const main = doc.querySelector('script[type="module"][src]').getAttribute("src");
  await linked(
    main,
    async (path) => {
      files.set(path, await read(path));
      return files.get(path);
    },
    () => "",
  );
  return files;
}

// The page in an iframe appended to `el`: its files read with `read`, its requests made
// with `fetchIn(realm)`'s fetch, its view the query `search` (static/js/state.js). Answers
// a function that frees what it made.
export async function mount(el, { fetchIn, read, search, height }) {
  const made = [];
  const blobUrl = (text, type) => {
    const url = URL.createObjectURL(new Blob([text], { type }));
    made.push(url);
    return url;
  };
  const iframe = document.createElement("iframe");
  iframe.title = "attnviz";
  iframe.style.cssText = `width: 100%; border: 0; height: ${height}px;`;
  let observer = null;
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
  const policy = doc.createElement("meta");
  policy.httpEquiv = "Content-Security-Policy";
  policy.content = FRAME_CSP;
  doc.head.prepend(policy); // (first: before any script is read)
  iframe.attnvizFetch = fetchIn;
  iframe.attnvizSearch = search;
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
  el.append(iframe);
  return () => {
    observer?.disconnect();
    for (const url of made) URL.revokeObjectURL(url);
  };
}

// A request's key in a saved view's answers: its method, path and query as a URL reads
// them, and its body (static/js/api.js records by it, replaying() looks up by it)
export function requestKey(method, url, body = "") {
  const { pathname, search } = new URL(url, "http://attnviz.key");
  return `${method.toUpperCase()} ${pathname}${search} ${body}`;
}

// A saved view's fetch (static/js/save.js writes the file): its page's files and the
// answers the page had when it was saved, by request; anything else a 404 that says so.
export function replaying(saved) {
  return (realm) =>
    async (input, init = {}) => {
      const request = new realm.Request(new URL(input.url ?? input, "http://attnviz.saved"), init);
      const { pathname } = new URL(request.url);
      const body = ["GET", "HEAD"].includes(request.method) ? "" : await request.text();
      const answer = saved.responses[requestKey(request.method, request.url, body)];
      if (answer) {
        // (a picture: its bytes as base64, static/js/save.js keepPicture)
        const content = answer.base64
          ? Uint8Array.from(atob(answer.body), (c) => c.charCodeAt(0))
          : answer.body;
        return new realm.Response(content, {
          status: answer.status,
          headers: { "content-type": answer.type },
        });
      }
      if (request.method === "GET" && pathname in saved.files) {
        return new realm.Response(saved.files[pathname], { status: 200 });
      }
      const detail =
        "This saved view holds what its page had drawn when it was saved; open it in " +
        "attnviz to compute anything else.";
      return new realm.Response(JSON.stringify({ detail }), {
        status: 404,
        headers: { "content-type": "application/json" },
      });
    };
}

async function render({ model, el }) {
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
  let unmount = () => {};
  try {
    const options = { fetchIn, read, search: model.get("search"), height: model.get("height") };
    unmount = await mount(el, options);
    status.remove();
  } catch (err) {
    status.textContent = `attnviz could not draw this view: ${err.message}`;
  }
  return () => {
    unmount();
    close();
  };
}

export default { render };
