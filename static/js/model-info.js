// What the page knows of a model is what the server sends in its info (GET /api/v1/models,
// and the page's boot JSON): its attention types with their layers and heads, its limits and
// capabilities. Nothing here derives them from the architecture, the token unit or the output.

// One attention type of the model: {type, layers, query_heads, kv_heads, head_dim, rows, columns}.
export function attentionOf(info, type) {
  const entry = info.attention.find((a) => a.type === type);
  if (!entry) throw new Error(`the model ${info.id} has no ${type} attention`);
  return entry;
}

// whether the model can run a lab experiment (by its id)
export function canRun(info, experiment) {
  return info.capabilities.experiments.includes(experiment);
}

// A model's name in the picker, in the page's language where the server has it, with the
// precision and device it runs in where they are not the shipped models' float32 on the CPU
// ("mine · bfloat16 · cuda:0 · 4bit": names, the same in every language).
export function pickerLabel(info, lang) {
  const placed = [info.dtype, info.device].filter((v, i) => v !== ["float32", "cpu"][i]);
  return [info.titles?.[lang] ?? info.title, ...placed, info.quantized ?? []].flat().join(" · ");
}
