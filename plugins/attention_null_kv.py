"""``null_kv``: attention with one extra all-zero key and value, i.e. "softmax plus one" (Miller, 2023, "Attention Is Off By One"; Bondarenko, Nagel & Blankevoort, 2023, "Quantizable Transformers: Removing Outliers by Helping Attention Heads Do Nothing", arXiv 2306.12929).

A softmax row must put all its weight somewhere, so a head with nothing to say dumps it on some
token (often the first), growing huge activations to do so.  Prepending a key and a value of zeros
gives every row a place to put weight that contributes nothing::

    w_ij = exp(s_ij) / (1 + Σ_j' exp(s_ij'))       # the zero key scores exactly 0: e^0 = 1
    out_i = Σ_j w_ij v_j                            # the zero value adds nothing

(``torch.nn.MultiheadAttention(add_zero_attn=True)`` and x-transformers' ``add_zero_kv`` do the
same.)  Fused: the zero column is concatenated and the row goes through PyTorch's
``scaled_dot_product_attention``; the weights of the real keys sum to less than 1, so none are
returned.  A query whose real keys are all masked still sees the zero key and outputs 0.
"""
from __future__ import annotations

import torch.nn.functional as F

import zoo
from zoo.components import AttentionKernel, Capabilities
from zoo.model.kernels import prefix_keys, sdpa


class NullKVAttention(AttentionKernel):
    """[fused sdpa] Attention with an all-zero key and value prepended, softmax plus one (Miller, 2023, "Attention Is Off By One"; Bondarenko et al., 2023, arXiv 2306.12929)."""

    capabilities = Capabilities(returns_weights=False, exact=False)
    lesson = {
        "en": "Problem: a softmax row must spend all its weight, so heads that should do nothing learn to "
              "dump it on one token with huge activations - the outliers that break 8-bit quantisation. "
              "A zero key and value give the row a free exit: w_ij = exp(s_ij) / (1 + Σ exp(s_ij')). "
              "It helps quantisation and long-context stability at the cost of one extra key.",
        "zh": "问题：softmax 的一行必须把权重花完，于是本该“什么都不做”的头学会把权重堆到某个词上，并产生巨大的激活值，"
              "正是这些离群值破坏了 8 位量化。加入一个全零的键和值，让这一行有个“出口”：w_ij = exp(s_ij) / "
              "(1 + Σ exp(s_ij'))。它改善量化和长上下文的稳定性，代价只是多一个键。",
    }

    def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
        k = F.pad(k, (0, 0, 1, 0))  # (B, h_kv, 1 + Tk, hd): key 0 is all zeros
        v = F.pad(v, (0, 0, 1, 0))  # (B, h_kv, 1 + Tk, hd): value 0 is all zeros
        mask, bias = prefix_keys(mask, bias, 1)  # (…, Tq, 1 + Tk): the zero key always visible, bias 0
        out = sdpa(q, k, v, mask, bias, scale=self.scale, dropout_p=self.dropout_p, training=self.training)
        return out, None  # (B, h, Tq, hd)


@zoo.hookimpl
def register_attention(register):
    register("null_kv", NullKVAttention)
