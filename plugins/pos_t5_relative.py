"""``t5_relative``: T5's bucketed relative position bias (Raffel et al., 2020; after Shaw et al., 2018).

Every head learns one scalar per *bucket* of relative offsets ``j - i`` (key minus query), added to
its attention scores.  Small offsets get a bucket each; larger ones share logarithmically wider
buckets up to ``max_distance``, beyond which all offsets share the last bucket::

    bidirectional (encoder):  half the buckets for keys after the query, half for keys before;
    unidirectional (decoder): only keys at or before the query (j <= i) get distinct buckets;
    within a half: offsets 0 .. n/2-1 exact, then log-spaced buckets up to max_distance.

The table (``num_buckets x num_heads``) belongs to the stack's position scheme, so the bias is
computed once per forward and shared by every layer — exactly T5, where the first layer computes it
and the others reuse it.  T5 adds no position information anywhere else, and it does not scale q·k by
1/sqrt(d) (set ``attn_scale: 1.0``), having folded the scale into its initialisation.  Cross-attention
gets no position bias.  Only offsets matter, so the bias is the same under a KV cache offset and for
left-padded rows.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

import zoo
from zoo.components import PositionScheme
from zoo.errors import ParamError


@dataclass(frozen=True)
class T5RelativeConfig:
    num_buckets: int = 32
    max_distance: int = 128
    bidirectional: Optional[bool] = None  # None: bidirectional in encoders, one-way in decoders

    def __post_init__(self):
        if self.num_buckets < 4:
            raise ParamError.of("param.at_least", name="num_buckets", minimum=4, value=self.num_buckets)
        if self.max_distance < 2:
            raise ParamError.of("param.at_least", name="max_distance", minimum=2, value=self.max_distance)


def relative_bucket(rel: torch.Tensor, bidirectional: bool, num_buckets: int,
                    max_distance: int) -> torch.Tensor:
    """Map offsets ``rel = j - i`` (any shape, integer) to bucket ids in ``[0, num_buckets)``."""
    buckets = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (rel > 0).long() * num_buckets  # keys after the query: upper half
        dist = rel.abs()
    else:
        dist = (-rel).clamp(min=0)  # keys after the query all land in bucket 0 (they are masked)
    max_exact = num_buckets // 2
    is_small = dist < max_exact
    large = max_exact + (torch.log(dist.float().clamp(min=1) / max_exact)
                         / math.log(max_distance / max_exact) * (num_buckets - max_exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, dist, large)


class T5Relative(PositionScheme):
    acts_on_scores = True

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.bidirectional = (not ctx.causal) if config.bidirectional is None else config.bidirectional
        self.bias = nn.Embedding(config.num_buckets, ctx.num_heads)  # one scalar per bucket and head

    def score_bias(self, pos_q, pos_k):
        rel = pos_k[:, None, :] - pos_q[:, :, None]  # (B|1, Tq, Tk): key minus query
        b = relative_bucket(rel, self.bidirectional, self.config.num_buckets, self.config.max_distance)
        return self.bias(b).permute(0, 3, 1, 2)  # (B|1, Tq, Tk, h) -> (B|1, h, Tq, Tk)


@zoo.hookimpl
def register_positions(register):
    register("t5_relative", T5Relative, config=T5RelativeConfig)
