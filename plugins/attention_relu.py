"""``relu``: ReLU attention, the softmax replaced by a scaled ReLU (Wortsman, Lee, Gilmer & Kornblith, 2023, "Replacing softmax with ReLU in Vision Transformers", arXiv 2309.08586).

Softmax needs a reduction over the whole row (the normaliser), which is what makes it slow to
parallelise over the sequence.  ReLU attention drops it and divides by the sequence length instead::

    w_ij = relu(q_i·k_j · scale + bias)^p / n,    out_i = Σ_j w_ij v_j

The ``1/n`` keeps the expected total weight of a row near the softmax's 1 at initialisation; the
paper finds it essential (without it, accuracy collapses).  ``power: 2`` squares the ReLU (as in
Primer's ReLU² activation, a sharper variant).  ``n`` is fixed (``length``, default ``max_len``) so
that cached decoding equals the full forward.  Masked keys get weight 0.  Eager; rows do not sum to
1, so no weights are returned.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import zoo
from zoo.components import AttentionKernel, Capabilities, repeat_kv
from zoo.errors import ParamError
from zoo.model.kernels import weigh


@dataclass(frozen=True)
class ReLUAttentionConfig:
    power: int = 1                # 1: relu(s), 2: relu(s)²
    length: int | None = None     # n in w = relu(s)^p / n; None: the model's max_len

    def __post_init__(self):
        if self.power not in (1, 2):
            raise ValueError(f"power must be 1 or 2, got {self.power}")
        if self.length is not None and self.length < 1:
            raise ParamError.of("param.at_least", name="length", minimum=1, value=self.length)


class ReLUAttention(AttentionKernel):
    """[eager] ReLU attention, relu(s)^p / n instead of softmax (Wortsman et al., 2023, "Replacing softmax with ReLU in Vision Transformers", arXiv 2309.08586)."""

    capabilities = Capabilities(returns_weights=False, exact=False)
    lesson = {
        "en": "Problem: the softmax normaliser is a reduction over the whole row, which limits parallelism "
              "over the sequence. ReLU attention replaces it: w_ij = relu(q_i·k_j/sqrt(d))^p / n, with the "
              "sequence-length divisor n doing the normaliser's job at initialisation. The paper matches "
              "softmax ViTs in accuracy-vs-compute scaling; keys with negative score get exactly zero "
              "weight (sparse attention for free).",
        "zh": "问题：softmax 的归一化是对整行的归约，限制了沿序列方向的并行。ReLU 注意力取而代之："
              "w_ij = relu(q_i·k_j/sqrt(d))^p / n，其中按序列长度 n 的除法在初始化时承担归一化的作用。论文中它在"
              "精度-计算量的缩放曲线上与 softmax ViT 相当；得分为负的键权重恰好为零（白得的稀疏注意力）。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.inv_n = 1.0 / (config.length if config.length is not None else ctx.max_len)

    def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
        k, v = repeat_kv(k, v, q.size(1))  # (B, h, Tk, hd)
        s = torch.matmul(q, k.transpose(-2, -1)) * self.scale  # (B, h, Tq, Tk)
        if bias is not None:
            s = s + bias
        w = torch.relu(s)
        if self.config.power == 2:
            w = w * w
        w = w * self.inv_n
        if mask is not None:
            w = w.masked_fill(~mask, 0.0)  # masked keys: weight exactly 0
        return weigh(w, v, self.dropout_p, self.training), None  # (B, h, Tq, hd)


@zoo.hookimpl
def register_attention(register):
    register("relu", ReLUAttention, config=ReLUAttentionConfig)
