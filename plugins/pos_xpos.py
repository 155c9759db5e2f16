"""``xpos``: extrapolatable rotary positions (Sun, Dong, Patra, Ma, Huang, Benhaim, Chaudhary, Song & Wei, 2022, "A Length-Extrapolatable Transformer", arXiv 2212.10554).

RoPE's attention to a far key oscillates instead of fading, which hurts when a model reads longer
sequences than it was trained on.  xPos multiplies RoPE's rotation by an exponential decay: the
query at position ``n`` is scaled up by ``ζ^(n/γ)`` and the key at ``m`` down by ``ζ^(-m/γ)``, per
feature pair ``i``, so their dot product carries ``ζ_i^((n-m)/γ)``::

    ζ_i = (2i/hd + 0.4) / 1.4     (in (0.29, 1): fast pairs decay most)
    q'_n = R(nθ) q_n · ζ^(n/γ),   k'_m = R(mθ) k_m · ζ^(-m/γ),   γ = scale_base (512)

The decay depends only on ``n - m``, so positions are shifted by a fixed centre (``max_len // 2``)
to keep both factors near 1; the attention output is unchanged by the shift (it cancels in q·k),
and keys are scaled with their absolute positions before they enter the KV cache.  Pairs are
``(2i, 2i+1)`` as in the paper and x-transformers.  For keys *after* the query the factor would
grow, so xPos is for causal stacks only.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import zoo
from zoo.components import PositionScheme


@dataclass(frozen=True)
class XPosConfig:
    base: float = 10000.0
    scale_base: float = 512.0  # γ: the decay's length scale

    def __post_init__(self):
        if self.base <= 1:
            raise ValueError(f"base must be > 1, got {self.base}")
        if not self.scale_base > 0:
            raise ValueError(f"scale_base must be > 0, got {self.scale_base}")


class XPos(PositionScheme):
    """Rotary positions with an exponential decay, for length extrapolation (Sun et al., 2022, "A Length-Extrapolatable Transformer", arXiv 2212.10554)."""

    acts_on_qk = True
    lesson = {
        "en": "Problem: with RoPE, attention to far-away keys oscillates instead of fading, so models "
              "trained on short texts degrade on longer ones. xPos adds a per-frequency decay to the "
              "rotation: q·k carries ζ_i^((n-m)/γ) with ζ_i = (2i/d + 0.4)/1.4 < 1. Fast-rotating "
              "features decay quickly, slow ones barely. It improves length extrapolation of causal LMs "
              "(TorchScale's LEX); combine with a local window for best effect.",
        "zh": "问题：使用 RoPE 时，对远处键的注意力会振荡而不是衰减，于是在短文本上训练的模型读长文本时变差。xPos 在旋转"
              "之外为每个频率加一个衰减：q·k 带有因子 ζ_i^((n-m)/γ)，ζ_i = (2i/d + 0.4)/1.4 < 1。转得快的特征衰减快，"
              "转得慢的几乎不衰减。它改善因果语言模型的长度外推（TorchScale 的 LEX）；与局部窗口结合效果最好。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        if not ctx.causal:
            raise zoo.IncompatibleComponentsError(
                "xpos decays attention towards earlier keys only; it is defined for causal (decoder) "
                "stacks", where="positions.kind", options=["rope", "alibi", "t5_relative"],
                fix="use xpos in a decoder, or rope in encoders")
        if ctx.head_dim % 2:
            raise zoo.SpecError(f"xpos rotates feature pairs; head_dim {ctx.head_dim} is odd",
                                where="positions.kind", fix="use an even head_dim")
        self.hd, self.center = ctx.head_dim, ctx.max_len // 2

    def qk_state(self, pos):
        """cos/sin ``(B|1, 1, T, hd/2)`` and the query / key scales, float32."""
        hd = self.hd
        i2 = torch.arange(0, hd, 2, device=pos.device, dtype=torch.float32)  # 2i, (hd/2,)
        inv_freq = self.config.base ** (-i2 / hd)
        zeta = (i2 + 0.4 * hd) / (1.4 * hd)  # (hd/2,)
        p = pos.to(torch.float32)[:, None, :, None]  # (B|1, 1, T, 1)
        ang = p * inv_freq  # (B|1, 1, T, hd/2)
        scale = zeta ** ((p - self.center) / self.config.scale_base)  # ζ^(n/γ), centred
        return ang.cos(), ang.sin(), scale

    def rotate(self, q, k, state):
        cos, sin, scale = state
        return self._rotate_scaled(q, cos, sin, scale), self._rotate_scaled(k, cos, sin, 1.0 / scale)

    @staticmethod
    def _rotate_scaled(x, cos, sin, scale):
        xf = x.float()
        a, b = xf[..., 0::2], xf[..., 1::2]  # (B, h, T, hd/2): pairs (2i, 2i+1)
        out = torch.stack([(a * cos - b * sin) * scale, (a * sin + b * cos) * scale], dim=-1)
        return out.flatten(-2).to(x.dtype)  # (B, h, T, hd)


@zoo.hookimpl
def register_positions(register):
    register("xpos", XPos, config=XPosConfig)
