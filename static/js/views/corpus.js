// Head statistics over a corpus (exBERT's search, for every model): a shipped corpus, or
// sentences pasted or uploaded, read as a background run with a progress bar; then each
// statistic as a layer x head heatmap, a sortable table, and a head search whose
// sentences open in the head view. The run lives in the URL (cr=id, cs=statistic, cp=
// pattern), so a reload finds it while the server keeps it.
import { heatmap } from "../plots.js";
import { el, labelled } from "./lab/shared.js";

const STATISTICS = ["entropy", "distance", "previous", "first", "special", "same", "induction",
  "alignment"]; // biome-ignore format: one list
const PATTERNS = ["previous", "first", "same", "special", "induction", "alignment"];

const STRINGS = {
  en: {
    view_corpus: "Corpus",
    corpus_source: "Corpus",
    corpus_yours: "your sentences (below, one a line)",
    corpus_file: "or a text file (UTF-8, one sentence a line):",
    corpus_text: "Your sentences, one a line (read when the corpus is “your sentences”):",
    corpus_limit: "Sentences read at most",
    corpus_keep: "keep the current head's queries and keys (for its query–key space)",
    corpus_run: "Run on the corpus",
    corpus_cancel: "Cancel",
    corpus_progress: "{done} of {total} sentences · {rate} per second · about {eta} s left",
    corpus_finished: "{status}: {done} of {total} sentences in {elapsed} s ({rate} per second).",
    corpus_statistic: "Statistic",
    corpus_pattern: "Find heads that attend to",
    corpus_title: "{statistic} · {type} · mean over {n} sentences",
    corpus_open: "open",
    corpus_csv: "Statistics (.csv)",
    corpus_npz: "Vectors (.npz)",
    corpus_licence: "{title}: {n} sentences, licence {licence}, from {source}.",
    corpus_explain:
      "Each cell is a head's statistic averaged over the sentences it applies to (grey: none). Click a column of the table to sort it; a sentence opens in the head view.",
    corpus_none: "Start a run: pick a corpus or paste sentences, then Run.",
    stat_entropy: "entropy (bits)",
    stat_distance: "attention distance (tokens)",
    stat_previous: "previous token",
    stat_first: "first token (sink)",
    stat_special: "special tokens",
    stat_same: "the same token elsewhere",
    stat_induction: "induction",
    stat_alignment: "alignment",
    status_done: "Done",
    status_cancelled: "Cancelled",
    status_failed: "Failed",
  },
  zh: {
    view_corpus: "语料库",
    corpus_source: "语料库",
    corpus_yours: "你的句子（在下方，每行一句）",
    corpus_file: "或一个文本文件（UTF-8，每行一句）：",
    corpus_text: "你的句子，每行一句（语料库选“你的句子”时读取）：",
    corpus_limit: "最多读取句数",
    corpus_keep: "保留当前头的查询与键（用于其查询–键空间）",
    corpus_run: "在语料库上运行",
    corpus_cancel: "取消",
    corpus_progress: "{done} / {total} 句 · 每秒 {rate} 句 · 约剩 {eta} 秒",
    corpus_finished: "{status}：{elapsed} 秒读了 {done} / {total} 句（每秒 {rate} 句）。",
    corpus_statistic: "统计量",
    corpus_pattern: "查找关注以下内容的头",
    corpus_title: "{statistic} · {type} · {n} 句的平均",
    corpus_open: "打开",
    corpus_csv: "统计（.csv）",
    corpus_npz: "向量（.npz）",
    corpus_licence: "{title}：{n} 句，许可 {licence}，来自 {source}。",
    corpus_explain:
      "每格是一个头的统计量在适用句子上的平均（灰色：不适用）。点击表头排序；句子可在单头视图中打开。",
    corpus_none: "开始一次运行：选一个语料库或粘贴句子，然后点运行。",
    stat_entropy: "熵（比特）",
    stat_distance: "注意距离（词元）",
    stat_previous: "前一个词元",
    stat_first: "第一个词元（汇点）",
    stat_special: "特殊词元",
    stat_same: "别处的相同词元",
    stat_induction: "归纳",
    stat_alignment: "对齐",
    status_done: "完成",
    status_cancelled: "已取消",
    status_failed: "失败",
  },
};

let corpora = null; // the shipped corpora, asked once
// the run the cancel button stops: the one shown, or the one being started (a promise)
let shown = null;
let starting = null;
const fixed = (v, d = 3) => (v === null || v === undefined ? "—" : Number(v).toFixed(d));

async function drawCorpus(ctx) {
  const { state, t, elements } = ctx;
  corpora ??= ctx.api.corpora();
  const shipped = await corpora;
  if (ctx.stale()) return;
  elements.grid.hidden = false;
  const status = el("p", { id: "corpus-status", className: "lab-summary" });
  const bar = el("progress", { id: "corpus-progress", max: 1, value: 0, hidden: true });
  const results = el("div", { id: "corpus-results" });
  elements.grid.replaceChildren(form(ctx, shipped, status), bar, status, results);
  elements.explain.textContent = t("corpus_explain");
  shown = state.cr || null;
  if (!state.cr) {
    status.textContent = t("corpus_none");
    return;
  }
  let run = await ctx.api.corpusGet(state.cr);
  const cancel = elements.grid.querySelector("#corpus-cancel");
  while (run.status === "queued" || run.status === "running") {
    if (ctx.stale()) return;
    cancel.hidden = false;
    bar.hidden = false;
    bar.max = run.total;
    bar.value = run.done;
    status.textContent = t("corpus_progress")
      .replace("{done}", String(run.done))
      .replace("{total}", String(run.total))
      .replace("{rate}", fixed(run.rate, 1))
      .replace("{eta}", fixed(run.eta_s, 0));
    await new Promise((resolve) => setTimeout(resolve, 1000));
    run = await ctx.api.corpusGet(state.cr);
  }
  if (ctx.stale()) return;
  cancel.hidden = true;
  bar.hidden = false;
  bar.max = run.total;
  bar.value = run.done;
  status.textContent =
    t("corpus_finished")
      .replace("{status}", t(`status_${run.status}`))
      .replace("{done}", String(run.done))
      .replace("{total}", String(run.total))
      .replace("{elapsed}", fixed(run.elapsed_s, 1))
      .replace("{rate}", fixed(run.rate, 1)) + (run.error ? ` ${run.error}` : "");
  if (run.done === 0) return;
  await drawResults(ctx, run, results);
}

// a shipped corpus's title and source in the page's language (the API's `title_zh`,
// `source_zh`; English where it has none)
function inLanguage(ctx, corpus) {
  if (ctx.state.lang !== "zh") return corpus;
  return {
    ...corpus,
    title: corpus.title_zh || corpus.title,
    source: corpus.source_zh || corpus.source,
  };
}

function form(ctx, shipped, status) {
  const { t, state } = ctx;
  const source = el("select", { id: "corpus-source" });
  source.append(
    ...shipped.map((c) => el("option", { value: c.id, textContent: inLanguage(ctx, c).title })),
    el("option", { value: "", textContent: t("corpus_yours") }),
  );
  const licence = el("p", { className: "convention", id: "corpus-licence" });
  const said = () => {
    const found = shipped.find((x) => x.id === source.value);
    const c = found && inLanguage(ctx, found);
    licence.textContent = c
      ? t("corpus_licence")
          .replace("{title}", c.title)
          .replace("{n}", String(c.sentences))
          .replace("{licence}", c.licence)
          .replace("{source}", c.source)
      : "";
  };
  // the first corpus in a language the model reads
  const readable = shipped.find((c) => ctx.modelInfo().languages.includes(c.language));
  if (readable) source.value = readable.id;
  source.addEventListener("change", said);
  said();
  const pasted = el("textarea", { id: "corpus-text", rows: 4 });
  const file = el("input", { type: "file", id: "corpus-file", accept: ".txt,text/plain" });
  const limit = el("input", { type: "number", id: "corpus-limit", min: "1", value: "200" });
  const keep = el("input", { type: "checkbox", id: "corpus-keep" });
  const run = el("button", { type: "button", id: "corpus-run", textContent: t("corpus_run") });
  // shown from a click on Run until the run ends: there is nothing to cancel before
  const cancel = el("button", {
    type: "button",
    id: "corpus-cancel",
    textContent: t("corpus_cancel"),
    hidden: true,
  });
  run.addEventListener("click", () => {
    cancel.hidden = false;
    starting = start();
  });
  const start = async () => {
    const max = Number.parseInt(limit.value, 10) || undefined;
    const vectors = keep.checked
      ? [{ type: state.type, layer: state.layer, head: state.head }]
      : [];
    try {
      let started;
      // (a file's run keeps no vectors: the upload route takes none)
      if (file.files.length) started = await ctx.api.corpusUpload(state.model, max, file.files[0]);
      else if (source.value) {
        started = await ctx.api.corpusRun({
          model: state.model,
          corpus: source.value,
          limit: max,
          vectors,
        });
      } else {
        const sentences = pasted.value
          .split("\n")
          .map((s) => s.trim())
          .filter(Boolean);
        started = await ctx.api.corpusRun({ model: state.model, sentences, limit: max, vectors });
      }
      shown = started.id;
      ctx.update({ cr: started.id });
    } catch (err) {
      cancel.hidden = true;
      status.textContent = err.message;
    }
  };
  // a cancel clicked while the run is being started stops that run once it has its id
  cancel.addEventListener("click", async () => {
    await starting;
    if (!shown) return;
    ctx.api.corpusCancel(shown).catch((err) => {
      status.textContent = err.message; // e.g. not this page's run (403)
    });
  });
  const top = labelled("corpus-source", t("corpus_source"), source);
  top.append(
    el("label", { htmlFor: "corpus-limit", textContent: t("corpus_limit") }),
    limit,
    run,
    cancel,
  );
  return el(
    "div",
    {},
    top,
    licence,
    el("div", {}, el("label", { htmlFor: "corpus-text", textContent: t("corpus_text") })),
    pasted,
    el("div", {}, el("label", { htmlFor: "corpus-file", textContent: t("corpus_file") }), file),
    el("div", {}, el("label", { htmlFor: "corpus-keep" }, keep, ` ${t("corpus_keep")}`)),
  );
}

async function drawResults(ctx, run, results) {
  const { t, state, elements } = ctx;
  const [{ heads }, found] = await Promise.all([
    ctx.api.corpusGet(run.id, "/heads"),
    ctx.api.corpusGet(run.id, "/search", {
      pattern: PATTERNS.includes(state.cp) ? state.cp : "previous",
      top: 10,
    }),
  ]);
  if (ctx.stale()) return;
  const statistic = STATISTICS.includes(state.cs) ? state.cs : "previous";
  const type = heads.some((h) => h.type === state.type) ? state.type : heads[0].type;
  const mine = heads.filter((h) => h.type === type);
  const layers = Math.max(...mine.map((h) => h.layer)) + 1;
  const perLayer = Math.max(...mine.map((h) => h.head)) + 1;
  const z = Array.from({ length: layers }, (_, l) =>
    Array.from(
      { length: perLayer },
      (_, h) => mine.find((x) => x.layer === l && x.head === h)?.means[statistic] ?? null,
    ),
  );
  const choose = el("select", { id: "corpus-statistic" });
  choose.append(...STATISTICS.map((s) => el("option", { value: s, textContent: t(`stat_${s}`) })));
  choose.value = statistic;
  choose.addEventListener("change", () => ctx.update({ cs: choose.value }));
  results.append(labelled("corpus-statistic", t("corpus_statistic"), choose));
  await heatmap(elements.plot, {
    z,
    rows: z.map((_, l) => `L${l}`),
    columns: Array.from({ length: perLayer }, (_, h) => `H${h}`),
    title: t("corpus_title")
      .replace("{statistic}", t(`stat_${statistic}`))
      .replace("{type}", t(type))
      .replace("{n}", String(run.done)),
    valueLabel: t(`stat_${statistic}`),
    // (beside the bar: a statistic's name is wider than it)
    colorbar: { title: { text: t(`stat_${statistic}`), side: "right" } },
    readout: elements.readout,
    filename: `attnviz-${state.model}-corpus-${statistic}`,
  });
  results.append(table(ctx, mine, statistic), search(ctx, found), downloads(t, run));
}

function table(ctx, heads, statistic) {
  const { t } = ctx;
  const columns = ["layer", "head", ...STATISTICS];
  const wrap = el("div", { className: "corpus-table" });
  let order = { key: statistic, down: true };
  const draw = () => {
    const sorted = heads.slice().sort((a, b) => {
      const value = (h) => (order.key in h ? h[order.key] : (h.means[order.key] ?? -Infinity));
      return (value(a) - value(b)) * (order.down ? -1 : 1);
    });
    const head = el(
      "tr",
      {},
      ...columns.map((c) => {
        const th = el("th", {
          scope: "col",
          textContent: STATISTICS.includes(c) ? t(`stat_${c}`) : t(c),
        });
        th.dataset.key = c;
        th.setAttribute(
          "aria-sort",
          order.key === c ? (order.down ? "descending" : "ascending") : "none",
        );
        th.addEventListener("click", () => {
          order = { key: c, down: order.key === c ? !order.down : true };
          draw();
        });
        return th;
      }),
    );
    const rows = sorted.map((h) =>
      el(
        "tr",
        {},
        ...columns.map((c) => el("td", { textContent: c in h ? String(h[c]) : fixed(h.means[c]) })),
      ),
    );
    wrap.replaceChildren(
      el(
        "table",
        { id: "corpus-table", className: "lab-table" },
        el("thead", {}, head),
        el("tbody", {}, ...rows),
      ),
    );
  };
  draw();
  return wrap;
}

function search(ctx, found) {
  const { t } = ctx;
  const pattern = el("select", { id: "corpus-pattern" });
  pattern.append(...PATTERNS.map((p) => el("option", { value: p, textContent: t(`stat_${p}`) })));
  pattern.value = found.pattern;
  pattern.addEventListener("change", () => ctx.update({ cp: pattern.value }));
  const list = el("ol", { id: "corpus-found" });
  for (const h of found.heads) {
    const item = el("li", {}, `${t(h.type)} L${h.layer} H${h.head}: ${fixed(h.score)}`);
    const examples = el("ul", {});
    for (const e of h.examples) {
      const open = el("button", {
        type: "button",
        className: "corpus-open",
        textContent: t("corpus_open"),
      });
      open.addEventListener("click", () =>
        ctx.update({ view: "head", text: e.text, type: h.type, layer: h.layer, head: h.head }),
      );
      examples.append(el("li", {}, `${fixed(e.score)} · ${e.text} `, open));
    }
    item.append(examples);
    list.append(item);
  }
  return el("div", {}, labelled("corpus-pattern", t("corpus_pattern"), pattern), list);
}

function downloads(t, run) {
  const id = encodeURIComponent(run.id);
  const links = [
    el("a", {
      href: `/api/v1/corpus-runs/${id}/statistics.csv`,
      textContent: t("corpus_csv"),
      id: "corpus-csv",
    }),
  ];
  if (run.vectors.length) {
    links.push(
      " · ",
      el("a", {
        href: `/api/v1/corpus-runs/${id}/vectors.npz`,
        textContent: t("corpus_npz"),
        id: "corpus-npz",
      }),
    );
  }
  return el("p", {}, ...links);
}

export const view = {
  id: "corpus",
  // a model of text (a corpus run reads sentences)
  applies: (info) => info.capabilities.text !== false,
  state: { cr: "", cs: "", cp: "" }, // the run's id; the statistic shown; the head search
  long: true,
  label: "view_corpus",
  controls: ["type", "layer", "head"],
  draw: drawCorpus,
  strings: STRINGS,
};
