"""What a tiny vision-language model of an architecture needs besides the sizes every one
gets (vlm_checkpoints.py's TEXT and VISION) to keep its own structure: the settings its
config derives from its layers, its latent and sparse attention's sizes, its experts',
its hybrid's linear layers', its rotary parameters per layer type, its other towers."""

from __future__ import annotations

# a config's per-layer settings its own code derives from its number of layers (its MoE
# layers, its sparse attention's indexers, its layers' own sizes): derived again for the
# tiny model's layers, not copied from the default's
DERIVED = ("mlp_layer_types", "indexer_types", "per_layer_config")
# what an architecture's sub-configs need besides TEXT and VISION for a tiny model of its
# own structure: its latent attention's (MLA) and sparse attention's (DSA) sizes, its
# experts', its hybrid's linear layers', its rotary parameters per layer type
MLA = dict(q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, v_head_dim=16,
           n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
           index_n_heads=2, index_topk=4)  # fmt: skip
TEXT_OVERRIDES: dict[str, dict] = {
    # (HY-V4: MLA rotating 16 of its 32 query-key dimensions, DSA whose third layer shares
    # the second's selection, a dense layer then MoE)
    "hy_v4_vl": MLA | dict(num_hidden_layers=3, qk_rope_head_dim=16, index_head_dim=32),
    # (GLM-5: NoPE MLA with DSA over pools of 4 keys every fourth layer, linear attention
    # (KDA) in the others; three dense layers, then MoE)
    "glm5_next": MLA | dict(num_hidden_layers=4, num_key_value_heads=4, qk_rope_head_dim=0,
                            index_head_dim=16, index_kpool=4, linear_head_dim=16,
                            linear_num_heads=4, layer_types=None),
    # (Cohere's interleaving: sliding-window layers with rotary positions, stated per
    # layer type, and full-attention layers with none, NoPE)
    "cohere_compass": {"layer_types": ["sliding_attention", "full_attention"],
                       "sliding_window": 6, "rope_parameters": {
                           "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                           "full_attention": None}},
    # (dots3: a sliding-window MLA layer with heads of its own sizes, then a DSA layer; a
    # quarter of each head rotated)
    "dots3_note": MLA | dict(num_key_value_heads=4, qk_rope_head_dim=8, head_dim=32,
                             index_head_dim=16, shared_experts_intermediate_size=32,
                             sliding_window=6, swa_num_attention_heads=2,
                             swa_num_key_value_heads=2, swa_q_lora_rank=32,
                             swa_kv_lora_rank=32, swa_head_dim=32, swa_qk_nope_head_dim=24,
                             swa_v_head_dim=16),
}  # fmt: skip
VISION_OVERRIDES: dict[str, dict] = {
    "hy_v4_vl": {"max_image_size": 56},  # (its learned positions: a grid of 4 x 4 patches)
    "glm5_next": {"projection_intermediate_size": 64},
    # (dots3: a dense layer, then one of 4 experts; its adapter into the text's width)
    "dots3_note": {"pyramid_num_routed": [-1, 4], "num_local_experts": 4,
                   "moe_intermediate_size": 32, "adapter_in_dim": 32, "adapter_out_dim": 64},
}  # fmt: skip
# (its other towers: dots3's audio encoder, its adapter into the text's width)
SUBCONFIGS: dict[str, dict[str, dict]] = {
    "dots3_note": {"audio_config": dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        downsample_hidden_size=16, adapter_input_size=32, adapter_out_dim=64)},
}  # fmt: skip
