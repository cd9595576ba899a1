// Heatmaps with token ticks. Token text is data: plotly.js reads a subset of HTML in
// labels, so & < > are escaped before any text reaches it.
import { api } from "./api.js";
import { download, setStatus, t } from "./page.js";
import { MAX_TICKS, refit, ticksFor } from "./ticks.js";

export function escapeText(s) {
  return String(s).replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
}

const LOCALES = []; // plotly.js's strings in other languages, for each bundle loaded

// plotly.js loads async (its 4.8 MB compile must not hold up the page); the page's own
// requests run meanwhile and drawing waits for it here.
// (The attnviz:* performance marks time a load for the page benchmark's breakdown.)
export const plotly = new Promise((resolve, reject) => {
  const ready = () => {
    performance.mark("attnviz:plotly");
    // its Chinese strings, if their script (async too) came first; else registered at draw
    registerLocales();
    // the first draw in a task of its own, not in the one that ran the bundle's script
    // (together they made the load's longest task: 171 against 139 ms, measured)
    setTimeout(() => resolve(window.Plotly), 0);
  };
  if (window.Plotly) {
    ready();
    return;
  }
  const script = document.getElementById("plotly-js");
  script.addEventListener("load", ready);
  script.addEventListener("error", () => reject(new Error("plotly.js failed to load")));
});

// Viridis: perceptually uniform and readable with colour-blindness.
export const COLORSCALE = "Viridis";
const HOVER_TEXT_LIMIT = 200 * 200; // past this, the page's own tip names the tokens (showTip)

// A plot as a figure for a paper: its own data and layout, with the axes' titles its view
// names (heatmap's `axes`: the plot on the page leaves them to the lines under it), as an
// SVG document's text.
async function figureSvg(gd) {
  const Plotly = gd.attnvizGl ?? window.Plotly;
  const full = gd._fullLayout;
  const axes = gd.attnvizAxes;
  const extra = axes ? 28 : 0;
  const layout = axes
    ? {
        ...gd.layout,
        xaxis: { ...gd.layout.xaxis, title: { text: escapeText(axes.x), standoff: 4 } },
        yaxis: { ...gd.layout.yaxis, title: { text: escapeText(axes.y), standoff: 4 } },
        margin: { ...gd.layout.margin, l: (gd.layout.margin?.l ?? 70) + extra },
      }
    : gd.layout;
  const url = await Plotly.toImage(
    { data: gd.data, layout },
    { format: "svg", width: full.width + extra, height: full.height },
  );
  return decodeURIComponent(url.slice(url.indexOf(",") + 1));
}

const arrow = "M500 50 L850 450 L600 450 L600 950 L400 950 L400 450 L150 450 Z";
const downloadSvg = (filename) => ({
  name: "downloadSvg",
  title: t("download_svg"),
  icon: { width: 1000, height: 1000, path: arrow },
  click: (gd) =>
    figureSvg(gd)
      .then((svg) => download(new Blob([svg], { type: "image/svg+xml" }), `${filename}.svg`))
      .catch((err) => setStatus(err.message, "error")),
});

// the server makes the PDF from the same SVG (POST /api/v1/figure/pdf: CairoSVG)
const downloadPdf = (filename) => ({
  name: "downloadPdf",
  title: t("download_pdf"),
  icon: { width: 1000, height: 1000, path: `${arrow} M100 980 L900 980 L900 1000 L100 1000 Z` },
  click: async (gd) => {
    try {
      download(await api.figurePdf(await figureSvg(gd)), `${filename}.pdf`);
    } catch (err) {
      setStatus(err.message, "error");
    }
  },
});

function registerLocales(Plotly = window.Plotly) {
  LOCALES.push(...(window.PlotlyLocales?.splice(0) ?? []));
  for (const locale of LOCALES) Plotly.register(locale);
}

// The whole of plotly.js (its WebGL traces: scattergl, scatter3d), loaded the first time
// a view needs it; the page's own bundle stays window.Plotly. A plot it draws is marked
// (el.attnvizGl) so that it is purged by the bundle that drew it.
let glBundle = null;
export function plotlyGl() {
  glBundle ??= plotly.then(
    (cartesian) =>
      new Promise((resolve, reject) => {
        const script = document.createElement("script");
        script.src = "/vendor/plotly-gl.min.js";
        script.addEventListener("load", () => {
          const gl = window.Plotly;
          window.Plotly = cartesian;
          registerLocales(gl);
          resolve(gl);
        });
        script.addEventListener("error", () => {
          window.Plotly = cartesian;
          glBundle = null;
          reject(new Error("plotly.js's WebGL bundle failed to load"));
        });
        document.head.append(script);
      }),
  );
  return glBundle;
}

// a plot purged by the bundle that drew it
export function purge(el) {
  const Plotly = el.attnvizGl ?? window.Plotly;
  Plotly?.purge(el);
  el.attnvizGl = null;
}

// plotly's toolbar, offline: no logo link, no button that needs a server, its tooltips in
// the page's language; exported PNG and SVG files are named after what they show
export function configFor(filename = "attnviz") {
  const safe = filename.replace(/[^\w.-]+/g, "_");
  if (window.Plotly) registerLocales();
  return {
    locale: document.documentElement.lang === "zh-CN" ? "zh-CN" : "en",
    responsive: true,
    displaylogo: false,
    showSendToCloud: false,
    showEditInChartStudio: false,
    // no "Double-click to zoom back out" notice: it covered the page's Run button (the
    // head view's line under the plot says how to zoom)
    showTips: false,
    toImageButtonOptions: { format: "png", filename: safe },
    modeBarButtonsToAdd: [downloadSvg(safe), downloadPdf(safe)],
  };
}

// z: rows of numbers; rows/columns: token lists (repeated tokens keep their own column),
// the axes' labels; rowNames: what the hover and the readout call each row (default: its
// label), e.g. a decoder step with the token it was fed and the one it predicts;
// columnNames: the same for the columns (a token with its raw piece); axes:
// {x, y}, what the columns and rows are, titled on the exported SVG and PDF figures.
export async function heatmap(
  el,
  {
    z,
    rows,
    rowNames = rows,
    columns,
    columnNames = columns,
    title,
    zmin,
    zmax,
    valueLabel,
    overlay,
    readout,
    colorscale = COLORSCALE,
    colorbar,
    filename,
    fill = false,
    axes = null,
  },
) {
  const safeRows = rows.map(escapeText);
  const safeNames = rowNames.map(escapeText);
  const safeColumns = columns ? columns.map(escapeText) : null;
  const safeColumnNames = columnNames ? columnNames.map(escapeText) : null;
  const trace = {
    type: "heatmap",
    z,
    colorscale,
    zmin,
    zmax,
    hoverongaps: false,
    ...(colorbar ? { colorbar } : {}),
  };
  if (safeColumns && z.length * (z[0]?.length || 0) <= HOVER_TEXT_LIMIT) {
    trace.text = z.map((row, i) =>
      row.map((v, j) => `${safeNames[i]} → ${safeColumnNames[j]}: ${formatValue(v)}`),
    );
    trace.hovertemplate = `%{text}<extra>${escapeText(valueLabel || "")}</extra>`;
  } else if (safeColumns && readout) {
    // too many cells for a label each: plotly.js draws no tooltip, the page's own tip (and
    // the readout) names the cell's tokens from the hover event
    trace.hoverinfo = "none";
  } else {
    trace.hovertemplate = `%{y} → %{x}: %{z:.3f}<extra></extra>`;
  }
  const data = [trace];
  if (overlay) {
    // masked cells drawn over in grey
    data.push({
      type: "heatmap",
      z: overlay.map((row) => row.map((m) => (m ? null : 1))),
      colorscale: [
        [0, "rgba(128,128,128,0.75)"],
        [1, "rgba(128,128,128,0.75)"],
      ],
      showscale: false,
      hoverinfo: "skip",
    });
  }
  const shown = Math.min(rows.length, MAX_TICKS);
  const tickFont = { size: Math.max(7, Math.min(14, 600 / Math.max(shown, 1))) };
  // a title wider than the plot (a phone's) wraps onto more lines, each adding to the top
  const lines = wrapTitle(title || "", Math.max(120, (el.clientWidth || 900) - 80));
  const more = 22 * (lines.length - 1);
  let height = Math.min(900, Math.max(320, 18 * rows.length + 120)) + more;
  if (fill) {
    // the view's one plot fits the screen below its top, less the two lines under it
    // that say what its rows are (a projected page's heatmap is the largest thing on it),
    // up to 900 px; but a row keeps 1.5 px, so that the pointer can rest on each one
    const below = innerHeight - (el.getBoundingClientRect().top + scrollY) - 56;
    height = Math.max(320, Math.min(900, Math.max(below, 1.5 * rows.length + 132 + more)));
  }
  // each axis's ticks from the room plotly.js will give it (estimated here, checked once
  // it is drawn: refit)
  const fit = ticksFor(rows, safeRows, columns, safeColumns, tickFont, trace);
  const top = 62 + more;
  const ticks = fit.estimate(el.clientWidth || 900, height - top);
  const layout = {
    // left-aligned just above the plot, under the toolbar (which sits at the top right):
    // the two never overlap, at a phone's width too
    title: titleAbove(lines.map(escapeText).join("<br>"), more),
    ...themed(),
    margin: { l: 70, r: 20, t: top, b: 70 },
    xaxis: ticks.x,
    yaxis: { ...ticks.y, autorange: "reversed" },
    height,
  };
  const Plotly = await plotly;
  performance.mark("attnviz:react");
  // the hover handler reads the labels of the plot being drawn, set before plotly.js draws
  // it: a pointer resting on the plot is hovered during the redraw, and plotly.js sends no
  // second event for the same cell
  hideTip(el); // a tip of the plot drawn before would name the wrong cell
  const ownTip = columns && trace.hoverinfo === "none";
  el.attnvizLabels =
    readout && columns ? { rowNames, columns: columnNames, readout, ownTip } : null;
  el.attnvizAxes = axes; // {x, y}: the axes' titles of its exported figures
  el.attnvizFit = fit;
  const drawn = await Plotly.react(el, data, layout, configFor(filename));
  await refit(el);
  // a resized plot (responsive: a turned phone, a narrowed window) fits its ticks again
  if (el.attnvizRefit) el.removeListener?.("plotly_relayout", el.attnvizRefit);
  el.attnvizRefit = (event) => {
    if (event && ("autosize" in event || "width" in event)) refit(el);
  };
  el.on("plotly_relayout", el.attnvizRefit);
  if (readout && columns) {
    el.removeAllListeners?.("plotly_hover");
    el.on("plotly_hover", (event) => {
      const point = event.points[0];
      const now = el.attnvizLabels;
      if (!now) return;
      // textContent: token text never becomes markup
      const named = `${now.rowNames[point.y]} → ${now.columns[point.x]}: ${formatValue(point.z)}`;
      now.readout.textContent = named;
      if (now.ownTip) showTip(el, named, event.event);
    });
    el.removeAllListeners?.("plotly_unhover");
    el.on("plotly_unhover", () => hideTip(el));
  }
  return drawn;
}

// A title's lines, each at most `room` px wide in plotly.js's title font (its default
// family at 1.4 x 12 px), broken after spaces and CJK punctuation.
export const TITLE_FONT = '16.8px "Open Sans", verdana, arial, sans-serif';
let measure = null;
export function wrapTitle(text, room) {
  measure ??= document.createElement("canvas").getContext("2d");
  measure.font = TITLE_FONT;
  const fits = (s) => measure.measureText(s).width <= room;
  if (fits(text)) return [text];
  const lines = [];
  let line = "";
  for (const part of text.split(/(?<=[\s，、：；。·—])/)) {
    if (line && !fits(line + part)) {
      lines.push(line.trimEnd());
      line = part.trimStart();
    } else {
      line += part;
    }
  }
  lines.push(line);
  return lines;
}

// The tooltip of a heatmap too large for plotly.js's own per-cell labels: one element,
// beside the pointer, with the cell's tokens as text.
function showTip(el, text, pointer) {
  let tip = el.querySelector(".cell-tip");
  if (!tip) {
    tip = document.createElement("div");
    tip.className = "cell-tip";
    tip.setAttribute("role", "tooltip");
    el.append(tip);
  }
  tip.textContent = text;
  tip.hidden = false; // (measured below: a hidden tip is 0 px wide)
  const box = el.getBoundingClientRect();
  const x = (pointer?.clientX ?? box.left) - box.left + 14;
  const y = (pointer?.clientY ?? box.top) - box.top + 14;
  tip.style.left = `${Math.min(x, box.width - tip.offsetWidth - 4)}px`;
  tip.style.top = `${y}px`;
}

function hideTip(el) {
  const tip = el.querySelector(".cell-tip");
  if (tip) tip.hidden = true;
}

// a plot's title left-aligned just above it, `more` px of further lines (plotly.js grows
// a title of more lines downwards)
export function titleAbove(text, more) {
  return {
    text,
    x: 0,
    xanchor: "left",
    xref: "paper",
    y: 1,
    yref: "paper",
    yanchor: "bottom",
    pad: { b: 6 + more },
  };
}

// The page's colours for plotly (a dark theme follows the system): transparent paper, the
// body's text colour.
export function themed() {
  const color = getComputedStyle(document.body).color;
  return {
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)",
    font: { color },
  };
}

function formatValue(v) {
  return v === null || v === undefined ? "" : Number(v).toFixed(3);
}

// Small thumbnails are drawn straight onto a canvas: cheap enough for hundreds of heads.
// values: one head, row-major (rows x cols); larger matrices are sampled, not averaged.
export function drawThumbnail(canvas, values, rows, cols, size = 96) {
  canvas.width = size;
  canvas.height = size;
  const ctx = canvas.getContext("2d");
  const image = ctx.createImageData(size, size);
  for (let y = 0; y < size; y++) {
    const r = Math.min(rows - 1, Math.floor((y * rows) / size));
    for (let x = 0; x < size; x++) {
      const c = Math.min(cols - 1, Math.floor((x * cols) / size));
      const [red, green, blue] = viridis(values[r * cols + c] ?? 0);
      const i = (y * size + x) * 4;
      image.data[i] = red;
      image.data[i + 1] = green;
      image.data[i + 2] = blue;
      image.data[i + 3] = 255;
    }
  }
  ctx.putImageData(image, 0, 0);
}

const VIRIDIS = [
  [68, 1, 84],
  [72, 40, 120],
  [62, 74, 137],
  [49, 104, 142],
  [38, 130, 142],
  [31, 158, 137],
  [53, 183, 121],
  [109, 205, 89],
  [180, 222, 44],
  [253, 231, 37],
];

function viridis(v) {
  const x = Math.max(0, Math.min(1, v)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const f = x - i;
  return VIRIDIS[i].map((a, k) => Math.round(a + (VIRIDIS[i + 1][k] - a) * f));
}
