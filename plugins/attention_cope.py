"""``cope``: contextual position encoding (Golovneva, Wang, Weston & Sukhbaatar, 2024, "Contextual Position Encoding: Learning to Count What's Important", arXiv 2405.18719).

Token positions count tokens, but a model often needs to count *words*, sentences or occurrences of
a symbol.  CoPE lets each query decide what counts: a key counts when the query's gate on it is open,
and a key's position is the number of counted keys between it and the query::

    g_ij = sigmoid(s_ij)                     # s_ij = q_i·k_j · scale + bias, masked keys -> g = 0
    p_ij = Σ_{t=j..i} g_it                   # a fractional, query-dependent position
    e_ij = (1 - f) · q_i·E[⌊p_ij⌋] + f · q_i·E[⌈p_ij⌉],  f = p_ij - ⌊p_ij⌋
    w_i  = softmax_j(s_ij + e_ij)

``E`` is a learned ``(max_pos, hd)`` table (positions are clipped at ``max_pos - 1``), initialised to
zeros as in x-transformers' ``CoPE`` (so the kernel starts as plain attention).  Because ``p_ij``
sums gates from key ``j`` up to the query, CoPE is defined for causal attention only; a query's
positions depend only on itself and the keys before it, so it decodes with a KV cache.  Eager (it
needs the full score matrix); rows sum to 1 and weights are returned.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

import zoo
from zoo.components import AttentionKernel, Capabilities, repeat_kv
from zoo.errors import ParamError
from zoo.model.kernels import bias_and_mask, softmax_values


@dataclass(frozen=True)
class CoPEConfig:
    max_pos: int = 64  # size of the learned position table (positions are clipped below it)

    def __post_init__(self):
        if self.max_pos < 2:
            raise ParamError.of("param.at_least", name="max_pos", minimum=2, value=self.max_pos)


class CoPEAttention(AttentionKernel):
    """[eager] Contextual position encoding: positions that count what the query gates in (Golovneva et al., 2024, "Contextual Position Encoding", arXiv 2405.18719)."""

    capabilities = Capabilities(returns_weights=True, exact=False, causal_only=True)
    lesson = {
        "en": "Problem: positions count tokens, so a model cannot directly attend to 'the third sentence "
              "back' or 'the second-to-last x'. CoPE lets each query choose what counts: gates "
              "g_ij = sigmoid(q_i·k_j), positions p_ij = Σ_{t=j..i} g_it, and a learned embedding "
              "interpolated at p_ij adds q_i·E[p_ij] to the logits. It solves counting and selective-copy "
              "tasks where RoPE fails and improves language-model perplexity in the paper.",
        "zh": "问题：位置编码数的是词元，模型无法直接关注“往前第三个句子”或“倒数第二个 x”。CoPE 让每个查询决定数什么："
              "门 g_ij = sigmoid(q_i·k_j)，位置 p_ij = Σ_{t=j..i} g_it，再在 p_ij 处插值一个可学习的位置向量，"
              "把 q_i·E[p_ij] 加到分数上。论文中它解决了 RoPE 做不好的计数与选择性复制任务，并降低了语言模型困惑度。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.pos_emb = nn.Parameter(torch.zeros(config.max_pos, ctx.head_dim))  # (P, hd)

    def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
        k, v = repeat_kv(k, v, q.size(1))  # (B, h, Tk, hd)
        s = torch.matmul(q, k.transpose(-2, -1)) * self.scale  # (B, h, Tq, Tk)
        s = bias_and_mask(s, bias, mask)  # + bias, -inf where the mask forbids
        gates = torch.sigmoid(s)  # (B, h, Tq, Tk), 0 on masked keys
        pos = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=self.config.max_pos - 1)  # p_ij = Σ_{t>=j} g_it
        logits_int = torch.matmul(q, self.pos_emb.to(q.dtype).t())  # (B, h, Tq, P): q_i·E[p]
        # a NaN position (a non-finite query or key) must not become an index: index with 0 there and
        # let the NaN travel on through frac, so it reaches the output as it does in every kernel
        safe = torch.nan_to_num(pos, nan=0.0)
        lo, hi = safe.floor().long(), safe.ceil().long()
        frac = pos - lo.to(pos.dtype)
        e = logits_int.gather(-1, lo) * (1 - frac) + logits_int.gather(-1, hi) * frac  # (B, h, Tq, Tk)
        out, weights = softmax_values(s + e, v, self.dropout_p, self.training)  # masked keys stay -inf
        return out, (weights if need_weights else None)  # (B, h, Tq, hd)


@zoo.hookimpl
def register_attention(register):
    register("cope", CoPEAttention, config=CoPEConfig)
