"""``swiglu`` / ``geglu`` / ``reglu``: gated feed-forward blocks (Shazeer, 2020, "GLU Variants Improve
Transformer"; after Dauphin et al.'s gated linear units, 2017).

The plain MLP computes ``down(act(up(x)))``.  A GLU block computes two projections and lets one gate
the other, element by element::

    down( act(gate(x)) * up(x) )      # (B, T, D) -> 2 x (B, T, d_ff) -> (B, T, D)

The gate decides, per feature, how much of the linear path passes — a multiplicative interaction a
plain MLP has to approximate.  Shazeer found these variants better at equal compute; with three
matrices instead of two, models shrink ``d_ff`` to about 2/3 · 4 · d_model to keep the parameter
count (Llama: 11008 for d_model 4096).  ``swiglu`` (act = SiLU/Swish) is Llama's and Mistral's,
``geglu`` (act = GELU; ``activation: gelu_tanh`` for T5 v1.1's "gated-gelu") T5 v1.1's and Gemma's,
``reglu`` (act = ReLU) the paper's third variant.  Biases default to off, as in those models.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn

import zoo
from zoo.components import Activation, FeedForward, taps_for
from zoo.registry import activation_fn


@dataclass(frozen=True)
class SwiGLUConfig:
    activation: Activation = "silu"
    bias: bool = False


@dataclass(frozen=True)
class GeGLUConfig:
    activation: Activation = "gelu"
    bias: bool = False


@dataclass(frozen=True)
class ReGLUConfig:
    activation: Activation = "relu"
    bias: bool = False


class GLU(FeedForward):
    hook_points = ("hook_pre", "hook_pre_linear", "hook_post")  # the inside view: TransformerLens' gated MLP

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.gate = nn.Linear(ctx.d_model, ctx.d_ff, bias=config.bias)
        self.up = nn.Linear(ctx.d_model, ctx.d_ff, bias=config.bias)
        self.down = nn.Linear(ctx.d_ff, ctx.d_model, bias=config.bias)
        self.act = activation_fn(config.activation)  # the registered activation's function

    def forward(self, x):
        tap = taps_for(self)  # the inside view's hook points: None outside a hooked call
        if tap is None:
            return self.down(self.act(self.gate(x)) * self.up(x))  # (B, T, d_ff): the gated path -> (B, T, D)
        h = self.act(tap("hook_pre", self.gate(x))) * tap("hook_pre_linear", self.up(x))
        return self.down(tap("hook_post", h))


@zoo.hookimpl
def register_ffns(register):
    register("swiglu", GLU, config=SwiGLUConfig)
    register("geglu", GLU, config=GeGLUConfig)
    register("reglu", GLU, config=ReGLUConfig)
