// The page's only way to the server: the public REST API.
import { requestKey } from "../widget/widget.js";

export class ApiError extends Error {
  constructor(status, detail) {
    super(typeof detail === "string" ? detail : JSON.stringify(detail));
    this.status = status;
    this.detail = detail;
  }
}

// The answers this page has had, by request (method, path, body), to save the view with
// them (save.js): JSON and event streams only, the newest kept within RECORDED_BYTES.
const RECORDED_BYTES = 64 * 2 ** 20;
const recorded = new Map();
const recording = new Set(); // answers still being read
let recordedBytes = 0;

function record(path, options, response) {
  const type = response.headers.get("content-type") || "";
  if (!/json|event-stream/.test(type) || typeof (options.body ?? "") !== "string") return;
  const key = requestKey(options.method || "GET", path, options.body ?? "");
  const reading = response
    .clone()
    .text()
    .then((body) => {
      if (recorded.has(key)) recordedBytes -= recorded.get(key).body.length;
      recorded.delete(key); // (re-set: the newest last)
      recorded.set(key, { status: response.status, type, body });
      recordedBytes += body.length;
      for (const [old, answer] of recorded) {
        if (recordedBytes <= RECORDED_BYTES) break;
        recorded.delete(old);
        recordedBytes -= answer.body.length;
      }
    })
    .catch(() => {}) // (an aborted stream: nothing to keep)
    .finally(() => recording.delete(reading));
  recording.add(reading);
}

// the answers of an input no longer shown, forgotten (main.js: a saved view holds its own)
export function forgetRecorded() {
  recorded.clear();
  recordedBytes = 0;
}

// what record() kept, once the answers being read are: {request key: {status, type, body}}
export async function recordedAnswers() {
  await Promise.all([...recording]);
  return Object.fromEntries(recorded);
}

async function call(path, options = {}) {
  let response;
  try {
    response = await fetch(path, options);
  } catch (err) {
    throw new ApiError(0, String(err));
  }
  if (!response.ok) {
    let detail = response.statusText;
    try {
      detail = (await response.json()).detail;
    } catch {
      /* not JSON */
    }
    throw new ApiError(response.status, detail);
  }
  record(path, options, response);
  return response;
}

// A picture the server does not hold (another replica, or dropped): `resend(digest)` sends
// it again where this page has it (main.js), answering whether it did; the request is then
// made once more.
let resend = async () => false;
export function onPictureGone(fn) {
  resend = fn;
}

function pictureGone(err, digest) {
  return err?.status === 404 && digest && String(err.detail).includes("picture");
}

async function again(request, digest) {
  try {
    return await request();
  } catch (err) {
    if (!pictureGone(err, digest) || !(await resend(digest))) throw err;
    return request();
  }
}

function post(path, body, headers = {}, signal = undefined) {
  const request = () =>
    call(path, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
      signal,
    });
  return again(request, body?.image);
}

// Corpus runs' owner tokens, by run id, as their creation answered them (this page's runs
// are one owner's: it sends the latest token with each new run, and a run's to cancel it).
const owners = new Map();
let latestOwner = null;

function owned(run) {
  owners.set(run.id, run.owner_token);
  latestOwner = run.owner_token;
  return run;
}

function ownerHeader(id = null) {
  const token = id === null ? latestOwner : owners.get(id);
  return token ? { "X-Owner-Token": token } : {};
}

export const api = {
  // prompt: {chat, continuation} for a model that continues a prompt, else {}; a run
  // watched for its progress is sent with its request id, and `signal` aborts it
  // input: {text} and, for a model that reads pictures, {image} (page.js's inputBody)
  analyze: async (model, input, compare, prompt = {}, { requestId, signal } = {}) =>
    (
      await post(
        "/api/v1/analyze",
        { model, ...input, ...(compare ? { compare } : {}), ...prompt },
        requestId ? { "X-Request-ID": requestId } : {},
        signal,
      )
    ).json(),
  // how far the run of a request has read; null before it starts
  progress: async (requestId) => {
    const response = await fetch(`/api/v1/progress/${encodeURIComponent(requestId)}`);
    return response.ok ? response.json() : null;
  },
  // the steps of a generation as the server makes them (server-sent events): onStep(step)
  // for each, and the whole answer at the end; `signal` aborts it (the server then stops);
  // a prompt watched for its progress is sent with its request id
  generate: async (body, onStep, signal, requestId = null) => {
    const response = await call("/api/v1/generate/stream", {
      method: "POST",
      headers: {
        "content-type": "application/json",
        ...(requestId ? { "X-Request-ID": requestId } : {}),
      },
      body: JSON.stringify(body),
      signal,
    });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) throw new ApiError(0, "the generation ended before its answer");
      buffer += value;
      let end = buffer.indexOf("\n\n");
      while (end >= 0) {
        const message = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const kind = /^event: (.*)$/m.exec(message)?.[1];
        const data = JSON.parse(/^data: (.*)$/m.exec(message)?.[1] ?? "null");
        if (kind === "step") onStep(data);
        else if (kind === "done") return data;
        else if (kind === "error") throw new ApiError(503, data.detail);
        end = buffer.indexOf("\n\n");
      }
    }
  },
  // a generation under way ends after its step (its `done` event answers what it made)
  stopGeneration: async (requestId) =>
    (await post("/api/v1/generate/stop", { request_id: requestId })).json(),
  // `signal` aborts it (a window the page no longer shows: the server stops computing it)
  attention: async (request, signal) =>
    (await post("/api/v1/attention", request, {}, signal)).json(),
  lab: async (route, body) => (await post(`/api/v1/lab/${route}`, body)).json(),
  // the views inside a head (/api/v1/neuron, /api/v1/qk-space)
  headView: async (route, body) => (await post(`/api/v1/${route}`, body)).json(),
  // corpus runs: started (a shipped corpus or sentences; or a file's bytes as they are),
  // followed, searched, cancelled
  corpora: async () => (await call("/api/v1/corpora")).json(),
  corpusRun: async (body) =>
    owned(await (await post("/api/v1/corpus-runs", body, ownerHeader())).json()),
  corpusUpload: async (model, limit, file) => {
    const query = new URLSearchParams({ model, ...(limit ? { limit: String(limit) } : {}) });
    const headers = { "content-type": "text/plain", ...ownerHeader() };
    const options = { method: "POST", headers, body: file };
    return owned(await (await call(`/api/v1/corpus-runs/upload?${query}`, options)).json());
  },
  corpusGet: async (id, part = "", query = {}) =>
    (
      await call(
        `/api/v1/corpus-runs/${encodeURIComponent(id)}${part}?${new URLSearchParams(query)}`,
      )
    ).json(),
  corpusCancel: async (id) =>
    (
      await post(`/api/v1/corpus-runs/${encodeURIComponent(id)}/cancel`, {}, ownerHeader(id))
    ).json(),
  positional: async (model, positions, dims) => {
    const path = `/api/v1/models/${encodeURIComponent(model)}/positional-encoding`;
    return (await call(`${path}?${new URLSearchParams({ positions, dims })}`)).json();
  },
  // a plot's SVG as a PDF (the server's CairoSVG)
  figurePdf: async (svg) =>
    (
      await call("/api/v1/figure/pdf", {
        method: "POST",
        headers: { "content-type": "image/svg+xml" },
        body: svg,
      })
    ).blob(),
  // what a citation names of a model: the attnviz version, its source, its weights' hash
  citation: async (model) =>
    (await call(`/api/v1/models/${encodeURIComponent(model)}/citation`)).json(),
  // a picture (a File or Blob) sent as its bytes: {digest, width, height, format}
  uploadImage: async (file) =>
    (
      await call("/api/v1/images", {
        method: "POST",
        headers: { "content-type": file.type || "application/octet-stream" },
        body: file,
      })
    ).json(),
  // a held picture as the page draws it (a PNG at most 1,024 pixels a side), as a blob:
  // through the page's own requests (a notebook's cell answers those, not an <img src>)
  imageBlob: async (digest) => (await again(() => call(`/api/v1/images/${digest}`), digest)).blob(),
  exportCapture: async (model, input, prompt = {}) => {
    const response = await post("/api/v1/export", { model, ...input, ...prompt });
    const name = /filename="([^"]+)"/.exec(response.headers.get("content-disposition") || "");
    return { blob: await response.blob(), filename: name ? name[1] : "capture.npz" };
  },
};

// One block of the attention answer ([heads, rows, columns]: every requested head of a
// type, layer and kind) kept as one flat Float32Array; nested rows are made per head on
// demand (plotly wants them; thumbnails read the flat values). u1 is scaled back to [0, 1].
export class Block {
  constructor(block) {
    const { data, shape } = block;
    [this.count, this.height, this.width] = shape;
    this.rows = block.rows;
    // decoder rows: the token each row's step predicts (rows: the token it was fed)
    this.predicted = block.predicted ?? null;
    this.columns = block.columns;
    this.heads = block.heads;
    this.values = Array.isArray(data) ? Float32Array.from(data.flat(2)) : decode(data);
    this.nested = new Map();
  }

  // head i's values, row-major (a view, no copy)
  flat(i) {
    const size = this.height * this.width;
    return this.values.subarray(i * size, (i + 1) * size);
  }

  // head i as rows of numbers
  matrix(i) {
    if (!this.nested.has(i)) this.nested.set(i, toRows(this.flat(i), this.width));
    return this.nested.get(i);
  }

  // the mean of all heads, as rows of numbers
  mean() {
    const size = this.height * this.width;
    const sum = new Float32Array(size);
    for (let h = 0; h < this.count; h++) {
      const head = this.flat(h);
      for (let j = 0; j < size; j++) sum[j] += head[j];
    }
    for (let j = 0; j < size; j++) sum[j] /= this.count;
    return toRows(sum, this.width);
  }
}

function toRows(flat, width) {
  const out = [];
  for (let start = 0; start < flat.length; start += width) {
    out.push(Array.from(flat.subarray(start, start + width)));
  }
  return out;
}

function decode(data) {
  const binary = atob(data.bdata);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  if (data.dtype === "u1") {
    const out = new Float32Array(bytes.length);
    for (let i = 0; i < bytes.length; i++) out[i] = bytes[i] / 255;
    return out;
  }
  if (data.dtype === "f4") return new Float32Array(bytes.buffer);
  return Float32Array.from(new Uint16Array(bytes.buffer), halfToFloat);
}

function halfToFloat(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * 2 ** -14 * (frac / 1024);
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * 2 ** (exp - 15) * (1 + frac / 1024);
}
