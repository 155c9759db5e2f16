"""``kerple_log`` / ``kerple_power``: kernelized relative positional biases (Chi, Fan, Ramadge & Rudnicky, 2022, "KERPLE: Kernelized Relative Positional Embedding for Length Extrapolation", arXiv 2205.09921).

ALiBi's linear penalty ``-m·|i-j|`` is one member of a family: KERPLE derives biases from
conditionally positive definite kernels of the distance, with learned per-head parameters
``r1, r2 > 0``::

    kerple_log:    b_h(i, j) = -r1_h · log(1 + r2_h · |i - j|)
    kerple_power:  b_h(i, j) = -r1_h · |i - j|^r2_h,        0 < r2 <= 2

The logarithmic variant penalises distance quickly at first and slowly later, which the paper found
best for extrapolating to longer sequences than in training (it is the form Pythia-style follow-ups
adopted).  Parameters are kept positive by clamping at ``1e-2`` (``r2`` of the power variant at 2), and
initialised uniformly as in the authors' code (``r1 ~ U(0, 1)``, ``r2 ~ U(0, 2)``).  Distances are
absolute, so the bias is right under a KV cache offset.  Needs a kernel that takes a score bias.
"""
from __future__ import annotations

import torch
from torch import nn

import zoo
from zoo.components import PositionScheme

EPS = 1e-2


class _Kerple(PositionScheme):
    acts_on_scores = True

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.r1 = nn.Parameter(torch.rand(ctx.num_heads))      # (h,) amplitude
        self.r2 = nn.Parameter(torch.rand(ctx.num_heads) * 2)  # (h,) shape

    def score_bias(self, pos_q, pos_k):
        dt = torch.float32 if self.r1.element_size() < 4 else self.r1.dtype  # half precision: float32
        dist = (pos_q[:, :, None] - pos_k[:, None, :]).abs().to(dt)[:, None]  # (B|1, 1, Tq, Tk)
        r1 = self.r1.to(dt).clamp(min=EPS)[None, :, None, None]  # (1, h, 1, 1)
        return self.kernel(dist, r1, self.r2.to(dt)[None, :, None, None]).to(self.r1.dtype)


class KerpleLog(_Kerple):
    """KERPLE's logarithmic bias -r1·log(1 + r2·|i - j|) (Chi et al., 2022, "KERPLE", arXiv 2205.09921)."""

    lesson = {
        "en": "Problem: ALiBi's fixed linear penalty is one guess at how attention should fade with "
              "distance. KERPLE learns the curve per head from a kernel family: b = -r1·log(1 + r2·|i-j|) "
              "(or -r1·|i-j|^r2). The log form falls fast nearby and slowly far away; it extrapolated "
              "best to longer sequences in the paper, at the cost of two scalars per head.",
        "zh": "问题：ALiBi 固定的线性惩罚只是对“注意力如何随距离衰减”的一种猜测。KERPLE 从核函数族中为每个头学习这条曲线："
              "b = -r1·log(1 + r2·|i-j|)（或 -r1·|i-j|^r2）。对数形式在近处下降快、远处下降慢；论文中它的长度外推最好，"
              "代价只是每个头两个标量。",
    }

    @staticmethod
    def kernel(dist, r1, r2):
        return -r1 * torch.log1p(r2.clamp(min=EPS) * dist)  # (B|1, h, Tq, Tk)


class KerplePower(_Kerple):
    """KERPLE's power bias -r1·|i - j|^r2, 0 < r2 <= 2 (Chi et al., 2022, "KERPLE", arXiv 2205.09921)."""

    lesson = {
        "en": "Problem: how fast should attention fade with distance? ALiBi answers 'linearly' for every "
              "model. KERPLE's power variant learns it per head: b = -r1·|i-j|^r2 with 0 < r2 <= 2 "
              "(r2 = 1 is ALiBi with a learned slope; r2 < 1 fades more gently far away). Useful to see "
              "what decay shape a task prefers.",
        "zh": "问题：注意力应随距离衰减多快？ALiBi 对所有模型都回答“线性”。KERPLE 的幂次变体为每个头学习它："
              "b = -r1·|i-j|^r2，0 < r2 <= 2（r2 = 1 即斜率可学习的 ALiBi；r2 < 1 在远处衰减更平缓）。可用来观察"
              "一个任务偏好什么样的衰减形状。",
    }

    @staticmethod
    def kernel(dist, r1, r2):
        # |i-j| is 0 or >= 1: clamp before pow so d(0^r2)/dr2 is 0, not 0 · log 0 = nan
        return -r1 * dist.clamp(min=1).pow(r2.clamp(min=EPS, max=2.0)) * (dist > 0)  # (B|1, h, Tq, Tk)


@zoo.hookimpl
def register_positions(register):
    register("kerple_log", KerpleLog)
    register("kerple_power", KerplePower)
