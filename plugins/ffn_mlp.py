"""``mlp``: the position-wise feed-forward network ``W2 · act(W1 · x + b1) + b2``.

Applied to every token independently: attention mixes information *between* positions, the MLP
transforms each position's vector (``d_model -> d_ff -> d_model``, usually ``d_ff = 4 d_model``).  It
holds about two thirds of a Transformer's parameters.  ``activation`` names a registered activation
(the ``activation`` family, ``zoo components activation``): ``relu`` (the original paper), ``gelu``
(exact, erf-based: BERT), ``gelu_tanh`` (the tanh approximation, GPT-2's "gelu_new"), ``silu``, or
any a plugin adds (docs/PLUGINS.md, "An activation").
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn

import zoo
from zoo.components import Activation, FeedForward, taps_for
from zoo.registry import activation_fn


@dataclass(frozen=True)
class MLPConfig:
    activation: Activation = "gelu"
    bias: bool = True


class MLP(FeedForward):
    hook_points = ("hook_pre", "hook_post")  # the inside view: TransformerLens' MLP points

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.up = nn.Linear(ctx.d_model, ctx.d_ff, bias=config.bias)
        self.down = nn.Linear(ctx.d_ff, ctx.d_model, bias=config.bias)
        self.act = activation_fn(config.activation)  # the registered activation's function

    def forward(self, x):
        tap = taps_for(self)  # the inside view's hook points: None outside a hooked call
        if tap is None:
            return self.down(self.act(self.up(x)))  # (B, T, D) -> (B, T, d_ff) -> (B, T, D)
        return self.down(tap("hook_post", self.act(tap("hook_pre", self.up(x)))))


@zoo.hookimpl
def register_ffns(register):
    register("mlp", MLP, config=MLPConfig)
