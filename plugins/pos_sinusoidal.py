"""``sinusoidal``: the fixed sine/cosine "coordinate fingerprint" of Vaswani et al. (2017).

    PE[pos, 2i]   = sin(pos / base^(2i / d))
    PE[pos, 2i+1] = cos(pos / base^(2i / d))

Each pair of dimensions is a clock running at its own frequency, from one turn every 2π positions
(i = 0) to one every 2π·base positions.  Nothing is learned, any position up to ``max_len`` has a
fingerprint, and ``PE[pos + k]`` is a fixed rotation of ``PE[pos]`` for every pair, which makes
relative offsets easy for attention to read.  Added to the (scaled) token embeddings.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

import zoo
from zoo.components import PositionScheme


@dataclass(frozen=True)
class SinusoidalConfig:
    base: float = 10000.0

    def __post_init__(self):
        if self.base <= 1:
            raise ValueError(f"base must be > 1, got {self.base}")


def sinusoid_table(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """``(max_len, d_model)`` table of sinusoidal encodings (odd ``d_model`` drops the last cosine)."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (L, 1)
    freq = torch.exp(-math.log(base) * torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * freq)  # (L, ceil(d/2))
    table[:, 1::2] = torch.cos(pos * freq)[:, : d_model // 2]
    return table.float()


class Sinusoidal(PositionScheme):
    acts_on_embeddings = True

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.max_len, self.d_model = ctx.max_len, ctx.d_model
        self.register_buffer("table", sinusoid_table(ctx.max_len, ctx.d_model, config.base),
                             persistent=False)

    def reset_buffers(self):
        self.table = sinusoid_table(self.max_len, self.d_model, self.config.base).to(self.table.device)

    def embed(self, x, pos):
        return x + self.table[pos].to(x.dtype)  # (B|1, T, D) broadcast over the batch


@zoo.hookimpl
def register_positions(register):
    register("sinusoidal", Sinusoidal, config=SinusoidalConfig)
