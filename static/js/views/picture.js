// A picture's attention drawn on the picture: over each patch, the weight one query
// position gives it (a class or register token, or a patch: hovered, clicked or chosen),
// for one head or the mean of a layer's heads. Each patch is placed by its box in the
// picture's own pixels (analyze's `image`: the processor's resizing and cropping undone).

import { attentionOf } from "../model-info.js";
import { drawn, labelOf, namesOf, queriesOf, said } from "./picture-labels.js";
import { Rows, rowBlock, rowOf } from "./picture-rows.js";

const TINT = [230, 60, 20]; // the weight's colour, its opacity the weight over the row's largest
const QUERY = "#00b5d8"; // the query patch's outline
const ROW_DELAY_MS = 80; // a long input's row is asked for once the pointer rests this long

// the position whose box holds the picture's point (x, y), or -1
function patchAt(image, x, y) {
  return image.positions.findIndex(
    (p) => drawn(p, image) && x >= p.box[0] && x < p.box[2] && y >= p.box[1] && y < p.box[3],
  );
}

function drawOverlay(canvas, image, row, q) {
  const context = canvas.getContext("2d");
  const scale = canvas.width / image.width;
  context.clearRect(0, 0, canvas.width, canvas.height);
  let top = 0;
  image.positions.forEach((p, j) => {
    if (drawn(p, image)) top = Math.max(top, row[j]);
  });
  image.positions.forEach((p, j) => {
    if (!drawn(p, image) || top <= 0) return;
    const [left, upper, right, lower] = p.box.map((v) => v * scale);
    context.fillStyle = `rgba(${TINT.join(",")},${((0.85 * row[j]) / top).toFixed(3)})`;
    context.fillRect(left, upper, right - left, lower - upper);
  });
  const query = image.positions[q];
  if (query && drawn(query, image)) {
    const [left, upper, right, lower] = query.box.map((v) => v * scale);
    context.strokeStyle = QUERY;
    context.lineWidth = Math.max(2, canvas.width / 300);
    context.strokeRect(left, upper, right - left, lower - upper);
  }
}

// each head's map of the query (the layer's heads side by side, the picture under each):
// a click opens that head
function headStrip(ctx, count, pictureUrl, alt) {
  const { t, state } = ctx;
  const strip = document.createElement("div");
  strip.className = "picture-heads";
  strip.setAttribute("role", "group");
  strip.setAttribute("aria-label", t("picture_heads").replace("{layer}", state.layer));
  const canvases = [];
  for (let h = 0; h < count; h++) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "picture-head";
    button.setAttribute("aria-pressed", String(!state.avg && h === state.head));
    const frame = document.createElement("span");
    frame.className = "picture-frame";
    const small = document.createElement("img");
    small.src = pictureUrl;
    small.alt = alt;
    const canvas = document.createElement("canvas");
    frame.append(small, canvas);
    const caption = document.createElement("span");
    caption.textContent = `${t("head")} ${h}`;
    button.append(frame, caption);
    button.addEventListener("click", () => ctx.update({ head: h, avg: false, pmap: "" }));
    strip.append(button);
    canvases.push(canvas);
  }
  return { strip, canvases };
}

async function draw(ctx) {
  const { state, t, elements } = ctx;
  const image = ctx.analysis.image;
  if (!image) return t("picture_no_image");
  // the query: the one kept, else a vision-language model's last position (the one that
  // predicts what comes next), an image encoder's first (its class token)
  const last = image.positions.length - 1;
  const reads = image.positions.some((p) => p.kind === "text");
  const chosen = state.pq < 0 ? (reads ? last : 0) : Math.min(state.pq, last);
  const body = { model: state.model, ...ctx.inputBody, type: state.type };
  // (rollout and flow where the model's lab runs them: on inputs it reads whole)
  const long = Boolean(ctx.analysis.long);
  const runs = long ? [] : (ctx.modelInfo().capabilities.experiments ?? []);
  const pmap = runs.includes(state.pmap) ? state.pmap : "";
  // through every layer: rollout's whole matrix (any query's row at once), or the flow
  // into the chosen query (a maximum flow an input: another query is another request)
  const through = {
    rollout: () => ctx.lab("rollout", body).then((r) => (q) => r.matrix[q]),
    flow: () => ctx.lab("flow", { ...body, query: chosen }).then((r) => () => r.flow),
  }[pmap];
  const [block, rowThrough] = await Promise.all([
    long ? rowBlock(ctx, chosen) : ctx.layerBlock(state.type, state.layer, "weights"),
    through ? through() : null,
  ]);
  if (ctx.stale()) return;
  const rows = new Rows(ctx, block, chosen, long);
  const who = state.avg ? t("average") : `${t("head")} ${Math.min(state.head, rows.count - 1)}`;
  const layers = attentionOf(ctx.modelInfo(), state.type).layers;
  elements.convention.textContent = through
    ? `${t(state.type)} · ${t(`picture_${pmap}_said`).replace("{n}", layers)}`
    : `${t(state.type)} · ${t("layer")} ${state.layer} · ${who}`;

  const figure = document.createElement("figure");
  figure.className = "picture-view";
  const choose = document.createElement("label");
  choose.className = "picture-choose";
  choose.textContent = `${t("picture_query_label")} `;
  const select = document.createElement("select");
  select.id = "picture-query";
  image.positions.forEach((p, j) => {
    const option = document.createElement("option");
    option.value = String(j);
    option.textContent = labelOf(p);
    select.append(option);
  });
  select.value = String(chosen);
  // what the map is: the layer's head (or mean), or rollout or flow through every layer
  const map = document.createElement("select");
  map.id = "picture-map";
  for (const [value, label] of [
    ["", "picture_map_layer"],
    ["rollout", "picture_rollout"],
    ["flow", "picture_flow"],
  ].filter(([value]) => !value || runs.includes(value))) {
    const option = document.createElement("option");
    option.value = value;
    option.textContent = t(label);
    map.append(option);
  }
  map.value = pmap;
  map.addEventListener("change", () => ctx.update({ pmap: map.value }));
  const mapLabel = document.createElement("label");
  mapLabel.className = "picture-choose";
  mapLabel.append(`${t("picture_map")} `, map);
  choose.append(select);
  const frame = document.createElement("div");
  frame.className = "picture-frame";
  frame.id = "picture-main";
  const picture = document.createElement("img");
  // a picture nothing of which has a place of its own (a resampler's queries alone): no
  // map over it, nor a head's
  const placed = image.positions.some((p) => drawn(p, image));
  const alt = placed ? "picture_alt" : "picture_alt_unplaced";
  picture.alt = t(alt).replace("{w}", image.width).replace("{h}", image.height);
  const source = await ctx.pictureUrl(image.digest);
  if (ctx.stale()) return;
  picture.src = source;
  const canvas = document.createElement("canvas");
  canvas.setAttribute("aria-hidden", "true");
  frame.append(picture, canvas);
  const heads = headStrip(ctx, rows.count, picture.src, "");
  const headsTitle = document.createElement("figcaption");
  headsTitle.textContent = t("picture_heads").replace("{layer}", state.layer);
  figure.append(choose, frame);
  if (placed) {
    figure.append(headsTitle, heads.strip);
    figure.insertBefore(mapLabel, frame);
  }
  elements.plot.replaceChildren(figure);
  await picture.decode().catch(() => {});
  if (ctx.stale()) return;
  // drawn in the picture's pixels as sent back (at most 1,024 a side), scaled with it
  const longer = Math.max(image.width, image.height);
  const shrink = Math.min(1, 1024 / longer);
  canvas.width = Math.max(1, Math.round(image.width * shrink));
  canvas.height = Math.max(1, Math.round(image.height * shrink));
  for (const small of heads.canvases) {
    // (a map a head: a few hundred pixels across)
    small.width = Math.max(1, Math.round(canvas.width / 4));
    small.height = Math.max(1, Math.round(canvas.height / 4));
  }

  const named = namesOf(t, image); // (what is no patch, named once: not on each hover)
  let wanted = chosen; // the query shown, or being asked for (a long input's)
  let asking = null;
  const show = (q) => {
    wanted = q;
    clearTimeout(asking);
    if (!rows.held(q)) {
      // (a long input's row, asked for once the pointer rests on its patch, drawn if it
      // is still the one wanted; meanwhile, and if it cannot be read, the readout says so)
      const current = () => !ctx.stale() && wanted === q;
      elements.readout.textContent = t("picture_row_asked").replace(
        "{q}",
        labelOf(image.positions[q]),
      );
      const failed = (err) => {
        if (current())
          elements.readout.textContent = `${t("picture_row_failed")} ${err.message ?? err}`;
      };
      const ask = () => current() && rows.ask(q).then(() => current() && show(q), failed);
      asking = setTimeout(ask, ROW_DELAY_MS);
      return;
    }
    const started = performance.now();
    const row = rowOf(rows, state, q, rowThrough);
    drawOverlay(canvas, image, row, q);
    heads.canvases.forEach((small, h) => {
      drawOverlay(small, image, rows.head(h, q), q);
    });
    elements.readout.textContent = said(t, image, row, q, named);
    performance.measure("attnviz:overlay", { start: started, end: performance.now() });
  };
  show(chosen);
  const pointed = (event) => {
    const bounds = canvas.getBoundingClientRect();
    const x = ((event.clientX - bounds.left) / bounds.width) * image.width;
    const y = ((event.clientY - bounds.top) / bounds.height) * image.height;
    return patchAt(image, x, y);
  };
  // a query kept: in the URL; flow's map is asked again for it
  const keep = (q) => {
    if (pmap === "flow") ctx.update({ pq: q });
    else {
      ctx.note({ pq: q });
      show(q);
    }
  };
  let hovered = -1;
  canvas.addEventListener("pointermove", (event) => {
    if (pmap === "flow") return; // (flow into another query is another request: click)
    const q = pointed(event);
    if (q < 0 || q === hovered) return;
    hovered = q;
    show(q);
  });
  canvas.addEventListener("pointerleave", () => {
    hovered = -1;
    show(Number(select.value));
  });
  canvas.addEventListener("click", (event) => {
    const q = pointed(event);
    if (q < 0) return;
    select.value = String(q);
    keep(q);
  });
  select.addEventListener("change", () => keep(Number(select.value)));
  // a model whose picture reaches its language model only through a resampler's queries:
  // nothing of it has a place to draw
  elements.explain.textContent = placed
    ? t("picture_explain")
    : t("picture_unplaced").replace("{n}", queriesOf(image));
}

export const view = {
  id: "picture",
  label: "view_picture",
  controls: ["type", "layer", "head", "average"],
  arrowKeys: true,
  applies: (info) => info.capabilities.pictures === true,
  // the query position whose attention is drawn on the picture; the map: the layer's, or
  // rollout's or flow's through every layer
  state: { pq: -1, pmap: "" },
  choices: { pmap: ["", "rollout", "flow"] },
  clearedOn: { pq: "input" },
  draw,
  long: true, // (a long input's rows asked for one at a time)
  prefetch: (ctx) => ctx.layerBlock(ctx.state.type, ctx.state.layer, "weights"),
  strings: {
    en: {
      view_picture: "Picture",
      picture_map: "Map",
      picture_map_layer: "this layer: the head, or the heads' mean",
      picture_rollout: "attention rollout (every layer)",
      picture_flow: "attention flow (every layer)",
      picture_flow_said:
        "attention flow into the query through all {n} layers (Abnar & Zuidema 2020: each patch's maximum flow through the layers' averaged attention, half identity for the residual); click a patch, or choose a query, to draw another's",
      picture_heads: "Layer {layer}, each head's map of the query (click one to open it):",
      picture_rollout_said:
        "attention rollout through all {n} layers (Abnar & Zuidema 2020: each layer's heads averaged, half identity for the residual, the layers multiplied)",
      picture_query_label: "Query",
      picture_query: "{q} looks at",
      picture_strongest: "most at {p} ({w})",
      picture_elsewhere: "{share}% to {names} (no patch: not drawn)",
      picture_text: "the text",
      picture_thumbnail: "the whole picture's thumbnail (▣)",
      picture_to_queries: "{share}% to the picture's {n} learned queries (◌)",
      picture_padding: "padding outside the picture (░ ×{n})",
      picture_unplaced:
        "This model's language model reads the picture only as the {n} learned queries (◌ 0, ◌ 1, …) of its resampler, each of which looks at the whole picture: none has a place on it, so no map is drawn over it. The readout says how much of the chosen position's attention goes to them; the head and model views show them as columns.",
      picture_alt_unplaced:
        "The picture read ({w} × {h} pixels): its tokens have no place on it, nothing is drawn over it",
      picture_alt:
        "The picture read ({w} × {h} pixels), its patches tinted by the query's attention",
      picture_no_image:
        "This run read no picture: the picture view is for models that read pictures.",
      picture_row_asked: "{q}: its row is being read…",
      picture_row_failed: "This query's row could not be read:",
      picture_explain:
        "Each patch of the picture is tinted by the weight the query gives it: the most opaque is its largest. Hover a patch to make it the query; click it, or choose a query above, to keep it.",
    },
    zh: {
      view_picture: "图片",
      picture_map: "图",
      picture_map_layer: "本层：这个头，或各头平均",
      picture_rollout: "注意力 rollout（所有层）",
      picture_flow: "注意力流（所有层）",
      picture_flow_said:
        "经过全部 {n} 层流入查询的注意力流（Abnar 与 Zuidema，2020：每个图块经过各层平均注意力的最大流，加一半单位矩阵表示残差）；点击图块或选择查询以画出另一个的",
      picture_heads: "第 {layer} 层，每个头对这个查询的注意力图（点击打开该头）：",
      picture_rollout_said:
        "经过全部 {n} 层的注意力 rollout（Abnar 与 Zuidema，2020：每层各头取平均，加一半单位矩阵表示残差，再逐层相乘）",
      picture_query_label: "查询",
      picture_query: "{q} 关注",
      picture_strongest: "最关注 {p}（{w}）",
      picture_elsewhere: "{share}% 给 {names}（不是图块：未画出）",
      picture_text: "文本",
      picture_thumbnail: "整张图片的缩略图（▣）",
      picture_to_queries: "{share}% 给图片的 {n} 个可学习查询（◌）",
      picture_padding: "图片外的填充（░ ×{n}）",
      picture_unplaced:
        "这个模型的语言模型只通过其重采样器的 {n} 个可学习查询（◌ 0、◌ 1、…）读图片，每个查询看整张图片：它们在图片上没有位置，所以不在图片上画图。读数说明所选位置的注意力有多少给了它们；注意力头视图和模型视图把它们显示为列。",
      picture_alt_unplaced:
        "读入的图片（{w} × {h} 像素）：它的词元在图片上没有位置，图片上不画任何东西",
      picture_alt: "读入的图片（{w} × {h} 像素），图块按查询的注意力着色",
      picture_no_image: "这次运行没有读图片：图片视图只用于读图片的模型。",
      picture_row_asked: "{q}：正在读取它的这一行……",
      picture_row_failed: "读取不到这个查询的这一行：",
      picture_explain:
        "图片的每个图块按查询给它的权重着色：最不透明的权重最大。把鼠标移到图块上，它就成为查询；点击它，或在上方选择查询，可以固定下来。",
    },
  },
};
