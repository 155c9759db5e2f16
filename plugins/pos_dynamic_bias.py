"""``dynamic_bias``: dynamic position bias, a small MLP from relative distance to a per-head bias (Wang et al., 2021, "CrossFormer: A Versatile Vision Transformer Hinging on Cross-scale Attention", arXiv 2108.00154).

Learned relative biases (T5's buckets, a lookup table) only know the distances seen in training.
A dynamic position bias computes the bias *as a function* of the distance with a tiny MLP, so it
is defined for any distance, including longer ones than in training::

    b_h(i, j) = MLP(i - j)_h       # MLP: 1 -> dim -> ... -> heads, SiLU between layers
    score(i, j) = q_i·k_j · scale + b_h(i, j)

``log_distance: true`` feeds ``sign(i-j)·log(1 + |i-j|)`` instead, compressing long distances (as in
SwinV2's log-spaced coordinates).  The MLP's layout (``Linear(1, dim)``, SiLU, ``depth - 1`` x
``Linear(dim, dim)`` + SiLU, ``Linear(dim, heads)``) is x-transformers' ``DynamicPositionBias``.
Positions are absolute, so the bias is right under a KV cache offset.  Needs a kernel that takes a
score bias.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

import zoo
from zoo.components import PositionScheme


@dataclass(frozen=True)
class DynamicBiasConfig:
    dim: int = 32          # hidden width of the MLP
    depth: int = 2         # number of hidden layers
    log_distance: bool = False

    def __post_init__(self):
        if self.dim < 1 or self.depth < 1:
            raise ValueError(f"dim and depth must be >= 1, got {self.dim}, {self.depth}")


class DynamicBias(PositionScheme):
    """Dynamic position bias: an MLP of the relative distance gives each head's score bias (Wang et al., 2021, "CrossFormer", arXiv 2108.00154)."""

    acts_on_scores = True
    lesson = {
        "en": "Problem: learned relative biases are lookup tables, undefined (or clipped) beyond the "
              "distances seen in training. A dynamic position bias computes b_h(i,j) = MLP(i - j)_h with a "
              "small network, so every distance gets a smooth, learned bias. It helps when sequence "
              "or image sizes change between training and use (CrossFormer, SwinV2's continuous bias).",
        "zh": "问题：可学习的相对位置偏置是查找表，训练中没见过的距离没有定义（或被截断）。动态位置偏置用一个小网络计算 "
              "b_h(i,j) = MLP(i - j)_h，于是每个距离都有平滑的、可学习的偏置。当训练与使用时的序列长度或图像尺寸"
              "不同时有帮助（CrossFormer、SwinV2 的连续偏置）。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        layers = [nn.Linear(1, config.dim), nn.SiLU()]
        for _ in range(config.depth - 1):
            layers += [nn.Linear(config.dim, config.dim), nn.SiLU()]
        self.mlp = nn.Sequential(*layers, nn.Linear(config.dim, ctx.num_heads))

    def score_bias(self, pos_q, pos_k):
        dt = self.mlp[0].weight.dtype
        rel = (pos_q[:, :, None] - pos_k[:, None, :]).to(torch.float32 if dt.itemsize < 4 else dt)  # i - j
        if self.config.log_distance:
            rel = torch.sign(rel) * torch.log1p(rel.abs())
        bias = self.mlp(rel[..., None].to(dt))  # (B|1, Tq, Tk, h)
        return bias.permute(0, 3, 1, 2)  # (B|1, h, Tq, Tk)


@zoo.hookimpl
def register_positions(register):
    register("dynamic_bias", DynamicBias, config=DynamicBiasConfig)
