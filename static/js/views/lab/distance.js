// Each head's mean attention distance against depth (the ViT paper's figure 7): a picture's
// heads, one point each, how far (in the model's pixels) their patches look.
import { ask, chart, selfType, summary } from "./shared.js";

async function draw({ ctx, t, out, base }) {
  const type = selfType(ctx);
  const r = await ask(ctx, "distance", { ...base, type });
  if (ctx.stale()) return;
  const layers = r.distance.length;
  const wide = Math.round(r.grid[1] * r.patch[1]);
  // (a head that gives the patches nothing has no distance: null, not drawn)
  const told = (row) => row.filter((v) => v !== null);
  const range = (row) =>
    told(row).length
      ? [Math.min(...told(row)), Math.max(...told(row))].map((v) => v.toFixed(1))
      : ["—", "—"];
  const [firstLow, firstHigh] = range(r.distance[0]);
  const [lastLow, lastHigh] = range(r.distance[layers - 1]);
  summary(
    out,
    t("lab_distance_said")
      .replace("{first_low}", firstLow)
      .replace("{first_high}", firstHigh)
      .replace("{last}", String(layers - 1))
      .replace("{last_low}", lastLow)
      .replace("{last_high}", lastHigh)
      .replace("{wide}", String(wide))
      .replace("{patch}", `${+r.patch[0].toFixed(1)} × ${+r.patch[1].toFixed(1)}`),
    { id: "lab-distance-said" },
  );
  const points = r.distance
    .flatMap((row, layer) =>
      row.map((d, head) => ({ layer, head, d, elsewhere: r.elsewhere[layer][head] })),
    )
    .filter((p) => p.d !== null);
  await chart(
    out,
    "lab-distance-plot",
    [
      {
        type: "scatter",
        mode: "markers",
        x: points.map((p) => p.layer),
        y: points.map((p) => p.d),
        customdata: points.map((p) => [p.head, (100 * p.elsewhere).toFixed(1)]),
        hovertemplate: t("lab_distance_hover"),
        marker: { size: 8, opacity: 0.75 },
        name: "",
      },
    ],
    {
      title: { text: `${t("lab_distance")} · ${t(r.type)}` },
      xaxis: { title: { text: t("layer") }, dtick: 1 },
      yaxis: { title: { text: t("lab_distance_axis") }, rangemode: "tozero" },
      showlegend: false,
    },
    `attnviz-${ctx.state.model}-distance`,
  );
  summary(out, t("lab_distance_assumes"));
}

const STRINGS = {
  en: {
    lab_distance: "Attention distance",
    lab_distance_explain:
      "How far each head looks across the picture, layer by layer (Dosovitskiy et al. 2021, the ViT paper's figure 7): per head, the distance from each patch to the patches it attends to, weighted by its attention, averaged over the patches.",
    lab_distance_said:
      "In layer 0 the heads look {first_low} to {first_high} pixels away on average; in layer {last}, {last_low} to {last_high} (the picture the model reads is {wide} pixels wide, in patches of {patch}).",
    lab_distance_axis: "mean attention distance (pixels the model reads)",
    lab_distance_hover:
      "layer %{x} · head %{customdata[0]}<br>%{y:.1f} px<br>%{customdata[1]}% to tokens that are no patch<extra></extra>",
    lab_distance_assumes:
      "Each patch's weights over the patches are renormalised: what it gives the class and register tokens is left out (the hover says how much). The ViT paper averages the same over 128 pictures; this is one picture's.",
  },
  zh: {
    lab_distance: "注意力距离",
    lab_distance_explain:
      "逐层看每个头在图片上看多远（Dosovitskiy 等，2021，ViT 论文图 7）：对每个头，每个图块到它所关注的图块的距离，按注意力加权，再对所有图块取平均。",
    lab_distance_said:
      "第 0 层的各头平均看向 {first_low} 到 {first_high} 像素之外；第 {last} 层为 {last_low} 到 {last_high}（模型读入的图片宽 {wide} 像素，图块大小 {patch}）。",
    lab_distance_axis: "平均注意力距离（模型读入的像素）",
    lab_distance_hover:
      "第 %{x} 层 · 头 %{customdata[0]}<br>%{y:.1f} 像素<br>%{customdata[1]}% 给非图块的词元<extra></extra>",
    lab_distance_assumes:
      "每个图块在各图块上的权重重新归一化：给类别词元和寄存器词元的权重不计在内（悬停时显示其份额）。ViT 论文对 128 张图片取平均；这里是一张图片的结果。",
  },
};

export const experiment = {
  id: "distance",
  label: "lab_distance",
  explain: "lab_distance_explain",
  draw,
  strings: STRINGS,
};
