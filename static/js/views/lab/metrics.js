// Head metrics: one number per head as a layer x head heatmap, and a sortable table.
import { heatmap } from "../../plots.js";
import { ask, el, labelled, table } from "./shared.js";

// sorting a table by a column's numbers (click or Enter on its header; again: reversed)
function sortable(tableElement) {
  let order = { column: null, descending: true };
  const headers = [...tableElement.querySelectorAll("th")];
  headers.forEach((th, i) => {
    th.tabIndex = 0;
    const sort = () => {
      order = { column: i, descending: order.column === i ? !order.descending : true };
      const body = tableElement.tBodies[0];
      const value = (tr) => {
        const v = Number.parseFloat(tr.children[i].textContent);
        return Number.isNaN(v) ? Number.NEGATIVE_INFINITY : v;
      };
      const sign = order.descending ? -1 : 1;
      body.append(...[...body.rows].sort((a, b) => sign * (value(a) - value(b))));
      const direction = order.descending ? "descending" : "ascending";
      for (const [j, h] of headers.entries()) {
        h.setAttribute("aria-sort", j === i ? direction : "none");
      }
    };
    th.addEventListener("click", sort);
    th.addEventListener("keydown", (e) => {
      if (e.key === "Enter" || e.key === " ") {
        e.preventDefault();
        sort();
      }
    });
  });
  return tableElement;
}

async function draw({ ctx, t, out, base }) {
  const { state } = ctx;
  const r = await ask(ctx, "metrics", base);
  if (ctx.stale()) return;
  const names = Object.keys(r.explain);
  const rows = r.rows.filter((row) => row.type === state.type);
  const metric = el("select", { id: "lab-metric" });
  // the metrics' names and what they mean in the page's language (the API's explain is
  // English)
  const named = (name) => t(`metric_${name}`);
  const meaning = (name) => t(`metric_${name}_explain`);
  for (const name of names) {
    metric.append(el("option", { value: name, textContent: named(name) }));
  }
  const box = el("div", { className: "plot" });
  const layers = Math.max(...rows.map((row) => row.layer)) + 1;
  const heads = Math.max(...rows.map((row) => row.head)) + 1;
  const at = (l, h) => rows.find((row) => row.layer === l && row.head === h);
  const drawMetric = () => {
    const z = Array.from({ length: layers }, (_, l) =>
      Array.from({ length: heads }, (_, h) => at(l, h)?.[metric.value] ?? null),
    );
    return heatmap(box, {
      z,
      rows: z.map((_, l) => `L${l}`),
      columns: Array.from({ length: heads }, (_, h) => `H${h}`),
      title: `${named(metric.value)} · ${t(state.type)} — ${meaning(metric.value)}`,
      valueLabel: named(metric.value),
    });
  };
  metric.addEventListener("change", drawMetric);
  out.append(labelled("lab-metric", t("lab_metric"), metric), box);
  await drawMetric();
  const columns = ["type", "layer", "head", ...names];
  const cells = rows.map((row) => columns.map((c) => (c === "type" ? t(row[c]) : row[c])));
  const headers = ["lab_type", "layer", "head"].map(t).concat(names.map(named));
  const metricsTable = sortable(table(headers, cells));
  metricsTable.id = "lab-metrics-table";
  // a phone scrolls the table sideways: say so above it
  const hint = el("p", { className: "scroll-hint", textContent: t("scroll_hint") });
  out.append(hint, el("div", { className: "table-scroll" }, metricsTable));
}

export const experiment = {
  id: "metrics",
  label: "lab_metrics",
  explain: "lab_metrics_explain",
  draw,
};
