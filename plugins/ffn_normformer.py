"""``normformer``: the feed-forward block with a LayerNorm after its activation (Shleifer, Weston & Ott, 2021, "NormFormer: Improved Transformer Pretraining with Extra Normalization", arXiv 2110.09456).

Pre-norm Transformers train stably but unevenly: gradients at early layers are much larger than at
late ones.  NormFormer adds three cheap operations; the one inside the feed-forward block is a
LayerNorm on the hidden activations::

    FFN(x) = W2 · LayerNorm(act(W1 x + b1)) + b2     # the norm over the d_ff features

It rescales what the first matrix produces before the second one sees it, evening out gradient
magnitudes across depth.  The paper reaches GPT-3-Large perplexity 24% faster (with the other two
additions: a norm after attention, which zoo's ``sandwich`` placement gives, and head scaling).
x-transformers calls it ``FeedForward(post_act_ln=True)``.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn

import zoo
from zoo.components import Activation, FeedForward
from zoo.registry import activation_fn


@dataclass(frozen=True)
class NormFormerConfig:
    activation: Activation = "gelu"
    bias: bool = True
    eps: float = 1e-5


class NormFormerMLP(FeedForward):
    """Feed-forward block with a LayerNorm after the activation (Shleifer et al., 2021, "NormFormer", arXiv 2110.09456)."""

    lesson = {
        "en": "Problem: in pre-norm Transformers, early layers receive much larger gradients than late "
              "ones. NormFormer normalises the feed-forward block's hidden activations, "
              "FFN(x) = W2·LN(act(W1x)), so the second matrix always sees unit-scale inputs. With its "
              "companion changes it reached the same perplexity 24% faster in the paper for about 0.4% "
              "more parameters.",
        "zh": "问题：在前置归一化的 Transformer 中，浅层得到的梯度远大于深层。NormFormer 在前馈块的隐藏激活上再做一次"
              "归一化：FFN(x) = W2·LN(act(W1x))，让第二个矩阵总看到单位尺度的输入。配合另外两处改动，论文中以约 0.4% "
              "的额外参数，用少 24% 的时间达到相同困惑度。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.up = nn.Linear(ctx.d_model, ctx.d_ff, bias=config.bias)
        self.act = activation_fn(config.activation)  # the registered activation's function
        self.norm = nn.LayerNorm(ctx.d_ff, eps=config.eps)
        self.down = nn.Linear(ctx.d_ff, ctx.d_model, bias=config.bias)

    def forward(self, x):
        return self.down(self.norm(self.act(self.up(x))))  # (B, T, D) -> (B, T, d_ff) -> (B, T, D)


@zoo.hookimpl
def register_ffns(register):
    register("normformer", NormFormerMLP, config=NormFormerConfig)
