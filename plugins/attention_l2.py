"""``l2``: L2-distance attention (Kim, Papamakarios & Mnih, 2021, "The Lipschitz Constant of Self-Attention", arXiv 2006.04710).

Dot-product attention is not Lipschitz: its output can change without bound for a bounded change of
the input, which rules out invertible or provably robust Transformers.  The paper proves that
scoring keys by *negative squared distance* instead of the dot product makes attention Lipschitz::

    s_ij = -|q_i - k_j|² · scale = (2 q_i·k_j - |k_j|² - |q_i|²) · scale
    w = softmax(s + bias),  out = w @ v

The ``-|q_i|²`` term is the same for a whole row and cancels in the softmax; ``-|k_j|²`` makes large
keys *less* attractive, unlike the dot product.  (The proof also ties the query and key
projections; zoo keeps them separate, as x-transformers' ``l2_distance`` does.)  Eager; rows sum to
1, so weights are returned.
"""
from __future__ import annotations

import torch

import zoo
from zoo.components import AttentionKernel, Capabilities, repeat_kv
from zoo.model.kernels import bias_and_mask, softmax_values


class L2Attention(AttentionKernel):
    """[eager] L2-distance attention, logits -|q - k|² (Kim et al., 2021, "The Lipschitz Constant of Self-Attention", arXiv 2006.04710)."""

    capabilities = Capabilities(returns_weights=True, exact=False)
    lesson = {
        "en": "Problem: dot-product attention has no Lipschitz bound, so small input changes can produce "
              "arbitrarily large output changes. Scoring by negative squared distance, "
              "s_ij = -|q_i - k_j|²/sqrt(d), gives a provably Lipschitz layer (with tied query/key "
              "projections) and penalises large keys instead of rewarding them. It helps where "
              "stability guarantees matter: invertible models, certified robustness, flows.",
        "zh": "问题：点积注意力没有 Lipschitz 上界，输入的微小变化可能引起任意大的输出变化。改用负的平方距离打分，"
              "s_ij = -|q_i - k_j|²/sqrt(d)，（在查询与键共享投影时）可证明是 Lipschitz 的，并且会惩罚而不是奖励"
              "范数大的键。在需要稳定性保证的场合有用：可逆模型、可认证鲁棒性、流模型。",
    }

    def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
        k, v = repeat_kv(k, v, q.size(1))  # (B, h, Tk, hd)
        qk = torch.matmul(q, k.transpose(-2, -1))  # (B, h, Tq, Tk)
        q2 = q.pow(2).sum(-1, keepdim=True)  # (B, h, Tq, 1)
        k2 = k.pow(2).sum(-1)[:, :, None, :]  # (B, h, 1, Tk)
        s = -(q2 - 2 * qk + k2) * self.scale  # -|q - k|² · scale
        s = bias_and_mask(s, bias, mask)  # + bias, -inf where the mask forbids
        out, weights = softmax_values(s, v, self.dropout_p, self.training)  # weights (B, h, Tq, Tk)
        return out, (weights if need_weights else None)  # (B, h, Tq, hd)


@zoo.hookimpl
def register_attention(register):
    register("l2", L2Attention)
