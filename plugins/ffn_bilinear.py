"""``bilinear``: the gated feed-forward block with no activation at all (Shazeer, 2020, "GLU Variants Improve Transformer", arXiv 2002.05202).

Among the GLU variants (``swiglu``, ``geglu``, ``reglu``) the simplest drops the nonlinearity from
the gate: the block is the product of two linear maps::

    FFN(x) = W_down · ( (W_gate x) ⊙ (W_up x) )       # (B, T, D) -> 2 x (B, T, d_ff) -> (B, T, D)

Each hidden feature is a quadratic form of the input, so the block is a sum of bilinear forms —
nonlinear in ``x`` without any activation function.  In Shazeer's table it beats the ReLU and GELU
MLPs at equal compute, close behind SwiGLU/GeGLU; interpretability work uses it because a bilinear
layer can be analysed exactly as a tensor (Pearce et al., 2024, arXiv 2410.08417).
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn

import zoo
from zoo.components import FeedForward, taps_for


@dataclass(frozen=True)
class BilinearConfig:
    bias: bool = False


class BilinearFFN(FeedForward):
    """Bilinear GLU, (W_gate x)·(W_up x) with no activation (Shazeer, 2020, "GLU Variants Improve Transformer", arXiv 2002.05202)."""

    lesson = {
        "en": "Problem: does a feed-forward block need an activation function? The bilinear GLU says no: "
              "FFN(x) = W_down((W_gate x)·(W_up x)) is already nonlinear (quadratic) in x. It trails "
              "SwiGLU only slightly in Shazeer's comparison, beats ReLU/GELU MLPs, and because it is a "
              "pure tensor contraction it can be analysed exactly - a favourite of interpretability work.",
        "zh": "问题：前馈块一定需要激活函数吗？双线性 GLU 的答案是否定的：FFN(x) = W_down((W_gate x)·(W_up x)) 对 x "
              "本身已是非线性（二次）的。在 Shazeer 的比较中它只略逊于 SwiGLU，优于 ReLU/GELU MLP；又因为它是纯粹的"
              "张量缩并，可以被精确分析，因此受可解释性研究青睐。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.gate = nn.Linear(ctx.d_model, ctx.d_ff, bias=config.bias)
        self.up = nn.Linear(ctx.d_model, ctx.d_ff, bias=config.bias)
        self.down = nn.Linear(ctx.d_ff, ctx.d_model, bias=config.bias)

    hook_points = ("hook_pre", "hook_pre_linear", "hook_post")  # as a GLU's, with no activation

    def forward(self, x):
        tap = taps_for(self)  # the inside view's hook points: None outside a hooked call
        if tap is None:
            return self.down(self.gate(x) * self.up(x))  # (B, T, D) -> (B, T, d_ff) -> (B, T, D)
        return self.down(tap("hook_post", tap("hook_pre", self.gate(x)) * tap("hook_pre_linear", self.up(x))))


@zoo.hookimpl
def register_ffns(register):
    register("bilinear", BilinearFFN, config=BilinearConfig)
