"""``layerscale``: pre-norm with a learned per-channel scale on each residual branch (Touvron, Cord, Sablayrolles, Synnaeve & Jégou, 2021, "Going deeper with Image Transformers", arXiv 2103.17239).

A pre-norm branch adds ``f(norm(x))`` to the stream at full strength from the first step; in deep
stacks the sum of many such branches destabilises training.  LayerScale multiplies each branch by a
learned diagonal matrix whose entries start tiny::

    x = x + diag(λ) · f(norm(x)),      λ ∈ R^D initialised to ε

CaiT's ``ε``: 0.1 up to 18 layers, 1e-5 up to 24, 1e-6 beyond (``init: null`` picks it from the
stack's depth).  Unlike ReZero's single scalar, each channel gets its own gain, so the branch can
open some directions early.  Used by CaiT, DeiT III, DINOv2 and ViT-22B.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

import zoo
from zoo.plugins.placements import PreNorm


@dataclass(frozen=True)
class LayerScaleConfig:
    init: float | None = None  # ε; None: CaiT's rule from the number of layers

    def __post_init__(self):
        if self.init is not None and not self.init > 0:
            raise ValueError(f"init must be > 0, got {self.init}")


def cait_init(num_layers: int) -> float:
    """CaiT's initial λ for a stack of ``num_layers`` layers."""
    return 0.1 if num_layers <= 18 else 1e-5 if num_layers <= 24 else 1e-6


class LayerScale(PreNorm):  # pre-norm's norm and enter, its own exit
    """Pre-norm with a learned per-channel branch scale λ initialised small (Touvron et al., 2021, "Going deeper with Image Transformers", arXiv 2103.17239)."""

    lesson = {
        "en": "Problem: in deep pre-norm stacks every branch adds its output at full strength from step one, "
              "and the sum destabilises training. LayerScale multiplies each branch by a learned per-channel "
              "vector initialised tiny: x = x + diag(λ)·f(norm(x)), λ0 = 0.1 ... 1e-6 by depth. It let CaiT "
              "train deeper ViTs and is standard in DeiT III, DINOv2 and ViT-22B.",
        "zh": "问题：在很深的前置归一化网络中，每个分支从第一步起就以全强度加到残差流上，叠加起来使训练不稳定。LayerScale "
              "给每个分支乘一个初始化得很小的逐通道可学习向量：x = x + diag(λ)·f(norm(x))，λ0 随深度取 0.1 到 1e-6。"
              "它让 CaiT 训练出更深的 ViT，并成为 DeiT III、DINOv2、ViT-22B 的标准做法。",
    }

    def __init__(self, config, ctx, make_norm):
        super().__init__(config, ctx, make_norm)  # self.norm
        self.init = config.init if config.init is not None else cait_init(ctx.num_layers)
        self.gamma = nn.Parameter(torch.empty(ctx.d_model))  # (D,)
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.constant_(self.gamma, self.init)

    def exit(self, x, y):
        return x + self.branch(y)

    def branch(self, y):  # what the sub-layer adds to the stream (the inside view's hook_*_out)
        return self.gamma * y  # (B, T, D) scaled per channel


@zoo.hookimpl
def register_placements(register):
    register("layerscale", LayerScale, config=LayerScaleConfig)
