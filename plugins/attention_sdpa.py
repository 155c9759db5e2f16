"""``sdpa``: PyTorch's fused ``F.scaled_dot_product_attention`` (the fast default).

Same function as ``eager`` (checked against it and against the naive loop), but computed by a fused
kernel (FlashAttention / memory-efficient / C++ math, chosen by PyTorch) that never materialises the
``(Tq, Tk)`` weights in Python, so it cannot return them: inspection switches to ``eager`` for the
inspected run only.  It declares a fused causal path, so a plain causal mask arrives as
``is_causal=True`` without a mask tensor; grouped-query attention uses ``enable_gqa`` rather than
copying k/v.  A score bias (ALiBi, T5) and a boolean mask are merged into one float ``attn_mask``.

Mind the mask convention: SDPA's boolean ``attn_mask`` is True where attention is *allowed*, the same
as zoo's; ``nn.MultiheadAttention``'s is the opposite.
"""
from __future__ import annotations

import torch.nn.functional as F

import zoo
from zoo.components import AttentionKernel, Capabilities, nonfinite_query_rows


class SDPAttention(AttentionKernel):
    capabilities = Capabilities(returns_weights=False, fused_causal=True)

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        attn_mask = mask
        if bias is not None:
            attn_mask = bias.to(q.dtype)
            if mask is not None:
                attn_mask = attn_mask.masked_fill(~mask, float("-inf"))
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=self.scale,
            dropout_p=self.dropout_p if self.training else 0.0,
            enable_gqa=q.size(1) != k.size(1))  # (B, h, Tq, hd)
        if attn_mask is None:  # the fused kernel would return zeros for a NaN query row
            out = nonfinite_query_rows(out, q)
        return out, None


@zoo.hookimpl
def register_attention(register):
    register("sdpa", SDPAttention)
