"""``memory_kv``: attention with persistent memory key/values (Sukhbaatar, Grave, Lample, Jégou & Joulin, 2019, "Augmenting Self-attention with Persistent Memory", arXiv 1907.01470).

Each head owns ``slots`` learned key/value pairs that are prepended to the keys and values of every
sequence: every query can always attend to them, whatever the input::

    K' = [M_k ; K],  V' = [M_v ; V]           # (slots + Tk) keys per head
    out = softmax(q·K'ᵀ · scale + [0 ; bias], mask [True ; mask]) @ V'

The paper shows such memory vectors can take over the feed-forward layer's role (a softmax over
learned keys is a key-value memory, like an MLP with a softmax activation).  Memory slots are never
masked, do not count as positions (a score bias gives them 0) and live outside the KV cache.
Initialised ``N(0, 1)`` as in x-transformers' ``num_mem_kv``.  Fused: the concatenated keys go through
PyTorch's ``scaled_dot_product_attention``.  With grouped-query attention the memory is per key/value
head.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

import zoo
from zoo.components import AttentionKernel, Capabilities
from zoo.errors import ParamError
from zoo.model.kernels import prefix_keys, sdpa


@dataclass(frozen=True)
class MemoryKVConfig:
    slots: int = 4  # learned key/value pairs per key/value head

    def __post_init__(self):
        if self.slots < 1:
            raise ParamError.of("param.at_least", name="slots", minimum=1, value=self.slots)


class MemoryKVAttention(AttentionKernel):
    """[fused sdpa] Attention with learned persistent memory key/values (Sukhbaatar et al., 2019, "Augmenting Self-attention with Persistent Memory", arXiv 1907.01470)."""

    capabilities = Capabilities(returns_weights=False, exact=False)
    lesson = {
        "en": "Problem: a sequence's keys only hold what is in the input, so general knowledge must live in "
              "the feed-forward layers. Persistent memory prepends learned key/value slots to every "
              "head: K' = [M_k; K], V' = [M_v; V]. A softmax over learned keys is a key-value memory, so "
              "the paper could drop the FFN entirely at equal quality; smaller doses (a few slots) also "
              "give heads a place to rest, like a sink.",
        "zh": "问题：一个序列的键只包含输入里的信息，通用知识只能存放在前馈层中。持久记忆为每个头在键和值前拼接可学习的"
              "槽位：K' = [M_k; K]，V' = [M_v; V]。对可学习键做 softmax 本身就是键值记忆，因此论文能在质量不变的"
              "情况下完全去掉前馈层；少量槽位也给注意力头一个“休息处”，类似注意力汇。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.mem_k = nn.Parameter(torch.randn(ctx.num_kv_heads, config.slots, ctx.head_dim))  # (h_kv, M, hd)
        self.mem_v = nn.Parameter(torch.randn(ctx.num_kv_heads, config.slots, ctx.head_dim))

    def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
        B, M = k.size(0), self.config.slots
        k = torch.cat([self.mem_k.to(k.dtype).expand(B, -1, -1, -1), k], dim=2)  # (B, h_kv, M + Tk, hd)
        v = torch.cat([self.mem_v.to(v.dtype).expand(B, -1, -1, -1), v], dim=2)
        mask, bias = prefix_keys(mask, bias, M)  # (…, Tq, M + Tk): memory always visible, bias 0
        out = sdpa(q, k, v, mask, bias, scale=self.scale, dropout_p=self.dropout_p, training=self.training)
        return out, None  # (B, h, Tq, hd)


@zoo.hookimpl
def register_attention(register):
    register("memory_kv", MemoryKVAttention, config=MemoryKVConfig)
