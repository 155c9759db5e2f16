"""zoo.model.kernels: the shared pieces of attention kernels agree with the maths written out.

The catalogue tests check each kernel that uses them against x-transformers; these check the pieces
themselves, so a kernel author (or the next refactor) can rely on what their docstrings say.
"""
from __future__ import annotations

import pytest
import torch

from zoo.components import repeat_kv
from zoo.model.kernels import bias_and_mask, prefix_keys, sdpa, sdpa_mask, softmax_values, weigh


def _qkv(h=4, h_kv=2, Tq=5, Tk=7, hd=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, h, Tq, hd, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, h_kv, Tk, hd, generator=g, dtype=torch.float64) for _ in range(2))
    mask = torch.rand(2, 1, Tq, Tk, generator=g) > 0.4
    mask[..., 0] = True  # no empty row: the engine guards those before a kernel runs
    bias = torch.randn(1, h, Tq, Tk, generator=g, dtype=torch.float64)
    return q, k, v, mask, bias


def _by_hand(q, k, v, mask, bias, scale):
    """softmax(q·kᵀ·scale + bias, masked) @ v, one query row at a time."""
    k, v = repeat_kv(k, v, q.size(1))
    out = torch.zeros_like(q)
    for b, hh, i in torch.cartesian_prod(*(torch.arange(n) for n in q.shape[:3])).tolist():
        s = k[b, hh] @ q[b, hh, i] * scale  # (Tk,)
        if bias is not None:
            s = s + bias[0, hh, i]
        if mask is not None:
            s = s[mask[b, 0, i]]
            w = torch.softmax(s, -1) @ v[b, hh][mask[b, 0, i]]
        else:
            w = torch.softmax(s, -1) @ v[b, hh]
        out[b, hh, i] = w
    return out


@pytest.mark.parametrize("with_mask,with_bias", [(False, False), (True, False), (False, True), (True, True)])
def test_the_eager_pieces_and_sdpa_compute_softmax_attention(with_mask, with_bias):
    q, k, v, mask, bias = _qkv()
    mask, bias = (mask if with_mask else None), (bias if with_bias else None)
    ref = _by_hand(q, k, v, mask, bias, 0.3)
    kk, vv = repeat_kv(k, v, q.size(1))
    out, weights = softmax_values(bias_and_mask(q @ kk.transpose(-2, -1) * 0.3, bias, mask), vv)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1], dtype=weights.dtype))
    if mask is not None:
        assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()
    torch.testing.assert_close(sdpa(q, k, v, mask, bias, scale=0.3), ref)  # GQA 4/2 without copies


def test_sdpa_mask_is_the_bool_mask_or_the_bias_with_minus_inf():
    _, _, _, mask, bias = _qkv()
    assert sdpa_mask(mask, None, torch.float32) is mask and sdpa_mask(None, None, torch.float32) is None
    merged = sdpa_mask(mask, bias, torch.float32)
    assert merged.dtype == torch.float32
    assert torch.equal(merged, bias.float().masked_fill(~mask, float("-inf")))


def test_prefix_keys_are_always_visible_with_no_bias():
    """Two all-zero keys in front (null_kv's trick, twice): every row gives them exp(0) each, so
    ``out = Σ exp(s_j) v_j / (2 + Σ exp(s_j))`` over the real, allowed keys."""
    q, k, v, mask, bias = _qkv(h=2, h_kv=2)
    pmask, pbias = prefix_keys(mask, bias, 2)
    assert pmask.shape[-1] == pbias.shape[-1] == k.size(2) + 2
    assert pmask[..., :2].all() and (pbias[..., :2] == 0).all()
    assert torch.equal(pmask[..., 2:], mask) and torch.equal(pbias[..., 2:], bias)
    assert prefix_keys(None, None, 3) == (None, None)
    zk, zv = (torch.nn.functional.pad(t, (0, 0, 2, 0)) for t in (k, v))
    out = sdpa(q, zk, zv, pmask, pbias, scale=0.5)
    e = torch.exp(bias_and_mask(q @ k.transpose(-2, -1) * 0.5, bias, mask))  # (B, h, Tq, Tk), 0 where masked
    torch.testing.assert_close(out, (e @ v) / (2 + e.sum(-1, keepdim=True)))


def test_weigh_drops_weights_in_training_only():
    w = torch.softmax(torch.randn(2, 2, 4, 6), -1)
    v = torch.randn(2, 2, 6, 3)
    assert torch.equal(weigh(w, v, 0.5, training=False), w @ v)
    assert torch.equal(weigh(w, v, 0.0, training=True), w @ v)
    torch.manual_seed(0)
    dropped = weigh(w, v, 0.5, training=True)
    torch.manual_seed(0)
    assert torch.equal(dropped, torch.nn.functional.dropout(w, 0.5) @ v) and not torch.equal(dropped, w @ v)
