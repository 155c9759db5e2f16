"""``rmsnorm``: root-mean-square layer normalisation (Zhang & Sennrich, 2019; T5, Llama, Mistral).

LayerNorm centres each token's features and rescales them; RMSNorm only rescales::

    y = x / sqrt(mean(x²) + eps) * gamma

No mean, no bias.  The paper's finding is that the re-*scaling* is what stabilises training; dropping
the re-centring saves a reduction and a parameter vector with no loss in quality.  T5 calls it
"T5LayerNorm", Llama "LlamaRMSNorm" — the same function.  As both do, the mean square is taken in
float32 even for half-precision inputs (a sum of squares of bf16 numbers loses precision fast).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

import zoo
from zoo.components import Norm


@dataclass(frozen=True)
class RMSNormConfig:
    eps: float = 1e-6

    def __post_init__(self):
        if not self.eps > 0:
            raise ValueError(f"eps must be > 0, got {self.eps}")


class RMSNorm(Norm):
    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.weight = nn.Parameter(torch.ones(ctx.d_model))

    def reset_parameters(self):
        nn.init.ones_(self.weight)

    def normalize(self, x):
        """``x / sqrt(mean(x²) + eps)`` in float32, ``(…, D)``; the scale is applied by forward."""
        xf = x.float()
        return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.config.eps)

    def forward(self, x):
        return self.weight * self.normalize(x).to(x.dtype)

    def steps(self, x):  # for the inside view: forward(x) == affine(centred / scale, x)
        xf = x.float()
        return xf, (xf.pow(2).mean(-1, keepdim=True) + self.config.eps).sqrt()  # (…, D), (…, 1)

    def affine(self, normalized, x):
        return self.weight * normalized.to(x.dtype)


@zoo.hookimpl
def register_norms(register):
    register("rmsnorm", RMSNorm, config=RMSNormConfig)
