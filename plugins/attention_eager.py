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

This is the kernel to read, and the one the inspection tools use: :meth:`steps` returns every
intermediate by name, so ``zoo.trace`` records them without computing attention a second time.  Its
steps are the pieces every softmax variant shares (:mod:`zoo.model.kernels`: ``bias_and_mask``,
``softmax_values``).
"""
from __future__ import annotations

import torch

import zoo
from zoo.components import AttentionKernel, Capabilities, repeat_kv
from zoo.model.kernels import bias_and_mask, softmax_values


class EagerAttention(AttentionKernel):
    capabilities = Capabilities(returns_weights=True)

    def score(self, q, k):
        """``q·kᵀ · scale``, ``(B, h, Tq, Tk)``: the one line a variant of softmax attention changes
        (``softcap`` caps it)."""
        return torch.matmul(q, k.transpose(-2, -1)) * self.scale

    def steps(self, q, k, v, mask=None, bias=None):
        k, v = repeat_kv(k, v, q.size(1))  # (B, h, Tk, hd)
        scores = bias_and_mask(self.score(q, k), bias)  # (B, h, Tq, Tk): q·kᵀ·scale + bias
        masked = bias_and_mask(scores, mask=mask)  # -inf where the mask forbids
        out, weights = softmax_values(masked, v, self.dropout_p, self.training)  # (B, h, Tq, hd); rows sum to 1
        return {"scores": scores, "scores_masked": masked, "weights": weights, "heads": out}

    def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
        s = self.steps(q, k, v, mask, bias)
        return s["heads"], (s["weights"] if need_weights else None)


@zoo.hookimpl
def register_attention(register):
    register("eager", EagerAttention)
