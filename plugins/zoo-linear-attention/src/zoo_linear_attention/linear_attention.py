"""``linear``: linear attention, "Transformers are RNNs" (Katharopoulos et al., ICML 2020).

Softmax attention weighs value ``j`` for query ``i`` by ``exp(q_i·k_j) / Σ_j' exp(q_i·k_j')``.  Computing
all those ``exp`` needs the full ``(T, T)`` score matrix: time and memory grow with ``T²``.  Replace the
similarity ``exp(q·k)`` by a dot product of *feature maps* ``φ(q)·φ(k)`` and matrix multiplication
lets us regroup the sum::

    out_i = Σ_j φ(q_i)·φ(k_j) v_j  /  Σ_j φ(q_i)·φ(k_j)
          = φ(q_i)ᵀ (Σ_j φ(k_j) v_jᵀ)  /  φ(q_i)ᵀ (Σ_j φ(k_j))
                     └── S: (hd, hd) ──┘            └─ z: (hd) ─┘

``S`` and ``z`` are computed once for all queries, so the cost is ``O(T · hd²)``: linear in ``T``.
The feature map is ``φ(x) = elu(x) + 1`` (positive, so the "weights" are positive and the
denominator never vanishes).  No ``1/sqrt(hd)`` scale is applied: the paper applies ``φ`` to the raw
projections, and the scale would not cancel through ``elu``.

Causal (decoder) attention keeps *running* sums ``S_i = Σ_{j<=i} φ(k_j) v_jᵀ`` and ``z_i``: that is
an RNN whose state is ``(S, z)``, the paper's title.  Here it is computed in chunks of ``chunk_size``
positions: inside a chunk the small masked ``(C, C)`` product, across chunks the carried state, which
is exact and keeps memory at ``O(T · hd + hd²)`` per head.

What it is *not*: it is not softmax attention (``exact = False``: the conformance kit does not compare
it with the naive softmax loop), its "weights" ``φ(q)·φ(k) / Σ`` are flatter than softmax ones, and an
additive score bias (ALiBi, T5 buckets) has no meaning in it (``supports_bias = False``: zoo never
passes one).  Arbitrary
boolean masks (padding, prefix, sliding window) are honoured through the quadratic form
``(φ(Q) φ(K)ᵀ ⊙ mask) V``, which is exact but ``O(T²)``; plain causal and unmasked attention take the
linear paths.  Under zoo's KV cache the new queries attend to all cached keys through the same
formulas (``O(T)`` per generated token; a cache of ``(S, z)`` would make it ``O(1)``).
Computation runs in float32 even for bf16/fp16 inputs, because long running sums lose precision.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from zoo.components import AttentionKernel, Capabilities, causal_mask, repeat_kv
from zoo.errors import ParamError


@dataclass(frozen=True)
class LinearAttentionConfig:
    eps: float = 1e-6  # added to the denominator
    chunk_size: int = 64  # positions per chunk in the causal path

    def __post_init__(self):
        if not self.eps > 0:
            raise ValueError(f"eps must be > 0, got {self.eps}")
        if self.chunk_size < 1:
            raise ParamError.of("param.at_least", name="chunk_size", minimum=1, value=self.chunk_size)


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """``φ(x) = elu(x) + 1``: positive everywhere, ~linear for x > 0, ~exp(x) for x < 0."""
    return F.elu(x) + 1.0


def causal_linear(fq, fk, v, eps: float, chunk: int) -> torch.Tensor:
    """Causal linear attention by chunks.  ``fq, fk (B, h, T, F)``, ``v (B, h, T, dv)``."""
    B, h, T, Fd = fq.shape
    S = fq.new_zeros(B, h, Fd, v.size(-1))  # running Σ φ(k_j) v_jᵀ       (B, h, F, dv)
    z = fq.new_zeros(B, h, Fd, 1)  # running Σ φ(k_j)                     (B, h, F, 1)
    outs = []
    for s in range(0, T, chunk):
        qc, kc, vc = fq[:, :, s:s + chunk], fk[:, :, s:s + chunk], v[:, :, s:s + chunk]  # (B,h,C,·)
        A = (qc @ kc.transpose(-2, -1)).tril()  # within-chunk similarities, causal (B, h, C, C)
        num = qc @ S + A @ vc  # earlier chunks via the state, this chunk directly (B, h, C, dv)
        den = qc @ z + A.sum(-1, keepdim=True)  # (B, h, C, 1)
        outs.append(num / (den + eps))
        S = S + kc.transpose(-2, -1) @ vc  # carry the state to the next chunk
        z = z + kc.sum(-2).unsqueeze(-1)
    return torch.cat(outs, dim=2)  # (B, h, T, dv)


class LinearAttention(AttentionKernel):
    capabilities = Capabilities(returns_weights=True, supports_bias=False, supports_mask=True,
                                supports_kv_cache=True, fused_causal=True, exact=False)

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        dtype = q.dtype
        k, v = repeat_kv(k, v, q.size(1))  # (B, h, Tk, hd)
        fq, fk, v = feature_map(q.float()), feature_map(k.float()), v.float()  # (B, h, T, hd)
        eps = self.config.eps
        if need_weights or mask is not None:  # the quadratic form: any mask, and the weights
            A = fq @ fk.transpose(-2, -1)  # φ(q_i)·φ(k_j) >= 0                 (B, h, Tq, Tk)
            if is_causal:
                mask = causal_mask(q.size(-2), k.size(-2), q.device)
            if mask is not None:
                A = A.masked_fill(~mask, 0.0)  # (B, h, Tq, Tk)
            weights = A / (A.sum(-1, keepdim=True) + eps)  # rows sum to ~1   (B, h, Tq, Tk)
            out = weights @ v  # (B, h, Tq, hd)
            return out.to(dtype), (weights.to(dtype) if need_weights else None)
        if is_causal:
            out = causal_linear(fq, fk, v, eps, self.config.chunk_size)
        else:
            S = fk.transpose(-2, -1) @ v  # Σ_j φ(k_j) v_jᵀ  (B, h, hd, hd): once for all queries
            z = fk.sum(-2).unsqueeze(-1)  # Σ_j φ(k_j)        (B, h, hd, 1)
            out = (fq @ S) / (fq @ z + eps)  # (B, h, Tq, hd)
        return out.to(dtype), None
