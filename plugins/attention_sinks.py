"""``sinks``: attention with a learned sink logit per head (OpenAI, 2025, "gpt-oss-120b & gpt-oss-20b Model Card", arXiv 2508.10925; after Xiao et al., 2023, "Efficient Streaming Language Models with Attention Sinks", arXiv 2309.17453).

Trained softmax heads park unused attention on the first token (an "attention sink"); evicting that
token from a sliding cache breaks them.  gpt-oss gives each head its own sink instead: a learned
logit ``a_h`` that joins every row's softmax but carries no value::

    w_ij = exp(s_ij) / (exp(a_h) + Σ_j' exp(s_ij'))     # the sink takes exp(a_h) of the mass
    out_i = Σ_j w_ij v_j

It equals a zero-valued extra key whose score is ``a_h`` for every query, and is computed that way:
fused, through PyTorch's ``scaled_dot_product_attention`` with one prepended zero key/value and a
float mask carrying ``a_h``.  ``a`` starts at 0 (then it is exactly ``null_kv``).  Real weights sum to
less than 1, so none are returned.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import zoo
from zoo.components import AttentionKernel, Capabilities
from zoo.model.kernels import prefix_keys, sdpa


class SinkAttention(AttentionKernel):
    """[fused sdpa] Attention with a learned per-head sink logit (gpt-oss, 2025, arXiv 2508.10925; Xiao et al., 2023, "Efficient Streaming Language Models with Attention Sinks", arXiv 2309.17453)."""

    capabilities = Capabilities(returns_weights=False, exact=False)
    lesson = {
        "en": "Problem: softmax heads that have nothing to attend to park their weight on the first token, "
              "which then cannot be evicted from a streaming cache and grows outlier activations. A learned "
              "sink logit a_h per head joins the softmax without a value: w_ij = exp(s_ij) / (exp(a_h) + "
              "Σ exp(s_ij')). gpt-oss uses it in every layer, its sliding-window ones included; it helps "
              "streaming and long-context decoding.",
        "zh": "问题：无事可做的 softmax 头会把权重停放在第一个词上，于是这个词无法从流式缓存中移除，还会产生离群激活。"
              "为每个头学习一个“汇”分数 a_h，它参与 softmax 但不带值：w_ij = exp(s_ij) / (exp(a_h) + Σ exp(s_ij'))。"
              "gpt-oss 在每一层（包括滑动窗口层）都使用它；对流式解码和长上下文解码有帮助。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.sink = nn.Parameter(torch.zeros(ctx.num_heads))  # (h,) one logit per head

    def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
        h, Tq, Tk = q.size(1), q.size(2), k.size(2)
        k = F.pad(k, (0, 0, 1, 0))  # (B, h_kv, 1 + Tk, hd): the sink's key (its score comes from the mask)
        v = F.pad(v, (0, 0, 1, 0))  # its value is zero
        base = bias.to(q.dtype) if bias is not None else q.new_zeros(1, 1, 1, 1)
        while base.dim() < 4:
            base = base[None]
        scores = base.expand(base.size(0), h, Tq, Tk)  # (B|1, h, Tq, Tk)
        sink = self.sink.to(q.dtype)[None, :, None, None].expand(base.size(0), h, Tq, 1)  # (B|1, h, Tq, 1)
        mask, _ = prefix_keys(mask, None, 1)  # (…, Tq, 1 + Tk): the sink is always visible
        bias = torch.cat([sink, scores], dim=-1)  # (B|1, h, Tq, 1 + Tk): the sink's logit, then the bias
        out = sdpa(q, k, v, mask, bias, scale=self.scale, dropout_p=self.dropout_p, training=self.training)
        return out, None  # (B, h, Tq, hd)


@zoo.hookimpl
def register_attention(register):
    register("sinks", SinkAttention)
