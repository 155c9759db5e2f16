"""``scalenorm``: one learned scale for the whole vector (Nguyen & Salazar, 2019, "Transformers without
Tears: Improving the Normalization of Self-Attention").

LayerNorm re-centres and re-scales every feature with its own gain; RMSNorm drops the centring; ScaleNorm
goes one step further and keeps a single scalar ``g``::

    y = g · x / max(‖x‖₂, eps)

Every token vector is projected onto the sphere of radius ``g``.  The paper initialises ``g = sqrt(d)``
(then ``‖y‖ = sqrt(d)``, the norm a unit-variance vector has) and reports faster convergence than
LayerNorm for low-resource translation, with ``d`` times fewer norm parameters.  Since
``‖x‖ = sqrt(d) · rms(x)``, ScaleNorm at initialisation computes exactly what RMSNorm does with all
gains 1; the difference is what training may change: one number instead of ``d``.  The norm is taken
in float32 for half-precision inputs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from zoo.components import Norm


@dataclass(frozen=True)
class ScaleNormConfig:
    eps: float = 1e-5
    init: float | None = None  # initial g; None = sqrt(d_model), as in the paper

    def __post_init__(self):
        if not self.eps > 0:
            raise ValueError(f"eps must be > 0, got {self.eps}")
        if self.init is not None and not self.init > 0:
            raise ValueError(f"init must be > 0, got {self.init}")


class ScaleNorm(Norm):
    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.d_model = ctx.d_model
        self.g = nn.Parameter(torch.empty(()))  # the single learned scale
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.constant_(self.g, self.config.init or math.sqrt(self.d_model))

    def forward(self, x):
        xf = x.float()
        norm = xf.norm(dim=-1, keepdim=True).clamp(min=self.config.eps)  # ‖x‖ per token (…, 1)
        return (self.g * xf / norm).to(x.dtype)  # (…, D) on the sphere of radius g
