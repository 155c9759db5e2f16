"""The mask rules: who may attend to whom.  True means "may attend" (the lecture scripts' convention).

- ``causal`` (look-ahead mask): query ``i`` sees keys ``j <= i``.  A decoder must not peek at the words
  it is about to predict.
- ``bidirectional``: everyone sees everyone (encoders).  It builds no tensor at all.
- ``prefix`` (prefix LM, as in UniLM / T5's prefix LM): the first ``P`` tokens see each other both
  ways; every later token sees the prefix and, causally, its own past.  ``P`` is the rule's
  ``length``, or per sample from ``model(ids, prefix_lengths=...)``.
- ``sliding_window``: query ``i`` sees keys with ``|i - j| < window`` (Longformer, Mistral).  Compose
  it with causal (``mask: [causal, {kind: sliding_window, window: 64}]``) for a causal local window.

Padding masks are not a rule: the engine adds them automatically whenever a batch has padding.
All rules use absolute positions from the :class:`~zoo.components.MaskContext`, so they stay correct
for queries that start at an offset under a KV cache.
"""
from __future__ import annotations

from dataclasses import dataclass

import zoo
from zoo.components import MaskRule
from zoo.errors import ParamError


class Causal(MaskRule):
    """Look-ahead mask: query i sees keys j <= i."""

    is_causal = True

    def forward(self, ctx):
        return ctx.key_positions() <= ctx.query_positions()  # (Tq, Tk)


class Bidirectional(MaskRule):
    """No restriction: every query sees every (non-padding) key."""

    def forward(self, ctx):
        return None


@dataclass(frozen=True)
class PrefixConfig:
    length: int = 0  # default prefix length when none is passed at call time

    def __post_init__(self):
        if self.length < 0:
            raise ParamError.of("param.at_least", name="length", minimum=0, value=self.length)


class Prefix(MaskRule):
    """Prefix LM: the first `length` tokens see each other both ways, the rest causally."""

    def forward(self, ctx):
        qpos, kpos = ctx.query_positions(), ctx.key_positions()  # (Tq, 1), (1, Tk)
        causal = kpos <= qpos
        if ctx.prefix_lengths is None:
            return causal | (kpos < self.config.length)  # (Tq, Tk)
        plen = ctx.prefix_lengths.to(ctx.device).view(-1, 1, 1, 1)  # (B, 1, 1, 1)
        return causal | (kpos < plen)  # (B, 1, Tq, Tk)


@dataclass(frozen=True)
class SlidingWindowConfig:
    window: int = 64

    def __post_init__(self):
        if self.window < 1:
            raise ParamError.of("param.at_least", name="window", minimum=1, value=self.window)


class SlidingWindow(MaskRule):
    """Local attention: query i sees keys j with |i - j| < window."""

    def forward(self, ctx):
        dist = ctx.query_positions() - ctx.key_positions()  # (Tq, Tk)
        return dist.abs() < self.config.window


@zoo.hookimpl
def register_masks(register):
    register("causal", Causal)
    register("bidirectional", Bidirectional)
    register("prefix", Prefix, config=PrefixConfig)
    register("sliding_window", SlidingWindow, config=SlidingWindowConfig)
