"""``softcap``: attention whose scores are soft-capped before the softmax (Gemma 2).

    scores = cap * tanh(q·kᵀ * scale / cap)

``tanh`` is close to the identity for small scores and flattens towards ``±cap`` for large ones, so
no single key can take all of a row's attention by an ever larger logit: a smooth limit instead of a
hard clip, with a gradient everywhere.  Gemma 2 caps attention scores at 50 (and, separately, its
final logits at 30: the spec's ``logit_softcap``).  The cap changes the scores themselves, which a
fused kernel (``sdpa``) cannot do, so this kernel is the eager computation with one extra line; it
returns the weights like ``eager``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import zoo
from zoo.components import AttentionKernel, Capabilities, repeat_kv


@dataclass(frozen=True)
class SoftcapConfig:
    cap: float = 50.0

    def __post_init__(self):
        if not self.cap > 0:
            raise ValueError(f"cap must be > 0, got {self.cap}")


class SoftcapAttention(AttentionKernel):
    # exact=False: not plain softmax attention, so the kit's naive-loop reference does not apply
    # (tests/test_convert_parts.py checks it against a per-query loop with the cap)
    capabilities = Capabilities(returns_weights=True, exact=False)

    def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
        k, v = repeat_kv(k, v, q.size(1))  # (B, h, Tk, hd)
        cap = self.config.cap
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale  # (B, h, Tq, Tk)
        scores = cap * torch.tanh(scores / cap)  # soft cap: |scores| < cap
        if bias is not None:
            scores = scores + bias
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # (B, h, Tq, Tk)
        dropped = weights
        if self.training and self.dropout_p > 0:
            dropped = torch.nn.functional.dropout(weights, self.dropout_p)
        out = torch.matmul(dropped, v)  # (B, h, Tq, hd)
        return out, (weights if need_weights else None)


@zoo.hookimpl
def register_attention(register):
    register("softcap", SoftcapAttention, config=SoftcapConfig)
