"""``none``: no feed-forward sub-layer -- the block is attention only.

Olsson et al. (2022), "In-context Learning and Induction Heads", study *attention-only*
Transformers: each block is ``x + attn(n(x))`` and nothing else, so every path through the model is
a product of attention heads and the circuits can be read off exactly.  ``ffn: none`` gives that
block in zoo: the feed-forward sub-layer adds exactly 0 to the residual stream and holds no
parameters (its placement's norm stays in the block but, receiving a gradient of exactly 0, learns
nothing -- a zero gradient rather than none, so optimisers, DDP and gradient checks see every parameter;
under pre-norm placement the block computes exactly ``x + attn(n(x))``).  ``d_ff`` is then unused.
"""
from __future__ import annotations

from dataclasses import dataclass

import zoo
from zoo.components import FeedForward


@dataclass(frozen=True)
class NoFFNConfig:
    pass


class NoFFN(FeedForward):
    """Adds nothing: ``forward(x) = 0 * x``, of ``x``'s shape and dtype (a NaN in ``x`` stays NaN, as
    any feed-forward block would pass it on; ``x + (-0.0) == x`` exactly)."""

    def forward(self, x):
        return x.mul(0.0)  # (B, T, D): the residual stream passes unchanged, the norm gets grad 0

    def macs_per_token(self) -> int:
        return 0


@zoo.hookimpl
def register_ffns(register):
    register("none", NoFFN, config=NoFFNConfig)
