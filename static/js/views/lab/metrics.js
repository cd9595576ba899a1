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
  // the metrics' names and what they mean in the page's language: the API's explain
  // (model/methods/head_stats.py, English) where this module has no translation
  const named = (name) => t(`metric_${name}`);
  const meaning = (name) => {
    const translated = t(`metric_${name}_explain`);
    return translated === `metric_${name}_explain` ? r.explain[name] : translated;
  };
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
  const formats = columns.map((c) => ({ type: "text", layer: "int", head: "int" })[c] ?? "real");
  const metricsTable = sortable(table(headers, cells, formats));
  metricsTable.id = "lab-metrics-table";
  // a phone scrolls the table sideways: say so above it
  const hint = el("p", { className: "scroll-hint", textContent: t("scroll_hint") });
  out.append(hint, el("div", { className: "table-scroll" }, metricsTable));
}

// its strings, in both languages
const STRINGS = {
  en: {
    metric_entropy: "entropy",
    metric_max_weight: "max weight",
    metric_distance: "distance",
    metric_previous: "previous token",
    metric_first: "first token",
    metric_special: "special tokens",
    metric_alignment: "alignment",
    lab_type: "type",
    scroll_hint: "The table is wider than the screen: scroll it sideways.",
    lab_metrics: "Head metrics",
    lab_metrics_explain:
      "A number per head: entropy (how spread out), distance (how far it looks), previous-token weight, weight on the first and on special tokens, and for cross-attention how often its strongest key lies on the diagonal (alignment). Click a column to sort.",
    lab_metric: "Metric",
  },
  zh: {
    metric_entropy: "熵",
    metric_max_weight: "最大权重",
    metric_distance: "距离",
    metric_previous: "前一词元",
    metric_first: "首词元",
    metric_special: "特殊词元",
    metric_alignment: "对齐",
    metric_entropy_explain: "每个查询行的 softmax 熵的均值，单位比特（低：集中）",
    metric_max_weight_explain: "每行最大权重的均值",
    metric_distance_explain: "自注意力：按注意力加权的 |查询 − 键| 的均值，单位词元",
    metric_previous_explain: "自注意力：落在查询前一个词元上的平均权重",
    metric_first_explain: "落在第一个键上的平均权重",
    metric_special_explain: "落在特殊词元（[CLS]、[SEP]、<bos>）上的平均权重",
    metric_alignment_explain: "交叉注意力：最强键落在两种长度拉伸后的对角线一格以内的行所占比例",
    lab_type: "类型",
    scroll_hint: "表格比屏幕宽：可左右滑动。",
    lab_metrics: "注意力头指标",
    lab_metrics_explain:
      "每个头的数值：熵（分散程度）、距离（看多远）、前一个词元的权重、第一个词元和特殊词元的权重，以及交叉注意力最强键落在对角线上的比例（对齐）。点击列名排序。",
    lab_metric: "指标",
  },
};

export const experiment = {
  id: "metrics",
  label: "lab_metrics",
  explain: "lab_metrics_explain",
  draw,
  strings: STRINGS,
};
