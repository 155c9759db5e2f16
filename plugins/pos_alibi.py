"""``alibi``: Attention with Linear Biases (Press, Smith & Lewis, 2022, "Train Short, Test Long").

No position vectors at all.  Each head ``k`` penalises attention to distant keys by a fixed linear
amount added to its scores::

    score(i, j) = q_i · k_j * scale  -  m_k * |i - j|

The slopes ``m_k`` form a geometric sequence, one per head: for ``h`` heads (a power of two)
``m_k = 2^(-max_bias · k / h)``, ``k = 1..h`` (with ``max_bias = 8``: 1/2, 1/4, ... 1/256 for 8 heads),
so some heads look very locally and others almost uniformly.  For other head counts the paper takes
the slopes of the nearest lower power of two and fills up with every other slope of the next one.
Because the bias only depends on the distance it extrapolates to sequences longer than those seen in
training, which was the paper's point.  Used by BLOOM and MPT.

In a causal model the keys right of the query are masked anyway, so ``|i - j|`` equals the paper's
``i - j`` wherever it matters; encoders get the symmetric penalty.  Positions are absolute, so the
bias stays right under a KV cache offset.  Needs an attention kernel that accepts a score bias.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

import zoo
from zoo.components import PositionScheme


@dataclass(frozen=True)
class AlibiConfig:
    max_bias: float = 8.0  # the slopes run from 2^(-max_bias/h) down to 2^(-max_bias)

    def __post_init__(self):
        if self.max_bias <= 0:
            raise ValueError(f"max_bias must be > 0, got {self.max_bias}")


def alibi_slopes(num_heads: int, max_bias: float = 8.0) -> torch.Tensor:
    """``(num_heads,)`` slopes, the paper's recipe (including non-powers of two)."""
    def geometric(n):
        start = 2.0 ** (-max_bias / n)
        return [start ** (k + 1) for k in range(n)]

    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = geometric(closest)
    if closest < num_heads:
        slopes += geometric(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


class Alibi(PositionScheme):
    acts_on_scores = True

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.num_heads = ctx.num_heads
        self.register_buffer("slopes", alibi_slopes(ctx.num_heads, config.max_bias), persistent=False)

    def reset_buffers(self):
        self.slopes = alibi_slopes(self.num_heads, self.config.max_bias).to(self.slopes.device)

    def score_bias(self, pos_q, pos_k):
        dist = (pos_q[:, :, None] - pos_k[:, None, :]).abs()  # (B|1, Tq, Tk)
        bias = -self.slopes.float()[None, :, None, None] * dist[:, None].float()  # (B|1, h, Tq, Tk)
        return bias.to(self.slopes.dtype)  # the model's dtype (the buffer follows model.to(...))


@zoo.hookimpl
def register_positions(register):
    register("alibi", Alibi, config=AlibiConfig)
