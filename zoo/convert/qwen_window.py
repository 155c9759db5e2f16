"""Qwen2 / Qwen3 sliding-window layers: with ``use_sliding_window`` the layers listed as
``sliding_attention`` in ``layer_types`` (transformers fills it: layers from ``max_window_layers`` on)
attend to the ``sliding_window`` most recent keys, the others to every earlier key.  In zoo that is
the spec's ``mask_pattern``: one mask per layer, ``[causal, {kind: sliding_window, window: W}]`` or
``causal`` (the same rule Gemma 2's local layers use)."""
from __future__ import annotations

from .core import Source
from .gemma2 import mask_pattern


def layer_masks(src: Source, family: str) -> dict:
    """``{"mask_pattern": [...]}`` for a config with sliding layers, ``{}`` when every layer is full."""
    L = src.int("num_hidden_layers")
    types = src.get("layer_types")
    if not src.flag("use_sliding_window", False):
        src.expect("layer_types", lambda v: all(t == "full_attention" for t in v),
                   f"{family} without use_sliding_window attends fully in every layer",
                   "set use_sliding_window: true, or use full_attention layers")
        return {}
    if types is None:
        start = src.int("max_window_layers", L, lo=0)
        src.config["layer_types"] = ["sliding_attention" if i >= start else "full_attention" for i in range(L)]
    if all(t == "full_attention" for t in src.config["layer_types"]):
        return {}
    src.int("sliding_window")  # required, and a positive integer
    return {"mask_pattern": mask_pattern(src, L)}


def window_config(spec) -> dict:
    """The reverse: ``use_sliding_window``, ``sliding_window``, ``layer_types``, ``max_window_layers``."""
    st = spec.stack("decoder")
    if not st.mask_pattern:
        return {"use_sliding_window": False}
    sliding = [any(m.kind == "sliding_window" for m in st.layer_mask(i)) for i in range(st.num_layers)]
    window = next(m.config.window for i in range(st.num_layers) for m in st.layer_mask(i)
                  if m.kind == "sliding_window")
    return {"use_sliding_window": True, "sliding_window": window,
            "layer_types": ["sliding_attention" if s else "full_attention" for s in sliding],
            "max_window_layers": sliding.index(True)}
