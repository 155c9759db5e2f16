"""``moe``: a sparse mixture-of-experts feed-forward block with top-k routing (Shazeer et al., 2017, "Outrageously Large Neural Networks: The Sparsely-Gated Mixture-of-Experts Layer", arXiv 1701.06538; as in Jiang et al., 2024, "Mixtral of Experts", arXiv 2401.04088).

A dense FFN spends the same parameters on every token.  A mixture of experts holds ``experts``
separate SwiGLU blocks and a router that sends each token to its ``top_k`` best ones::

    r = W_r x                                    # (B, T, E) router logits
    G = softmax over the top_k entries of r      # the others get gate 0 (Mixtral's order)
    FFN(x) = Σ_e G_e · SwiGLU_e(x)               # only top_k experts contribute per token

Parameters grow with ``experts`` while the useful compute per token grows with ``top_k`` only —
Mixtral 8x7B has 47B parameters and uses 13B per token.  Each expert has ``d_ff`` hidden units.

Dispatch without a loop over tokens: the ``N·k`` (token, expert) pairs are sorted by expert, each
expert multiplies its contiguous slice of tokens in one matmul, and ``index_add`` sums the gated
outputs back per token — compute scales with ``top_k``, not ``experts``.  The families differ in
small ways, each an option: ``normalize`` renormalises the top-k probabilities of the softmax over
all experts (Mixtral, Qwen3-MoE; Qwen2-MoE and OLMoE keep them as they are), ``shared_d_ff`` adds a
*shared* SwiGLU expert every token passes through, scaled by ``sigmoid(w·x)`` (Qwen2-MoE; DeepSeek
adds it ungated, ``shared_gate: false``).  DeepSeek's routers (DeepSeek-AI, 2024, arXiv 2405.04434
and 2412.19437) add: ``groups`` / ``topk_groups`` (a token's experts come from its best groups only,
DeepSeek-V2's device-limited routing; a group ranked by its best score, or V3's best two summed),
``scoring: sigmoid`` with a ``score_bias`` that moves the choice but not the gates (V3's auxiliary-
loss-free balancing) and ``scale`` on the chosen gates (``routed_scaling_factor``).

Experts left idle stop learning, so training adds the load-balancing loss of Switch Transformer
(Fedus et al., 2021) as transformers computes it: ``E · Σ_e f_e · P_e`` with ``f_e`` the tokens
sent to expert ``e`` per token and ``P_e`` its mean router probability; it is ``top_k`` for a
uniform router and grows as routing collapses.  Each forward leaves it in ``aux_loss`` (times ``aux_loss_coef``) and the tokens per
expert in ``expert_counts`` (each token's experts in ``routing``), for the trainer and for ``zoo.trace``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

import zoo
from zoo.components import FeedForward, taps_for


@dataclass(frozen=True)
class MoEConfig:
    experts: int = 4
    top_k: int = 2
    normalize: bool = True      # renormalise the top-k probabilities to sum to 1
    shared_d_ff: int = 0        # hidden width of a shared, sigmoid-gated SwiGLU expert (0: none)
    aux_loss_coef: float = 0.0  # weight of the load-balancing loss the trainer adds
    # the router options of DeepSeek-V2/V3 (the defaults are Mixtral's plain top-k softmax):
    scoring: Literal["softmax", "sigmoid"] = "softmax"  # expert scores from the router logits
    shared_gate: bool = True    # scale the shared expert by sigmoid(w·x) (Qwen2-MoE); False: add it as is
    groups: int = 1             # experts split into this many equal groups ...
    topk_groups: int = 1        # ... and each token picks its top_k experts inside its best topk_groups
    group_score: Literal["max", "top2"] = "max"  # a group's rank: its best score, or its best two summed
    score_bias: bool = False    # a per-expert bias added to the scores for *choosing* only (V3)
    scale: float = 1.0          # the chosen gates times this (routed_scaling_factor)

    def __post_init__(self):
        if self.experts < 1 or not 1 <= self.top_k <= self.experts:
            raise ValueError(f"need experts >= 1 and 1 <= top_k <= experts, got {self.experts}, {self.top_k}")
        if self.shared_d_ff < 0 or self.aux_loss_coef < 0:
            raise ValueError("shared_d_ff and aux_loss_coef must be >= 0")
        if self.groups < 1 or self.experts % self.groups or not 1 <= self.topk_groups <= self.groups:
            raise ValueError(f"need groups dividing experts ({self.experts}) and 1 <= topk_groups <= groups, "
                             f"got groups={self.groups}, topk_groups={self.topk_groups}")
        if self.top_k > self.topk_groups * (self.experts // self.groups):
            raise ValueError(f"top_k {self.top_k} is more experts than topk_groups={self.topk_groups} groups hold")
        if self.group_score == "top2" and self.experts // self.groups < 2:
            raise ValueError("group_score top2 needs at least two experts per group")
        if not self.scale > 0:
            raise ValueError(f"scale must be > 0, got {self.scale}")


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
        S = config.shared_d_ff
        if config.score_bias:  # moves the choice only; trained by balance updates, not gradients (V3)
            self.register_buffer("score_bias", torch.zeros(E))
        if S and config.shared_gate:
            self.shared_gate = nn.Linear(D, 1, bias=False)
        if S:
            self.shared = nn.ModuleDict({n: nn.Linear(*io, bias=False)
                                         for n, io in (("gate", (D, S)), ("up", (D, S)), ("down", (S, D)))})
        self.aux_loss: torch.Tensor | None = None  # of the last forward
        self.expert_counts: torch.Tensor | None = None  # (E,) tokens routed to each expert, last forward
        self.routing: torch.Tensor | None = None  # (B, T, k) the experts of each token, last forward

    def macs_per_token(self) -> int:
        """Active multiply-adds per token: the router, the ``top_k`` chosen experts (gate, up and
        down of each) and the shared expert if any -- not all ``experts`` (OLMoE: 8 of 64)."""
        c = self.config
        D, F_ = self.w_gate.shape[1], self.w_gate.shape[2]
        shared = 0
        if c.shared_d_ff:
            shared = D * c.shared_gate + 3 * D * c.shared_d_ff  # its gate (D -> 1) if any, its SwiGLU
        return D * c.experts + c.top_k * 3 * D * F_ + shared

    def forward(self, x):
        B, T, D = x.shape
        E, k = self.config.experts, self.config.top_k
        xf = x.reshape(B * T, D)  # (N, D)
        weight, expert, probs = self._route(xf, taps_for(self), B)  # (N, k), (N, k), (N, E)
        flat = expert.reshape(-1)  # (N*k,) the expert of each (token, slot) pair
        order = flat.argsort(stable=True)  # pairs grouped by expert
        token = order // k  # (N*k,) the token of each sorted pair
        counts = torch.bincount(flat, minlength=E)  # (E,)
        xs = xf.index_select(0, token)  # (N*k, D) tokens in expert order
        y = self._experts(xs, counts)  # (N*k, D) each pair through its expert
        gate = weight.reshape(-1)[order, None].to(x.dtype)  # (N*k, 1) the gate of each sorted pair
        y = y.mul_(gate) if _inplace_ok(y) else y * gate
        out = torch.zeros_like(xf).index_add_(0, token, y)  # (N, D): each token's k experts summed
        if self.config.shared_d_ff:
            s = self.shared
            shared = s["down"](F.silu(s["gate"](xf)) * s["up"](xf))
            out = out + (torch.sigmoid(self.shared_gate(xf)) * shared if self.config.shared_gate else shared)
        self.expert_counts = counts.detach()
        self.routing = expert.detach().view(B, T, k)  # for zoo.trace's router statistics
        # Switch Transformer's balance: E * sum_e (tokens to e per token) * (mean probability of e)
        self.aux_loss = self.config.aux_loss_coef * E * (counts.to(probs.dtype) / (B * T) * probs.mean(0)).sum()
        return out.view(B, T, D)

    #: the inside view (TransformerLens' MoE names): the router's scores ``(B, T, E)`` and the chosen
    #: experts ``(B, T, k)``; an edit of either moves the choice and the gates
    hook_points = ("hook_expert_weights", "hook_expert_indices")

    def _route(self, xf: torch.Tensor, tap=None, B: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``xf (N, D)`` -> each token's gates and experts ``(N, k)`` and all scores ``(N, E)``.

        Scores are the softmax (or the sigmoid, V3) of the router logits.  The choice ranks
        ``scores + score_bias``; with ``groups`` > 1 only the experts of each token's best
        ``topk_groups`` groups compete (DeepSeek's device-limited routing; a group ranks by its best
        score or its best two summed).  The gates are the chosen experts' *scores* (without the
        bias), renormalised when ``normalize``, times ``scale``."""
        c, E = self.config, self.config.experts
        logits = self.router(xf).float()  # (N, E)
        scores = torch.softmax(logits, dim=-1) if c.scoring == "softmax" else torch.sigmoid(logits)
        if tap is not None:  # shown per position: (B, T, E)
            scores = tap("hook_expert_weights", scores.unflatten(0, (B, -1))).flatten(0, 1)
        choice = scores + self.score_bias.float() if c.score_bias else scores  # (N, E) ranks the experts
        if c.groups > 1:
            g = choice.view(-1, c.groups, E // c.groups)  # (N, G, E/G)
            rank = g.max(-1).values if c.group_score == "max" else g.topk(2, dim=-1).values.sum(-1)  # (N, G)
            best = rank.topk(c.topk_groups, dim=-1).indices  # (N, topk_groups)
            keep = torch.zeros_like(rank, dtype=torch.bool).scatter_(1, best, True)  # (N, G)
            choice = choice.masked_fill(~keep.repeat_interleave(E // c.groups, dim=1), float("-inf"))
        expert = choice.topk(c.top_k, dim=-1).indices  # (N, k)
        if tap is not None:  # (B, T, k)
            expert = tap("hook_expert_indices", expert.unflatten(0, (B, -1))).flatten(0, 1)
        weight = scores.gather(1, expert)  # (N, k)
        if c.normalize:
            weight = weight / weight.sum(-1, keepdim=True)
        return (weight * c.scale if c.scale != 1.0 else weight), expert, scores

    def _experts(self, xs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """``xs (N*k, D)`` grouped by expert (``counts (E,)`` rows each) -> each row through its
        expert, ``(N*k, D)``: one grouped matmul per weight where torch has one for the dtype,
        else one matmul per busy expert."""
        if xs.dtype in _GROUPED and xs.size(0) and not torch.compiler.is_compiling():
            offs = counts.cumsum(0).to(torch.int32)  # (E,) where each expert's rows end
            g = torch._grouped_mm(xs, self.w_gate, offs=offs)  # (N*k, d_ff)
            u = torch._grouped_mm(xs, self.w_up, offs=offs)
            h = F.silu(g, inplace=True).mul_(u) if _inplace_ok(g) else F.silu(g) * u
            return torch._grouped_mm(h, self.w_down, offs=offs)
        ys = []
        for e, (start, n) in enumerate(zip((counts.cumsum(0) - counts).tolist(), counts.tolist())):
            if n:
                h = xs[start:start + n]
                ys.append((F.silu(h @ self.w_gate[e]) * (h @ self.w_up[e])) @ self.w_down[e])  # (n, D)
        return torch.cat(ys)


def _inplace_ok(t: torch.Tensor) -> bool:
    """Whether ``t`` (a fresh intermediate) may be overwritten: not when autograd will need it for
    the backward pass (in-place there saves two (N*k, d_ff) allocations per forward, ~3%)."""
    return not (torch.is_grad_enabled() and t.requires_grad)


#: dtypes torch's grouped matmul takes (none on builds without it)
_GROUPED = (torch.float32, torch.bfloat16, torch.float16) if hasattr(torch, "_grouped_mm") else ()


@zoo.hookimpl
def register_ffns(register):
    register("moe", MoE, config=MoEConfig)
