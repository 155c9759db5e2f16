"""``topk``: sparse top-k attention (Zhao, Lin, Sun, Zhang, Ren & Su, 2019, "Explicit Sparse Transformer: Concentrated Attention Through Explicit Selection", arXiv 1912.11637).

Softmax never gives a key exactly zero weight, so a long row spreads some attention over every
irrelevant key.  Top-k attention keeps, for each query, only its ``k`` highest-scoring allowed keys
and renormalises over them::

    s = q·kᵀ · scale + bias;   t_i = k-th largest allowed s_ij
    w_ij = softmax_j( s_ij if s_ij >= t_i else -inf )

Ties at the threshold are all kept (as x-transformers does).  A row with fewer than ``k`` allowed
keys keeps them all.  Eager (the selection needs the full score row); rows still sum to 1, so the
kernel returns weights.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import zoo
from zoo.components import AttentionKernel, Capabilities, repeat_kv
from zoo.errors import ParamError
from zoo.model.kernels import bias_and_mask, softmax_values


@dataclass(frozen=True)
class TopKConfig:
    k: int = 8  # keys kept per query

    def __post_init__(self):
        if self.k < 1:
            raise ParamError.of("param.at_least", name="k", minimum=1, value=self.k)


class TopKAttention(AttentionKernel):
    """[eager] Sparse top-k attention: each query keeps only its k best keys (Zhao et al., 2019, "Explicit Sparse Transformer", arXiv 1912.11637)."""

    capabilities = Capabilities(returns_weights=True, exact=False)
    lesson = {
        "en": "Problem: softmax gives every key some weight, so in long contexts attention is diluted over "
              "irrelevant tokens. Top-k attention keeps only each query's k best scores, "
              "w_i = softmax(s_i masked to s_ij >= t_i) with t_i the k-th largest, and renormalises. "
              "It sharpens attention (the paper reports gains in translation and captioning) but the "
              "selection needs the full score row, so it is an eager kernel.",
        "zh": "问题：softmax 给每个键都分一点权重，长上下文中注意力被无关词稀释。top-k 注意力只保留每个查询得分最高的 "
              "k 个键并重新归一化：w_i = softmax(只保留 s_ij >= t_i 的项)，t_i 为第 k 大的分数。它让注意力更集中"
              "（论文在翻译和图像描述上有提升），但选择需要完整的分数行，因此只能用逐步（eager）内核。",
    }

    def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
        k, v = repeat_kv(k, v, q.size(1))  # (B, h, Tk, hd)
        s = torch.matmul(q, k.transpose(-2, -1)) * self.scale  # (B, h, Tq, Tk)
        s = bias_and_mask(s, bias, mask)  # + bias, -inf where the mask forbids
        kk = min(self.config.k, s.size(-1))
        threshold = s.topk(kk, dim=-1).values[..., -1:]  # (B, h, Tq, 1): the k-th best score
        s = s.masked_fill(s < threshold, float("-inf"))  # drop everything below it
        out, weights = softmax_values(s, v, self.dropout_p, self.training)  # at most k (plus ties) non-zero
        return out, (weights if need_weights else None)  # (B, h, Tq, hd)


@zoo.hookimpl
def register_attention(register):
    register("topk", TopKAttention, config=TopKConfig)
