"""``deepnorm``: post-norm with an up-weighted residual (Wang, Ma, Dong, Huang, Zhang & Wei, 2022, "DeepNet: Scaling Transformers to 1,000 Layers", arXiv 2203.00555).

Post-norm (``norm(x + f(x))``) gives the best quality when it trains, but deep post-norm stacks
diverge: early updates to the branches move the output too much.  DeepNorm up-weights the residual
so each branch's relative contribution is small::

    x = LayerNorm(α · x + f(x)),     α = (2N)^(1/4)  for an N-layer encoder-only or decoder-only stack

The paper's second half is an initialisation: the feed-forward, value and output projections are
scaled down by ``β = (8N)^(-1/4)``.  A placement does not own those weights, so zoo applies ``α`` only
(``alpha`` overrides it; for an encoder-decoder the paper uses ``0.81·(N⁴M)^(1/16)`` and
``(3M)^(1/4)``); the missing ``β`` is noted in docs/CATALOGUE.md.  No final norm (post-norm).
"""
from __future__ import annotations

from dataclasses import dataclass

import zoo
from zoo.components import Placement


@dataclass(frozen=True)
class DeepNormConfig:
    alpha: float | None = None  # None: (2N)^(1/4) from the stack's number of layers

    def __post_init__(self):
        if self.alpha is not None and not self.alpha > 0:
            raise ValueError(f"alpha must be > 0, got {self.alpha}")


class DeepNorm(Placement):
    """Post-norm with the residual up-weighted by α = (2N)^(1/4) (Wang et al., 2022, "DeepNet: Scaling Transformers to 1,000 Layers", arXiv 2203.00555)."""

    final_norm = False
    lesson = {
        "en": "Problem: post-norm Transformers reach better quality than pre-norm but diverge when deep, "
              "because early updates change the output too much. DeepNorm up-weights the residual: "
              "x = LN(α·x + f(x)), α = (2N)^(1/4), so every branch is a small correction (the paper also "
              "shrinks branch weights at init by β = (8N)^(-1/4)). It trained 1,000-layer Transformers "
              "stably.",
        "zh": "问题：后置归一化的 Transformer 效果比前置归一化好，但层数一多就发散，因为早期更新让输出变化过大。DeepNorm "
              "放大残差：x = LN(α·x + f(x))，α = (2N)^(1/4)，让每个分支只是小修正（论文还在初始化时把分支权重乘以 "
              "β = (8N)^(-1/4)）。它稳定地训练了 1000 层的 Transformer。",
    }

    def __init__(self, config, ctx, make_norm):
        super().__init__(config, ctx, make_norm)
        self.norm = make_norm()
        self.alpha = config.alpha if config.alpha is not None else (2 * ctx.num_layers) ** 0.25

    def enter(self, x):
        return x

    def exit(self, x, y):
        return self.norm(self.alpha * x + y)


@zoo.hookimpl
def register_placements(register):
    register("deepnorm", DeepNorm, config=DeepNormConfig)
