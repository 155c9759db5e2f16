"""Phi-3 (``Phi3ForCausalLM``): Llama with a fused ``qkv_proj`` (already zoo's q|k|v layout) and a
fused ``gate_up_proj`` (``[gate; up]`` row blocks, split into zoo's ``gate`` and ``up``), optional
partial rotary (``partial_rotary_factor``) and sliding window.

LongRoPE (Phi-3 128k: ``rope_type: longrope``, ``short_factor`` / ``long_factor``, the top-level
``original_max_position_embeddings``) becomes ``rope`` with ``scaling: longrope``; as transformers
does, the legacy names ``su`` and ``yarn`` mean longrope for Phi-3.  Refused: other rope types
(transformers' Phi-3 takes default and longrope only), and what Llama refuses.
"""
from __future__ import annotations

from .core import Converter, Source, register
from .llama import decoder_config, read_decoder
from .mistral import spec_window, window_mask


def _longrope_names(src: Source) -> None:
    """Phi3Config's reading of the rope type: ``su`` / ``yarn`` are longrope; only default and
    longrope are valid."""
    for key in ("rope_scaling", "rope_parameters"):
        m = src.mapping(key)
        kind = m.get("rope_type") or m.get("type")
        if kind in ("su", "yarn"):
            src.config[key] = {**{k: v for k, v in m.items() if k != "type"}, "rope_type": "longrope"}
        elif kind not in (None, "default", "longrope"):
            src.refuse(key, kind, "transformers' Phi-3 takes default and longrope rope types only",
                       options=["default", "longrope"], fix="use rope_type longrope (or default)")


def read(src: Source, attention: str):
    _longrope_names(src)
    fraction = src.float("partial_rotary_factor", src.mapping("rope_parameters").get("partial_rotary_factor", 1.0),
                         lo=0.0, hi=1.0, positive=True)
    return read_decoder(src, attention, "phi3", mask=window_mask(src), fraction=fraction)


def write(spec) -> dict:
    cfg = decoder_config(spec)
    cfg["rope_parameters"]["partial_rotary_factor"] = spec.stack("decoder").positions.config.fraction
    rc = spec.stack("decoder").positions.config
    orig = rc.original_max_len if rc.scaling == "longrope" else spec.max_len
    return dict(cfg, sliding_window=spec_window(spec), original_max_position_embeddings=orig,
                pad_token_id=None)


register(Converter("phi3", read, write, "Phi3Config", "Phi3ForCausalLM",
                refuses=("rope_parameters", "rope_scaling", "hidden_act")))
