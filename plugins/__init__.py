"""zoo's built-in components, installed as ``zoo.plugins``.

Each module is a plugin like any third-party one: it implements hooks from ``zoo.hookspecs`` and is
registered through them, in the order below (built-ins first, so a third-party plugin can never
shadow a built-in name).
"""

BUILTINS = (
    "attention_eager",
    "attention_sdpa",
    "attention_naive",
    "masks",
    "pos_none",
    "pos_sinusoidal",
    "pos_learned",
    "norm_layernorm",
    "norm_batchnorm",
    "placements",
    "ffn_mlp",
    "pos_rope",
    "pos_alibi",
    "pos_t5_relative",
    "norm_rmsnorm",
    "placement_sandwich",
    "ffn_glu",
    "pos_learned_offset",
    "norm_rmsnorm_plus1",
    "attention_softcap",
    "pos_sinusoidal_split",
    "tok_char",
    "tok_byte",
    "tok_hf",
    "task_mqar",
    "task_copy",
    "task_reverse",
    "task_modadd",
    "task_position",
    "task_numerals",
    "task_poems",
)
