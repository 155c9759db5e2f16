"""``scaled_sinusoidal``: sinusoidal positions times one learned scalar (Hua, Dai, Liu & Le, 2022, "Transformer Quality in Linear Time", arXiv 2202.10447).

Fixed sinusoids have unit amplitude whatever ``d_model`` is, while token embeddings are initialised
small, so at the start positions can swamp the tokens (or, scaled down, vanish).  FLASH multiplies the
sinusoids by a single learned scalar, initialised to ``d_model^(-1/2)``, and lets training decide the
balance::

    x_t = e_t + a · [sin(t·ω) | cos(t·ω)],   ω_i = base^(-i / (D/2)),  a learned, a_0 = D^(-1/2)

The layout (all sines, then all cosines) is x-transformers' ``ScaledSinusoidalEmbedding``.  Acts on
the embeddings, so any attention kernel works; absolute positions make it right under a KV cache.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

import zoo
from zoo.components import PositionScheme


@dataclass(frozen=True)
class ScaledSinusoidalConfig:
    base: float = 10000.0

    def __post_init__(self):
        if self.base <= 1:
            raise ValueError(f"base must be > 1, got {self.base}")


class ScaledSinusoidal(PositionScheme):
    """Sinusoidal positions times a learned scalar initialised to d_model^-1/2 (Hua et al., 2022, "Transformer Quality in Linear Time", arXiv 2202.10447)."""

    acts_on_embeddings = True
    lesson = {
        "en": "Problem: fixed sinusoids have amplitude 1 regardless of width, so they can dominate (or be "
              "drowned by) the token embeddings, and the right balance is unknown in advance. FLASH "
              "scales them by one learned scalar: x_t = e_t + a·PE(t), a initialised to D^(-1/2). One "
              "parameter lets the model tune how loudly position speaks.",
        "zh": "问题：固定的正弦位置编码幅度恒为 1，与模型宽度无关，可能压过（或被淹没于）词嵌入，而合适的比例事先并不知道。"
              "FLASH 用一个可学习的标量缩放它：x_t = e_t + a·PE(t)，a 初始化为 D^(-1/2)。只用一个参数，让模型自己调节"
              "位置信息的“音量”。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        if ctx.d_model % 2:
            raise zoo.SpecError(f"scaled_sinusoidal needs an even d_model, got {ctx.d_model}",
                                where="d_model", fix="use an even d_model")
        self.half = ctx.d_model // 2
        self.scale = nn.Parameter(torch.tensor(ctx.d_model ** -0.5))

    def embed(self, x, pos):
        inv_freq = self.config.base ** -(torch.arange(self.half, device=x.device, dtype=torch.float32)
                                         / self.half)  # (D/2,)
        ang = pos.to(torch.float32)[..., None] * inv_freq  # (B|1, T, D/2)
        pe = torch.cat([ang.sin(), ang.cos()], dim=-1)  # (B|1, T, D)
        return x + (pe * self.scale.float()).to(x.dtype)


@zoo.hookimpl
def register_positions(register):
    register("scaled_sinusoidal", ScaledSinusoidal, config=ScaledSinusoidalConfig)
