"""``dyt``: Dynamic Tanh, a normalisation-free replacement for LayerNorm (Zhu, Chen, He, LeCun & Liu, 2025, "Transformers without Normalization", arXiv 2503.10622).

The authors noticed that trained LayerNorms map their inputs to outputs along S-shaped, tanh-like
curves: roughly linear for most activations, squashing the rare extreme ones.  DyT is that curve
with no statistics at all::

    y = γ ⊙ tanh(α · x) + β          # α a learned scalar (init 0.5 here, α0), γ, β per feature

No mean, no variance, no reduction over the features: each element is transformed on its own, so
it is cheaper than LayerNorm and independent of the other tokens and features.  The paper matches
LayerNorm/RMSNorm models in vision, speech and language (LLaMA up to 70B) when ``α0`` is tuned
(0.5-1 for most, smaller for wide LLMs).  Same layout as x-transformers' ``DynamicTanh``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

import zoo
from zoo.components import Norm


@dataclass(frozen=True)
class DyTConfig:
    alpha: float = 0.5  # α0, the initial pre-tanh scale

    def __post_init__(self):
        if not self.alpha > 0:
            raise ValueError(f"alpha must be > 0, got {self.alpha}")


class DyT(Norm):
    """Dynamic Tanh, y = γ·tanh(αx) + β, a statistics-free norm (Zhu et al., 2025, "Transformers without Normalization", arXiv 2503.10622)."""

    lesson = {
        "en": "Problem: normalisation layers need a reduction over the features of every token, which costs "
              "time and couples features. The paper observed that trained LayerNorms act like an S-curve "
              "and replaced them by one: y = γ·tanh(αx) + β with a learned scalar α. It matches LayerNorm "
              "quality in ViTs, diffusion models and LLaMA when α0 is tuned, and is element-wise (cheap, "
              "fusable).",
        "zh": "问题：归一化层需要对每个词元的所有特征做归约，既费时又让特征互相耦合。论文发现训练后的 LayerNorm 表现得像一条"
              " S 形曲线，于是直接用曲线替代它：y = γ·tanh(αx) + β，α 是可学习的标量。在调好 α0 时，它在 ViT、扩散模型"
              "和 LLaMA 上与 LayerNorm 效果相当，而且是逐元素的（便宜、易融合）。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.alpha = nn.Parameter(torch.empty(()))
        self.weight = nn.Parameter(torch.empty(ctx.d_model))
        self.bias = nn.Parameter(torch.empty(ctx.d_model))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.constant_(self.alpha, self.config.alpha)
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x):
        return torch.tanh(self.alpha * x) * self.weight + self.bias  # (…, D), element-wise

    def steps(self, x):  # for the inside view: no scale, the squashed x before the weight and bias
        return torch.tanh(self.alpha * x), None

    def affine(self, normalized, x):
        return normalized * self.weight + self.bias

    def hook_points(self):
        return ("hook_normalized",)


@zoo.hookimpl
def register_norms(register):
    register("dyt", DyT, config=DyTConfig)
