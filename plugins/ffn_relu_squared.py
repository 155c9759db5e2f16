"""``relu_squared``: the feed-forward block with a squared ReLU (So, Mańke, Liu, Dai, Shazeer & Le, 2021, "Primer: Searching for Efficient Transformers for Language Modeling", arXiv 2109.08668).

Primer is what an evolutionary search over TensorFlow programs found to train language models
fastest; one of its two changes that transfer everywhere is simply squaring the ReLU::

    FFN(x) = W2 · relu(W1 x + b1)² + b2        # (B, T, D) -> (B, T, d_ff) -> (B, T, D)

The square keeps ReLU's sparsity (negative inputs give exactly 0) but grows faster for large
inputs, a sharper, GLU-like nonlinearity at the cost and parameter count of a plain MLP.  Used in
Primer, in the nanoGPT speedrun and in several sparse-activation models.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

import zoo
from zoo.components import FeedForward, taps_for


@dataclass(frozen=True)
class ReluSquaredConfig:
    bias: bool = True


class ReluSquaredMLP(FeedForward):
    """Feed-forward block with a squared-ReLU activation (So et al., 2021, "Primer: Searching for Efficient Transformers for Language Modeling", arXiv 2109.08668)."""

    lesson = {
        "en": "Problem: which activation makes a language model learn fastest per FLOP? Primer's "
              "architecture search found a one-word answer: square the ReLU, FFN(x) = W2·relu(W1x)². "
              "It keeps ReLU's exact zeros (sparse activations) while growing quadratically, and gave a "
              "large share of Primer's speed-up at no extra parameters; a cheap upgrade over GELU.",
        "zh": "问题：哪种激活函数让语言模型每单位计算学得最快？Primer 的架构搜索给出了一句话的答案：把 ReLU 平方，"
              "FFN(x) = W2·relu(W1x)²。它保留了 ReLU 的精确零值（稀疏激活），同时以平方速度增长，不增加参数就贡献了"
              " Primer 加速的很大一部分；是替换 GELU 的廉价升级。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.up = nn.Linear(ctx.d_model, ctx.d_ff, bias=config.bias)
        self.down = nn.Linear(ctx.d_ff, ctx.d_model, bias=config.bias)

    hook_points = ("hook_pre", "hook_post")  # the inside view: TransformerLens' MLP points

    def forward(self, x):
        tap = taps_for(self)  # the inside view's hook points: None outside a hooked call
        if tap is None:
            h = torch.relu(self.up(x))  # (B, T, d_ff)
            return self.down(h * h)  # (B, T, D)
        h = torch.relu(tap("hook_pre", self.up(x)))
        return self.down(tap("hook_post", h * h))


@zoo.hookimpl
def register_ffns(register):
    register("relu_squared", ReluSquaredMLP, config=ReluSquaredConfig)
