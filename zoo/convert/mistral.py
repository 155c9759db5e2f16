"""Mistral (``MistralForCausalLM``): Llama with sliding-window attention.  Each query sees the
``sliding_window`` most recent keys (itself included), so the zoo mask is ``[causal,
{kind: sliding_window, window: W}]``; ``sliding_window: null`` is plain causal attention.

Refused: what Llama refuses.
"""
from __future__ import annotations

from .core import Converter, Source, register
from .llama import decoder_config, read_decoder


def window_mask(src: Source, key: str = "sliding_window"):
    """The zoo mask of a causal model whose config may set a sliding window."""
    w = src.int(key, None)
    return "causal" if w is None else ["causal", {"kind": "sliding_window", "window": w}]


def spec_window(spec) -> int | None:
    """The sliding window of a zoo spec's decoder mask, or None."""
    for m in spec.stack("decoder").mask:
        if m.kind == "sliding_window":
            return m.config.window
    return None


def read(src: Source, attention: str):
    return read_decoder(src, attention, "mistral", mask=window_mask(src))


def write(spec) -> dict:
    return dict(decoder_config(spec), sliding_window=spec_window(spec))


register(Converter("mistral", read, write, "MistralConfig", "MistralForCausalLM",
                refuses=("hidden_act", "rope_parameters")))
