// The rows a picture is drawn from: each head's row of the chosen query over the keys
// (and their mean), from a short input's layer block, or asked for a query at a time for a
// long input, whose whole matrices are not kept.

import { Block } from "../api.js";

// One query's row of one layer's heads (POST /api/v1/attention, rows [q, q + 1]): what a
// long input's picture is drawn from, a row at a time (no whole matrix of it is kept).
export async function rowBlock(ctx, q) {
  const { state } = ctx;
  const asked = { model: state.model, ...ctx.inputBody, ...ctx.promptOptions };
  const body = { ...asked, types: [state.type], layers: [state.layer], kinds: ["weights"] };
  const answer = await ctx.api.attention({ ...body, encoding: "f4", rows: [q, q + 1] });
  return new Block(answer.blocks[0]);
}

// Each head's row of a query over the keys, and their mean: a short input's from its
// layer's block (every query's row at once), a long input's asked for a row at a time as
// queries are chosen or pointed at, and kept (`held`, `ask`).
export class Rows {
  constructor(ctx, block, q, long) {
    this.ctx = ctx;
    this.long = long;
    this.count = block.count;
    this.blocks = new Map(long ? [[q, block]] : []);
    this.whole = long ? null : block;
    this.means = new Map();
  }

  held(q) {
    return !this.long || this.blocks.has(q);
  }

  async ask(q) {
    if (!this.blocks.has(q)) this.blocks.set(q, await rowBlock(this.ctx, q));
  }

  head(h, q) {
    if (this.long) return this.blocks.get(q).flat(h);
    const { width } = this.whole;
    return this.whole.flat(h).subarray(q * width, (q + 1) * width);
  }

  mean(q) {
    if (!this.means.has(q)) {
      const sum = new Float32Array(this.head(0, q).length);
      for (let h = 0; h < this.count; h++) {
        this.head(h, q).forEach((v, j) => {
          sum[j] += v / this.count;
        });
      }
      this.means.set(q, sum);
    }
    return this.means.get(q);
  }
}

// the query's row over the keys: one head's, the layer's mean, or attention rollout's or
// flow's through every layer (`through(q)`: the lab's answer's row)
export function rowOf(rows, state, q, through) {
  if (through) return through(q);
  if (state.avg) return rows.mean(q);
  return rows.head(Math.min(state.head, rows.count - 1), q);
}
