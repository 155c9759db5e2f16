"""``mla``: multi-head latent attention (DeepSeek-AI, 2024, "DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts Language Model", arXiv 2405.04434, section 2.1).

A decoder's KV cache grows with every token: multi-head attention keeps ``2 · h · hd`` numbers per
token per layer (DeepSeek-V2-Lite's shape: 2 · 16 · 128 = 4096), grouped-query attention divides
that by ``h / h_kv``, at some cost in quality.  MLA instead keeps one small *latent* vector per token
and rebuilds every head's key and value from it::

    c  = RMSNorm(W_DKV x)          # (r,)       the compressed latent, r = kv_lora_rank (512)
    k_C = W_UK c,  v = W_UV c      # (h, d_n), (h, d_v): per-head keys and values, rebuilt
    q  = W_UQ RMSNorm(W_DQ x)      # (h, d_n + d_r)  (or W_Q x when q_lora_rank = 0)

Only ``c`` is cached — plus one detail, the *decoupled rope*: RoPE rotates a key by its position,
and a rotated key can no longer be rebuilt by a fixed ``W_UK`` from a position-free latent.  So the
position goes into ``d_r`` extra features: each head's query gets ``d_r`` rotated features, and all
heads share one rotated key ``k_R = RoPE(W_KR x)`` (``d_r`` = qk_rope_head_dim, 64), cached next to
``c``.  A head's score is ``q_C·k_C + q_R·k_R`` over ``d_n + d_r`` features.  Cache per token per
layer: ``r + d_r`` = 576 numbers instead of 4096 (7.1x less than MHA; as little as GQA with 2.25
groups, while every head keeps its own keys and values).

The absorbed-projection trick (paper, 2.1.2): since ``q_C·(W_UK c) = (W_UKᵀ q_C)·c`` and
``Σ p_j W_UV c_j = W_UV Σ p_j c_j``, a layer can move each head's query into latent space and attend
over the cached latents directly -- multi-query attention with ``h`` query heads of ``r + d_r``
features over one key head ``[c; k_R]`` and one value head ``c`` -- and only then apply ``W_UV``.
Rebuilding keys and values instead costs ``Tk · r · h (d_n + d_v)`` multiply-adds per step (every
cached token, every step); absorbed, a decoding step costs ``h · (d_n + d_v) · r`` for the two
weight products plus ``h · Tk · (2r + d_r)`` for the attention.  ``absorb``: ``decode`` (default)
absorbs when the call attends to cached tokens (decoding), rebuilds in a prefill (what transformers
always does, and cheaper when there are as many queries as keys); ``always`` / ``never``.

Here the engine's cache slots hold the latents: ``k`` slot ``c (B, 1, T, r)``, ``v`` slot ``k_R
(B, 1, T, d_r)`` (:attr:`MultiHeadLatentAttention.cache_layout`).  The stack's ``head_dim`` is
``d_r`` (the rotated share, as in transformers' config), its ``positions`` rotate ``q_R``/``k_R``
only, and ``attn_scale`` should be ``(d_n + d_r)^-1/2`` (zoo's converter writes it).  Every head
reads the one latent, so ``num_kv_heads`` plays no part.  The kernel after the projections is
plain softmax attention (PyTorch's SDPA), so the registry's kernel checks hold for it too.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

import zoo
from zoo.model.layers import call_kernel
from zoo.plugins.attention_sdpa import SDPAttention


@dataclass(frozen=True)
class MLAConfig:
    kv_lora_rank: int = 64      # r: width of the cached latent c
    q_lora_rank: int = 0        # width of the query's own bottleneck (0: one full q projection)
    nope_dim: int = 16          # d_n: per-head query/key features without position (qk_nope_head_dim)
    v_dim: int = 16             # d_v: per-head value features (v_head_dim)
    latent_eps: float = 1e-6    # epsilon of the RMSNorms on the latents
    absorb: Literal["decode", "always", "never"] = "decode"  # attend in latent space (see above)

    def __post_init__(self):
        if min(self.kv_lora_rank, self.nope_dim, self.v_dim) < 1 or self.q_lora_rank < 0:
            raise ValueError("kv_lora_rank, nope_dim and v_dim must be >= 1, q_lora_rank >= 0")
        if not self.latent_eps > 0:
            raise ValueError(f"latent_eps must be > 0, got {self.latent_eps}")


class MultiHeadLatentAttention(nn.Module):
    """The projections and latent cache around the ``mla`` kernel (the engine builds this in place
    of :class:`zoo.model.layers.Attention`, because the kernel class names it as its ``layer``)."""

    #: what :meth:`run_kernel` taps in a hooked call (the kernel adds its scores and pattern)
    hook_points = ("hook_q", "hook_k", "hook_v", "hook_z")

    def __init__(self, st, kernel, head_norm=None):
        super().__init__()
        c = kernel.config
        if head_norm is not None:
            raise zoo.SpecError("mla has its own latent norms and no per-head q/k norm", where="qk_norm",
                                fix="set qk_norm: false with attention: mla")
        D, h, dr = st.d_model, st.num_heads, st.head_dim
        self.h, self.dn, self.dr, self.dv, self.r = h, c.nope_dim, dr, c.v_dim, c.kv_lora_rank
        self.absorb = c.absorb
        self.h_kv, self.hd = h, c.nope_dim + dr  # as the engine sees the expanded heads
        if c.q_lora_rank:
            self.q_a = nn.Linear(D, c.q_lora_rank, bias=st.qkv_bias)  # W_DQ
            self.q_norm = nn.RMSNorm(c.q_lora_rank, eps=c.latent_eps)
            self.q_b = nn.Linear(c.q_lora_rank, h * self.hd, bias=False)  # W_UQ (and W_QR)
        else:
            self.q = nn.Linear(D, h * self.hd, bias=False)
        self.kv_a = nn.Linear(D, self.r + dr, bias=st.qkv_bias)  # [W_DKV; W_KR]
        self.kv_norm = nn.RMSNorm(self.r, eps=c.latent_eps)
        self.kv_b = nn.Linear(self.r, h * (self.dn + self.dv), bias=False)  # [W_UK; W_UV] per head
        self.out = nn.Linear(h * self.dv, D, bias=st.out_bias)
        self.kernel = kernel

    @property
    def cache_layout(self):
        """Per token: the latent ``c`` (1 x r) in the k slot, the shared rope key (1 x d_r) in v."""
        return (1, self.r), (1, self.dr)

    def run_kernel(self, q, k, v, a, tap=None):
        """The kernel call on the heads, ``(B, h, Tq, d_v)``.  In a hooked call (``tap``) its hook
        points are what it hands the kernel: ``hook_q (B, T, h, ·)``, ``hook_k`` / ``hook_v``
        every key so far, from position 0, and ``hook_z``, around the kernel's scores and pattern."""
        if tap is not None:
            q = tap("hook_q", q.transpose(1, 2)).transpose(1, 2)
            k = tap("hook_k", k.transpose(1, 2), at=0).transpose(1, 2)
            v = tap("hook_v", v.transpose(1, 2), at=0).transpose(1, 2)
        out = call_kernel(self.kernel, q, k, v, a, tap=tap)[0]
        return out if tap is None else tap("hook_z", out.transpose(1, 2)).transpose(1, 2)

    def forward(self, x, a, cache=None):
        tap = None if a.taps is None else a.taps.get(self)  # a hooked call sees the rebuilt heads (never absorbed)
        B, T, _ = x.shape
        h, dn, dr, dv = self.h, self.dn, self.dr, self.dv
        q = self.q_b(self.q_norm(self.q_a(x))) if hasattr(self, "q_a") else self.q(x)
        q_c, q_r = q.view(B, T, h, dn + dr).transpose(1, 2).split([dn, dr], -1)  # (B, h, T, dn), (.., dr)
        lat, k_r = self.kv_a(x).split([self.r, dr], -1)  # (B, T, r), (B, T, dr)
        lat, k_r = self.kv_norm(lat)[:, None], k_r[:, None]  # (B, 1, T, r), (B, 1, T, dr)
        if a.rotary is not None:
            q_r, k_r = a.rotary.rotate(q_r, k_r, a.rot_state)  # decoupled rope: these features only
        if cache is not None:
            lat, k_r = cache.update(lat, k_r)  # the latent cache: (B, 1, Tk, r), (B, 1, Tk, dr)
        Tk = lat.size(2)
        if tap is None and (self.absorb == "always" or (self.absorb == "decode" and Tk > T)):  # over the latents
            W = self.kv_b.weight.view(h, dn + dv, self.r)  # per head: W_UK (dn, r) over W_UV (dv, r)
            q_lat = torch.einsum("bhtn,hnr->bhtr", q_c, W[:, :dn])  # W_UKᵀ q_C: (B, h, T, r)
            out = self.run_kernel(torch.cat([q_lat, q_r], -1), torch.cat([lat, k_r], -1), lat, a)  # (B, h, T, r)
            out = torch.einsum("bhtr,hvr->bhtv", out, W[:, dn:])  # W_UV per head: (B, h, T, dv)
            return self.out(out.transpose(1, 2).reshape(B, T, h * dv))
        kv = self.kv_b(lat[:, 0]).view(B, Tk, h, dn + dv).transpose(1, 2)  # (B, h, Tk, dn + dv)
        k_c, v = kv.split([dn, dv], -1)
        k = torch.cat([k_c, k_r.expand(B, h, Tk, dr)], -1)  # (B, h, Tk, dn + dr)
        out = self.run_kernel(torch.cat([q_c, q_r], -1), k, v, a, tap)  # (B, h, T, dv)
        return self.out(out.transpose(1, 2).reshape(B, T, h * dv))


class MLAttention(SDPAttention):
    """[fused sdpa] Multi-head latent attention with a compressed KV cache (DeepSeek-AI, 2024, "DeepSeek-V2", arXiv 2405.04434).

    Softmax attention through PyTorch's SDPA.  With one key/value head (the absorbed latent path:
    every head reads ``[c; k_R]``) the heads fold into the query axis, ``(B, 1, h·Tq, ·)``
    (:func:`zoo.plugins.attention_sdpa.fold_groups`, for prompts too), so the fused kernel never
    copies the shared latents once per head (its grouped-query path does)."""

    layer = MultiHeadLatentAttention
    lesson = {
        "en": "Problem: the KV cache, not the weights, limits long-context decoding: MHA stores 2·h·hd "
              "numbers per token per layer. MLA stores one normalised latent c (r numbers) plus one shared "
              "rotated key (d_r) and rebuilds every head's keys and values from c with learned up-"
              "projections; rope lives in separate features because a rotated key cannot be rebuilt from "
              "a position-free latent. DeepSeek-V2-Lite: 576 numbers instead of 4096.",
        "zh": "问题：限制长上下文解码的是 KV 缓存而不是权重：MHA 每层每个词元要存 2·h·hd 个数。MLA 只存一个归一化的"
              "潜向量 c（r 个数）和一个所有头共享的旋转键（d_r 个数），再用学习到的上投影从 c 重建每个头的键和值；"
              "RoPE 放在单独的特征里，因为旋转过的键无法从与位置无关的潜向量重建。DeepSeek-V2-Lite：576 个数而不是 4096。",
    }

    def folds(self, q, k) -> bool:
        """Fold whenever every head reads the one shared latent head (any number of queries)."""
        return k.size(1) == 1 and q.size(1) > 1


@zoo.hookimpl
def register_attention(register):
    register("mla", MLAttention, config=MLAConfig)
