"""``rmsnorm_plus1``: RMSNorm whose scale is stored as an offset from 1 (Gemma, Gemma 2).

    y = x / sqrt(mean(x²) + eps) * (1 + w)

The same function as ``rmsnorm`` with ``gamma = 1 + w``; only the parameterisation differs.  The
weight starts at zero, so weight decay pulls the scale towards 1 (the identity) rather than towards
0, which would shrink every normalised activation.  Gemma's checkpoints store ``w``, so zoo stores
it too (converting ``1 + w`` into a plain RMSNorm weight would round in bf16 and no longer give back
the original tensors).  As Gemma does, the sum ``1 + w`` and the product are taken in float32.
"""
from __future__ import annotations

from torch import nn

import zoo
from zoo.plugins.norm_rmsnorm import RMSNorm, RMSNormConfig


class RMSNormPlus1(RMSNorm):  # rmsnorm's normalisation, the scale 1 + w

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        nn.init.zeros_(self.weight)  # w = 0: the scale starts at 1

    def reset_parameters(self):
        nn.init.zeros_(self.weight)

    def forward(self, x):
        return (self.normalize(x) * (1.0 + self.weight.float())).to(x.dtype)

    def affine(self, normalized, x):  # the steps are rmsnorm's
        return (normalized * (1.0 + self.weight.float())).to(x.dtype)


@zoo.hookimpl
def register_norms(register):
    register("rmsnorm_plus1", RMSNormPlus1, config=RMSNormConfig)
