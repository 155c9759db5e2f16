"""Qwen2 (``Qwen2ForCausalLM``): Llama with biases on the q, k and v projections (none on the
output projection).

Refused: ``use_sliding_window`` / ``layer_types`` other than full attention everywhere (Qwen2's
released models do not use them), and what Llama refuses.
"""
from __future__ import annotations

from .core import Converter, Source, register
from .llama import decoder_config, read_decoder


def read(src: Source, attention: str):
    src.expect("use_sliding_window", lambda v: not v, "zoo converts Qwen2 with full attention in every layer",
               "set use_sliding_window to false (the released Qwen2 models do)")
    src.expect("layer_types", lambda v: all(t == "full_attention" for t in v),
               "zoo converts Qwen2 with full attention in every layer", "use full_attention layers")
    return read_decoder(src, attention, "qwen2", qkv_bias=True, out_bias=False)


def write(spec) -> dict:
    return decoder_config(spec)


register(Converter("qwen2", read, write, "Qwen2Config", "Qwen2ForCausalLM",
                refuses=("use_sliding_window", "layer_types", "hidden_act", "rope_parameters")))
