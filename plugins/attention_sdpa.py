"""``sdpa``: PyTorch's fused ``F.scaled_dot_product_attention`` (the fast default).

Same function as ``eager`` (checked against it and against the naive loop), but computed by a fused
kernel (FlashAttention / memory-efficient / C++ math, chosen by PyTorch) that never materialises the
``(Tq, Tk)`` weights in Python, so it cannot return them: inspection switches to ``eager`` for the
inspected run only.  A plain causal mask takes the ``is_causal=True`` path without building a mask
tensor; grouped-query attention uses ``enable_gqa`` rather than copying k/v.

Mind the mask convention: SDPA's boolean ``attn_mask`` is True where attention is *allowed*, the same
as zoo's; ``nn.MultiheadAttention``'s is the opposite.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import zoo
from zoo.components import AttentionKernel, Capabilities, guard_empty_rows


class SDPAttention(AttentionKernel):
    capabilities = Capabilities(returns_weights=False)

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        mask, empty = guard_empty_rows(mask)
        attn_mask = mask
        if bias is not None:
            if is_causal:
                mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool,
                                  device=q.device).tril(k.size(-2) - q.size(-2))
                is_causal = False
            attn_mask = bias.to(q.dtype)
            if mask is not None:
                attn_mask = attn_mask.masked_fill(~mask, float("-inf"))
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=self.scale,
            dropout_p=self.dropout_p if self.training else 0.0,
            enable_gqa=q.size(1) != k.size(1))  # (B, h, Tq, hd)
        if empty is not None:
            out = out.masked_fill(empty, 0.0)
        return out, None


@zoo.hookimpl
def register_attention(register):
    register("sdpa", SDPAttention)
