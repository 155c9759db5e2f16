"""``stochastic_depth``: pre-norm whose residual branches are dropped at random per sample in training (Huang, Sun, Liu, Sedra & Weinberger, 2016, "Deep Networks with Stochastic Depth", arXiv 1603.09382; for Transformers: Fan, Grave & Joulin, 2019, "Reducing Transformer Depth on Demand with Structured Dropout", arXiv 1909.11556).

Dropout drops single activations; stochastic depth drops whole sub-layers.  In training each
sample of the batch skips each branch with probability ``p``, and the surviving branches are scaled
up so the expectation is unchanged::

    training:   x = x + (m / (1 - p)) · f(norm(x)),   m ~ Bernoulli(1 - p), one per sample
    evaluation: x = x + f(norm(x))                     # the plain pre-norm block

The network trains as an ensemble of shallower networks: shorter gradient paths, a strong
regulariser, and (LayerDrop) a model that can be pruned to fewer layers at inference.  ``p`` is the
same for every layer here (Huang et al. also use a linear schedule over depth).  Used in DeiT, Swin,
ConvNeXt ("drop path").
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import zoo
from zoo.plugins.placements import PreNorm


@dataclass(frozen=True)
class StochasticDepthConfig:
    p: float = 0.1  # probability of skipping a branch (per sample, per sub-layer) in training

    def __post_init__(self):
        if not 0.0 <= self.p < 1.0:
            raise ValueError(f"p must be in [0, 1), got {self.p}")


class StochasticDepth(PreNorm):  # pre-norm's norm and enter, its own exit
    """Pre-norm with per-sample random branch dropping in training, "drop path" (Huang et al., 2016, "Deep Networks with Stochastic Depth", arXiv 1603.09382)."""

    lesson = {
        "en": "Problem: deep networks overfit and have long gradient paths. Stochastic depth drops whole "
              "residual branches at random during training, per sample: x = x + (m/(1-p))·f(norm(x)) with "
              "m ~ Bernoulli(1-p); at evaluation every branch is used. The model trains as an ensemble of "
              "shallower ones - a strong regulariser for ViTs (DeiT, Swin) and, as LayerDrop, a way to "
              "prune layers at inference.",
        "zh": "问题：深层网络容易过拟合，梯度路径也很长。随机深度在训练时按样本随机丢弃整个残差分支："
              "x = x + (m/(1-p))·f(norm(x))，m ~ Bernoulli(1-p)；评估时所有分支都使用。模型相当于许多更浅网络的集成，"
              "是 ViT（DeiT、Swin）的强正则化手段；以 LayerDrop 的形式还能在推理时剪掉层。",
    }

    def exit(self, x, y):
        p = self.config.p
        if not self.training or p == 0.0:
            return super().exit(x, y)  # x + y: the plain pre-norm block
        keep = torch.empty(y.size(0), *([1] * (y.dim() - 1)), device=y.device, dtype=y.dtype)
        keep = keep.bernoulli_(1 - p)  # (B, 1, 1): one draw per sample
        return x + y * keep / (1 - p)


@zoo.hookimpl
def register_placements(register):
    register("stochastic_depth", StochasticDepth, config=StochasticDepthConfig)
