"""Qwen3 (``Qwen3ForCausalLM``): Llama with an RMSNorm over each head's features on the queries and
keys before the rotation (``qk_norm: true``), an explicit ``head_dim`` and optional q/k/v/o biases
(``attention_bias``).

Sliding-window layers (``use_sliding_window``, ``layer_types``) become the spec's ``mask_pattern``
(zoo/convert/qwen_window.py).  Refused: ``layer_types`` with sliding layers while
``use_sliding_window`` is false, and what Llama refuses.
"""
from __future__ import annotations

from .core import Converter, Source, register
from .llama import decoder_config, read_decoder
from .qwen_window import layer_masks, window_config


def read(src: Source, attention: str):
    windows = layer_masks(src, "Qwen3")  # sliding-window layers, if any (zoo/convert/qwen_window.py)
    return read_decoder(src, attention, "qwen3", qk_norm=True, **windows)


def write(spec) -> dict:
    return dict(decoder_config(spec), attention_bias=spec.stack("decoder").qkv_bias, **window_config(spec))


register(Converter("qwen3", read, write, "Qwen3Config", "Qwen3ForCausalLM",
                refuses=("use_sliding_window", "layer_types", "hidden_act", "rope_parameters")))
