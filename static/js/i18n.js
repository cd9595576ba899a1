// Every label, help text and error message, in both languages.
const STRINGS = {
  en: {
    tagline: "Every attention head of a Transformer, live.",
    model: "Model", text: "Text", run: "Run",
    placeholder: "Type a sentence, Chinese or English, and press Enter",
    source: "Source", output: "Output", embedding: "sentence embedding",
    compare: "Compare with", compare_placeholder: "A second sentence, to compare",
    similarity: "cosine similarity to the second sentence",
    truncated: "The text was longer than the model reads and was cut.",
    view_head: "Head view", view_model: "Model view", view_masks: "Masks",
    view_positional: "Positional encoding", view_lab: "Lab",
    type: "Attention", layer: "Layer", head: "Head", kind: "Show",
    kind_weights: "weights", kind_scores: "raw scores", kind_mask: "mask",
    overlay: "mask overlay", average: "average of heads", words: "word view",
    hide: "hide [CLS]/[SEP]", export: "Download capture (.npz)",
    "encoder.self": "encoder self-attention", "decoder.self": "decoder self-attention",
    "decoder.cross": "cross-attention",
    running: "Running the model…", loading: "Loading…", ready: "Ready.",
    empty: "Type a sentence first.",
    query: "query", key: "key", weight: "weight", score: "score",
    hint: "Arrow keys: ←/→ head, ↑/↓ layer. Click a thumbnail to open it.",
    entropy: "Entropy of each head (bits): low = focused, high = spread out",
    error_422: "The input cannot be used: ", error_404: "Unknown model: ",
    error_413: "The text is too long to send.", error_503: "The server is busy; try again in a moment.",
    error_network: "The server cannot be reached.", error_other: "Something went wrong: ",
    mask_padding: "Padding mask: keys that are padding (<pad>) are hidden from every query, so they get weight 0.",
    mask_causal: "Causal mask: position t may only attend to positions ≤ t, so the decoder cannot see the future.",
    mask_combined: "Combined: the decoder's self-attention applies both, padding and causal, with a logical AND.",
    mask_causal_title: "causal mask (tril)",
    mask_cross: "Cross-attention mask: every output position may look at every source token that is not padding.",
    pe_table: "The vector added to each position (positions × dims)",
    pe_similarity: "Cosine similarity of positions: nearby positions look alike",
    pe_curves: "A few dimensions across positions: sines and cosines of different frequencies",
    pe_explain: "Self-attention alone does not see order (猫追狗 and 狗追猫 would look the same); the positional encoding adds each position's vector to the token embeddings.",
  },
  zh: {
    tagline: "实时查看 Transformer 每一个注意力头。",
    model: "模型", text: "文本", run: "运行",
    placeholder: "输入一句中文或英文，按回车",
    source: "输入", output: "输出", embedding: "句向量",
    compare: "比较", compare_placeholder: "第二句话，用于比较",
    similarity: "与第二句的余弦相似度",
    truncated: "文本超过模型可读长度，已截断。",
    view_head: "单头视图", view_model: "全模型视图", view_masks: "掩码",
    view_positional: "位置编码", view_lab: "实验室",
    type: "注意力", layer: "层", head: "头", kind: "显示",
    kind_weights: "权重", kind_scores: "原始分数", kind_mask: "掩码",
    overlay: "叠加掩码", average: "各头平均", words: "按词合并",
    hide: "隐藏 [CLS]/[SEP]", export: "下载捕获数据 (.npz)",
    "encoder.self": "编码器自注意力", "decoder.self": "解码器自注意力",
    "decoder.cross": "交叉注意力",
    running: "模型运行中…", loading: "加载中…", ready: "完成。",
    empty: "请先输入一句话。",
    query: "查询", key: "键", weight: "权重", score: "分数",
    hint: "方向键：←/→ 切换头，↑/↓ 切换层。点击缩略图打开该头。",
    entropy: "每个头的熵（比特）：低 = 集中，高 = 分散",
    error_422: "输入无法使用：", error_404: "未知模型：",
    error_413: "文本太长，无法发送。", error_503: "服务器繁忙，请稍后再试。",
    error_network: "无法连接服务器。", error_other: "出错了：",
    mask_padding: "填充掩码：填充词元（<pad>）对所有查询不可见，权重为 0。",
    mask_causal: "因果掩码：位置 t 只能关注 ≤ t 的位置，解码器看不到未来。",
    mask_combined: "组合：解码器自注意力同时使用填充掩码和因果掩码（逻辑与）。",
    mask_causal_title: "因果掩码（下三角）",
    mask_cross: "交叉注意力掩码：每个输出位置可以关注所有非填充的输入词元。",
    pe_table: "每个位置加上的向量（位置 × 维度）",
    pe_similarity: "位置之间的余弦相似度：相邻位置更相似",
    pe_curves: "几个维度随位置的变化：不同频率的正弦和余弦",
    pe_explain: "自注意力本身感知不到顺序（“猫追狗”和“狗追猫”看起来一样）；位置编码把每个位置的向量加到词嵌入上。",
  },
};

export const LANGS = Object.keys(STRINGS);

export function t(lang, key) {
  return (STRINGS[lang] && STRINGS[lang][key]) ?? STRINGS.en[key] ?? key;
}

export function applyLanguage(lang, root = document) {
  document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
  for (const el of root.querySelectorAll("[data-i18n]")) el.textContent = t(lang, el.dataset.i18n);
  for (const el of root.querySelectorAll("[data-i18n-placeholder]")) {
    el.placeholder = t(lang, el.dataset.i18nPlaceholder);
  }
  for (const el of root.querySelectorAll("[data-lang]")) {
    el.setAttribute("aria-pressed", String(el.dataset.lang === lang));
  }
}
