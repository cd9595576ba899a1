// The page's own strings, in both languages, and the one lookup; views, experiments and
// masked.js bring theirs beside the code that uses them (`addStrings`).
const STRINGS = {
  en: {
    tagline: "Every attention head of a Transformer, live.",
    api_docs: "API docs",
    more_tokens: "show all {n} tokens",
    unknown_tokens:
      "{n} of the {total} tokens are unknown to this model ({unk}): it reads {languages}, and what it makes of them is a guess.",
    lang_en: "English",
    lang_zh: "Chinese",
    model: "Model",
    text: "Text",
    run: "Run",
    generate: "Generate",
    chat: "chat turn",
    new_tokens: "new tokens",
    temperature: "temperature",
    generating: "Generating…",
    generating_n: "Generating… token {n} of at most {max}",
    open_step: "Show the step that generated this token",
    placeholder: "Type a sentence, Chinese or English, and press Enter",
    source: "Source",
    output: "Output",
    embedding: "sentence embedding",
    compare: "Compare with",
    compare_placeholder: "A second sentence, to compare",
    similarity: "cosine similarity to the second sentence",
    truncated:
      "The text was longer than the model reads: its first {read} of {length} tokens were read, the rest cut.",
    read_in_pieces:
      "Decoded in {n} pieces: the model was trained on sentences of at most 40 characters, so it reads a longer text piece by piece, each from its own <bos>. Every view shows those pieces' passes: a position sees only its own piece.",
    piece_mark: "Piece {n} starts here, read on its own",
    stopped_at: "at {steps} tokens",
    list_comma: ", ",
    stopped_piece: "piece {n} at {steps} tokens",
    output_stopped:
      "The output stopped at its length limit before the model ended it (no <eos>): {where}. What it would say next is not shown; the whole input was read.",
    type: "Attention",
    layer: "Layer",
    head: "Head",
    kind: "Show",
    kind_weights: "weights",
    kind_scores: "raw scores",
    kind_mask: "mask",
    kind_norms: "value-weighted",
    overlay: "mask overlay",
    average: "average of heads",
    words: "word view",
    hide: "hide {specials}",
    export: "Download capture (.npz)",
    save_view: "Save view (.html)",
    cite_view: "Cite this view",
    axis_keys: "key (attended to)",
    axis_queries: "query (attending)",
    "encoder.self": "encoder self-attention",
    "decoder.self": "decoder self-attention",
    "decoder.cross": "cross-attention",
    running: "Running the model…",
    reading_progress: "Reading {tokens} tokens: layer {done} of {layers}, about {left} s left…",
    reading_layers: "Reading {tokens} tokens: layer {done} of {layers}…",
    cancel_run: "Cancel",
    download_svg: "Download plot as SVG (with its axes' titles)",
    download_pdf: "Download plot as PDF (with its axes' titles)",
    stop_generation: "Stop",
    stopping: "Stopping after this token…",
    run_cancelled: "Cancelled. Run it again to read this text.",
    long_unsupported:
      "This view reads whole heads: at {n} tokens (over 512) only the head, model, positional and corpus views read this input (and the lines and neuron views a zoomed window); shorten it to use this one.",
    loading: "Loading…",
    ready: "Ready.",
    empty: "Type a sentence first.",
    no_picture: "Choose a picture first: a file of yours, drop or paste one, or take a sample.",
    choose_picture: "Choose a picture…",
    picture_hint: "or drop one on the page, or paste it",
    picture_sending: "Sending the picture…",
    picture_pasted: "pasted picture",
    picture_type: "A PNG, JPEG or WebP picture only (this file is {type}).",
    picture_none_dropped: "Nothing dropped was a picture.",
    picture_gone:
      "This link's picture is not on this server (it keeps the latest pictures sent to it): choose it again.",
    sample_street: "Sample: a street",
    sample_shapes: "Sample: shapes",
    features_said:
      "{n} positions: {rows} × {columns} patches and {others}; the output is their last hidden states (no task head).",
    features_said_kept:
      "{n} positions: {kept} of its {rows} × {columns} patches (it drops the others, as a masked autoencoder does) and {others}; the output is their last hidden states (no task head).",
    features_none: "nothing else",
    query: "query",
    key: "key",
    weight: "weight",
    score: "score",
    role_alignment: "an alignment head: each output step looks at the source token it reads",
    "role_previous-token": "a previous-token head: each token looks at the one just before it",
    "role_first-token": "a first-token head: most weight rests on the first token",
    role_positional:
      "a positional head: each token looks at the token a fixed distance away (or at itself)",
    role_broad: "a broad head: its weight spreads over many tokens",
    role_short_alignment: "align",
    "role_short_previous-token": "prev",
    "role_short_first-token": "first",
    role_short_positional: "pos",
    role_short_broad: "broad",
    entropy: "Entropy of each head (bits): low = focused, high = spread out",
    error_422: "The input cannot be used: ",
    error_404: "Unknown model: ",
    error_413: "The text is too long to send.",
    error_429: "This browser has asked the server for too much at once; try again in a moment.",
    error_503: "The server is busy; try again in a moment.",
    error_network: "The server cannot be reached.",
    model_refused: "not served",
    model_refused_status: "The model {id} is not served: {reason}",
    error_other: "Something went wrong: ",
    dim: "dim",
    position: "position",
    // the lab (views/lab/)
    lab_ind_seed: "seed",
    lab_ind_heads: "heads switched off",
    lab_apply: "Apply",
  },
  zh: {
    api_docs: "API 文档",
    more_tokens: "显示全部 {n} 个词元",
    unknown_tokens:
      "{total} 个词元中有 {n} 个是该模型不认识的（{unk}）：它读的是{languages}，对它们的输出只是猜测。",
    lang_en: "英文",
    lang_zh: "中文",
    tagline: "实时查看 Transformer 每一个注意力头。",
    model: "模型",
    text: "文本",
    run: "运行",
    generate: "生成",
    chat: "对话轮",
    new_tokens: "新词元数",
    temperature: "温度",
    generating: "生成中…",
    generating_n: "生成中… 第 {n} 个词元，最多 {max} 个",
    open_step: "查看生成这个词元的那一步",
    placeholder: "输入一句中文或英文，按回车",
    source: "输入",
    output: "输出",
    embedding: "句向量",
    compare: "比较",
    compare_placeholder: "第二句话，用于比较",
    similarity: "与第二句的余弦相似度",
    truncated: "文本超过模型可读长度：只读了前 {read} 个词元（共 {length} 个），其余已截断。",
    read_in_pieces:
      "分 {n} 段解码：模型训练时的句子最多 40 个字符，所以较长的文本逐段读，每段从自己的 <bos> 开始。各视图显示的就是这几段的计算：每个位置只看得到本段。",
    piece_mark: "第 {n} 段从这里开始，单独读",
    stopped_at: "停在第 {steps} 个词元",
    list_comma: "，",
    stopped_piece: "第 {n} 段停在第 {steps} 个词元",
    output_stopped:
      "输出在长度上限处停止，模型尚未结束（没有 <eos>）：{where}。之后的内容未显示；输入已全部读入。",
    type: "注意力",
    layer: "层",
    head: "头",
    kind: "显示",
    kind_weights: "权重",
    kind_scores: "原始分数",
    kind_mask: "掩码",
    kind_norms: "按值加权",
    overlay: "叠加掩码",
    average: "各头平均",
    words: "按词合并",
    hide: "隐藏 {specials}",
    export: "下载捕获数据 (.npz)",
    save_view: "保存视图 (.html)",
    cite_view: "引用此视图",
    axis_keys: "键（被关注的）",
    axis_queries: "查询（关注者）",
    "encoder.self": "编码器自注意力",
    "decoder.self": "解码器自注意力",
    "decoder.cross": "交叉注意力",
    running: "模型运行中…",
    reading_progress: "正在读取 {tokens} 个词元：第 {done} / {layers} 层，约剩 {left} 秒…",
    reading_layers: "正在读取 {tokens} 个词元：第 {done} / {layers} 层…",
    cancel_run: "取消",
    download_svg: "下载图为 SVG（含坐标轴标题）",
    download_pdf: "下载图为 PDF（含坐标轴标题）",
    stop_generation: "停止",
    stopping: "这个词元之后停止…",
    run_cancelled: "已取消。再次运行即可读取此文本。",
    long_unsupported:
      "此视图读取整个注意力头：{n} 个词元（超过 512）时只有单头、全模型、位置编码和语料库视图能读（连线视图和神经元视图读放大的窗口）；缩短输入才能用此视图。",
    loading: "加载中…",
    ready: "完成。",
    empty: "请先输入一句话。",
    no_picture: "请先选一张图片：你的文件、拖放或粘贴一张，或用示例图片。",
    choose_picture: "选择图片…",
    picture_hint: "或把图片拖到页面上，或粘贴",
    picture_sending: "正在发送图片…",
    picture_pasted: "粘贴的图片",
    picture_type: "只接受 PNG、JPEG 或 WebP 图片（这个文件是 {type}）。",
    picture_none_dropped: "拖放的内容里没有图片。",
    picture_gone: "这个链接的图片不在本服务器上（它只保留最近收到的图片）：请重新选择。",
    sample_street: "示例：街道",
    sample_shapes: "示例：几何图形",
    features_said:
      "{n} 个位置：{rows} × {columns} 个图块，以及 {others}；输出是它们最后一层的隐藏状态（没有任务头）。",
    features_said_kept:
      "{n} 个位置：{rows} × {columns} 个图块中的 {kept} 个（其余被丢弃，掩码自编码器就是这样读图的），以及 {others}；输出是它们最后一层的隐藏状态（没有任务头）。",
    features_none: "没有别的",
    query: "查询",
    key: "键",
    weight: "权重",
    score: "分数",
    role_alignment: "对齐头：每个输出步关注它所读的源词元",
    "role_previous-token": "前一词元头：每个词元关注它前面紧挨的词元",
    "role_first-token": "首词元头：大部分权重落在第一个词元上",
    role_positional: "位置头：每个词元关注与自身固定距离的词元（或自身）",
    role_broad: "宽泛头：权重分散在许多词元上",
    role_short_alignment: "对齐",
    "role_short_previous-token": "前词",
    "role_short_first-token": "首词",
    role_short_positional: "位置",
    role_short_broad: "宽泛",
    entropy: "每个头的熵（比特）：低 = 集中，高 = 分散",
    error_422: "输入无法使用：",
    error_404: "未知模型：",
    error_413: "文本太长，无法发送。",
    error_429: "此浏览器一次请求过多，请稍后再试。",
    error_503: "服务器繁忙，请稍后再试。",
    error_network: "无法连接服务器。",
    model_refused: "无法使用",
    model_refused_status: "模型 {id} 无法使用：{reason}",
    error_other: "出错了：",
    dim: "维度",
    position: "位置",
    // the lab (views/lab/)
    lab_ind_seed: "随机种子",
    lab_ind_heads: "关闭的头数",
    lab_apply: "应用",
  },
};

export const LANGS = Object.keys(STRINGS);

// The one lookup: the key in `lang`, else in English, else the key itself.
export function t(lang, key) {
  return STRINGS[lang]?.[key] ?? STRINGS.en[key] ?? key;
}

// Strings a module brings with it ({en: {key: text}, zh: {...}}), such as a view's tab label;
// a key already defined is an error, not an override.
export function addStrings(table) {
  for (const [lang, strings] of Object.entries(table)) {
    if (!(lang in STRINGS)) throw new Error(`strings for an unknown language: ${lang}`);
    for (const [key, text] of Object.entries(strings)) {
      if (key in STRINGS[lang]) throw new Error(`the string ${key} (${lang}) is defined twice`);
      STRINGS[lang][key] = text;
    }
  }
}

// whether every language has the key (a view's label must be readable in each)
export function hasString(key) {
  return LANGS.every((lang) => key in STRINGS[lang]);
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
