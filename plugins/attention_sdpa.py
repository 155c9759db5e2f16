"""``sdpa``: PyTorch's fused ``F.scaled_dot_product_attention`` (the fast default).

Same function as ``eager`` (checked against it and against the naive loop), but computed by a fused
kernel (FlashAttention / memory-efficient / C++ math, chosen by PyTorch) that never materialises the
``(Tq, Tk)`` weights in Python, so it cannot return them: inspection switches to ``eager`` for the
inspected run only.  It declares a fused causal path, so a plain causal mask arrives as
``is_causal=True`` without a mask tensor; grouped-query attention uses ``enable_gqa`` rather than
copying k/v.  A score bias (ALiBi, T5) and a boolean mask are merged into one float ``attn_mask``.

Decoding with grouped-query attention folds each key/value head's group of queries into the query
length: one new token's ``(B, h, 1, hd)`` queries become ``(B, h_kv, h / h_kv, hd)``, so the fused
kernel reads every cached key once per group instead of once per query head (the group's queries
sit at the same position and share one mask row, so nothing else changes).  On a CPU, 16 rows x 4
heads over ~300 cached keys took 194 us that way against 306 us with ``enable_gqa`` (one thread).

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
        B, h, Tq, hd = q.shape
        h_kv = k.size(1)
        if Tq == 1 and h != h_kv and not is_causal and bias is None and (mask is None or mask.dim() < 3
                                                                      or mask.size(-3) == 1):
            # one query per head (decoding): the group of each kv head as its query length
            out, _ = self.forward(q.reshape(B, h_kv, h // h_kv, hd), k, v, mask=mask)
            return out.reshape(B, h, 1, hd), None
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
