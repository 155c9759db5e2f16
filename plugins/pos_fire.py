"""``fire``: functional interpolation for relative positions (Li, You, Guruganesh, Ainslie, Ontañón, Zaheer, Sanghai, Yang, Kumar & Bhojanapalli, 2023, "Functional Interpolation for Relative Positions Improves Long Context Transformers", arXiv 2310.04418).

A learned function of the *raw* distance sees only distances up to the training length.  FIRE feeds
its MLP a *normalised* distance instead, the distance divided by the query's position, both
log-compressed, so every query sees inputs in ``[0, 1]`` however long the sequence grows::

    ψ(x) = log(|c·x| + 1)                                 # c learned
    b_h(i, j) = MLP( ψ(i - j) / (ψ(max(i, L)) + ε) )_h     # L learned threshold (= L0·|λ|)

The threshold ``L`` keeps short prefixes from being over-stretched.  The MLP (``1 -> hidden -> heads``,
ReLU) and the initial values (``c = 0.1``, ``λ = 1``, ``L0`` = the model's ``max_len``) follow the paper's
appendix code.  In encoders ``|i - j|`` is used (the paper treats the causal case).  Query positions are
absolute, so the bias is right under a KV cache offset.  Needs a kernel that takes a score bias.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

import zoo
from zoo.components import PositionScheme
from zoo.errors import ParamError


@dataclass(frozen=True)
class FireConfig:
    hidden: int = 32
    init_c: float = 0.1
    init_L: float | None = None  # L0; None: the model's max_len
    eps: float = 1e-6

    def __post_init__(self):
        if self.hidden < 1:
            raise ParamError.of("param.at_least", name="hidden", minimum=1, value=self.hidden)


class Fire(PositionScheme):
    """FIRE: an MLP of the log-normalised relative distance gives each head's bias (Li et al., 2023, "Functional Interpolation for Relative Positions Improves Long Context Transformers", arXiv 2310.04418)."""

    acts_on_scores = True
    lesson = {
        "en": "Problem: a learned function of raw distance meets unseen inputs as soon as a sequence is "
              "longer than in training. FIRE normalises the distance by the query's position, "
              "b = MLP(ψ(i-j)/ψ(max(i, L))) with ψ(x) = log(c·x + 1), so inputs always lie in [0, 1]. "
              "The paper shows it can represent T5, ALiBi and KERPLE biases and extrapolates best of "
              "them on long-context tasks.",
        "zh": "问题：以原始距离为输入的可学习函数，一旦序列比训练时长就会遇到没见过的输入。FIRE 用查询的位置归一化距离："
              "b = MLP(ψ(i-j)/ψ(max(i, L)))，ψ(x) = log(c·x + 1)，因此输入总在 [0, 1] 内。论文证明它能表示 T5、"
              "ALiBi 和 KERPLE 的偏置，并在长上下文任务上外推得最好。",
    }

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.causal = ctx.causal
        self.mlp = nn.Sequential(nn.Linear(1, config.hidden), nn.ReLU(), nn.Linear(config.hidden, ctx.num_heads))
        self.c = nn.Parameter(torch.tensor(float(config.init_c)))
        self.L_mult = nn.Parameter(torch.tensor(1.0))  # λ
        self.L0 = float(config.init_L if config.init_L is not None else ctx.max_len)

    def score_bias(self, pos_q, pos_k):
        dt = torch.float32 if self.c.element_size() < 4 else self.c.dtype  # half precision: float32
        rel = (pos_q[:, :, None] - pos_k[:, None, :]).to(dt)  # (B|1, Tq, Tk): i - j
        rel = rel.clamp(min=0) if self.causal else rel.abs()  # keys after a causal query are masked
        threshold = (self.L_mult.to(dt) * self.L0).abs()
        norm = torch.maximum(pos_q.to(dt), threshold)[:, :, None]  # (B|1, Tq, 1): max(i, L)
        c = self.c.to(dt)
        x = torch.log(torch.abs(c * rel) + 1) / (torch.log(torch.abs(c * norm) + 1) + self.config.eps)
        bias = self.mlp(x[..., None].to(self.mlp[0].weight.dtype))  # (B|1, Tq, Tk, h)
        return bias.permute(0, 3, 1, 2)  # (B|1, h, Tq, Tk)


@zoo.hookimpl
def register_positions(register):
    register("fire", Fire, config=FireConfig)
