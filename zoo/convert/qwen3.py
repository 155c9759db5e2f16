"""Qwen3 (``Qwen3ForCausalLM``): Llama with an RMSNorm over each head's features on the queries and
keys before the rotation (``qk_norm: true``), an explicit ``head_dim`` and optional q/k/v/o biases
(``attention_bias``).

Refused: ``use_sliding_window`` / ``layer_types`` other than full attention, and what Llama refuses.
"""
from __future__ import annotations

from .core import Converter, Source, register
from .llama import decoder_config, read_decoder


def read(src: Source, attention: str):
    src.expect("use_sliding_window", lambda v: not v, "zoo converts Qwen3 with full attention in every layer",
               "set use_sliding_window to false (the released Qwen3 models do)")
    src.expect("layer_types", lambda v: all(t == "full_attention" for t in v),
               "zoo converts Qwen3 with full attention in every layer", "use full_attention layers")
    return read_decoder(src, attention, "qwen3", qk_norm=True)


def write(spec) -> dict:
    return dict(decoder_config(spec), attention_bias=spec.stack("decoder").qkv_bias)


register(Converter("qwen3", read, write, "Qwen3Config", "Qwen3ForCausalLM",
                refuses=("use_sliding_window", "layer_types", "hidden_act", "rope_parameters")))
