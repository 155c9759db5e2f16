"""``learned_offset``: learned absolute positions whose table starts ``offset`` rows in.

Position ``p`` reads row ``p + offset`` of a ``(max_len + offset, D)`` table; the first ``offset``
rows are never read for real tokens.  Three well-known models do this for historical reasons:

- OPT and BART (fairseq lineage) reserve 2 rows (``offset: 2``): fairseq numbered positions from
  ``padding_idx + 1`` with ``padding_idx = 1``, and the converted tables kept the layout;
- RoBERTa numbers real tokens from ``pad_token_id + 1`` (``offset: 2`` with pad id 1), so its
  514-row table serves 512 positions.

Keeping the reserved rows (instead of slicing them away) makes a converted checkpoint hold exactly
the source's tensors, so converting back gives the identical model.  The function is otherwise the
``learned`` scheme: ``x + table[pos + offset]``.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn

import zoo
from zoo.components import PositionScheme


@dataclass(frozen=True)
class LearnedOffsetConfig:
    offset: int = 2  # rows before position 0

    def __post_init__(self):
        if not 0 <= self.offset <= 1024:
            raise ValueError(f"offset must be in [0, 1024], got {self.offset}")


class LearnedOffset(PositionScheme):
    acts_on_embeddings = True

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.offset = config.offset
        self.table = nn.Embedding(ctx.max_len + config.offset, ctx.d_model)  # (max_len + offset, D)

    def embed(self, x, pos):
        return x + self.table(pos + self.offset)  # (B|1, T, D)


@zoo.hookimpl
def register_positions(register):
    register("learned_offset", LearnedOffset, config=LearnedOffsetConfig)
