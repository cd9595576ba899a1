// A heatmap's tick labels, measured so that no two ever touch at any width: thinned to
// every k-th token, turned upright where flat ones would meet, in a smaller font where that
// labels every token; fitted again to the plot area plotly.js lays out.

let measure = null; // (a canvas's context, made once)

// At most this many tick labels per axis: past it every k-th token is labelled. Each label
// costs plotly a measured SVG text element (128 of them per axis took ~175 ms to draw, 16
// ~25 ms), and past ~64 rows in 900 px they overlap unreadably; the hover and the readout
// line still name every token.
export const MAX_TICKS = 64;
// plotly.js's font for tick labels and text (its default family; themed() sets no other)
export const FONT_FAMILY = '"Open Sans", verdana, arial, sans-serif';
// a CJK font's line is taller (Noto Sans CJK: 1.45 of its size, Latin fonts ~1.16)
const TALL = /[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]/;

// Each string's width in px, in `font` (a CSS font) as the page draws it.
export function textWidths(texts, font) {
  measure ??= document.createElement("canvas").getContext("2d");
  measure.font = font;
  return texts.map((s) => measure.measureText(String(s)).width);
}

// A heatmap's ticks for a plot area of w x h px (estimate: from the plot's width and the
// height under its title, before plotly.js lays it out). labels: raw, to measure; safe:
// escaped, to show.
export function ticksFor(rows, safeRows, columns, safeColumns, font, trace) {
  const family = `${font.size}px ${FONT_FAMILY}`;
  const rowWidths = textWidths(rows, family);
  const columnWidths = columns ? textWidths(columns, family) : null;
  const widest = (widths) => widths.reduce((a, b) => Math.max(a, b), 0);
  const at = (w, h) => ({
    x: axis(safeColumns, columnWidths, font, w, true),
    y: axis(safeRows, rowWidths, font, h, false),
  });
  return {
    trace,
    at,
    // plotly.js grows the left margin to the rows' labels and the bottom one to upright
    // column labels (automargin: true); the colour bar and its numbers take 80 px and 2 %
    // of the plot right of it (measured)
    estimate(width, height) {
      const left = Math.max(70, widest(rowWidths) + 20);
      const x = axis(
        safeColumns,
        columnWidths,
        font,
        Math.max(60, (width - left - 80) / 1.02),
        true,
      );
      const bottom = x.tickangle ? Math.max(70, widest(columnWidths) + 12) : 70;
      return { x, y: axis(safeRows, rowWidths, font, Math.max(60, height - bottom), false) };
    },
  };
}

// The ticks again from the plot area plotly.js laid out, where they differ from those
// drawn (upright labels grow the bottom margin, and so shorten the y axis: a few rounds).
export async function refit(el) {
  const fit = el.attnvizFit;
  for (let round = 0; round < 3; round++) {
    const size = el._fullLayout?._size;
    if (!fit || !size || el.data?.[0] !== fit.trace) return; // another plot drawn since
    const { x, y } = fit.at(size.w, size.h);
    const update = {};
    for (const [name, ticks] of [
      ["xaxis", x],
      ["yaxis", y],
    ]) {
      const now = el.layout[name];
      if (!ticks.tickvals) continue; // (a numbered axis: plotly.js's own ticks)
      const same =
        String(now.tickvals) === String(ticks.tickvals) &&
        now.tickangle === ticks.tickangle &&
        now.tickfont?.size === ticks.tickfont.size;
      if (same) continue;
      for (const key of ["tickvals", "ticktext", "tickangle", "tickfont"]) {
        update[`${name}.${key}`] = ticks[key];
      }
    }
    if (!Object.keys(update).length) return;
    await (el.attnvizGl ?? window.Plotly).relayout(el, update);
  }
}

// Every k-th label, k such that labels are at most MAX_TICKS and none touches the next:
// upright ones (the y axis's; the x axis's where flat ones would not fit) a line apart,
// flat x labels half their two widths and a gap apart. widths: each label's, in px;
// length: the axis's, in px.
function axis(labels, widths, font, length, across) {
  if (!labels)
    return { title: { text: document.documentElement.lang === "zh-CN" ? "维度" : "dim" } };
  const n = labels.length;
  const tall = labels.some((l) => TALL.test(l)) ? 1.5 : 1.25;
  // a smaller font (down to 9 px) where it labels each token (a phone's 16 columns)
  const size = Math.max(Math.min(font.size, 9), Math.min(font.size, length / n / tall));
  const fit = Math.max(1, Math.floor(length / (size * tall)));
  const stride = Math.ceil(n / Math.min(MAX_TICKS, fit));
  const tickvals = labels.map((_, i) => i).filter((i) => i % stride === 0);
  const apart = (stride * length) / Math.max(n, 1);
  const wide = (i) => (widths[i] * size) / font.size;
  const flat =
    !across ||
    tickvals.every((v, i) => i === 0 || (wide(tickvals[i - 1]) + wide(v)) / 2 + size / 2 <= apart);
  return {
    tickmode: "array",
    tickvals,
    ticktext: tickvals.map((i) => labels[i]),
    tickfont: { ...font, size },
    tickangle: flat ? 0 : -90,
    automargin: true,
  };
}
