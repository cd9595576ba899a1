// The page's only way to the server: the public REST API.
export class ApiError extends Error {
  constructor(status, detail) {
    super(typeof detail === "string" ? detail : JSON.stringify(detail));
    this.status = status;
    this.detail = detail;
  }
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
    } catch { /* not JSON */ }
    throw new ApiError(response.status, detail);
  }
  return response;
}

function post(path, body) {
  return call(path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

export const api = {
  analyze: async (model, text, compare) =>
    (await post("/api/v1/analyze", { model, text, ...(compare ? { compare } : {}) })).json(),
  attention: async (request) => (await post("/api/v1/attention", request)).json(),
  positional: async (model, positions, dims) =>
    (await call(`/api/v1/models/${encodeURIComponent(model)}/positional-encoding?positions=${positions}&dims=${dims}`)).json(),
  exportCapture: async (model, text) => {
    const response = await post("/api/v1/export", { model, text });
    const name = /filename="([^"]+)"/.exec(response.headers.get("content-disposition") || "");
    return { blob: await response.blob(), filename: name ? name[1] : "capture.npz" };
  },
};

// A block's data (nested lists or a plotly.js typed array, [heads, rows, columns]) ->
// one matrix (rows of numbers) per head; u1 is scaled back to [0, 1].
export function toMatrices(data, shape) {
  if (Array.isArray(data)) return data;
  const bytes = Uint8Array.from(atob(data.bdata), (c) => c.charCodeAt(0));
  let flat;
  if (data.dtype === "u1") {
    flat = new Float32Array(bytes.length);
    for (let i = 0; i < bytes.length; i++) flat[i] = bytes[i] / 255;
  } else if (data.dtype === "f4") flat = new Float32Array(bytes.buffer);
  else flat = Float32Array.from(new Uint16Array(bytes.buffer), halfToFloat);
  const [heads, rows, cols] = shape;
  const out = [];
  for (let h = 0; h < heads; h++) {
    const matrix = [];
    for (let r = 0; r < rows; r++) {
      const start = (h * rows + r) * cols;
      matrix.push(Array.from(flat.subarray(start, start + cols)));
    }
    out.push(matrix);
  }
  return out;
}

function halfToFloat(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * 2 ** -14 * (frac / 1024);
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * 2 ** (exp - 15) * (1 + frac / 1024);
}
