// Induction heads: a random sequence twice; each head's induction and previous-token
// scores, the heads ranked, and the second copy's loss with the top heads switched off
// against as many random ones. Its settings live in the URL (rep=length,seed,heads).
import { heatmap } from "../../plots.js";
import {
  ask,
  el,
  fmt,
  labelled,
  plotBox,
  repSettings,
  settingsBar,
  summary,
  table,
  weights,
} from "./shared.js";

// the route's bounds: tokens per copy, seed, heads switched off
const FIELDS = [
  {
    key: "length",
    most: (n) => Math.min(256, Math.floor(n / 2)),
    id: "lab-ind-length",
    label: "lab_ind_length",
    min: 8,
    max: 256,
    value: 50,
  },
  { key: "seed", id: "lab-ind-seed", label: "lab_ind_seed", min: 0, max: 2 ** 31 - 1, value: 0 },
  { key: "ablate", id: "lab-ind-heads", label: "lab_ind_heads", min: 1, max: 32, value: 5 },
];
const TABLE_ROWS = 10;

const named = (ref) => `L${ref.layer} H${ref.head}`;

async function draw({ ctx, t, out, base }) {
  const { state } = ctx;
  const chosen = repSettings(FIELDS, state.rep, ctx.modelInfo().max_tokens);
  out.append(settingsBar(ctx, FIELDS, chosen, "lab-ind-apply"));
  const r = await ask(ctx, "induction", { model: base.model, text: base.text, ...chosen });
  if (ctx.stale()) return;
  const nats = (x) => `${fmt(x)} ${t("lab_nats")}`;
  summary(
    out,
    t("lab_ind_losses")
      .replace("{first}", nats(r.loss_first))
      .replace("{second}", nats(r.loss_second))
      .replace("{chance}", nats(r.chance_loss)),
    { id: "lab-ind-loss" },
  );
  const off = r.ablated.map(named).join(", ");
  const control = r.control.map(named).join(", ");
  summary(
    out,
    t("lab_ind_ablated")
      .replaceAll("{k}", String(r.ablated.length))
      .replace("{heads}", off)
      .replace("{loss}", nats(r.loss_second_ablated))
      .replace("{control}", control)
      .replace("{control_loss}", nats(r.loss_second_control)),
    { id: "lab-ind-ablated" },
  );
  // the measured claim, said as measured: it holds (the server's criterion: over 1 nat
  // and over twice the random heads' raise) or it does not
  const raised = r.loss_second_ablated - r.loss_second;
  const controlRaised = r.loss_second_control - r.loss_second;
  summary(
    out,
    t(r.copying_is_theirs ? "lab_ind_holds" : "lab_ind_fails")
      .replace("{raised}", nats(raised))
      .replace("{control}", nats(controlRaised)),
    { id: "lab-ind-verdict" },
  );
  // every head's induction score, layer x head
  const layers = Math.max(...r.heads.map((h) => h.layer)) + 1;
  const heads = Math.max(...r.heads.map((h) => h.head)) + 1;
  const z = Array.from({ length: layers }, () => Array(heads).fill(null));
  for (const h of r.heads) z[h.layer][h.head] = h.induction;
  await heatmap(plotBox(out), {
    z,
    rows: z.map((_, l) => `L${l}`),
    columns: Array.from({ length: heads }, (_, h) => `H${h}`),
    title: t("lab_ind_scores"),
    zmin: 0,
    zmax: 1,
    valueLabel: t("lab_ind_score"),
  });
  if (ctx.stale()) return;
  const top = r.heads.slice(0, TABLE_ROWS);
  const ranked = table(
    ["#", t("layer"), t("head"), t("lab_ind_score"), t("lab_ind_previous")],
    top.map((h, i) => [i + 1, h.layer, h.head, h.induction, h.previous]),
  );
  ranked.id = "lab-ind-table";
  out.append(ranked);
  // the top heads' weights on the sequence: the stripe one token right of the diagonal
  // of the copy
  const pick = el("select", { id: "lab-ind-pattern" });
  r.patterns.forEach((_, i) => {
    pick.append(el("option", { value: String(i), textContent: named(r.ablated[i]) }));
  });
  const box = el("div");
  const tokens = r.tokens.map((tok, i) => `${tok} (${i < r.length ? 1 : 2})`);
  const drawPattern = () => {
    box.replaceChildren();
    const i = Number(pick.value);
    return weights(box, {
      z: r.patterns[i],
      rows: tokens,
      columns: tokens,
      title: `${t("lab_ind_pattern")} · ${named(r.ablated[i])}`,
    });
  };
  pick.addEventListener("change", drawPattern);
  out.append(labelled("lab-ind-pattern", t("lab_ind_pattern_of"), pick), box);
  await drawPattern();
}

export const experiment = {
  id: "induction",
  label: "lab_induction",
  explain: "lab_induction_explain",
  draw,
};
