"""``learned``: a trainable vector per absolute position (BERT, GPT-2).

Simple and effective within the trained range, but a position never seen in training has an
untrained vector, and ``max_len`` is a hard limit.
"""
from __future__ import annotations

from torch import nn

import zoo
from zoo.components import PositionScheme


class Learned(PositionScheme):
    acts_on_embeddings = True

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.table = nn.Embedding(ctx.max_len, ctx.d_model)

    def embed(self, x, pos):
        return x + self.table(pos)  # (B|1, T, D)


@zoo.hookimpl
def register_positions(register):
    register("learned", Learned)
