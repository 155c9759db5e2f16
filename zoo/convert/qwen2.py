"""Qwen2 (``Qwen2ForCausalLM``): Llama with biases on the q, k and v projections (none on the
output projection).

Sliding-window layers (``use_sliding_window``, ``layer_types``) become the spec's ``mask_pattern``
(zoo/convert/qwen_window.py).  Refused: ``layer_types`` with sliding layers while
``use_sliding_window`` is false, and what Llama refuses.
"""
from __future__ import annotations

from .core import Converter, Source, register
from .llama import decoder_config, read_decoder
from .qwen_window import layer_masks, window_config


def read(src: Source, attention: str):
    windows = layer_masks(src, "Qwen2")  # sliding-window layers, if any (zoo/convert/qwen_window.py)
    return read_decoder(src, attention, "qwen2", qkv_bias=True, out_bias=False, **windows)


def write(spec) -> dict:
    return dict(decoder_config(spec), **window_config(spec))


register(Converter("qwen2", read, write, "Qwen2Config", "Qwen2ForCausalLM",
                refuses=("use_sliding_window", "layer_types", "hidden_act", "rope_parameters")))
