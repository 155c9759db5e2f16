"""``differential``: differential attention (Ye, Dong, Xia, Sun, Zhu, Huang & Wei, 2024, "Differential Transformer", arXiv 2410.05258).

Softmax attention spreads some weight over irrelevant context ("attention noise").  Differential
attention computes two softmax maps from two halves of each head's query and key and subtracts one
from the other, like a differential amplifier cancelling common-mode noise::

    [q1 | q2] = q,  [k1 | k2] = k                        # each half: hd/2 features
    A_r = softmax(q_r·k_rᵀ / sqrt(hd/2) + bias, mask)    # r = 1, 2
    λ = exp(λ_q1·λ_k1) - exp(λ_q2·λ_k2) + λ_init          # a learned scalar (4 vectors of hd/2)
    out = (1 - λ_init) · RMSNorm_head((A_1 - λ A_2) @ v)  # per-head norm with a learned gain

The paper's ``λ_init = 0.8 - 0.6·exp(-0.3·(l-1))`` depends on the layer index ``l``; a kernel does not
know its layer, so ``lambda_init`` is a parameter (0.8, the deep-layer value).  The weights
``A_1 - λA_2`` can be negative and do not sum to 1: eager, no weights returned.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

import zoo
from zoo.components import AttentionKernel, Capabilities, repeat_kv
from zoo.model.kernels import bias_and_mask, weigh


@dataclass(frozen=True)
class DifferentialConfig:
    lambda_init: float = 0.8
    eps: float = 1e-5  # of the per-head RMSNorm

    def __post_init__(self):
        if not 0.0 <= self.lambda_init < 1.0:
            raise ValueError(f"lambda_init must be in [0, 1), got {self.lambda_init}")


class DifferentialAttention(AttentionKernel):
    """[eager] Differential attention, the difference of two softmax maps (Ye et al., 2024, "Differential Transformer", arXiv 2410.05258)."""

    capabilities = Capabilities(returns_weights=False, exact=False)
    lesson = {
        "en": "Problem: softmax always leaves some weight on irrelevant tokens, and that noise drowns the "
              "signal in long contexts. Differential attention subtracts two softmax maps computed from two "
              "halves of each head: out = (A_1 - λA_2)V, with a learned λ and a per-head RMSNorm. Common "
              "noise cancels; the paper reports better long-context retrieval, fewer hallucinations and "
              "smaller activation outliers at equal size.",
        "zh": "问题：softmax 总会在无关词上留下一些权重，长上下文中这些噪声会淹没信号。差分注意力用每个头的两半分别算"
              "两张 softmax 图并相减：out = (A_1 - λA_2)V，λ 可学习，之后做逐头 RMSNorm。共同的噪声被抵消；论文报告"
              "在相同规模下长上下文检索更好、幻觉更少、激活离群值更小。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        if ctx.head_dim % 2:
            raise zoo.SpecError(f"differential attention splits each head in two; head_dim {ctx.head_dim} "
                                "is odd", where="attention.kind", fix="use an even head_dim")
        half = ctx.head_dim // 2
        self.half_scale = half ** -0.5
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(torch.randn(half) * 0.1) for _ in range(4))  # (hd/2,) each, N(0, 0.1) as the paper
        self.gain = nn.Parameter(torch.ones(ctx.head_dim))  # the per-head RMSNorm's gain

    def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
        k, v = repeat_kv(k, v, q.size(1))  # (B, h, Tk, hd)
        q1, q2 = q.chunk(2, dim=-1)  # (B, h, Tq, hd/2) each
        k1, k2 = k.chunk(2, dim=-1)  # (B, h, Tk, hd/2) each

        def softmax_map(a, b):
            s = torch.matmul(a, b.transpose(-2, -1)) * self.half_scale  # (B, h, Tq, Tk)
            return torch.softmax(bias_and_mask(s, bias, mask), dim=-1)

        lam = (torch.exp(torch.dot(self.lambda_q1, self.lambda_k1))
               - torch.exp(torch.dot(self.lambda_q2, self.lambda_k2)) + self.config.lambda_init)
        w = softmax_map(q1, k1) - lam.to(q.dtype) * softmax_map(q2, k2)  # (B, h, Tq, Tk)
        out = weigh(w, v, self.dropout_p, self.training)  # (B, h, Tq, hd)
        of = out.float() if out.element_size() < 4 else out  # half precision: norm in float32
        of = of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + self.config.eps)  # RMSNorm per head
        return (of.to(out.dtype) * self.gain.to(out.dtype)) * (1 - self.config.lambda_init), None


@zoo.hookimpl
def register_attention(register):
    register("differential", DifferentialAttention, config=DifferentialConfig)
