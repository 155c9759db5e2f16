"""``eager``: scaled dot-product attention written out step by step, returning the weights.

The lecture scripts' four lines, batched over heads::

    scores  = q @ kᵀ                 # how well each query matches each key      (B, h, Tq, Tk)
    scaled  = scores / sqrt(d_k)     # keep the logits' variance ~1, whatever d_k is
    masked  = scaled where mask else -inf
    weights = softmax(masked)        # each row sums to 1
    out     = weights @ v            # a weighted average of the values          (B, h, Tq, hd)

Why divide by sqrt(d_k): with q, k of unit-variance entries, q·k is a sum of d_k products and has
variance d_k; without the scaling a large d_k pushes softmax into a near one-hot regime where its
gradient vanishes (Vaswani et al., 2017, §3.2.1).  The scale is ``1/sqrt(head_dim)``, the width of
one head, not of the model.

This is the kernel to read, and the one the inspection tools use because it returns the weights.
"""
from __future__ import annotations

import torch

import zoo
from zoo.components import AttentionKernel, Capabilities, causal_mask, guard_empty_rows, repeat_kv


class EagerAttention(AttentionKernel):
    capabilities = Capabilities(returns_weights=True)

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        k, v = repeat_kv(k, v, q.size(1))  # (B, h, Tk, hd)
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale  # (B, h, Tq, Tk)
        if bias is not None:
            scores = scores + bias
        if is_causal:
            mask = causal_mask(q.size(-2), k.size(-2), q.device)
        mask, empty = guard_empty_rows(mask)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # (B, h, Tq, Tk), rows sum to 1
        if empty is not None:
            weights = weights.masked_fill(empty, 0.0)  # fully masked rows attend to nothing
        if self.training and self.dropout_p > 0:
            weights = torch.nn.functional.dropout(weights, self.dropout_p)
        out = torch.matmul(weights, v)  # (B, h, Tq, hd)
        return out, (weights if need_weights else None)


@zoo.hookimpl
def register_attention(register):
    register("eager", EagerAttention)
