"""Norm placements: where the norm sits relative to a residual sub-layer ``f``.

- ``post`` (the original Transformer, BERT): ``x = norm(x + f(x))``.  The residual stream is normalised
  after every sub-layer; deep post-norm stacks need learning-rate warm-up to train stably (Xiong et al.,
  2020, "On Layer Normalization in the Transformer Architecture").
- ``pre`` (GPT-2 and most modern models): ``x = x + f(norm(x))``.  The residual path is an identity from
  input to output, so gradients flow unimpeded; the stack then needs one final norm.
"""
from __future__ import annotations

import zoo
from zoo.components import Placement


class PreNorm(Placement):
    final_norm = True

    def __init__(self, config, ctx, make_norm):
        super().__init__(config, ctx, make_norm)
        self.norm = make_norm()

    def enter(self, x):
        return self.norm(x)

    def exit(self, x, y):
        return x + y


class PostNorm(Placement):
    final_norm = False

    def __init__(self, config, ctx, make_norm):
        super().__init__(config, ctx, make_norm)
        self.norm = make_norm()

    def enter(self, x):
        return x

    def exit(self, x, y):
        return self.norm(x + y)


@zoo.hookimpl
def register_placements(register):
    register("pre", PreNorm)
    register("post", PostNorm)
