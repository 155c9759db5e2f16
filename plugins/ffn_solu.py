"""``solu``: the Softmax Linear Unit feed-forward block (Elhage et al., Anthropic, 2022, "Softmax Linear Units", Transformer Circuits Thread; no arXiv id).

Neurons of ordinary MLPs are polysemantic: one neuron fires for many unrelated features, which makes
them hard to interpret.  SoLU makes neurons compete, so that a few win on each token::

    h = W1 x + b1                          # (B, T, d_ff)
    solu(h) = h ⊙ softmax(h)               # over the d_ff features: large entries stay, small shrink
    FFN(x) = W2 · LayerNorm(solu(h)) + b2

The softmax sharpens activations towards the largest few; the LayerNorm afterwards (over ``d_ff``)
restores their scale, which the paper found necessary for performance (and which, they note, can
hide some superposition again).  x-transformers calls it ``FeedForward(solu=True)``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

import zoo
from zoo.components import FeedForward


@dataclass(frozen=True)
class SoLUConfig:
    bias: bool = True
    eps: float = 1e-5  # of the LayerNorm after the activation


class SoLUMLP(FeedForward):
    """Feed-forward block with the Softmax Linear Unit h·softmax(h) and a LayerNorm (Elhage et al., 2022, "Softmax Linear Units", Transformer Circuits Thread)."""

    lesson = {
        "en": "Problem: MLP neurons are polysemantic (one neuron, many unrelated meanings), which defeats "
              "interpretability. SoLU makes neurons compete: solu(h) = h·softmax(h) over the hidden "
              "features, then a LayerNorm. A few neurons win per token, and many more neurons become "
              "interpretable in the paper at nearly equal loss. A teaching case of an architecture chosen "
              "for understanding rather than speed.",
        "zh": "问题：MLP 神经元是多义的（一个神经元对应许多无关含义），妨碍可解释性。SoLU 让神经元互相竞争："
              "solu(h) = h·softmax(h)（在隐藏特征维上），再接 LayerNorm。每个词元只有少数神经元胜出；论文中在损失几乎"
              "不变的情况下，可解释的神经元明显增多。这是一个为了“理解”而不是速度而选择结构的教学案例。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.up = nn.Linear(ctx.d_model, ctx.d_ff, bias=config.bias)
        self.norm = nn.LayerNorm(ctx.d_ff, eps=config.eps)
        self.down = nn.Linear(ctx.d_ff, ctx.d_model, bias=config.bias)

    def forward(self, x):
        h = self.up(x)  # (B, T, d_ff)
        sm = torch.softmax(h.float() if h.element_size() < 4 else h, dim=-1)  # half precision: in float32
        h = h * sm.to(h.dtype)  # competition across the d_ff features
        return self.down(self.norm(h))  # (B, T, D)


@zoo.hookimpl
def register_ffns(register):
    register("solu", SoLUMLP, config=SoLUConfig)
