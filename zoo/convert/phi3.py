"""Phi-3 (``Phi3ForCausalLM``): Llama with a fused ``qkv_proj`` (already zoo's q|k|v layout) and a
fused ``gate_up_proj`` (``[gate; up]`` row blocks, split into zoo's ``gate`` and ``up``), optional
partial rotary (``partial_rotary_factor``) and sliding window.

Refused: ``longrope`` / ``su`` rope scaling (Phi-3 128k), and what Llama refuses.
"""
from __future__ import annotations

from .core import Converter, Source, register
from .llama import decoder_config, read_decoder, rope
from .mistral import spec_window, window_mask


def read(src: Source, attention: str):
    fraction = src.float("partial_rotary_factor", src.mapping("rope_parameters").get("partial_rotary_factor", 1.0),
                         lo=0.0, hi=1.0, positive=True)
    spec, st = read_decoder(src, attention, "phi3", mask=window_mask(src))
    spec["positions"] = rope(src, fraction)
    return spec, st


def write(spec) -> dict:
    cfg = decoder_config(spec)
    cfg["rope_parameters"]["partial_rotary_factor"] = spec.stack("decoder").positions.config.fraction
    return dict(cfg, sliding_window=spec_window(spec), original_max_position_embeddings=spec.max_len,
                pad_token_id=None)


register(Converter("phi3", read, write, "Phi3Config", "Phi3ForCausalLM",
                refuses=("rope_parameters", "rope_scaling", "hidden_act")))
