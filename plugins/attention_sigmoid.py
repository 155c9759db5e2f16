"""``sigmoid``: sigmoid attention with a bias (Ramapuram et al., 2024, "Theory, Analysis, and Best Practices for Sigmoid Self-Attention", arXiv 2409.04431).

Softmax makes the keys of a row compete: their weights must sum to 1.  Sigmoid attention scores each
(query, key) pair on its own::

    w_ij = sigmoid(q_i·k_j · scale + b),   out_i = Σ_j w_ij v_j,   b = -log(n)

Without the bias, each of ``n`` keys starts near weight 1/2 and the output's norm grows with ``n``;
``b = -log(n)`` starts each weight near ``1/n``, as softmax would.  The paper sets ``n`` to the
sequence length; here ``n`` is fixed (``length``, default the model's ``max_len``) so that a query's
output does not depend on how many keys happen to be cached (cached decoding = full forward).
Masked keys get weight exactly 0.  Eager; the weights do not sum to 1, so none are returned.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

import zoo
from zoo.components import AttentionKernel, Capabilities, repeat_kv
from zoo.errors import ParamError
from zoo.model.kernels import bias_and_mask, shown, weigh


@dataclass(frozen=True)
class SigmoidConfig:
    length: int | None = None  # n in b = -log(n); None: the model's max_len

    def __post_init__(self):
        if self.length is not None and self.length < 1:
            raise ParamError.of("param.at_least", name="length", minimum=1, value=self.length)


class SigmoidAttention(AttentionKernel):
    """[eager] Sigmoid attention with bias -log(n) (Ramapuram et al., 2024, "Theory, Analysis, and Best Practices for Sigmoid Self-Attention", arXiv 2409.04431)."""

    capabilities = Capabilities(returns_weights=False, exact=False)
    lesson = {
        "en": "Problem: softmax couples all keys of a row (they must share a total weight of 1), which "
              "costs a row-wise reduction and forces attention somewhere even when nothing is relevant. "
              "Sigmoid attention weighs each pair independently, w_ij = sigmoid(q_i·k_j/sqrt(d) - log n); "
              "the -log n bias keeps early outputs the size softmax would give. It matches softmax "
              "quality in the paper's language and vision runs and allows faster kernels (FlashSigmoid).",
        "zh": "问题：softmax 让一行里所有键互相竞争（权重之和必须为 1），既需要按行归约，又强迫注意力总要落在某处。"
              "sigmoid 注意力独立地给每对打分：w_ij = sigmoid(q_i·k_j/sqrt(d) - log n)；偏置 -log n 让初始输出"
              "与 softmax 同量级。论文在语言和视觉任务上达到与 softmax 相当的效果，并可写出更快的内核（FlashSigmoid）。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.bias_value = -math.log(config.length if config.length is not None else ctx.max_len)

    def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
        k, v = repeat_kv(k, v, q.size(1))  # (B, h, Tk, hd)
        s = torch.matmul(q, k.transpose(-2, -1)) * self.scale + self.bias_value  # (B, h, Tq, Tk)
        s = shown("hook_attn_scores", bias_and_mask(s, bias, mask))  # + bias, -inf where masked: sigmoid(-inf) = 0
        w = torch.sigmoid(s)  # (B, h, Tq, Tk), each in (0, 1), rows need not sum to 1
        return weigh(w, v, self.dropout_p, self.training), None  # (B, h, Tq, hd)


@zoo.hookimpl
def register_attention(register):
    register("sigmoid", SigmoidAttention, config=SigmoidConfig)
