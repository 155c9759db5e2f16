"""``talking_heads``: talking-heads attention (Shazeer, Lan, Cheng, Ding & Hou, 2020, "Talking-Heads Attention", arXiv 2003.02436).

In multi-head attention every head decides alone where to look.  Talking heads let the heads
exchange information through two learned ``h x h`` mixes, one on the logits before the softmax and
one on the weights after it::

    s  = q·kᵀ · scale                      # (B, h, Tq, Tk), one score map per head
    s' = P_l s      (over the head axis)   # new head g = Σ_h P_l[g, h] · s_h
    w  = softmax(mask(s' + bias))
    w' = P_w w                             # mix the attention maps again
    out = w' @ v

Both mixes start as the identity, so an untrained model is ordinary multi-head attention.  The mixes
act at every ``(query, key)`` pair separately, so the causal rule still holds.  Eager (the mixes
touch the full score tensor, which a fused kernel never materialises); the post-softmax mix breaks
"rows sum to 1", so the kernel does not return weights.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

import zoo
from zoo.components import AttentionKernel, Capabilities, repeat_kv
from zoo.model.kernels import bias_and_mask, shown


@dataclass(frozen=True)
class TalkingHeadsConfig:
    pre: bool = True   # mix the logits across heads before the softmax (P_l)
    post: bool = True  # mix the weights across heads after it (P_w)

    def __post_init__(self):
        if not (self.pre or self.post):
            raise ValueError("talking_heads needs pre or post (or both); with neither use eager")


class TalkingHeadsAttention(AttentionKernel):
    """[eager] Talking-heads attention (Shazeer et al., 2020, "Talking-Heads Attention", arXiv 2003.02436): heads exchange information through learned h x h mixes of the logits and of the weights."""

    capabilities = Capabilities(returns_weights=False, exact=False)
    lesson = {
        "en": "Problem: each head attends on its own, so a pattern one head finds cannot steer another. "
              "Talking heads insert learned head-mixing matrices around the softmax: "
              "s'_g = Σ_h P_l[g,h] s_h before it and w'_g = Σ_h P_w[g,h] w_h after it. "
              "It helps most with many small heads (the paper's T5 models improved perplexity and "
              "downstream scores for a small extra cost), at the price of an eager kernel (the full "
              "score tensor must exist).",
        "zh": "问题：多头注意力里每个头各自决定看哪里，一个头发现的模式无法影响另一个头。talking heads 在 softmax "
              "前后各插入一个可学习的 h×h 头混合矩阵：softmax 前 s'_g = Σ_h P_l[g,h] s_h，softmax 后 "
              "w'_g = Σ_h P_w[g,h] w_h。头多而小时收益最大（论文中的 T5 模型以很小的额外计算换来了更低的困惑度和更好的下游成绩），"
              "代价是只能用逐步（eager）计算，因为必须得到完整的分数张量。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        eye = torch.eye(ctx.num_heads)  # (h, h): starts as plain multi-head attention
        self.pre = nn.Parameter(eye.clone()) if config.pre else None
        self.post = nn.Parameter(eye.clone()) if config.post else None

    def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
        k, v = repeat_kv(k, v, q.size(1))  # (B, h, Tk, hd)
        s = torch.matmul(q, k.transpose(-2, -1)) * self.scale  # (B, h, Tq, Tk)
        if self.pre is not None:
            s = torch.einsum("gh,bhqk->bgqk", self.pre.to(s.dtype), s)  # mix logits across heads
        w = torch.softmax(shown("hook_attn_scores", bias_and_mask(s, bias, mask)), dim=-1)  # (B, h, Tq, Tk)
        w = torch.nn.functional.dropout(w, self.dropout_p, self.training)
        if self.post is not None:
            w = torch.einsum("gh,bhqk->bgqk", self.post.to(w.dtype), w)  # mix weights across heads
        return torch.matmul(shown("hook_pattern", w), v), None  # (B, h, Tq, hd); shown: the inside view


@zoo.hookimpl
def register_attention(register):
    register("talking_heads", TalkingHeadsAttention, config=TalkingHeadsConfig)
