// Every label, help text and error message, in both languages.
const STRINGS = {
  en: {
    tagline: "Every attention head of a Transformer, live.",
    api_docs: "API docs",
    lab_rows_columns:
      "In the heatmaps: rows are the queries, columns the keys; a decoder's cross-attention rows are named by the token each step predicts, its self-attention rows by the token fed in (a cell's hover names both); tables list heads by layer.",
    pe_rows_columns:
      "Table: rows are positions, columns dimensions. Similarity: positions against positions.",
    lab_rollout_assumes:
      "Each layer's heads are averaged and mixed with the identity (residual {residual}) for the residual connection, rows renormalised, and the layers multiplied (Abnar & Zuidema 2020): information is assumed to move linearly along attention weights and the residual stream only, ignoring values, the output projection, the feed-forward layers and LayerNorm. A heuristic of where information comes from, not an attribution.",
    metric_entropy: "entropy",
    metric_max_weight: "max weight",
    metric_distance: "distance",
    metric_previous: "previous token",
    metric_first: "first token",
    metric_special: "special tokens",
    metric_alignment: "alignment",
    metric_entropy_explain: "mean softmax entropy of a query row, in bits (low: focused)",
    metric_max_weight_explain: "mean of each row's largest weight",
    metric_distance_explain: "self-attention: mean |query - key| in tokens, weighted by attention",
    metric_previous_explain: "self-attention: mean weight on the token just before the query",
    metric_first_explain: "mean weight on the first key",
    metric_special_explain: "mean weight on special tokens ([CLS], [SEP], <bos>)",
    metric_alignment_explain:
      "cross-attention: share of rows whose strongest key is within one token of the diagonal stretched over both lengths",
    lab_type: "type",
    scroll_hint: "The table is wider than the screen: scroll it sideways.",
    words_weights_only:
      "The word view and hidden special tokens apply to weights: these are the tokens' own.",
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
    view_step: "Generation step",
    probability: "probability",
    step_title: "Step {i}: fed {fed}, predicts {predicts}",
    step_bars: "What step {i} predicts: the 10 likeliest tokens (the chosen one in colour)",
    step_rows:
      "Rows: every query head of the layer (heads sharing a key/value head are {group} in a row: KV n). Columns: the tokens this step sees, itself the last.",
    step_explain:
      "Click a generated token above to see its step; the layer picker shows another layer.",
    step_no_distribution:
      "This step generated no token of the continuation: Generate to see the distributions.",
    placeholder: "Type a sentence, Chinese or English, and press Enter",
    source: "Source",
    output: "Output",
    embedding: "sentence embedding",
    compare: "Compare with",
    compare_placeholder: "A second sentence, to compare",
    similarity: "cosine similarity to the second sentence",
    truncated: "The text was longer than the model reads and was cut.",
    view_head: "Head view",
    view_model: "Model view",
    view_masks: "Masks",
    view_positional: "Positional encoding",
    view_lab: "Lab",
    type: "Attention",
    layer: "Layer",
    head: "Head",
    kind: "Show",
    kind_weights: "weights",
    kind_scores: "raw scores",
    kind_mask: "mask",
    overlay: "mask overlay",
    average: "average of heads",
    words: "word view",
    hide: "hide {specials}",
    export: "Download capture (.npz)",
    "encoder.self": "encoder self-attention",
    "decoder.self": "decoder self-attention",
    "decoder.cross": "cross-attention",
    running: "Running the model…",
    reading_progress: "Reading {tokens} tokens: layer {done} of {layers}, about {left} s left…",
    reading_layers: "Reading {tokens} tokens: layer {done} of {layers}…",
    cancel_run: "Cancel",
    run_cancelled: "Cancelled. Run it again to read this text.",
    long_unsupported:
      "This view reads whole heads: at {n} tokens (over 512) only the head, model, positional and corpus views read this input (and the lines and neuron views a zoomed window); shorten it to use this one.",
    loading: "Loading…",
    ready: "Ready.",
    empty: "Type a sentence first.",
    query: "query",
    key: "key",
    weight: "weight",
    score: "score",
    hint: "Arrow keys: ←/→ head, ↑/↓ layer.",
    hint_model:
      "Rows: layers; columns: heads. Arrow keys move between thumbnails (Tab into them first); Enter or a click opens one.",
    step_row: "step {i}: fed {fed}, predicts {predicts}",
    rows_predicted:
      "Rows: the token each decoder step predicts (that step was fed the token before it). Columns: the source tokens.",
    rows_fed:
      "Rows and columns: the tokens fed to the decoder, so the diagonal is a token itself; each row's step predicts the next token (hover a cell).",
    rows_encoder: "Rows: each token as a query. Columns: the tokens it attends to.",
    role_alignment: "an alignment head: each output step looks at the source token it reads",
    "role_previous-token": "a previous-token head: each token looks at the one just before it",
    "role_first-token": "a first-token head: most weight rests on the first token",
    role_positional:
      "a positional head: each token looks at the token a fixed distance away (or at itself)",
    role_broad: "a broad head: its weight spreads over many tokens",
    role_none: "the most focused head",
    start_model_card: "Opened on the head the model card names, {role}.",
    start_metrics: "Opened on this model's strongest head of its kind, {role}.",
    start_trained_model:
      "Opened on the head the trained model opens on (there, {role}). Compare what it does before training.",
    start_focused:
      "Opened on this model's most focused head (lowest entropy on its first example).",
    start_first_head:
      "Opened on its first head: this model of yours had not been read when the page loaded, so no head was chosen for it.",
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
    mask_padding:
      "Padding mask: keys that are padding (<pad>) are hidden from every query, so they get weight 0.",
    mask_causal:
      "Causal mask: position t may only attend to positions ≤ t, so the decoder cannot see the future.",
    mask_combined:
      "Combined: the decoder's self-attention applies both, padding and causal, with a logical AND.",
    mask_causal_title: "causal mask (tril)",
    mask_hidden: "hidden",
    mask_visible: "may attend",
    mask_no_padding:
      "This one sentence has no padding, so every key is visible: the lab's Masks experiment pads it in a batch of two.",
    mask_cross:
      "Cross-attention mask: every output position may look at every source token that is not padding.",
    pe_table: "The vector added to each position (positions × dims)",
    pe_similarity: "Cosine similarity of positions: nearby positions look alike",
    pe_table_relative:
      "Each head's bias on the score, by distance from the first key (distances × heads)",
    pe_similarity_relative: "Cosine similarity of distances, by their biases across heads",
    pe_rows_columns_relative:
      "Table: rows are distances from the first key, columns heads. Similarity: distances against distances.",
    pe_explain_relative: "Nothing is added to the tokens:",
    pe_curves: "A few dimensions across positions: sines and cosines of different frequencies",
    pe_curves_learned: "A few dimensions across positions: learned values, no formula behind them",
    pe_curves_rotary:
      "A few pairs across positions: each rotates at its own rate (angles wrapped to ±π)",
    pe_table_rotary:
      "The angle RoPE rotates each pair of a head's dims by, per position (radians, wrapped to ±π)",
    pe_similarity_rotary:
      "How alike RoPE makes two positions: the mean cosine of their angle differences (it depends on their distance only)",
    pe_rows_columns_rotary:
      "Table: rows are positions, columns the pairs of a head's dims (i and i + d_head/2). Similarity: positions against positions.",
    pe_explain_rotary:
      "Self-attention alone does not see order; RoPE adds nothing to the embeddings but rotates each query and key by its position, so q · k depends on how far apart two tokens are.",
    pe_curves_none: "This model adds no positional encoding",
    pe_curves_relative:
      "No vector is added: each head's learned bias on the score, by distance from the first key",
    dim: "dim",
    pair: "pair",
    kv_group: "KV {g}: H{first}–H{last}",
    kv_group_title: "Query heads {first}–{last} share key/value head {g}",
    position: "position",
    pe_explain:
      "Self-attention alone does not see order (猫追狗 and 狗追猫 would look the same); the positional encoding adds each position's vector to the token embeddings.",
    // the lab (views/lab/)
    lab_scaling: "Why divide by √d_k",
    lab_scaling_explain:
      "The scores q·kᵀ grow with the head's width d_k; without dividing by √d_k the softmax saturates: one key takes almost all the weight and the gradients vanish. The same input runs with and without the scaling; lower entropy and higher peaks show the saturation.",
    lab_positions: "Order needs positions",
    lab_positions_explain:
      "Self-attention treats its input as a set. With the positional encoding switched off, the attention of a permuted input (猫追狗 → 狗追猫) is exactly the permuted attention of the original; with it on, it is not.",
    lab_masks: "Masks at work",
    lab_masks_explain:
      "The causal mask hides later tokens from the decoder: switched off, the decoder would read the future. The padding mask hides <pad> keys: in a padded batch of two sentences, the shorter one's weights on padding are 0 and equal its weights when run alone.",
    lab_kv_cache: "The KV cache",
    lab_kv_cache_explain:
      "Decoding one token at a time, the cache keeps every layer's keys and values, so each step computes only the new query's row over the cached keys. The logits match a full recomputation.",
    lab_metrics: "Head metrics",
    lab_metrics_explain:
      "A number per head: entropy (how spread out), distance (how far it looks), previous-token weight, weight on the first and on special tokens, and for cross-attention how often its strongest key lies on the diagonal (alignment). Click a column to sort.",
    lab_rollout: "Attention rollout",
    lab_rollout_explain:
      "How much each input token flows into each position through all self-attention layers (Abnar & Zuidema 2020): heads averaged, the residual connection added as the identity, layers multiplied.",
    lab_ablation: "Head ablation",
    lab_ablation_explain:
      "Switch heads off (their output set to zero) and see what changes: the transcription and the probability of each of its tokens, or for an embedding model the cosine between the embeddings.",
    lab_compare: "Compare",
    lab_compare_explain:
      "The same head for two inputs, or two models, side by side, and their difference on the tokens found in both.",
    lab_experiment: "Experiment",
    lab_scaled: "scaled: q·kᵀ/√d_k",
    lab_unscaled: "unscaled: q·kᵀ",
    lab_mean_entropy: "mean entropy",
    lab_bits: "bits",
    lab_max_weight: "mean max weight",
    lab_original: "input",
    lab_permuted: "permuted input",
    lab_with_pe: "with positional encoding",
    lab_without_pe: "without positional encoding",
    lab_max_diff: "max |W(permuted) − P·W·Pᵀ|",
    lab_with_mask: "causal mask on",
    lab_without_mask: "causal mask off",
    lab_future: "mean weight on later tokens",
    lab_padding_mask: "padding mask of the batch",
    lab_batch_weights: "the shorter sentence in the batch",
    lab_pad_weight: "weight on padding",
    lab_alone_diff: "max difference from running it alone",
    lab_no_decoder: "This model has no decoder: no causal mask.",
    lab_step: "Step",
    lab_fed: "fed",
    lab_predicted: "predicts",
    lab_kv_cache_bytes: "cache per layer",
    lab_induction: "Induction heads",
    lab_induction_explain:
      "A sequence of random tokens, repeated. The first copy cannot be predicted; in the second, a model can find where the current token occurred before and copy the token that came after it. An induction head attends from a token of the second copy to that next token: in its pattern, the diagonal of the lower-left block (second copy over first) moved one column right. Its score is the mean of that weight. Switching the top induction heads off should make the second copy as hard as the first: the loss is measured, against as many heads chosen at random.",
    lab_ind_length: "tokens per copy",
    lab_ind_seed: "seed",
    lab_ind_heads: "heads switched off",
    lab_nats: "nats",
    lab_ind_losses:
      "next-token loss: first copy {first}, second copy {second} (a uniform guess: {chance})",
    lab_ind_ablated:
      "second copy with the top {k} induction heads off ({heads}): {loss}; with {k} random heads off ({control}): {control_loss}",
    lab_ind_holds:
      "Switching the induction heads off raises the second copy's loss by {raised}; the random heads by {control} (under half that): the copying is theirs.",
    lab_ind_fails:
      "Here switching the top induction heads off raises the second copy's loss by {raised}, the random heads by {control}: not by over 1 nat and over twice the random heads' raise, so this sequence does not show the copying to be theirs.",
    lab_ind_scores: "induction score per head (layer × head)",
    lab_ind_score: "induction",
    lab_ind_previous: "previous token",
    lab_ind_pattern: "attention on the repeated sequence (1, 2: which copy)",
    lab_ind_pattern_of: "Head",
    lab_cached_diff: "max |cached − uncached logits|",
    lab_prompt_pass: "the prompt's {n} tokens read into the cache in one pass; its last, {token},",
    lab_kv_shared:
      "grouped-query attention: the cache holds {kv} key/value heads per layer for its {q} query heads: {ratio}× smaller than one per query head",
    lab_metric: "Metric",
    lab_other_text: "Second text",
    lab_other_model: "Second model",
    lab_same_model: "(same model)",
    lab_difference: "difference (first − second)",
    lab_output: "output",
    lab_ablated: "with the heads off",
    lab_probability: "probability",
    lab_cosine: "embedding cosine with/without",
    lab_apply: "Apply",
    lab_none_selected: "No head switched off: nothing changes.",
    lab_first: "first",
    lab_second: "second",
    lab_piece: "decoded (input → output)",
    lab_output_token: "output token",
    lab_most_future:
      "Without the mask, layer {layer} head {head} looks ahead most ({weight} of its weight on later tokens): show it",
    lab_not_ended: "stopped at the length limit, before an end token",
    lab_second_sentence: "Second sentence (default: the first half)",
  },
  zh: {
    api_docs: "API 文档",
    lab_rows_columns:
      "热力图中：行是查询，列是键；解码器交叉注意力的行以该步预测的词元命名，自注意力的行以输入的词元命名（悬停单元格可见两者）；表格按层列出各头。",
    pe_rows_columns: "表：行是位置，列是维度。相似度：位置对位置。",
    lab_rollout_assumes:
      "每层各头取平均，再按残差连接与单位矩阵混合（残差 {residual}），各行重新归一化，然后逐层相乘（Abnar 与 Zuidema，2020）：假定信息只沿注意力权重和残差流线性传递，忽略值向量、输出投影、前馈层和 LayerNorm。这是一种估计信息来源的启发式方法，不是归因。",
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
    words_weights_only: "词视图和隐藏特殊词元只作用于权重：这里显示的是词元本身的数值。",
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
    view_step: "生成步骤",
    probability: "概率",
    step_title: "第 {i} 步：输入 {fed}，预测 {predicts}",
    step_bars: "第 {i} 步预测的下一个词元：概率最高的 10 个（选中的那个着色）",
    step_rows:
      "行：该层每个查询头（共享同一个键/值头的 {group} 个头相邻：KV n）。列：这一步看到的词元，最后一个是它自己。",
    step_explain: "点击上方生成的词元查看它的那一步。层选择器：换一层。",
    step_no_distribution: "这一步没有生成续写的词元：先点“生成”再看分布。",
    placeholder: "输入一句中文或英文，按回车",
    source: "输入",
    output: "输出",
    embedding: "句向量",
    compare: "比较",
    compare_placeholder: "第二句话，用于比较",
    similarity: "与第二句的余弦相似度",
    truncated: "文本超过模型可读长度，已截断。",
    view_head: "单头视图",
    view_model: "全模型视图",
    view_masks: "掩码",
    view_positional: "位置编码",
    view_lab: "实验室",
    type: "注意力",
    layer: "层",
    head: "头",
    kind: "显示",
    kind_weights: "权重",
    kind_scores: "原始分数",
    kind_mask: "掩码",
    overlay: "叠加掩码",
    average: "各头平均",
    words: "按词合并",
    hide: "隐藏 {specials}",
    export: "下载捕获数据 (.npz)",
    "encoder.self": "编码器自注意力",
    "decoder.self": "解码器自注意力",
    "decoder.cross": "交叉注意力",
    running: "模型运行中…",
    reading_progress: "正在读取 {tokens} 个词元：第 {done} / {layers} 层，约剩 {left} 秒…",
    reading_layers: "正在读取 {tokens} 个词元：第 {done} / {layers} 层…",
    cancel_run: "取消",
    run_cancelled: "已取消。再次运行即可读取此文本。",
    long_unsupported:
      "此视图读取整个注意力头：{n} 个词元（超过 512）时只有单头、全模型、位置编码和语料库视图能读（连线视图和神经元视图读放大的窗口）；缩短输入才能用此视图。",
    loading: "加载中…",
    ready: "完成。",
    empty: "请先输入一句话。",
    query: "查询",
    key: "键",
    weight: "权重",
    score: "分数",
    hint: "方向键：←/→ 切换头，↑/↓ 切换层。",
    hint_model: "行：层；列：头。方向键在缩略图之间移动（先用 Tab 进入）；回车或点击打开该头。",
    step_row: "第 {i} 步：输入 {fed}，预测 {predicts}",
    rows_predicted: "行：解码器每一步预测的词元（这一步输入的是它前面的词元）。列：源词元。",
    rows_fed:
      "行和列：输入解码器的词元，对角线即词元自身；每一行这一步预测的是下一个词元（悬停查看）。",
    rows_encoder: "行：作为查询的每个词元。列：它所关注的词元。",
    role_alignment: "对齐头：每个输出步关注它所读的源词元",
    "role_previous-token": "前一词元头：每个词元关注它前面紧挨的词元",
    "role_first-token": "首词元头：大部分权重落在第一个词元上",
    role_positional: "位置头：每个词元关注与自身固定距离的词元（或自身）",
    role_broad: "宽泛头：权重分散在许多词元上",
    role_none: "最集中的头",
    start_model_card: "打开的是模型卡所指的头，{role}。",
    start_metrics: "打开的是该模型中同类最强的头，{role}。",
    start_trained_model:
      "打开的是训练后模型所打开的同一个头（在那里，{role}）。对比它训练前的样子。",
    start_focused: "打开的是该模型最集中的头（在它第一个示例上熵最低）。",
    start_first_head: "打开的是它的第一个头：页面加载时你的这个模型尚未读入，所以没有为它挑选头。",
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
    mask_padding: "填充掩码：填充词元（<pad>）对所有查询不可见，权重为 0。",
    mask_causal: "因果掩码：位置 t 只能关注 ≤ t 的位置，解码器看不到未来。",
    mask_combined: "组合：解码器自注意力同时使用填充掩码和因果掩码（逻辑与）。",
    mask_causal_title: "因果掩码（下三角）",
    mask_hidden: "屏蔽",
    mask_visible: "可关注",
    mask_no_padding:
      "这一句没有填充，所以每个键都可见：实验室的“掩码”实验把它和另一句放在一个批次里填充。",
    mask_cross: "交叉注意力掩码：每个输出位置可以关注所有非填充的输入词元。",
    pe_table: "每个位置加上的向量（位置 × 维度）",
    pe_similarity: "位置之间的余弦相似度：相邻位置更相似",
    pe_table_relative: "每个头按到第一个键的距离给分数加的偏置（距离 × 头）",
    pe_similarity_relative: "距离之间的余弦相似度（按各头的偏置）",
    pe_rows_columns_relative: "表：行是到第一个键的距离，列是头。相似度：距离对距离。",
    pe_explain_relative: "不给词元加任何向量：",
    pe_curves: "几个维度随位置的变化：不同频率的正弦和余弦",
    pe_curves_learned: "几个维度随位置的变化：训练学到的数值，没有公式",
    pe_curves_rotary: "几对维度随位置的变化：每对以自己的速率旋转（角度折回到 ±π）",
    pe_table_rotary: "RoPE 在每个位置把头的每对维度旋转的角度（弧度，折回到 ±π）",
    pe_similarity_rotary: "RoPE 眼中两个位置的相似度：角度差的平均余弦（只取决于两者的距离）",
    pe_rows_columns_rotary:
      "表：行是位置，列是头的维度对（i 与 i + d_head/2）。相似度：位置对位置。",
    pe_explain_rotary:
      "自注意力本身感知不到顺序；RoPE 不往嵌入上加任何东西，而是按位置旋转每个查询和键，于是 q · k 取决于两个词元相距多远。",
    pe_curves_none: "该模型不加位置编码",
    pe_curves_relative: "不加位置向量：每个头按到第一个键的距离给分数加上学到的偏置",
    dim: "维度",
    pair: "维度对",
    kv_group: "KV {g}：H{first}–H{last}",
    kv_group_title: "查询头 {first}–{last} 共享键/值头 {g}",
    position: "位置",
    pe_explain:
      "自注意力本身感知不到顺序（“猫追狗”和“狗追猫”看起来一样）；位置编码把每个位置的向量加到词嵌入上。",
    // the lab (views/lab/)
    lab_scaling: "为什么除以 √d_k",
    lab_scaling_explain:
      "分数 q·kᵀ 随头的维度 d_k 增大；不除以 √d_k，softmax 会饱和：几乎所有权重落在一个键上，梯度消失。同一输入分别在缩放与不缩放下运行，更低的熵和更高的峰值说明了饱和。",
    lab_positions: "顺序需要位置编码",
    lab_positions_explain:
      "自注意力把输入当作集合。关闭位置编码后，打乱顺序的输入（猫追狗 → 狗追猫）的注意力恰好是原注意力按同样方式打乱；打开位置编码则不然。",
    lab_masks: "掩码的作用",
    lab_masks_explain:
      "因果掩码对解码器隐藏后面的词元：关掉它，解码器就能看到未来。填充掩码隐藏 <pad>：两句话组成的填充批次中，较短那句对填充的权重为 0，且与单独运行时相同。",
    lab_kv_cache: "KV 缓存",
    lab_kv_cache_explain:
      "逐个词元解码时，缓存保存每层的键和值，每一步只计算新查询对缓存键的那一行。其 logits 与完整重算一致。",
    lab_metrics: "注意力头指标",
    lab_metrics_explain:
      "每个头的数值：熵（分散程度）、距离（看多远）、前一个词元的权重、第一个词元和特殊词元的权重，以及交叉注意力最强键落在对角线上的比例（对齐）。点击列名排序。",
    lab_rollout: "注意力展开（rollout）",
    lab_rollout_explain:
      "经过所有自注意力层，每个输入词元流向每个位置的程度（Abnar & Zuidema 2020）：各头平均，残差连接作为单位矩阵加入，各层相乘。",
    lab_ablation: "注意力头消融",
    lab_ablation_explain:
      "关闭一些头（输出置零），看看有何变化：转写结果及其每个词元的概率；对句向量模型则是前后句向量的余弦。",
    lab_compare: "对比",
    lab_compare_explain:
      "同一个头在两个输入（或两个模型）上的注意力并排显示，以及两者共有词元上的差。",
    lab_experiment: "实验",
    lab_scaled: "缩放：q·kᵀ/√d_k",
    lab_unscaled: "不缩放：q·kᵀ",
    lab_mean_entropy: "平均熵",
    lab_bits: "比特",
    lab_max_weight: "平均最大权重",
    lab_original: "原输入",
    lab_permuted: "打乱后的输入",
    lab_with_pe: "有位置编码",
    lab_without_pe: "无位置编码",
    lab_max_diff: "最大 |W(打乱) − P·W·Pᵀ|",
    lab_with_mask: "开启因果掩码",
    lab_without_mask: "关闭因果掩码",
    lab_future: "对后面词元的平均权重",
    lab_padding_mask: "批次的填充掩码",
    lab_batch_weights: "批次中较短的句子",
    lab_pad_weight: "填充上的权重",
    lab_alone_diff: "与单独运行的最大差",
    lab_no_decoder: "该模型没有解码器，没有因果掩码。",
    lab_step: "步",
    lab_fed: "输入",
    lab_predicted: "预测",
    lab_kv_cache_bytes: "每层缓存",
    lab_induction: "归纳头",
    lab_induction_explain:
      "一段随机词元，重复两遍。第一遍无法预测；第二遍里，模型可以找到当前词元上次出现的位置，照抄它后面的那个词元。归纳头从第二遍的词元注意到那个“下一个”词元：在注意力图上，是左下块（第二遍对第一遍）的对角线右移一列。其得分就是这部分权重的均值。关闭得分最高的归纳头，第二遍应该变得和第一遍一样难：这里测量损失，并与随机关闭同样多个头对照。",
    lab_ind_length: "每遍词元数",
    lab_ind_seed: "随机种子",
    lab_ind_heads: "关闭的头数",
    lab_nats: "奈特",
    lab_ind_losses: "下一词元损失：第一遍 {first}，第二遍 {second}（均匀猜测：{chance}）",
    lab_ind_ablated:
      "关闭得分最高的 {k} 个归纳头（{heads}）后第二遍：{loss}；随机关闭 {k} 个头（{control}）：{control_loss}",
    lab_ind_holds:
      "关闭归纳头使第二遍的损失升高 {raised}；关闭随机的头升高 {control}（不到其一半）：照抄靠的是它们。",
    lab_ind_fails:
      "这里关闭归纳头使第二遍的损失升高 {raised}，关闭随机的头升高 {control}：没有超过 1 奈特且超过随机头的两倍，这段序列没能说明照抄靠的是它们。",
    lab_ind_scores: "每个头的归纳得分（层 × 头）",
    lab_ind_score: "归纳",
    lab_ind_previous: "前一个词元",
    lab_ind_pattern: "在重复序列上的注意力（1、2：第几遍）",
    lab_ind_pattern_of: "头",
    lab_cached_diff: "最大 |缓存 − 非缓存 logits|",
    lab_prompt_pass: "提示的 {n} 个词元一次读入缓存；最后一个 {token}",
    lab_kv_shared:
      "分组查询注意力：每层缓存 {kv} 个键/值头，供 {q} 个查询头共用：是每个查询头各存一份的 1/{ratio}",
    lab_metric: "指标",
    lab_other_text: "第二段文本",
    lab_other_model: "第二个模型",
    lab_same_model: "（同一模型）",
    lab_difference: "差（第一 − 第二）",
    lab_output: "输出",
    lab_ablated: "关闭这些头后",
    lab_probability: "概率",
    lab_cosine: "前后句向量余弦",
    lab_apply: "应用",
    lab_none_selected: "没有关闭任何头：没有变化。",
    lab_first: "第一",
    lab_second: "第二",
    lab_piece: "解码（输入 → 输出）",
    lab_output_token: "输出词元",
    lab_most_future:
      "去掉掩码后，第 {layer} 层第 {head} 个头最爱看后面的词元（{weight} 的权重在后面）：查看它",
    lab_not_ended: "到达长度上限，仍未输出结束词元",
    lab_second_sentence: "第二句（默认：前一半）",
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
