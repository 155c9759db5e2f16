"""``temperature``: softmax attention with a learned temperature per head.

Each head multiplies its logits by its own learned factor ``g_h = exp(log_g_h)`` on top of the usual
``1/sqrt(head_dim)``: a head can learn to attend more sharply (``g > 1``) or more evenly (``g < 1``),
the learnable softmax scale of QK-norm (Henry et al., 2020, "Query-Key Normalization for
Transformers"), without the normalisation.  With ``init: 1.0`` every head starts as ordinary
scaled dot-product attention.

    attention: {kind: temperature, init: 1.0}

The tested example of docs/PLUGINS.md: the guide shows this file, and
tests/docs/test_plugin_guide.py runs the conformance kit on it and checks it against
``torch.nn.functional.scaled_dot_product_attention``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import zoo
from zoo.components import AttentionKernel, Capabilities, repeat_kv


@dataclass(frozen=True)
class TemperatureConfig:
    init: float = 1.0  # every head's factor g at the start (1: plain softmax attention)

    def __post_init__(self):
        if not (isinstance(self.init, (int, float)) and self.init > 0 and math.isfinite(self.init)):
            raise ValueError(f"init must be a positive number, got {self.init!r}")


class TemperatureAttention(AttentionKernel):
    # Softmax attention: the defaults (masks, a score bias, the KV cache, exact) all hold; it also
    # returns its weights.  No fused causal path: a causal rule arrives as a mask.
    capabilities = Capabilities(returns_weights=True)

    def __init__(self, config: TemperatureConfig, ctx):
        super().__init__(config, ctx)  # sets self.scale and self.dropout_p
        # A plain Parameter keeps this value through zoo.build's initialisation, and is saved and
        # loaded like any weight (an nn.Linear here would be re-drawn from N(0, 0.02)).
        self.log_g = nn.Parameter(torch.full((ctx.num_heads,), math.log(config.init)))  # (h,)

    def steps(self, q, k, v, mask=None, bias=None):
        k, v = repeat_kv(k, v, q.size(1))                              # (B, h, Tk, hd)
        g = self.log_g.exp()[:, None, None]                            # (h, 1, 1)
        scores = (q @ k.transpose(-2, -1)) * (self.scale * g)          # (B, h, Tq, Tk)
        if bias is not None:
            scores = scores + bias                                     # bias (B|1, h, Tq, Tk)
        masked = scores if mask is None else scores.masked_fill(~mask, float("-inf"))  # mask (B|1, 1, Tq, Tk)
        weights = masked.softmax(dim=-1)                               # (B, h, Tq, Tk)
        dropped = F.dropout(weights, self.dropout_p) if self.training and self.dropout_p > 0 else weights
        return {"scores": scores, "scores_masked": masked, "weights": weights, "heads": dropped @ v}

    def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
        s = self.steps(q, k, v, mask, bias)
        return s["heads"], (s["weights"] if need_weights else None)   # (B, h, Tq, hd), (B, h, Tq, Tk)


@zoo.hookimpl
def register_attention(register):
    register("temperature", TemperatureAttention, config=TemperatureConfig)
