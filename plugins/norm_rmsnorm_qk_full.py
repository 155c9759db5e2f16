"""``rmsnorm_qk_full``: RMSNorm whose query/key form spans the whole projection, as in OLMo 2 and OLMoE (Muennighoff et al., 2024, "OLMoE: Open Mixture-of-Experts Language Models", arXiv 2409.02060).

Everywhere in the residual stream it is ``rmsnorm``: ``y = x / sqrt(mean(x²) + eps) * gamma`` over
the ``d_model`` features of a token.  The difference is the q/k norm (the spec's ``qk_norm: true``),
which bounds the attention logits.  Qwen3 and Gemma 3 normalise each head on its own (``hd``
features, one ``gamma`` of size ``hd`` shared by all heads); OLMo 2 and OLMoE normalise the query
projection as one vector of ``h · hd`` features, and the key projection as one of ``h_kv · hd``,
each with its own ``gamma`` of that size::

    q = W_q x                          # (B, T, h·hd), before the split into heads
    q = q / sqrt(mean(q²) + eps) * γ_q # one mean over all h·hd features; γ_q has h·hd entries

So one head with large activations shrinks the others — the heads share a scale.  zoo's attention
hands a q/k norm the split heads ``(B, T, h, hd)``; this norm joins them back to ``(B, T, h·hd)``,
normalises and splits again.  ``qk_spans_heads`` tells the engine to size the q norm for ``h`` heads
and the k norm for ``h_kv`` heads.  The mean square is taken in float32, as in ``rmsnorm``.
"""
from __future__ import annotations

from typing import ClassVar

import zoo
from zoo.plugins.norm_rmsnorm import RMSNorm, RMSNormConfig


class RMSNormQKFull(RMSNorm):
    """RMSNorm; as a q/k norm over all heads of the projection together (OLMoE, 2024, arXiv 2409.02060)."""

    qk_spans_heads: ClassVar[bool] = True  # the engine sizes q/k norms for h·hd (h_kv·hd) features

    lesson = {
        "en": "Problem: attention logits q·k can grow without bound during training and make the softmax "
              "collapse onto one key. A q/k norm rescales queries and keys before the dot product. Qwen3 "
              "normalises each head separately; OLMo 2 and OLMoE normalise the whole query projection "
              "(all heads, h·hd features) as one vector with one learned scale per feature, so the heads "
              "share one root-mean-square. Elsewhere this norm is plain RMSNorm.",
        "zh": "问题：训练中注意力分数 q·k 可能无限增长，使 softmax 塌缩到单个键上。q/k 归一化在点积之前重新缩放查询和键。"
              "Qwen3 对每个头分别归一化；OLMo 2 和 OLMoE 把整个查询投影（所有头，h·hd 个特征）当作一个向量归一化，"
              "每个特征一个可学习的缩放，于是各头共享同一个均方根。在其他位置它就是普通的 RMSNorm。",
    }

    def split_heads(self, x) -> bool:
        """A q/k norm's input: the split heads ``(B, T, h, hd)`` of one projection of ``h·hd``
        features (the residual stream ``(…, D)``, one copy per head too, is plain RMSNorm's)."""
        return x.dim() == 4 and x.size(-1) != self.weight.numel()

    def forward(self, x):
        if not self.split_heads(x):
            return super().forward(x)
        return super().forward(x.flatten(-2)).view(x.shape)  # as the projection (B, T, h·hd)

    def steps(self, x):
        return super().steps(x.flatten(-2) if self.split_heads(x) else x)  # (…, D'), (…, 1)

    def affine(self, normalized, x):
        return super().affine(normalized, x).view(x.shape)


@zoo.hookimpl
def register_norms(register):
    register("rmsnorm_qk_full", RMSNormQKFull, config=RMSNormConfig)
