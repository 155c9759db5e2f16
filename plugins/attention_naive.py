"""``naive``: attention as a per-query Python loop, the reference every other kernel is checked against.

For each batch row, head and query position ``i``: score every key ``j`` with a dot product, scale,
drop the keys the mask forbids (the engine guarantees each row allows at least one), take a numerically stable softmax by hand (subtract the max,
exponentiate, divide by the sum) and average the values with those weights.  Nothing is vectorised
across queries, so there is nowhere for a broadcasting bug to hide.  Slow on purpose: use it to check
and to teach, never to train.
"""
from __future__ import annotations

import torch

import zoo
from zoo.components import AttentionKernel, Capabilities


class NaiveAttention(AttentionKernel):
    capabilities = Capabilities(returns_weights=True)

    def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
        B, h, Tq, hd = q.shape
        h_kv, Tk = k.size(1), k.size(2)
        group = h // h_kv  # grouped-query: query head `head` reads kv head `head // group`
        out = q.new_zeros(B, h, Tq, v.size(-1))
        weights = q.new_zeros(B, h, Tq, Tk)
        for b in range(B):
            for head in range(h):
                kh, vh = k[b, head // group], v[b, head // group]  # (Tk, hd)
                for i in range(Tq):
                    allowed = []
                    for j in range(Tk):
                        if mask is not None and not bool(_at(mask, b, head, i, j)):
                            continue
                        s = (q[b, head, i] * kh[j]).sum() * self.scale
                        if bias is not None:
                            s = s + _at(bias, b, head, i, j)
                        allowed.append((j, s))
                    top = max(float(s.detach()) for _, s in allowed)
                    exps = [(j, torch.exp(s - top)) for j, s in allowed]
                    total = sum(e for _, e in exps)
                    for j, e in exps:
                        w = e / total
                        weights[b, head, i, j] = w
                        out[b, head, i] = out[b, head, i] + w * vh[j]
        return out, (weights if need_weights else None)


def _at(t: torch.Tensor, b: int, head: int, i: int, j: int):
    """Index a tensor broadcastable to (B, h, Tq, Tk) at one element."""
    while t.dim() < 4:
        t = t.unsqueeze(0)
    return t[b if t.size(0) > 1 else 0, head if t.size(1) > 1 else 0,
             i if t.size(2) > 1 else 0, j if t.size(3) > 1 else 0]


@zoo.hookimpl
def register_attention(register):
    register("naive", NaiveAttention)
