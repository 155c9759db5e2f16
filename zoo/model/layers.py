"""The engine's building blocks: multi-head attention, the residual block, the block stack, the KV cache.

Nothing here knows a component by name.  Components are looked up in the registry once, at build time
(:func:`make_stack`); ``forward`` only calls the interfaces of :mod:`zoo.components`.  Read top-down:
``Attention`` -> ``Block`` -> ``Stack``.

Multi-head attention, as in the lecture scripts: project ``x`` to q, k, v; split ``d`` into ``h``
heads of ``hd`` features (``view`` + ``transpose``); attend in every head in parallel; merge the heads
back (``transpose`` + ``reshape``) and project.  The projection of all heads together is one
``D x (h * hd)`` matrix, so the parameter count does not depend on how many heads share it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from ..components import (FAMILY, BuildContext, MaskContext, PositionScheme, causal_mask, current_taps,
                          guard_empty_rows)
from ..errors import SpecError, ZooError
from .spec import StackSpec


def real_padding(key_padding: torch.Tensor | None) -> torch.Tensor | None:
    """``key_padding`` (True = real token), or None when every token is real, so the fused causal /
    mask-free kernels stay in use.  Under ``torch.compile`` the check would break the graph; the
    explicit all-True mask gives the same result, so it is kept."""
    if key_padding is not None and not torch.compiler.is_compiling() and bool(key_padding.all()):
        return None
    return key_padding


def _append(buf: torch.Tensor | None, n: int, new: torch.Tensor, dim: int, capacity: int | None
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Write ``new`` into slots ``[n, n + T)`` of the preallocated ``buf`` along ``dim``, in place.

    ``buf`` is allocated at the first write with room for ``capacity`` slots (or exactly what is
    needed when the capacity is unknown) and, should a write ever overflow it, reallocated at twice
    the size (amortised growth, as a Python list does).  Returns ``(buf, view of slots [0, n + T))``:
    the view shares ``buf``'s memory, nothing is copied."""
    T = new.size(dim)
    if buf is not None and buf.size(0) != new.size(0):  # (1, T) positions meeting a batch
        if new.size(0) == 1:
            new = new.expand(buf.size(0), *new.shape[1:])
        else:
            buf = buf.expand(new.size(0), *buf.shape[1:]).clone()
    if buf is None or n + T > buf.size(dim):
        size = max(capacity or 0, n + T, 2 * buf.size(dim) if buf is not None else 0)
        shape = list(new.shape)
        shape[dim] = size
        grown = new.new_empty(shape)
        if buf is not None and n:
            grown.narrow(dim, 0, n).copy_(buf.narrow(dim, 0, n))
        buf = grown
    buf.narrow(dim, n, T).copy_(new)
    return buf, buf.narrow(dim, 0, n + T)


class LayerCache:
    """The cached keys/values of one attention layer, in preallocated buffers
    ``k, v (B, h_kv, capacity, hd)`` of which the first ``length`` slots are filled.

    A decoding step writes its new keys into the next free slots **in place** (no concatenation, no
    allocation per step) and attends to a view of the filled slots.  Slot ``j`` holds the key of
    the ``j``-th token fed to the model, so the stack's ``key_pos``/``key_padding`` (indexed the
    same way) tell every position scheme and mask rule where each key sits.  Cross-attention
    computes the encoder's keys once (``cross``) and reuses them.
    """

    __slots__ = ("k", "v", "cross", "length", "capacity")

    def __init__(self, capacity: int | None = None):
        self.k: torch.Tensor | None = None  # (B, h_kv, capacity, hd) buffers
        self.v: torch.Tensor | None = None
        self.cross: tuple[torch.Tensor, torch.Tensor] | None = None
        self.length = 0
        self.capacity = capacity

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k, v (B, h_kv, T, hd)`` after the cached ones; return all keys and values so far,
        ``(B, h_kv, length + T, hd)`` views of the buffers."""
        n, end = self.length, self.length + k.size(2)
        self.length = end
        if self.k is not None and end <= self.k.size(2) and self.k.size(0) == k.size(0):
            self.k.narrow(2, n, end - n).copy_(k)  # the common case: room left, write in place
            self.v.narrow(2, n, end - n).copy_(v)
            return self.k.narrow(2, 0, end), self.v.narrow(2, 0, end)
        self.k, k_all = _append(self.k, n, k, 2, self.capacity)
        self.v, v_all = _append(self.v, n, v, 2, self.capacity)
        return k_all, v_all

    def reorder(self, order: torch.Tensor) -> None:
        """Row ``j`` becomes old row ``order[j]`` (beam search), in the same buffers."""
        for buf in (self.k, self.v, *(self.cross or ())):
            if buf is not None:
                buf.copy_(buf.index_select(0, order))

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only the rows ``rows (B',)`` (B' < B), in new, smaller buffers of the same capacity:
        the batch shrinks, and so does every later step's work on this layer."""
        if self.k is not None:
            self.k, self.v = self.k.index_select(0, rows), self.v.index_select(0, rows)
        if self.cross is not None:
            self.cross = tuple(t.index_select(0, rows) for t in self.cross)


class KVCache:
    """Incremental-decoding state of one stack: a :class:`LayerCache` per block, the number of tokens
    seen, the absolute positions of the cached keys and their padding (True = real token).

    ``capacity``: how many tokens the cache will hold (prompt + new tokens); every buffer is
    allocated once, at the first forward, with that many slots.  Without it the buffers grow by
    doubling."""

    def __init__(self, num_layers: int, capacity: int | None = None):
        self.layers = [LayerCache(capacity) for _ in range(num_layers)]
        self.length = 0
        self.capacity = capacity
        self._pos: torch.Tensor | None = None  # (B|1, capacity) long
        self._pad: torch.Tensor | None = None  # (B, capacity) bool, None while nothing is padding
        # while no token was padding and every row counts from 0, slot j holds position j: then
        # _pos is a preallocated arange and next_positions hands out views of it (no work per step)
        self._plain = True
        self._issued: torch.Tensor | None = None  # the view handed out for the coming append

    @property
    def key_pos(self) -> torch.Tensor | None:
        """``(B|1, T_cached)`` absolute positions of the cached keys."""
        return None if self._pos is None else self._pos[:, :self.length]

    @property
    def key_padding(self) -> torch.Tensor | None:
        """``(B, T_cached)`` bool, True for real tokens, or None if no cached token is padding."""
        return None if self._pad is None else self._pad[:, :self.length]

    def next_positions(self, T: int, device) -> torch.Tensor | None:
        """``(1, T)`` absolute positions of the next ``T`` tokens while every key so far sits at
        its slot index (no padding seen, all rows alike): a view of a preallocated ``arange``, so a
        decoding step spends no tensor operation on its position.  None once that stops being true;
        the caller then derives positions from the cached ones (:attr:`key_pos`)."""
        if not self._plain:
            return None
        end = self.length + T
        if self._pos is None or end > self._pos.size(1) or self._pos.device != torch.device(device):
            size = max(self.capacity or 0, end, 2 * self._pos.size(1) if self._pos is not None else 0)
            self._pos = torch.arange(size, device=device)[None]  # (1, size): slot j at position j
        self._issued = self._pos.narrow(1, self.length, T)
        return self._issued

    def reorder(self, order: torch.Tensor) -> None:
        """Beam search: row ``j`` of every cached tensor becomes old row ``order[j] (B,)``, in
        place (the preallocated buffers are kept; :mod:`zoo.run.beam` calls this between steps)."""
        for layer in self.layers:
            layer.reorder(order)
        for buf in (self._pos, self._pad):
            if buf is not None and buf.size(0) == order.numel() and buf.size(0) > 1:
                buf.copy_(buf.index_select(0, order))

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only the rows ``rows (B',)`` of the batch, in order (generation drops the rows that
        have finished, :class:`zoo.run.steps.LiveRows`): every layer's keys and values, the cached
        positions and padding.  Unlike :meth:`reorder` the batch shrinks, so the buffers are new."""
        for layer in self.layers:
            layer.keep(rows)
        if self._pos is not None and self._pos.size(0) > 1:  # (1, capacity) is shared by every row
            self._pos = self._pos.index_select(0, rows)
        if self._pad is not None and self._pad.size(0) > 1:
            self._pad = self._pad.index_select(0, rows)

    @classmethod
    def from_rows(cls, rows: list["KVCache"], lengths: list[int], capacity: int) -> "KVCache":
        """One left-padded batch cache from the caches of prompts prefilled one by one (ragged
        prefill, :func:`zoo.run.generate`): row ``i``'s ``lengths[i]`` keys land in the last slots of
        the first ``T0 = max(lengths)``, exactly where a left-padded batch prefill would have put
        them; the slots before are padding (``key_padding`` False, position 0, zeros).

        Each row cache must hold only self-attention keys/values of one unpadded sequence counted
        from position 0 (what a decoder's forward of that prompt alone leaves); anything else is a
        ``ValueError`` and the caller prefills the padded batch instead."""
        B, T0 = len(rows), max(lengths)
        out = cls(len(rows[0].layers), capacity)
        dev = None
        for li, layer in enumerate(out.layers):
            src = [r.layers[li] for r in rows]
            if any(c.k is None or c.cross is not None or c.length != n for c, n in zip(src, lengths)):
                raise ValueError("a row cache is not a plain self-attention cache")
            k0 = src[0].k
            dev = k0.device
            layer.k = k0.new_zeros(B, k0.size(1), capacity, k0.size(3))  # (B, h_kv, capacity, hd)
            layer.v = src[0].v.new_zeros(B, src[0].v.size(1), capacity, src[0].v.size(3))
            for i, (c, n) in enumerate(zip(src, lengths)):
                layer.k[i, :, T0 - n:T0].copy_(c.k[0, :, :n])
                layer.v[i, :, T0 - n:T0].copy_(c.v[0, :, :n])
            layer.length = T0
        out._pos = torch.zeros(B, capacity, dtype=torch.long, device=dev)
        out._pad = torch.zeros(B, capacity, dtype=torch.bool, device=dev)
        for i, (r, n) in enumerate(zip(rows, lengths)):
            if r.length != n or (r.key_padding is not None and not bool(r.key_padding.all())):
                raise ValueError("a row cache holds padding")
            out._pos[i, T0 - n:T0].copy_(r.key_pos[0, :n])
            out._pad[i, T0 - n:T0] = True
        out.length, out._plain = T0, False
        return out

    def append(self, pos: torch.Tensor, key_padding: torch.Tensor | None
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Record the positions ``(B|1, T)`` and padding ``(B, T)`` (or None) of ``T`` new tokens;
        return those of every key so far, ``(key_pos (B|1, n + T), key_padding (B, n + T) or
        None)``.  The cache's ``length`` advances when the stack's forward is complete."""
        n, end = self.length, self.length + pos.size(1)
        issued, self._issued = self._issued, None
        if pos is issued and key_padding is None:  # from next_positions: already in place
            return self._pos.narrow(1, 0, end), None
        self._plain = False  # from here on, positions are written as given
        if key_padding is None and self._pad is None and self._pos is not None \
                and end <= self._pos.size(1) and self._pos.size(0) == pos.size(0):
            self._pos.narrow(1, n, end - n).copy_(pos)  # the common case: write in place
            return self._pos.narrow(1, 0, end), None
        self._pos, key_pos = _append(self._pos, n, pos, 1, self.capacity)
        if key_padding is None and self._pad is None:
            return key_pos, None
        if key_padding is None:
            key_padding = torch.ones(self._pad.size(0), pos.size(1), dtype=torch.bool,
                                     device=pos.device)
        if self._pad is None and n:  # the first padded tokens: every earlier one was real
            self._pad, _ = _append(None, 0, torch.ones(key_padding.size(0), n, dtype=torch.bool,
                                                       device=pos.device), 1, self.capacity)
        self._pad, padding = _append(self._pad, n, key_padding, 1, self.capacity)
        return key_pos, padding


@dataclass
class AttnArgs:
    """What every attention layer of one stack forward shares, computed once by :class:`Stack`.

    ``mask (B|1, 1, Tq, Tk)`` bool, True = may attend, or None; never has a fully masked row (those
    rows are opened and listed in ``empty (…, Tq, 1)``, whose outputs the engine zeroes).
    ``is_causal``: the plain causal fast path (then ``mask`` and ``bias`` are None); only kernels
    declaring ``Capabilities(fused_causal=True)`` ever see it, the others get the causal ``mask``.
    ``bias``: additive score bias ``(B|1, h, Tq, Tk)`` or None.  ``rotary``/``rot_state``: the q/k
    rotation (RoPE) of self-attention.  ``memory``: the encoder output, for cross-attention.
    ``taps``: the hooked call's ``module -> taps`` (:func:`zoo.components.current_taps`), or None
    outside one; a block or attention layer takes its own with ``a.taps.get(self)``.
    """

    mask: torch.Tensor | None = None
    empty: torch.Tensor | None = None
    is_causal: bool = False
    bias: torch.Tensor | None = None
    rotary: PositionScheme | None = None
    rot_state: Any = None
    memory: torch.Tensor | None = None
    taps: Any = None

    @classmethod
    def make(cls, q_len: int, k_len: int, device, *, mask=None, bias=None, is_causal=False,
             fused_causal=False, **rest) -> "AttnArgs":
        """The kernel-facing part of the contract, in one place: a causal flag becomes a mask unless
        the kernel has a fused causal path (and no bias rides along), and fully masked rows are
        opened here and zeroed after the kernel, so no kernel has to guard them."""
        if is_causal and (not fused_causal or bias is not None or mask is not None):
            causal = causal_mask(q_len, k_len, device)[None, None]  # (1, 1, Tq, Tk)
            mask = causal if mask is None else mask & causal
            is_causal = False
        mask, empty = guard_empty_rows(mask)
        return cls(mask=mask, empty=empty, is_causal=is_causal, bias=bias, **rest)

    def unfused(self, q_len: int, k_len: int, device) -> "AttnArgs":
        """The same arguments for a kernel without a fused causal path: the causal flag as a mask."""
        if not self.is_causal:
            return self
        return replace(self, mask=causal_mask(q_len, k_len, device)[None, None], is_causal=False)


def call_kernel(kernel: nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: AttnArgs,
                need_weights: bool = False, tap=None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Call an attention kernel under the engine's contract: ``is_causal`` only for a fused causal
    path, rows listed in ``a.empty`` zeroed in the output (and the weights).

    ``tap``: the attention layer's taps in a hooked call (:func:`zoo.components.taps_for`).  When
    the call asks for the scores or the pattern, the kernel shows them (``hook_attn_scores``,
    ``hook_pattern``): through its own :meth:`~zoo.components.AttentionKernel.steps`, through the
    shared steps it is built from (:mod:`zoo.model.kernels`), or -- softmax attention that shows
    neither, a fused kernel -- by the registry's ``eager`` kernel standing in for this call."""
    if tap is not None and tap.wants("hook_attn_scores", "hook_pattern"):
        return tap.kernel_call(kernel, q, k, v, a)
    if a.is_causal:
        out, weights = kernel(q, k, v, is_causal=True, need_weights=need_weights)
    else:
        out, weights = kernel(q, k, v, mask=a.mask, bias=a.bias, need_weights=need_weights)
    if a.empty is not None:
        out = out.masked_fill(a.empty, 0.0)  # fully masked rows attend to nothing
        if weights is not None:
            weights = weights.masked_fill(a.empty, 0.0)
    return out, weights


def kernel_steps(kernel: nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: AttnArgs
                 ) -> dict[str, torch.Tensor] | None:
    """A kernel's named intermediates (:meth:`~zoo.components.AttentionKernel.steps`: ``scores``,
    ``scores_masked``, ``weights``, ``heads``) under the contract :func:`call_kernel` keeps: the
    causal flag arrives as a mask, and rows listed in ``a.empty`` show ``-inf`` masked scores, zero
    weights and a zero output.  None when the kernel does not show its steps."""
    a = a.unfused(q.size(-2), k.size(-2), q.device)
    steps = kernel.steps(q, k, v, a.mask, a.bias)
    if steps is not None and a.empty is not None:  # fully masked rows attend to nothing
        steps = {**steps, "scores_masked": steps["scores_masked"].masked_fill(a.empty, float("-inf")),
                 "weights": steps["weights"].masked_fill(a.empty, 0.0),
                 "heads": steps["heads"].masked_fill(a.empty, 0.0)}
    return steps


def attend(kernel: nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
           mask: torch.Tensor | None = None, bias: torch.Tensor | None = None,
           is_causal: bool = False, need_weights: bool = False
           ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run one attention kernel outside a model exactly as a model would (tests, the conformance
    kit, the UI): ``q (B, h, Tq, hd)``, ``k, v (B, h_kv, Tk, hd)``; ``mask`` bool, True = may attend;
    ``is_causal`` the causal rule (queries aligned with the last keys).  Returns ``(out (B, h, Tq,
    hd), weights (B, h, Tq, Tk) or None)``; weights only when asked and the kernel returns them."""
    caps = kernel.capabilities
    if bias is not None and not caps.supports_bias:
        raise ZooError(f"{type(kernel).__name__} takes no additive score bias",
                       where="attend(bias=...)", fix="pass bias=None, or use a kernel with "
                       "supports_bias=True (eager, sdpa)")
    a = AttnArgs.make(q.size(-2), k.size(-2), q.device, mask=mask, bias=bias, is_causal=is_causal,
                      fused_causal=caps.fused_causal)
    return call_kernel(kernel, q, k, v, a, need_weights=need_weights and caps.returns_weights)


class Attention(nn.Module):
    """Multi-head (grouped-query) attention: projections around a pluggable kernel.

    Self-attention uses one fused ``qkv`` projection ``D -> (h + 2 h_kv) * hd``; cross-attention a
    ``q`` projection of the decoder states and a fused ``kv`` projection of the encoder memory.
    """

    def __init__(self, st: StackSpec, kernel: nn.Module, cross: bool = False, head_norm=None):
        super().__init__()
        self.h, self.h_kv, self.hd = st.num_heads, st.num_kv_heads, st.head_dim
        # q/k norm (Qwen3, OLMo 2, Gemma 3): the stack's norm type over each head's features,
        # on queries and keys before positions -- it bounds the attention logits
        self.q_norm = head_norm(st.num_heads) if head_norm is not None else None
        self.k_norm = head_norm(st.num_kv_heads) if head_norm is not None else None
        d, inner, kv_inner = st.d_model, st.num_heads * st.head_dim, st.num_kv_heads * st.head_dim
        self.is_cross = cross
        if cross:
            self.q = nn.Linear(d, inner, bias=st.qkv_bias)
            self.kv = nn.Linear(d, 2 * kv_inner, bias=st.qkv_bias)
        else:
            self.qkv = nn.Linear(d, inner + 2 * kv_inner, bias=st.qkv_bias)
        self.out = nn.Linear(inner, d, bias=st.out_bias)
        self.kernel = kernel

    @property
    def cache_layout(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """What one token leaves in a :class:`LayerCache`: ``((heads, features) of k, (heads,
        features) of v)``; a layer with another cache (MLA's latents) declares its own."""
        return (self.h_kv, self.hd), (self.h_kv, self.hd)

    def run_kernel(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: AttnArgs, tap=None
                   ) -> torch.Tensor:
        """This layer's kernel call, ``(B, h, Tq, hd)`` per-head outputs (``tap``: the layer's taps
        in a hooked call).  (The module-level :func:`attend` runs a kernel *outside* a model.)"""
        return call_kernel(self.kernel, q, k, v, a, tap=tap)[0]

    def forward(self, x: torch.Tensor | tuple[torch.Tensor, ...], a: AttnArgs,
                cache: LayerCache | None = None) -> torch.Tensor:
        """``x (B, T, D)``, or in a hooked call that gives every head its own input (TL's
        ``hook_attn_in`` / ``hook_q_input`` ...) the tuple ``(q_in (B, T, h, D), k_in, v_in (B, T,
        h_kv, D))``.  Hook points: ``tap(...)`` lines, which run only in a hooked call."""
        tap = None if a.taps is None else a.taps.get(self)  # hook points: in a hooked call only
        h, h_kv, hd = self.h, self.h_kv, self.hd
        if a.memory is None:
            if isinstance(x, tuple):  # one input per head: each head projects its own copy
                q, k, v = (t.transpose(1, 2) for t in self.per_head_qkv(*x))  # (B, h|h_kv, T, hd)
            else:
                qkv = self.qkv(x).view(*x.shape[:2], h + 2 * h_kv, hd).transpose(1, 2)  # (B, h + 2 h_kv, T, hd)
                q, k, v = qkv.split_with_sizes([h, h_kv, h_kv], dim=1)  # (B, h, T, hd), (B, h_kv, T, hd) x 2
            if tap is not None:  # (B, T, h|h_kv, hd), as TransformerLens shows them
                q, k, v = (tap(n, t.transpose(1, 2)).transpose(1, 2) for n, t in (
                    ("hook_q", q), ("hook_k", k), ("hook_v", v)))
            if self.q_norm is not None:  # normalised over hd, per head: on (B, T, h, hd)
                q = self.q_norm(q.transpose(1, 2)).transpose(1, 2)
                k = self.k_norm(k.transpose(1, 2)).transpose(1, 2)
            if a.rotary is not None:
                q, k = a.rotary.rotate(q, k, a.rot_state)
            if tap is not None:  # q and k as the kernel sees them
                q = tap("hook_rot_q", q.transpose(1, 2)).transpose(1, 2)
                k = tap("hook_rot_k", k.transpose(1, 2)).transpose(1, 2)
            if cache is not None:
                k, v = cache.update(k, v)  # (B, h_kv, T_cached + T, hd)
        else:
            q = self.q(x).view(*x.shape[:2], h, hd)  # (B, T, h, hd)
            q = (q if tap is None else tap("hook_q", q)).transpose(1, 2)  # (B, h, T, hd)
            if cache is not None and cache.cross is not None:
                k, v = cache.cross
            else:
                B, S = a.memory.shape[:2]
                k, v = self.kv(a.memory).split([h_kv * hd, h_kv * hd], dim=-1)
                k, v = k.view(B, S, h_kv, hd), v.view(B, S, h_kv, hd)  # (B, S, h_kv, hd)
                if tap is not None:  # the encoder's positions: from 0
                    k, v = tap("hook_k", k, at=0), tap("hook_v", v, at=0)
                k, v = k.transpose(1, 2), v.transpose(1, 2)  # (B, h_kv, S, hd)
                if cache is not None:
                    cache.cross = (k, v)
        if tap is not None and a.bias is not None:
            bias = tap("hook_score_bias", a.bias)  # (B|1, h, Tq, Tk): ALiBi, T5 buckets, ...
            a = a if bias is a.bias else replace(a, bias=bias)
        z = self.run_kernel(q, k, v, a, tap).transpose(1, 2)  # (B, T, h, hd)
        if tap is not None:
            z = tap("hook_z", z)
        y = self.out(z.reshape(*z.shape[:2], h * hd))  # merge heads: (B, T, h * hd) -> (B, T, D)
        if tap is not None and tap.wants("hook_result"):  # each head's write into the stream
            result = head_writes(self.out, z)  # (B, T, h, D), summing to y less the bias
            shown = tap("hook_result", result)
            if shown is not result:  # an edit moves the stream by exactly what it changed
                y = y + (shown - result).sum(2)
        return y

    def hook_points(self, score_bias: bool = False) -> tuple[str, ...]:
        """The names :meth:`forward` taps, in order (``score_bias``: the stack adds a positional
        score bias; the kernel's own ``hook_attn_scores`` / ``hook_pattern`` come from the kernel)."""
        if self.is_cross:
            return ("hook_q", "hook_k", "hook_v", "hook_z", "hook_result")
        return ("hook_q", "hook_k", "hook_v", "hook_rot_q", "hook_rot_k") + \
            (("hook_score_bias",) if score_bias else ()) + ("hook_z", "hook_result")

    def per_head_qkv(self, q_in: torch.Tensor, k_in: torch.Tensor, v_in: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v ``(B, T, h|h_kv, hd)`` when every head has its own input ``(B, T, h|h_kv, D)``:
        head ``j`` projects its own copy (the projection of all copies, of which head ``j`` keeps
        its own rows -- any linear layer, a quantised one too)."""
        h, h_kv, hd = self.h, self.h_kv, self.hd
        out = []
        for t, first, n in ((q_in, 0, h), (k_in, h, h_kv), (v_in, h + h_kv, h_kv)):
            y = self.qkv(t).unflatten(-1, (h + 2 * h_kv, hd))  # (B, T, n copies, h + 2 h_kv, hd)
            j = torch.arange(n, device=y.device)
            out.append(y[:, :, j, first + j])  # (B, T, n, hd): copy j through head j's rows
        return out[0], out[1], out[2]


class Block(nn.Module):
    """One Transformer layer: self-attention, optional cross-attention, feed-forward, each wrapped by
    the placement (pre / post / ...) of its norm and a residual connection."""

    def __init__(self, st: StackSpec, parts: "_Parts", index: int = 0):
        super().__init__()
        self.attn_res = parts.placement()
        kernel = parts.kernel()
        layer = type(kernel).layer or Attention  # a kernel may bring its own projections (MLA)
        self.attn = layer(st, kernel, head_norm=parts.head_norm if st.qk_norm else None)
        if st.cross_attention:
            self.cross_res = parts.placement()
            self.cross = Attention(st, parts.kernel(), cross=True)
        else:
            self.cross_res = self.cross = None
        self.ffn_res = parts.placement()
        self.ffn = parts.ffn(index)
        self.drop = nn.Dropout(st.dropout)
        self.has_dropout = st.dropout > 0  # static: forward skips three no-op module calls
        self.parallel = st.parallel_residual
        if self.parallel and st.cross_attention:
            raise SpecError("parallel_residual has no cross-attention form", where="decoder.parallel_residual",
                            fix="use parallel_residual in decoder-only or encoder-only models")

    def forward(self, x: torch.Tensor, a: AttnArgs, cross: AttnArgs | None = None,
                cache: LayerCache | None = None) -> torch.Tensor:
        """``a``: the self-attention arguments; ``cross``: the cross-attention ones (with memory).
        Hook points (TransformerLens' names): the ``tap(...)`` lines, run only in a hooked call."""
        drop = self.drop if self.has_dropout and self.training else _identity
        tap = None if a.taps is None else a.taps.get(self)  # hook points: in a hooked call only
        if tap is not None:
            x = tap("hook_resid_pre", x)
        if self.parallel:  # GPT-J / GPT-NeoX: x + attn(n1(x)) + ffn(n2(x)), both read the same x
            y = self.attn(self.attn_res.enter(x) if tap is None else self.attn_input(x, tap), a, cache)
            f = self.ffn(self.ffn_res.enter(x if tap is None else tap("hook_mlp_in", x)))
            if tap is None:
                return self.ffn_res.exit(self.attn_res.exit(x, drop(y)), drop(f))
            x = _exit(self.attn_res, x, drop(y), tap, "hook_attn_out")
            return tap("hook_resid_post", _exit(self.ffn_res, x, drop(f), tap, "hook_mlp_out"))
        y = self.attn(self.attn_res.enter(x) if tap is None else self.attn_input(x, tap), a, cache)
        x = self.attn_res.exit(x, drop(y)) if tap is None else tap(
            "hook_resid_mid", _exit(self.attn_res, x, drop(y), tap, "hook_attn_out"))
        if self.cross is not None:
            y = self.cross(self.cross_res.enter(x), cross, cache)
            x = self.cross_res.exit(x, drop(y)) if tap is None else tap(
                "hook_resid_mid_cross", _exit(self.cross_res, x, drop(y), tap, "hook_cross_out"))
        y = self.ffn(self.ffn_res.enter(x if tap is None else tap("hook_mlp_in", x)))
        if tap is None:
            return self.ffn_res.exit(x, drop(y))
        return tap("hook_resid_post", _exit(self.ffn_res, x, drop(y), tap, "hook_mlp_out"))

    def hook_points(self) -> tuple[str, ...]:
        """The names :meth:`forward` taps, in order (TL's per-head inputs where the attention is the
        engine's own; ``hook_attn_in`` only where every head has its own keys)."""
        heads = ()
        if isinstance(self.attn, Attention):
            heads = (("hook_attn_in",) if self.attn.h == self.attn.h_kv else ()) + \
                ("hook_q_input", "hook_k_input", "hook_v_input")
        cross = ("hook_cross_out", "hook_resid_mid_cross") if self.cross is not None else ()
        return ("hook_resid_pre",) + heads + ("hook_attn_out",) + (() if self.parallel else ("hook_resid_mid",)) + \
            cross + ("hook_mlp_in", "hook_mlp_out", "hook_resid_post")

    def attn_input(self, x: torch.Tensor, tap=None) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """What self-attention reads: the placement's way in (pre-norm: ``ln1(x)``).  A hooked call
        asking for TransformerLens' per-head inputs gets one copy of the stream per head, before the
        norm (``hook_attn_in`` for all of q, k, v, or ``hook_q_input`` / ``hook_k_input`` /
        ``hook_v_input``), each copy through the norm, so an edit of one head's copy moves only it."""
        if tap is None or not tap.wants("hook_attn_in", "hook_q_input", "hook_k_input", "hook_v_input"):
            return self.attn_res.enter(x)
        B, T, D = x.shape
        h, h_kv = self.attn.h, self.attn.h_kv

        def copies(n):
            return x[:, :, None].expand(B, T, n, D)  # (B, T, n, D), one per head

        if tap.wants("hook_attn_in"):  # listed only where every head has its own keys (h == h_kv)
            q = k = v = tap("hook_attn_in", copies(h))
        else:
            q, k, v = copies(h), copies(h_kv), copies(h_kv)
        if not tap.wants("hook_q_input", "hook_k_input", "hook_v_input"):
            q = k = v = self.attn_res.enter(q)
            return q, k, v
        enter = self.attn_res.enter  # the norm sees each input on its own, as in TransformerLens
        return (enter(tap("hook_q_input", q)), enter(tap("hook_k_input", k)), enter(tap("hook_v_input", v)))


def _identity(x):
    return x


def _exit(res: nn.Module, x: torch.Tensor, y: torch.Tensor, tap, name: str) -> torch.Tensor:
    """``res.exit(x, y)`` in a hooked call, the sub-layer's output shown as ``name``: what the
    placement adds to the stream (its ``branch``, where it has one: sandwich's post-norm)."""
    if res.branch is None:
        return res.exit(x, tap(name, y))
    return x + tap(name, res.branch(y))


def head_writes(out: nn.Module, z: torch.Tensor) -> torch.Tensor:
    """``(B, T, h, D)``: what each head writes into the stream, ``z_h @ W_O[h]ᵀ`` without the bias
    (TransformerLens' ``hook_result``), for ``z (B, T, h, hd)`` and the output projection ``out``
    (its weight read directly; any other linear layer -- int8, int4 -- applied to each head alone)."""
    B, T, h, hd = z.shape
    if isinstance(out, nn.Linear):
        return torch.einsum("bthe,dhe->bthd", z, out.weight.view(-1, h, hd))
    eye = torch.eye(h, dtype=z.dtype, device=z.device)  # head j's z alone in row j
    alone = (eye[:, :, None] * z[:, :, None]).reshape(B, T, h, h * hd)  # (B, T, h, h * hd)
    y = out(alone)  # (B, T, h, D), with the bias in every row
    return y - out.bias if getattr(out, "bias", None) is not None else y


class _Parts:
    """Factories for one stack's components: each family's class looked up in the registry once,
    every component built as ``cls(config, st)`` -- the resolved stack is the
    :class:`~zoo.components.BuildContext` it sizes itself from."""

    def __init__(self, st: StackSpec, registry):
        self.st = st
        self._get = lambda cs: registry.get(cs.family, cs.kind).cls

    def make(self, family: str, ctx: BuildContext | None = None, *extra):
        """The stack's component of ``family`` (one of the family table's single-entry families)."""
        cs = getattr(self.st, FAMILY[family].field)
        return self._get(cs)(cs.config, ctx if ctx is not None else self.st, *extra)

    def kernel(self):
        return self.make("attention")

    def norm(self):
        return self.make("norm")

    def head_norm(self, heads: int = 1):
        """The stack's norm type for q or k: sized for one head (``head_dim`` features), or for all
        ``heads`` heads together when the norm class sets ``qk_spans_heads`` (OLMo 2, OLMoE)."""
        span = heads if getattr(self._get(self.st.norm), "qk_spans_heads", False) else 1
        return self.make("norm", replace(self.st, d_model=span * self.st.head_dim))

    def placement(self):
        return self.make("placement", None, self.norm)  # a placement builds its own norms

    def ffn(self, layer: int = 0):
        """Layer ``layer``'s feed-forward: the stack's ``ffn``, or ``dense_ffn`` (of width
        ``dense_d_ff``) in the first ``dense_layers`` layers (DeepSeek's dense layers)."""
        st = self.st
        if st.dense_ffn is not None and layer < st.dense_layers:
            return self._get(st.dense_ffn)(st.dense_ffn.config, replace(st, d_ff=st.dense_d_ff or st.d_ff))
        return self.make("ffn")

    def positions(self):
        return self.make("position")

    def masks(self, rules=None):
        return [self._get(m)(m.config, self.st) for m in (rules or self.st.mask)]


class Stack(nn.Module):
    """``num_layers`` blocks sharing one positional scheme and one mask, plus the final norm.

    Computes once per forward what every layer shares: the boolean mask (or the fused causal flag),
    the positional score bias, the rotary state.  Embedding-level positions are applied by the model,
    which owns the embeddings.
    """

    def __init__(self, st: StackSpec, registry):
        super().__init__()
        parts = _Parts(st, registry)
        self.positions = parts.positions()
        self.masks = nn.ModuleList(parts.masks())
        # mask_pattern: layer i uses rule group i % len (Gemma 2: local, global, local, ...)
        pattern = st.mask_pattern or ()
        self.pattern = nn.ModuleList([nn.ModuleList(parts.masks(rules)) for rules in pattern])
        self.pattern_plain = [all(type(m).is_causal for m in g) for g in self.pattern]
        self.blocks = nn.ModuleList([Block(st, parts, i) for i in range(st.num_layers)])
        placement_cls = registry.get("placement", st.placement.kind).cls
        self.final_norm = parts.norm() if placement_cls.final_norm else nn.Identity()
        # static facts, so forward never inspects component types
        self.plain_causal = all(type(m).is_causal for m in self.masks)
        self.rotates = type(self.positions).acts_on_qk
        # a scheme with tables per mask_pattern group (rope's pattern_base: Gemma 3) hands each its own
        self.group_rot = self.rotates and hasattr(self.positions, "group_state")
        self.biases = type(self.positions).acts_on_scores
        self.fused_causal = registry.get("attention", st.attention.kind).capabilities.fused_causal
        self.num_layers = st.num_layers

    def build_mask(self, mctx: MaskContext, rules=None, plain_causal=None) -> tuple[torch.Tensor | None, bool]:
        """``(mask (B|1, 1, Tq, Tk) bool or None, is_causal)``; padding joins automatically.
        ``rules``: another group of mask rules than the stack's (a layer of ``mask_pattern``)."""
        rules = self.masks if rules is None else rules
        plain_causal = self.plain_causal if plain_causal is None else plain_causal
        if plain_causal and mctx.key_padding is None:
            if mctx.q_offset == 0 and mctx.q_len == mctx.k_len:
                return None, True  # kernels take the fused causal path
            if mctx.q_len == 1:
                return None, False  # the newest token may see every cached one
        mask = None
        for rule in rules:
            m = rule(mctx)
            if m is not None:
                mask = m if mask is None else mask & m
        if mctx.key_padding is not None:
            pad = mctx.key_padding[:, None, None, :]  # (B, 1, 1, Tk)
            mask = pad if mask is None else mask & pad
        if mask is not None and mask.dim() == 2:
            mask = mask[None, None]  # (1, 1, Tq, Tk)
        return mask, False

    def forward(self, x: torch.Tensor, pos: torch.Tensor, key_padding: torch.Tensor | None = None,
                cache: KVCache | None = None, prefix_lengths: torch.Tensor | None = None,
                memory: torch.Tensor | None = None, memory_padding: torch.Tensor | None = None
                ) -> torch.Tensor:
        """``x (B, T, D)`` embedded tokens at absolute positions ``pos (B|1, T)``; ``key_padding
        (B, T)`` True for real tokens.  With a ``cache``, ``x`` holds only the new tokens."""
        B, T, _ = x.shape
        offset = cache.length if cache is not None else 0
        key_pos = pos
        if cache is not None:  # positions and padding of every key: (B|1, Tk), (B, Tk) or None
            key_pos, key_padding = cache.append(pos, key_padding)
        key_padding = real_padding(key_padding)
        mctx = MaskContext(q_len=T, k_len=offset + T, device=x.device, q_offset=offset,
                           batch_size=B, key_padding=key_padding, prefix_lengths=prefix_lengths)
        mask, is_causal = self.build_mask(mctx)
        taps = current_taps()  # a hooked call's taps, for every layer (None outside one)
        a = AttnArgs.make(T, offset + T, x.device, mask=mask, is_causal=is_causal, taps=taps,
                          fused_causal=self.fused_causal,
                          bias=self.positions.score_bias(pos, key_pos) if self.biases else None,
                          rotary=self.positions if self.rotates else None,
                          rot_state=self.positions.qk_state(pos) if self.rotates else None)
        cross = None
        if memory is not None:
            memory_mask = memory_padding[:, None, None, :] if memory_padding is not None else None
            cross = AttnArgs.make(T, memory.size(1), x.device, mask=memory_mask, memory=memory, taps=taps)
        per_layer = [a]
        if len(self.pattern):  # mask_pattern: one set of attention arguments per rule group
            per_layer = []
            for j, (rules, plain) in enumerate(zip(self.pattern, self.pattern_plain)):
                m, causal = self.build_mask(mctx, rules, plain)
                rot = self.positions.group_state(a.rot_state, j) if self.group_rot else a.rot_state
                per_layer.append(AttnArgs.make(T, offset + T, x.device, mask=m, is_causal=causal, taps=taps,
                                               fused_causal=self.fused_causal, bias=a.bias,
                                               rotary=a.rotary, rot_state=rot))
        for i, block in enumerate(self.blocks):
            x = block(x, per_layer[i % len(per_layer)], cross, cache.layers[i] if cache is not None else None)
        if cache is not None:
            cache.length = offset + T
        return self.final_norm(x)


def make_parts(spec, role: str, registry) -> _Parts:
    """The component factories of ``spec``'s ``role`` stack (the UI, accounting and plots build
    single components with them)."""
    return _Parts(spec.stack(role), registry)


def make_stack(spec, role: str, registry) -> Stack:
    """The ``role`` stack of ``spec``, resolved once (:meth:`~zoo.model.spec.ModelSpec.stack`)."""
    return Stack(spec.stack(role), registry)
