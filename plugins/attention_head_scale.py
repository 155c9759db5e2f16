"""``head_scale``: softmax attention with a learned scale on each head's output (Shleifer, Weston & Ott, 2021, "NormFormer: Improved Transformer Pretraining with Extra Normalization", arXiv 2110.09456).

The output projection sums the heads' outputs with fixed relative weight: a head cannot be turned
down without retraining the projection.  NormFormer's head scaling gives each head ``h`` one learned
scalar ``γ_h`` (initialised to 1) on its output, before the heads are concatenated::

    o_h = γ_h · softmax(q_h·k_hᵀ · scale + bias, mask) @ v_h        # (B, h, Tq, hd)

It is the third of NormFormer's additions (with the post-activation LayerNorm of ``ffn: normformer``
and the norm after attention of ``placement: sandwich``), and lets training down-weight heads that
hurt — the paper found the learned ``γ`` spread widely across heads.  x-transformers calls it
``Attention(head_scale=True)``.  Fused: the scale is applied to SDPA's output, with its causal path.
"""
from __future__ import annotations

import torch
from torch import nn

import zoo
from zoo.components import AttentionKernel, Capabilities
from zoo.model.kernels import sdpa


class HeadScaleAttention(AttentionKernel):
    """[fused sdpa] Softmax attention with a learned scale per head output (Shleifer et al., 2021, "NormFormer", arXiv 2110.09456)."""

    capabilities = Capabilities(returns_weights=False, fused_causal=True, exact=False)
    lesson = {
        "en": "Problem: the output projection mixes heads with fixed relative weight, so a harmful or "
              "useless head stays loud until the projection is retrained. NormFormer gives each head a "
              "learned scalar on its output, o_h = γ_h · Attention_h(q, k, v), initialised to 1. A nearly "
              "free parameter (one per head) that, with NormFormer's two extra norms, sped up pre-training "
              "in the paper and lets you read off which heads the model turned down.",
        "zh": "问题：输出投影以固定的相对权重混合各个头，一个有害或无用的头在投影重新训练之前一直“音量”很大。NormFormer "
              "给每个头的输出乘一个可学习的标量：o_h = γ_h · Attention_h(q, k, v)，初始为 1。几乎不花代价（每头一个参数），"
              "配合 NormFormer 的另外两处归一化，论文中加快了预训练，还能直接读出模型调低了哪些头。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.gamma = nn.Parameter(torch.ones(ctx.num_heads))  # (h,)

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        out = sdpa(q, k, v, mask, bias, scale=self.scale, dropout_p=self.dropout_p, training=self.training,
                   is_causal=is_causal)  # (B, h, Tq, hd)
        return out * self.gamma.to(out.dtype)[None, :, None, None], None  # γ_h · o_h


@zoo.hookimpl
def register_attention(register):
    register("head_scale", HeadScaleAttention)
