"""Attention kernels against the seeds' hand computation, the naive loop and PyTorch's SDPA."""
import math

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.components import MaskContext

from helpers import kernel, mask_rule


def test_seed_hand_computed_example():
    """Seed 000: three words, 2-d vectors; every number checkable with a calculator."""
    Q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    K = Q.clone()
    V = torch.tensor([[10.0, 0.0], [0.0, 10.0], [5.0, 5.0]])
    q, k, v = (t[None, None] for t in (Q, K, V))  # (1, 1, 3, 2)
    for name in ("eager", "naive"):
        out, w = kernel(name, head_dim=2, heads=1)(q, k, v, need_weights=True)
        assert torch.allclose(w[0, 0, 0], torch.tensor([0.4011, 0.1978, 0.4011]), atol=1e-4)
        # the seed multiplies the *rounded* weights (0.4011*10 + 0.4011*5 = 6.0165); exact: 6.01672
        assert torch.allclose(out[0, 0, 0], torch.tensor([6.0165, 3.9835]), atol=3e-4)
        assert torch.allclose(w.sum(-1), torch.ones(1, 1, 3))
        assert torch.allclose(out.sum(-1), torch.full((1, 1, 3), 10.0))  # weights average V rows of sum 10
    out, _ = kernel("sdpa", head_dim=2, heads=1)(q, k, v)
    assert torch.allclose(out[0, 0, 0], torch.tensor([6.0165, 3.9835]), atol=3e-4)


def test_scale_is_sqrt_head_dim_not_d_model():
    """8 heads of 4 dims: scores must be divided by sqrt(4), not sqrt(32)."""
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 8, 5, 4, dtype=torch.float64) for _ in range(3))
    out, w = kernel("eager", head_dim=4, heads=8)(q, k, v, need_weights=True)
    ref = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(4), -1)
    assert torch.allclose(w, ref, atol=1e-12)
    wrong = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(32), -1)
    assert not torch.allclose(w, wrong, atol=1e-3)


def _masks(B, T):
    ctx = MaskContext(q_len=T, k_len=T, device=torch.device("cpu"), batch_size=B)
    causal = mask_rule("causal")(ctx)[None, None]
    prefix = mask_rule("prefix", length=3)(ctx)[None, None]
    window = (mask_rule("sliding_window", window=2)(ctx) & mask_rule("causal")(ctx))[None, None]
    lengths = torch.tensor([T, T - 3])
    pad = (torch.arange(T)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, T)
    ctx_p = MaskContext(q_len=T, k_len=T, device=torch.device("cpu"), batch_size=B,
                        prefix_lengths=torch.tensor([2, 5]))
    per_sample_prefix = mask_rule("prefix")(ctx_p)
    return {"causal": causal, "padding": pad, "causal+padding": causal & pad, "prefix": prefix,
            "prefix_per_sample": per_sample_prefix, "sliding_window": window}


@pytest.mark.parametrize("which", ["causal", "padding", "causal+padding", "prefix",
                                   "prefix_per_sample", "sliding_window"])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_kernels_agree_float64(which, kv_heads):
    torch.manual_seed(0)
    B, h, T, hd = 2, 4, 7, 8
    q = torch.randn(B, h, T, hd, dtype=torch.float64)
    k = torch.randn(B, kv_heads, T, hd, dtype=torch.float64)
    v = torch.randn(B, kv_heads, T, hd, dtype=torch.float64)
    mask = _masks(B, T)[which]
    ref, w_ref = kernel("naive", hd, h, kv_heads)(q, k, v, mask=mask, need_weights=True)
    eager, w = kernel("eager", hd, h, kv_heads)(q, k, v, mask=mask, need_weights=True)
    sdpa, _ = kernel("sdpa", hd, h, kv_heads)(q, k, v, mask=mask)
    kk, vv = k.repeat_interleave(h // kv_heads, 1), v.repeat_interleave(h // kv_heads, 1)
    torch_ref = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)
    assert (eager - ref).abs().max() <= 1e-10
    assert (w - w_ref).abs().max() <= 1e-10
    assert (sdpa - ref).abs().max() <= 1e-10
    assert (torch_ref - ref).abs().max() <= 1e-10


def test_is_causal_fast_path_matches_explicit_mask():
    q, k, v = (torch.randn(2, 2, 6, 4, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    for name in ("eager", "sdpa", "naive"):
        kern = kernel(name, 4, 2)
        a, _ = kern(q, k, v, is_causal=True)
        b, _ = kern(q, k, v, mask=mask)
        assert (a - b).abs().max() <= 1e-12, name


def test_additive_bias_agrees():
    q, k, v = (torch.randn(1, 2, 5, 4, dtype=torch.float64) for _ in range(3))
    bias = torch.randn(1, 2, 5, 5, dtype=torch.float64)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]
    ref, _ = kernel("naive", 4, 2)(q, k, v, mask=mask, bias=bias)
    for name in ("eager", "sdpa"):
        out, _ = kernel(name, 4, 2)(q, k, v, mask=mask, bias=bias)
        assert (out - ref).abs().max() <= 1e-10, name
        out_c, _ = kernel(name, 4, 2)(q, k, v, bias=bias, is_causal=True)
        assert (out_c - ref).abs().max() <= 1e-10, name


@pytest.mark.parametrize("name", ["eager", "sdpa", "naive"])
def test_fully_masked_rows_are_zero_not_nan(name):
    q = torch.randn(1, 2, 4, 4, requires_grad=True)
    k, v = torch.randn(1, 2, 4, 4), torch.randn(1, 2, 4, 4)
    mask = torch.ones(1, 1, 4, 4, dtype=torch.bool)
    mask[..., 1, :] = False  # query 1 may attend to nothing
    out, _ = kernel(name, 4, 2)(q, k, v, mask=mask)
    assert not torch.isnan(out).any()
    assert out[0, :, 1].abs().max() == 0
    assert out[0, :, 0].abs().max() > 0
    out.sum().backward()
    assert not torch.isnan(q.grad).any()


def test_multihead_parameter_count_independent_of_heads():
    """Seed: splitting d_model into more heads re-partitions the same projections."""
    counts = set()
    for heads in (1, 2, 4, 8, 16):
        m = zoo.build("gpt_tiny", num_heads=heads, seed=0)
        attn = sum(p.numel() for n, p in m.named_parameters() if ".attn." in n)
        counts.add(attn)
    assert len(counts) == 1
    d = 128
    assert counts.pop() == 4 * (4 * d * d + 4 * d)  # 4 layers x (Wq, Wk, Wv, Wo + biases)


@pytest.mark.parametrize("d_k", [4, 64, 1024])
def test_why_divide_by_sqrt_dk(d_k):
    """Seed: q·k of unit-variance vectors has std sqrt(d_k); scaling brings it back to ~1 and keeps
    softmax out of saturation (its Jacobian p(1-p) stays large)."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(20000, d_k, generator=g), torch.randn(20000, d_k, generator=g)
    std = (q * k).sum(-1).std().item()
    assert abs(std / math.sqrt(d_k) - 1) < 0.05
    qs, ks = torch.randn(1, 1, 1, d_k, generator=g), torch.randn(1, 1, 6, d_k, generator=g)
    vs = torch.randn(1, 1, 6, 3, generator=g)
    _, w_scaled = kernel("eager", d_k, 1)(qs, ks, vs, need_weights=True)
    _, w_raw = kernel("eager", d_k, 1, scale=1.0)(qs, ks, vs, need_weights=True)
    if d_k >= 64:
        assert (w_raw * (1 - w_raw)).max() < (w_scaled * (1 - w_scaled)).max()
        assert w_raw.max() > w_scaled.max()  # unscaled: closer to one-hot


@pytest.mark.parametrize("mask_shape,with_bias", [(None, False), ((5, 1, 1, 37), False), ((1, 37), False),
                                                  ((5, 8, 1, 37), False), ((5, 1, 1, 37), True)],
                         ids=["no_mask", "key_padding", "2d", "per_head", "per_head_bias"])
def test_sdpa_decoding_step_with_grouped_queries_equals_hand_softmax(mask_shape, with_bias):
    """One new token, 8 query heads over 2 kv heads: sdpa folds each kv head's 4 queries into its
    query axis (plugins/attention_sdpa.py, fold_groups), each mask and bias row following its head.
    Against softmax(q k^T / sqrt(hd) + bias) v computed by hand in float64 with k, v repeated per
    query head (head j reads kv head j // 4)."""
    g = torch.Generator().manual_seed(7)
    B, h, h_kv, Tk, hd = 5, 8, 2, 37, 16
    q = torch.randn(B, h, 1, hd, generator=g, dtype=torch.float64)
    k, v = (torch.randn(B, h_kv, Tk, hd, generator=g, dtype=torch.float64) for _ in range(2))
    mask = None
    if mask_shape is not None:
        mask = torch.rand(mask_shape, generator=g) > 0.4
        mask[..., 0] = True  # no row without a key
    bias = torch.randn(1, h, 1, Tk, generator=g, dtype=torch.float64) if with_bias else None
    out, _ = kernel("sdpa", head_dim=hd, heads=h, kv_heads=h_kv)(q, k, v, mask=mask, bias=bias)
    kr, vr = k.repeat_interleave(h // h_kv, 1), v.repeat_interleave(h // h_kv, 1)
    scores = q @ kr.transpose(-1, -2) / math.sqrt(hd)  # (B, h, 1, Tk)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    ref = torch.softmax(scores, -1) @ vr
    assert out.shape == (B, h, 1, hd)
    assert torch.allclose(out, ref, atol=1e-10)
