"""``cosine``: cosine-similarity attention with a learned temperature (Henry, Dachapally, Pawar & Chen, 2020, "Query-Key Normalization for Transformers", arXiv 2010.04245; Swin Transformer V2, arXiv 2111.09883).

Dot-product logits grow with the norms of q and k, and a few large norms can saturate the softmax
(attention entropy collapse).  Cosine attention replaces the dot product by the cosine of the angle
between query and key, times a learned per-head gain ``g``::

    s = g_h · (q / |q|) · (k / |k|)ᵀ        # every logit lies in [-g_h, g_h]

``g`` plays the role of ``1/sqrt(d)``'s temperature, but learned (initialised to ``gain``, 10 by
default, as in x-transformers' ``qk_norm_scale``).  Fused: the normalised, scaled queries go through
PyTorch's ``scaled_dot_product_attention`` with ``scale=1`` and its fused causal path.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import zoo
from zoo.components import AttentionKernel, Capabilities
from zoo.model.kernels import sdpa


@dataclass(frozen=True)
class CosineConfig:
    gain: float = 10.0  # initial per-head gain g (the inverse temperature), learned per head

    def __post_init__(self):
        if not self.gain > 0:
            raise ValueError(f"gain must be > 0, got {self.gain}")


class CosineAttention(AttentionKernel):
    """[fused sdpa] Cosine-similarity attention with a learned per-head gain (Henry et al., 2020, "Query-Key Normalization for Transformers", arXiv 2010.04245)."""

    capabilities = Capabilities(returns_weights=False, fused_causal=True, exact=False)
    lesson = {
        "en": "Problem: dot-product logits scale with |q|·|k|, so a few large vectors can make the softmax "
              "one-hot and stall training. Cosine attention bounds every logit: s = g · cos(q, k), "
              "with a learned per-head gain g replacing 1/sqrt(d). It helps when training is unstable at "
              "high learning rates or large scale (Swin V2, ViT-22B-style qk normalisation).",
        "zh": "问题：点积分数随 |q|·|k| 增长，少数大向量就能让 softmax 变成独热、训练停滞。余弦注意力把每个分数"
              "限制在有界范围：s = g · cos(q, k)，用每个头可学习的增益 g 代替 1/sqrt(d)。在大学习率或大规模"
              "训练不稳定时有帮助（Swin V2、ViT-22B 式的 qk 归一化）。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        # log-parameterised so the gain stays positive: (h,)
        self.log_gain = nn.Parameter(torch.full((ctx.num_heads,), math.log(config.gain)))

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        g = self.log_gain.exp().to(q.dtype)[None, :, None, None]  # (1, h, 1, 1)
        q = F.normalize(q, dim=-1) * g  # (B, h, Tq, hd), |q| = g
        k = F.normalize(k, dim=-1)      # (B, h_kv, Tk, hd), unit length
        out = sdpa(q, k, v, mask, bias, scale=1.0, dropout_p=self.dropout_p, training=self.training,
                   is_causal=is_causal)  # (B, h, Tq, hd): the gain is already in q
        return out, None


@zoo.hookimpl
def register_attention(register):
    register("cosine", CosineAttention, config=CosineConfig)
