"""``moe``: a sparse mixture-of-experts feed-forward block with top-k routing (Shazeer et al., 2017, "Outrageously Large Neural Networks: The Sparsely-Gated Mixture-of-Experts Layer", arXiv 1701.06538; as in Jiang et al., 2024, "Mixtral of Experts", arXiv 2401.04088).

A dense FFN spends the same parameters on every token.  A mixture of experts holds ``experts``
separate SwiGLU blocks and a router that sends each token to its ``top_k`` best ones::

    r = W_r x                                    # (B, T, E) router logits
    G = softmax over the top_k entries of r      # the others get gate 0 (Mixtral's order)
    FFN(x) = Σ_e G_e · SwiGLU_e(x)               # only top_k experts contribute per token

Parameters grow with ``experts`` while the useful compute per token grows with ``top_k`` only —
Mixtral 8x7B has 47B parameters and uses 13B per token.  This teaching version runs every expert on
every token and multiplies the unused ones by 0 (simple and exact, not fast); each expert has
``d_ff`` hidden units.  No load-balancing loss is added (the trainer has no auxiliary-loss hook).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import zoo
from zoo.components import FeedForward


@dataclass(frozen=True)
class MoEConfig:
    experts: int = 4
    top_k: int = 2

    def __post_init__(self):
        if self.experts < 1 or not 1 <= self.top_k <= self.experts:
            raise ValueError(f"need experts >= 1 and 1 <= top_k <= experts, got {self.experts}, {self.top_k}")


class MoE(FeedForward):
    """Sparse mixture of SwiGLU experts with top-k softmax routing (Shazeer et al., 2017, arXiv 1701.06538; Mixtral, 2024, arXiv 2401.04088)."""

    lesson = {
        "en": "Problem: a dense model pays for every parameter on every token. A mixture of experts keeps "
              "E feed-forward blocks and routes each token to its top k: FFN(x) = Σ_e G_e(x)·E_e(x), G a "
              "softmax over the k largest router logits. Capacity grows with E, compute per token with k "
              "(Mixtral: 47B parameters, 13B active). It needs large batches and a balancing loss to keep "
              "experts busy.",
        "zh": "问题：稠密模型在每个词元上都要为全部参数付出计算。专家混合保留 E 个前馈块，把每个词元路由到得分最高的 k 个："
              "FFN(x) = Σ_e G_e(x)·E_e(x)，G 是在最大的 k 个路由分数上的 softmax。容量随 E 增长，每个词元的计算只随 k "
              "增长（Mixtral：470 亿参数，每词元激活 130 亿）。它需要大批量和负载均衡损失来让专家都得到使用。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        E, D, F_ = config.experts, ctx.d_model, ctx.d_ff
        self.router = nn.Linear(D, E, bias=False)
        self.w_gate = nn.Parameter(torch.randn(E, D, F_) * 0.02)  # (E, D, d_ff)
        self.w_up = nn.Parameter(torch.randn(E, D, F_) * 0.02)
        self.w_down = nn.Parameter(torch.randn(E, F_, D) * 0.02)  # (E, d_ff, D)

    def forward(self, x):
        logits = self.router(x)  # (B, T, E)
        top, idx = logits.topk(self.config.top_k, dim=-1)  # (B, T, k)
        gates = torch.zeros_like(logits).scatter(-1, idx, torch.softmax(top.float(), -1).to(x.dtype))
        h = F.silu(torch.einsum("btd,edf->btef", x, self.w_gate)) * torch.einsum("btd,edf->btef", x, self.w_up)
        y = torch.einsum("btef,efd->bted", h, self.w_down)  # (B, T, E, D): every expert's output
        return torch.einsum("bte,bted->btd", gates, y)  # (B, T, D): gated sum, unused experts x 0


@zoo.hookimpl
def register_ffns(register):
    register("moe", MoE, config=MoEConfig)
