"""The shared pieces of attention kernels: what many ``plugins/attention_*.py`` files would
otherwise each write again.

An attention kernel (:class:`zoo.components.AttentionKernel`) gets ``q (B, h, Tq, hd)``, ``k, v
(B, h_kv, Tk, hd)``, a boolean ``mask`` (True = may attend) and an additive ``bias``, and most
variants change one step of the same recipe::

    s   = q·kᵀ · scale                       # the scores: the step a variant usually changes
    s   = s + bias, -inf where ~mask         # bias_and_mask(s, bias, mask)
    w   = softmax(s)                         # softmax_values(s, v, ...): the softmax ...
    out = dropout(w) @ v                     # ... and the tail, weigh(w, v, ...) on its own

A kernel over PyTorch's fused ``F.scaled_dot_product_attention`` instead hands the mask and the
bias to one call: :func:`sdpa` (the merge of the two into SDPA's ``attn_mask``, grouped-query heads,
and the NaN row the fused kernel would hide), with :func:`prefix_keys` for the variants that put
extra always-visible keys in front of the real ones (``null_kv``, ``memory_kv``, ``sinks``).

The contract's own helpers stay in :mod:`zoo.components` (``repeat_kv``, ``causal_mask``,
``nonfinite_query_rows``, ``guard_empty_rows``), and the engine's side of it -- turning a causal flag
into a mask, opening and zeroing fully masked rows -- in :mod:`zoo.model.layers` (``AttnArgs``,
``call_kernel``, ``attend``).  The functions here are plain maths on tensors: no state, no flags.

**The inside view.**  These steps are where a kernel's scores and weights exist, so they are where
a hooked call sees them (TransformerLens' ``hook_attn_scores`` and ``hook_pattern``, through
:func:`shown`): :func:`softmax_values` shows the scores entering its softmax and the weights it
applies, :func:`weigh` the weights it applies, and :func:`sdpa` -- in a hooked call that asks for
them, and only then -- computes the same attention step by step to show both (the keys
:func:`prefix_keys` put in front are not shown, as TransformerLens shows an attention sink).  An
edit of either flows on into the output.  Outside a hooked call :func:`shown` is one context-
global read.  A kernel that forms its weights some other way calls :func:`shown` itself.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..components import causal_mask, kernel_taps, nonfinite_query_rows, repeat_kv


def shown(name: str, x: torch.Tensor) -> torch.Tensor:
    """``x`` handed to the hooked call running this kernel as ``name`` (``hook_attn_scores``: scores
    ``(B, h, Tq, Tk)``, ``-inf`` where masked, as they enter the softmax; ``hook_pattern``: the
    weights applied to the values), and whatever its hooks made of it; ``x`` itself outside one."""
    tap = kernel_taps()
    return x if tap is None else tap(name, x)


def bias_and_mask(s: torch.Tensor, bias: torch.Tensor | None = None, mask: torch.Tensor | None = None
                  ) -> torch.Tensor:
    """Raw scores ``s (B, h, Tq, Tk)`` under the engine's score bias and mask: ``s + bias``, and
    ``-inf`` where ``mask`` is False (so softmax gives those keys weight exactly 0)."""
    if bias is not None:
        s = s + bias  # bias broadcastable to (B, h, Tq, Tk): ALiBi, T5 buckets, ...
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s


def weigh(weights: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0, training: bool = False
          ) -> torch.Tensor:
    """The values mixed by the weights, ``dropout(weights) @ v``: ``weights (B, h, Tq, Tk)``, ``v
    (B, h, Tk, hd) -> (B, h, Tq, hd)``.  Dropout acts only in training (``F.dropout`` returns the
    weights themselves otherwise, or when ``dropout_p`` is 0)."""
    weights = shown("hook_pattern", weights)  # the inside view (identity outside a hooked call)
    return torch.matmul(F.dropout(weights, dropout_p, training), v)  # (B, h, Tq, hd)


def softmax_values(s: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0, training: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention's tail: ``weights = softmax(s)`` over the keys, ``out = dropout(weights) @
    v``.  ``s (B, h, Tq, Tk)`` already biased and masked (:func:`bias_and_mask`); returns ``(out (B, h, Tq,
    hd), weights (B, h, Tq, Tk))``, the weights before dropout (each row sums to 1)."""
    weights = torch.softmax(shown("hook_attn_scores", s), dim=-1)  # (B, h, Tq, Tk)
    weights = shown("hook_pattern", weights)
    return torch.matmul(F.dropout(weights, dropout_p, training), v), weights  # (B, h, Tq, hd)


def sdpa_mask(mask: torch.Tensor | None, bias: torch.Tensor | None, dtype: torch.dtype
              ) -> torch.Tensor | None:
    """zoo's mask and bias as SDPA's one ``attn_mask``: the boolean mask as it is (SDPA's True also
    means "may attend"), or the bias in ``dtype`` with ``-inf`` where the mask forbids."""
    if bias is None:
        return mask
    attn_mask = bias.to(dtype)  # (…, Tq, Tk) float: added to the scores
    if mask is not None:
        attn_mask = attn_mask.masked_fill(~mask, float("-inf"))
    return attn_mask


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
         bias: torch.Tensor | None = None, *, scale: float, dropout_p: float = 0.0,
         training: bool = False, is_causal: bool = False) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` under zoo's contract: ``q (B, h, Tq, hd)``, ``k, v (B,
    h_kv, Tk, ·)`` (grouped-query heads by ``enable_gqa``, no copies), ``mask`` and ``bias`` merged
    by :func:`sdpa_mask`, dropout only in training; returns ``(B, h, Tq, hd_v)``.

    Without an ``attn_mask`` the fused CPU kernel returns zeros for a query row holding NaN or
    infinity (it takes the row for a fully masked one); the output passes through
    :func:`~zoo.components.nonfinite_query_rows` then, so the NaN shows where it arose.

    In a hooked call that asks for the scores or the pattern the same attention runs step by step
    (:func:`_sdpa_shown`), so that it can show them."""
    tap = kernel_taps()
    if tap is not None:
        return _sdpa_shown(q, k, v, mask, bias, scale, dropout_p, training, is_causal, getattr(tap, "prefix", 0))
    attn_mask = sdpa_mask(mask, bias, q.dtype)
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
        dropout_p=dropout_p if training else 0.0, enable_gqa=q.size(1) != k.size(1))  # (B, h, Tq, hd_v)
    if attn_mask is None:  # the fused kernel would return zeros for a NaN query row
        out = nonfinite_query_rows(out, q)
    return out


def _sdpa_shown(q, k, v, mask, bias, scale, dropout_p, training, is_causal, prefix: int) -> torch.Tensor:
    """:func:`sdpa` step by step, showing the scores and the pattern of the keys after the first
    ``prefix`` (those :func:`prefix_keys` put in front stay as computed)."""
    k, v = repeat_kv(k, v, q.size(1))  # (B, h, Tk, hd)
    if is_causal:
        mask = causal_mask(q.size(-2), k.size(-2), q.device)[None, None]  # (1, 1, Tq, Tk)
    s = bias_and_mask(torch.matmul(q, k.transpose(-2, -1)) * scale,
                      None if bias is None else bias.to(q.dtype), mask)  # (B, h, Tq, Tk)
    if not prefix:
        out, _ = softmax_values(s, v, dropout_p, training)
        return out
    real = shown("hook_attn_scores", s[..., prefix:])  # (B, h, Tq, Tk - prefix)
    w = torch.softmax(torch.cat([s[..., :prefix], real], dim=-1), dim=-1)
    w = torch.cat([w[..., :prefix], shown("hook_pattern", w[..., prefix:])], dim=-1)  # rows may sum below 1
    return torch.matmul(F.dropout(w, dropout_p, training), v)  # (B, h, Tq, hd_v)


def prefix_keys(mask: torch.Tensor | None, bias: torch.Tensor | None, n: int
                ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The mask and bias for ``n`` extra keys put in front of the real ones (a zero key, learned
    memory slots, a sink): every query may attend to them (mask True) and they get bias 0, so
    ``(…, Tq, Tk) -> (…, Tq, n + Tk)``; None stays None.  (A hooked call is told which keys they
    are, so that it shows the real keys' scores and pattern only.)"""
    tap = kernel_taps()
    if tap is not None:
        tap.prefix = n
    if mask is not None:
        mask = F.pad(mask, (n, 0), value=True)  # (…, Tq, n + Tk): the prefix is always visible
    if bias is not None:
        bias = F.pad(bias, (n, 0))  # (…, Tq, n + Tk): no score bias on the prefix
    return mask, bias
