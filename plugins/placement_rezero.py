"""``rezero``: no norm at all, each residual branch scaled by a learned scalar that starts at 0 (Bachlechner, Majumder, Mao, Cottrell & McAuley, 2020, "ReZero is All You Need: Fast Convergence at Large Depth", arXiv 2003.04887).

Norms exist to keep deep residual stacks trainable.  ReZero does it differently: every sub-layer's
contribution passes through a learned gate ``α`` initialised to zero::

    x = x + α · f(x)          # α = 0 at the start: the whole network is the identity

At initialisation signals and gradients pass through every layer unchanged (dynamical isometry),
and each layer "switches itself on" as ``α`` grows.  The paper trains 100+-layer Transformers
without warm-up and converges faster than with LayerNorm.  The spec's norm type is not used (the
placement builds no norm), and the stack gets no final norm.
"""
from __future__ import annotations

import torch
from torch import nn

import zoo
from zoo.components import Placement


class ReZero(Placement):
    """ReZero: x + α·f(x) with a learned α initialised to 0 and no norm (Bachlechner et al., 2020, "ReZero is All You Need", arXiv 2003.04887)."""

    final_norm = False
    lesson = {
        "en": "Problem: deep residual stacks need normalisation and warm-up to train. ReZero removes the "
              "norm and gates each branch with one learned scalar that starts at zero: x = x + α·f(x). "
              "The network begins as the identity, so signals and gradients reach every layer intact; the "
              "paper trains very deep Transformers faster and without warm-up. Trade-off: no norm bounds "
              "activations later in training.",
        "zh": "问题：深的残差网络需要归一化和学习率预热才能训练。ReZero 去掉归一化，给每个分支乘一个从零开始的可学习标量："
              "x = x + α·f(x)。网络从恒等映射开始，信号和梯度能完整到达每一层；论文无需预热就更快地训练了很深的 "
              "Transformer。代价：训练后期没有归一化来约束激活的大小。",
    }

    def __init__(self, config, ctx, make_norm):
        super().__init__(config, ctx, make_norm)
        self.alpha = nn.Parameter(torch.zeros(()))

    def enter(self, x):
        return x

    def exit(self, x, y):
        return x + self.branch(y)

    def branch(self, y):  # what the sub-layer adds to the stream (the inside view's hook_*_out)
        return self.alpha * y


@zoo.hookimpl
def register_placements(register):
    register("rezero", ReZero)
