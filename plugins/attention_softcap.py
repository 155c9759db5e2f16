"""``softcap``: attention whose scores are soft-capped before the softmax (Gemma 2).

    scores = cap * tanh(q·kᵀ * scale / cap)

``tanh`` is close to the identity for small scores and flattens towards ``±cap`` for large ones, so
no single key can take all of a row's attention by an ever larger logit: a smooth limit instead of a
hard clip, with a gradient everywhere.  Gemma 2 caps attention scores at 50 (and, separately, its
final logits at 30: the spec's ``logit_softcap``).  The cap changes the scores themselves, which a
fused kernel (``sdpa``) cannot do, so this kernel is ``eager`` with its score line capped: it returns
the weights, and shows its steps to ``zoo.trace``, like ``eager``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import zoo
from zoo.components import Capabilities
from zoo.plugins.attention_eager import EagerAttention


@dataclass(frozen=True)
class SoftcapConfig:
    cap: float = 50.0

    def __post_init__(self):
        if not self.cap > 0:
            raise ValueError(f"cap must be > 0, got {self.cap}")


class SoftcapAttention(EagerAttention):
    # eager with the scores capped: the bias, mask, softmax, dropout and the steps zoo.trace
    # records are eager's
    # exact=False: not plain softmax attention, so the kit's naive-loop reference does not apply
    # (tests/convert/test_convert_parts.py checks it against a per-query loop with the cap)
    capabilities = Capabilities(returns_weights=True, exact=False)

    def score(self, q, k):
        cap = self.config.cap
        return cap * torch.tanh(super().score(q, k) / cap)  # (B, h, Tq, Tk), |scores| < cap


@zoo.hookimpl
def register_attention(register):
    register("softcap", SoftcapAttention, config=SoftcapConfig)
