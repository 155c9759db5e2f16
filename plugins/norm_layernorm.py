"""``layernorm``: normalise each token's feature vector on its own (Ba et al., 2016).

For one token ``x`` of ``d`` features: ``y = (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta``,
statistics taken *across the features of that token*.  No other token and no other sample enters the
computation, so a sequence's output never depends on what else is in the batch, on the batch size, or
on train/eval mode — the reason Transformers use it rather than BatchNorm (see ``batchnorm``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import zoo
from zoo.components import Norm


@dataclass(frozen=True)
class LayerNormConfig:
    eps: float = 1e-5
    bias: bool = True

    def __post_init__(self):
        if not self.eps > 0:
            raise ValueError(f"eps must be > 0, got {self.eps}")


class LayerNorm(Norm):
    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.weight = nn.Parameter(torch.empty(ctx.d_model))
        self.bias = nn.Parameter(torch.empty(ctx.d_model)) if config.bias else None
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x):
        return F.layer_norm(x, (x.size(-1),), self.weight, self.bias, self.config.eps)

    def steps(self, x):  # for the inside view: forward(x) == affine(centred / scale, x)
        xf = x.float() if x.element_size() < 4 else x  # half precision: in float32, as F.layer_norm
        centred = xf - xf.mean(-1, keepdim=True)
        return centred, (centred.pow(2).mean(-1, keepdim=True) + self.config.eps).sqrt()  # (…, D), (…, 1)

    def affine(self, normalized, x):
        y = normalized * self.weight
        return (y if self.bias is None else y + self.bias).to(x.dtype)


@zoo.hookimpl
def register_norms(register):
    register("layernorm", LayerNorm, config=LayerNormConfig)
