"""``sinusoidal_split``: the sinusoidal encodings with all sines first, then all cosines (Marian).

    PE[pos, i]         = sin(pos / base^(2i / d))      for i < d/2
    PE[pos, d/2 + i]   = cos(pos / base^(2i / d))

The same numbers as ``sinusoidal`` (Vaswani et al., 2017), in another feature order: there, the
sine and cosine of each frequency sit side by side (features ``2i``, ``2i + 1``).  A model only ever
sees the order it was trained with, so a checkpoint from Marian / OPUS-MT (and fairseq's
``SinusoidalPositionalEmbedding``) needs this layout; nothing else changes.
"""
from __future__ import annotations

import torch

import zoo
from zoo.plugins.pos_sinusoidal import Sinusoidal, SinusoidalConfig, sinusoid_table


def split_table(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """``(max_len, d_model)``: the interleaved table's sines, then its cosines."""
    t = sinusoid_table(max_len, d_model, base)  # (L, d): sin, cos, sin, cos, ...
    return torch.cat([t[:, 0::2], t[:, 1::2]], dim=-1)  # (L, d): sin ... sin, cos ... cos


class SinusoidalSplit(Sinusoidal):
    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.table = split_table(ctx.max_len, ctx.d_model, config.base)

    def reset_buffers(self):
        self.table = split_table(self.max_len, self.d_model, self.config.base).to(self.table.device)


@zoo.hookimpl
def register_positions(register):
    register("sinusoidal_split", SinusoidalSplit, config=SinusoidalConfig)
