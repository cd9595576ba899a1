"""The strongest key of each query row of one head, and its weight.

A toy lab experiment, registered as a plugin (ATTNVIZ_PLUGINS='["tests.toy_experiment"]'):
what adding an experiment takes — a function of (context, request), its request and
answer models, and one register line. The page's half is TOY_MODULE: one module, and one
line in static/js/views/lab/index.js."""

from __future__ import annotations

from pydantic import BaseModel

from app.lab import LabRoute, register
from app.lab.context import LabContext
from app.lab.schemas import HeadRequest


class StrongestKeys(BaseModel):
    model: str
    type: str
    rows: list[str]  # the head's query tokens
    strongest: list[str]  # for each row, the key it gives the most weight
    weight: list[float]  # and that weight


def strongest_keys(ctx: LabContext, req: HeadRequest) -> StrongestKeys:
    """The key each query row of one head gives the most weight, and the weight."""
    spec = ctx.spec(req.type)
    ctx.check_head(spec, req.layer, req.head)
    weights = ctx.weights(ctx.result.captured, spec, req.layer)[req.head].float()
    rows, columns = ctx.tokens(spec)
    best = weights.max(-1)
    return StrongestKeys(
        model=ctx.entry.id,
        type=spec.type,
        rows=rows,
        strongest=[columns[int(i)] for i in best.indices],
        weight=[round(float(w), 6) for w in best.values],
    )


register(LabRoute("toy-strongest", strongest_keys, HeadRequest, StrongestKeys))

# the page's half, served in place of static/js/views/lab/toy.js by the e2e test
TOY_MODULE = """
// a lab experiment as a new contributor would write one: its id, label and explanation
// (strings in both languages), the URL key it keeps, what it draws
import { ask, summary } from "./shared.js";

async function draw({ ctx, t, out, head }) {
  const r = await ask(ctx, "toy-strongest", head);
  if (ctx.stale()) return;
  const pairs = r.rows.map((row, i) => `${row}→${r.strongest[i]}`);
  summary(out, t("toy_said").replace("{pairs}", pairs.join(" ")));
  const mark = document.createElement("button");
  mark.id = "toy-mark";
  mark.textContent = ctx.state.toymark ? `${t("toy_marked")}: ${ctx.state.toymark}` : t("toy_mark");
  mark.addEventListener("click", () => ctx.update({ toymark: r.strongest[0] }));
  out.append(mark);
}

export const experiment = {
  id: "toy-strongest",
  label: "lab_toy",
  explain: "lab_toy_explain",
  state: { toymark: "" },
  draw,
  strings: {
    en: { lab_toy: "Strongest keys", lab_toy_explain: "Each query's strongest key.",
          toy_said: "Strongest: {pairs}", toy_mark: "Mark", toy_marked: "Marked" },
    zh: { lab_toy: "最强的键", lab_toy_explain: "每个查询最强的键。",
          toy_said: "最强：{pairs}", toy_mark: "标记", toy_marked: "已标记" },
  },
};
"""
