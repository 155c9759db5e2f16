"""``sdpa``: PyTorch's fused ``F.scaled_dot_product_attention`` (the fast default).

Same function as ``eager`` (checked against it and against the naive loop), but computed by a fused
kernel (FlashAttention / memory-efficient / C++ math, chosen by PyTorch) that never materialises the
``(Tq, Tk)`` weights in Python, so it cannot return them: inspection switches to ``eager`` for the
inspected run only.  It declares a fused causal path, so a plain causal mask arrives as
``is_causal=True`` without a mask tensor; grouped-query attention uses ``enable_gqa`` rather than
copying k/v.  A score bias (ALiBi, T5) and a boolean mask are merged into one float ``attn_mask``.

Grouped queries can be *folded* into the query axis (:func:`fold_groups`): ``(B, h, Tq, hd)``
queries over ``h_kv`` key/value heads become ``(B, h_kv, (h / h_kv)·Tq, hd)``, each mask or bias
row following its query, so the fused kernel reads every key once per kv head instead of once per
query head.  ``sdpa`` folds a decoding step (one query per head: the mask rows it repeats are one
per head, cheap); on a CPU, 16 rows x 4 heads over ~300 cached keys took 194 us folded against
306 us with ``enable_gqa`` (one thread).  A prompt is not folded: its ``(Tq, Tk)`` mask would be
copied once per query head.  MLA (``attention_mla``, one latent kv head) folds always.

Mind the mask convention: SDPA's boolean ``attn_mask`` is True where attention is *allowed*, the same
as zoo's; ``nn.MultiheadAttention``'s is the opposite.
"""
from __future__ import annotations

import zoo
from zoo.components import AttentionKernel, Capabilities, causal_mask
from zoo.model.kernels import sdpa


def fold_groups(attend, q, k, v, mask=None, bias=None, is_causal=False):
    """Attention with each kv head's group of query heads folded into the query axis.

    ``q (B, h, Tq, hd)``, ``k, v (B, h_kv, Tk, ·)``; head ``j`` reads kv head ``j // (h / h_kv)``
    (``enable_gqa``'s pairing), so ``q`` reshapes to ``(B, h_kv, (h / h_kv)·Tq, hd)`` with rows in
    (head in group, position) order, and ``mask`` / ``bias`` (broadcastable to ``(B, h, Tq, Tk)``)
    are expanded per head and reshaped the same way; the causal rule becomes an explicit mask, since
    the folded rows are no longer positions.  ``attend(q, k, v, mask, bias)`` is the unfolded kernel
    call on equal head counts; returns ``(B, h, Tq, hd_v)``."""
    B, h, Tq, _ = q.shape
    h_kv, Tk = k.size(1), k.size(2)
    rows = h // h_kv * Tq
    if is_causal:  # queries are the last Tq positions of the keys
        mask = causal_mask(Tq, Tk, q.device)

    def fold(t):  # (B|1, h|1, Tq|1, Tk) -> (B|1, h_kv, rows, Tk)
        t = t.reshape((1,) * (4 - t.dim()) + tuple(t.shape))
        return t.expand(t.size(0), h, Tq, Tk).reshape(t.size(0), h_kv, rows, Tk)

    out = attend(q.reshape(B, h_kv, rows, q.size(-1)), k, v,
                 None if mask is None else fold(mask), None if bias is None else fold(bias))
    return out.reshape(B, h, Tq, out.size(-1))


class SDPAttention(AttentionKernel):
    capabilities = Capabilities(returns_weights=False, fused_causal=True)

    def folds(self, q, k) -> bool:
        """Whether this call runs through :func:`fold_groups`: a decoding step (one query per head)
        over grouped kv heads."""
        return q.size(2) == 1 and q.size(1) != k.size(1)

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        if self.folds(q, k):
            return fold_groups(self.attend, q, k, v, mask, bias, is_causal), None
        return self.attend(q, k, v, mask, bias, is_causal), None

    def attend(self, q, k, v, mask=None, bias=None, is_causal=False):
        """``F.scaled_dot_product_attention`` with zoo's mask and bias merged, ``(B, h, Tq, hd_v)``
        (:func:`zoo.model.kernels.sdpa`, which also keeps a NaN query row NaN)."""
        return sdpa(q, k, v, mask, bias, scale=self.scale, dropout_p=self.dropout_p, training=self.training,
                    is_causal=is_causal)


@zoo.hookimpl
def register_attention(register):
    register("sdpa", SDPAttention)
