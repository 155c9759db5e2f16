"""The catalogue (issue 25): every component from the literature against a reference nobody here wrote.

Where x-transformers (lucidrains, pinned in the ``test`` extra) implements the same idea, the same
weights go through its module (``Attend``, ``Attention``, ``RotaryEmbedding``, ``FeedForward``, ...);
otherwise the reference is a float64 loop written from the paper's equations in this file, or a value
worked by hand.  zoo's own code never serves as its own reference.  The conformance kit (every
architecture, cache = no-cache) runs over all of them at the end.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.components import BuildContext, MaskContext
from zoo.model.layers import attend

xt = pytest.importorskip("x_transformers.x_transformers")
xa = pytest.importorskip("x_transformers.attend")

#: family -> the catalogue's components (docs/CATALOGUE.md documents exactly these)
CATALOGUE = {
    "attention": ["talking_heads", "cosine", "sigmoid", "topk", "null_kv", "sinks", "l2", "memory_kv",
                  "relu", "differential", "cope", "head_scale"],
    "position": ["xpos", "dynamic_bias", "kerple_log", "kerple_power", "fire", "scaled_sinusoidal", "yarn"],
    "norm": ["dyt"],
    "ffn": ["relu_squared", "solu", "normformer", "bilinear", "moe"],
    "placement": ["rezero", "layerscale", "stochastic_depth", "gru_gating", "deepnorm"],
    "mask": ["strided", "global_window"],
}
KEYS = [f"{fam}:{name}" for fam, names in CATALOGUE.items() for name in names]
B, H, HD, T = 2, 4, 8, 7
TOL = 1e-5  # x-transformers' Attend takes its softmax in float32 even for float64 inputs


def make(family, name, ctx=None, **params):
    """A catalogue component on its own, in float64."""
    ctx = ctx or BuildContext.for_heads(H, HD, max_len=64)
    return zoo.get_registry().get(family, name).make(ctx, **params).double()


def qkv(h_kv=H, Tq=T, Tk=T, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, Tq, HD, generator=g, dtype=torch.float64)
    k = torch.randn(B, h_kv, Tk, HD, generator=g, dtype=torch.float64)
    v = torch.randn(B, h_kv, Tk, HD, generator=g, dtype=torch.float64)
    return q, k, v


def bool_mask(Tq=T, Tk=T, seed=1):
    """A random (B, 1, Tq, Tk) mask with at least one allowed key per row (True = may attend)."""
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(B, 1, Tq, Tk, generator=g) > 0.4
    m[..., 0] = True
    return m


def expand(k, v):
    """zoo's grouped-query convention (each key/value head serves consecutive query heads)."""
    r = H // k.size(1)
    return k.repeat_interleave(r, 1), v.repeat_interleave(r, 1)


def diff(a, b):
    return float((a - b).detach().abs().max())


def causal(Tq, Tk):
    return torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq)[None, None]


# ---------------------------------------------------------------------------------- attention
@pytest.mark.parametrize("case", ["mask", "causal", "gqa"])
def test_talking_heads_matches_x_transformers(case):
    """Attend(pre_talking_heads, post_talking_heads): x-transformers mixes logits as s + W s (so
    zoo's P_l = I + W) and weights as W w."""
    ker = make("attention", "talking_heads")
    ref = xa.Attend(heads=H, pre_talking_heads=True, post_talking_heads=True).double()
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for conv in (ref.pre_softmax_talking_heads, ref.post_softmax_talking_heads):
            conv.weight.copy_(torch.randn(H, H, 1, 1, generator=g, dtype=torch.float64) * 0.5)
        ker.pre.copy_(torch.eye(H, dtype=torch.float64) + ref.pre_softmax_talking_heads.weight[:, :, 0, 0])
        ker.post.copy_(ref.post_softmax_talking_heads.weight[:, :, 0, 0])
    q, k, v = qkv(h_kv=2 if case == "gqa" else H)
    mask = causal(T, T) if case == "causal" else bool_mask()
    out, _ = attend(ker, q, k, v, mask=mask)
    want, _ = ref(q, *expand(k, v), mask=mask)
    assert diff(out, want) < TOL


def test_cosine_matches_x_transformers_per_head():
    """x-transformers' qk_norm: l2norm(q), l2norm(k), then Attend(scale=g); one gain per head."""
    ker = make("attention", "cosine")
    gains = torch.tensor([3.0, 7.5, 10.0, 15.0], dtype=torch.float64)
    with torch.no_grad():
        ker.log_gain.copy_(gains.log())
    q, k, v = qkv(h_kv=2)
    mask = bool_mask()
    out, _ = attend(ker, q, k, v, mask=mask)
    ke, ve = expand(k, v)
    qn, kn = xt.l2norm(q), xt.l2norm(ke)
    for h in range(H):
        want, _ = xa.Attend(scale=float(gains[h]))(qn[:, h:h + 1], kn[:, h:h + 1], ve[:, h:h + 1], mask=mask)
        assert diff(out[:, h:h + 1], want) < TOL
    out_c, _ = attend(ker, q, k, v, is_causal=True)  # the fused causal path
    want_c = torch.cat([xa.Attend(scale=float(gains[h]), causal=True)(
        qn[:, h:h + 1], kn[:, h:h + 1], ve[:, h:h + 1])[0] for h in range(H)], 1)
    assert diff(out_c, want_c) < TOL


def test_sigmoid_matches_x_transformers():
    """Attend(sigmoid=True) with the paper's bias -log(n) passed as attn_bias (n = max_len)."""
    ker = make("attention", "sigmoid", ctx=BuildContext.for_heads(H, HD, max_len=50))
    q, k, v = qkv()
    mask = bool_mask()
    bias = torch.randn(1, H, T, T, dtype=torch.float64)
    out, _ = attend(ker, q, k, v, mask=mask, bias=bias)
    want, _ = xa.Attend(sigmoid=True)(q, k, v, mask=mask, attn_bias=bias - math.log(50))
    assert diff(out, want) < TOL


def test_topk_matches_x_transformers():
    ker = make("attention", "topk", k=3)
    q, k, v = qkv()
    mask = bool_mask()
    out, w = attend(ker, q, k, v, mask=mask, need_weights=True)
    want, _ = xa.Attend(sparse_topk=3)(q, k, v, mask=mask)
    assert diff(out, want) < TOL
    assert int((w > 0).sum(-1).max()) == 3  # at most k keys per row carry weight


def test_null_kv_matches_x_transformers():
    """Attend(add_zero_kv=True), and the 'softmax plus one' identity worked out in float64."""
    ker = make("attention", "null_kv")
    q, k, v = qkv(h_kv=2)
    mask = bool_mask()
    out, _ = attend(ker, q, k, v, mask=mask)
    ke, ve = expand(k, v)
    want, _ = xa.Attend(add_zero_kv=True)(q, ke, ve, mask=mask)
    assert diff(out, want) < TOL
    s = (q @ ke.transpose(-2, -1) / math.sqrt(HD)).masked_fill(~mask, -math.inf).exp()
    assert diff(out, (s / (1 + s.sum(-1, keepdim=True))) @ ve) < 1e-12


def test_sinks_match_x_transformers():
    ker = make("attention", "sinks")
    ref = xa.Attend(heads=H, head_learned_sink=True).double()
    with torch.no_grad():
        ref.head_attn_sink.copy_(torch.tensor([-1.0, 0.5, 2.0, 0.0]))
        ker.sink.copy_(ref.head_attn_sink)
    q, k, v = qkv()
    mask = bool_mask()
    bias = torch.randn(1, H, T, T, dtype=torch.float64)
    out, _ = attend(ker, q, k, v, mask=mask, bias=bias)
    want, _ = ref(q, k, v, mask=mask, attn_bias=bias)
    assert diff(out, want) < TOL


def test_l2_matches_x_transformers():
    ker = make("attention", "l2")
    q, k, v = qkv()
    out, _ = attend(ker, q, k, v, is_causal=True)
    want, _ = xa.Attend(l2_distance=True, causal=True)(q, k, v)
    assert diff(out, want) < TOL


@pytest.mark.parametrize("causal_", [False, True])
def test_memory_kv_matches_x_transformers_attention(causal_):
    """The whole x-transformers Attention(num_mem_kv=3): zoo's kernel between its projections."""
    D, M = H * HD, 3
    ref = xt.Attention(dim=D, heads=H, dim_head=HD, num_mem_kv=M, causal=causal_).double()
    ker = make("attention", "memory_kv", slots=M)
    with torch.no_grad():
        ker.mem_k.copy_(ref.mem_k)
        ker.mem_v.copy_(ref.mem_v)
    x = torch.randn(B, T, D, dtype=torch.float64)
    pad = torch.ones(B, T, dtype=torch.bool)
    pad[1, -2:] = False  # right padding in the second sample

    def heads(t):
        return t.view(B, T, H, HD).transpose(1, 2)  # (B, h, T, hd)

    q, k, v = heads(ref.to_q(x)), heads(ref.to_k(x)), heads(ref.to_v(x))
    out, _ = attend(ker, q, k, v, mask=pad[:, None, None, :], is_causal=causal_)
    got = ref.to_out(out.transpose(1, 2).reshape(B, T, D))
    want = ref(x, mask=pad)
    assert diff(got[pad], want[pad]) < TOL


def test_relu_attention_matches_the_papers_equation():
    """w_ij = relu(q_i·k_j / sqrt(d) + b_ij)^p / n, written as a float64 loop."""
    for power in (1, 2):
        ker = make("attention", "relu", power=power, length=20)
        q, k, v = qkv()
        mask = bool_mask()
        bias = torch.randn(1, H, T, T, dtype=torch.float64)
        out, _ = attend(ker, q, k, v, mask=mask, bias=bias)
        want = torch.zeros_like(out)
        for b in range(B):
            for h in range(H):
                for i in range(T):
                    for j in range(T):
                        if mask[b, 0, i, j]:
                            s = float(q[b, h, i] @ k[b, h, j]) / math.sqrt(HD) + float(bias[0, h, i, j])
                            want[b, h, i] += max(s, 0.0) ** power / 20 * v[b, h, j]
        assert diff(out, want) < 1e-12


def test_differential_matches_the_papers_equations():
    """Ye et al. (2024), eq. 1-3 and the head-wise RMSNorm, as a float64 loop per (b, h, i)."""
    ker = make("attention", "differential", lambda_init=0.5)
    with torch.no_grad():
        ker.gain.copy_(torch.linspace(0.5, 1.5, HD, dtype=torch.float64))
    q, k, v = qkv(h_kv=2)
    out, _ = attend(ker, q, k, v, is_causal=True)
    ke, ve = expand(k, v)
    lq1, lk1, lq2, lk2 = (p.detach() for p in (ker.lambda_q1, ker.lambda_k1, ker.lambda_q2, ker.lambda_k2))
    lam = math.exp(float(lq1 @ lk1)) - math.exp(float(lq2 @ lk2)) + 0.5
    d = HD // 2
    want = torch.zeros_like(out)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                js = range(i + 1)
                s1 = [float(q[b, h, i, :d] @ ke[b, h, j, :d]) / math.sqrt(d) for j in js]
                s2 = [float(q[b, h, i, d:] @ ke[b, h, j, d:]) / math.sqrt(d) for j in js]
                z1, z2 = sum(math.exp(s) for s in s1), sum(math.exp(s) for s in s2)
                o = sum((math.exp(a) / z1 - lam * math.exp(c) / z2) * ve[b, h, j] for a, c, j in zip(s1, s2, js))
                rms = math.sqrt(float((o * o).mean()) + 1e-5)
                want[b, h, i] = o / rms * ker.gain.detach() * (1 - 0.5)
    assert diff(out, want) < 1e-10


def test_cope_matches_x_transformers():
    """Attend(causal=True, cope=CoPE(dim, heads, max_pos)) with the same position table."""
    P = 5
    cope = xt.CoPE(dim=HD, heads=H, max_pos=P).double()
    ker = make("attention", "cope", max_pos=P)
    with torch.no_grad():
        cope.pos_emb.copy_(torch.randn(P, HD, dtype=torch.float64))
        ker.pos_emb.copy_(cope.pos_emb)
    q, k, v = qkv()
    out, w = attend(ker, q, k, v, is_causal=True, need_weights=True)
    want, inter = xa.Attend(causal=True, cope=cope)(q, k, v)
    assert diff(out, want) < TOL
    # and the positions are not the token positions: the weights differ from plain causal attention
    plain, _ = xa.Attend(causal=True)(q, k, v)
    assert diff(out, plain) > 1e-3
    # suffix queries under a KV cache: the last 3 queries against all keys
    out3, _ = attend(ker, q[:, :, -3:], k, v, mask=causal(3, T))
    assert diff(out3, out[:, :, -3:]) < 1e-12


@pytest.mark.parametrize("causal_", [False, True])
def test_head_scale_matches_x_transformers_attention(causal_):
    """The whole x-transformers Attention(head_scale=True): zoo's kernel between its projections."""
    D = H * HD
    ref = xt.Attention(dim=D, heads=H, dim_head=HD, head_scale=True, causal=causal_).double()
    ker = make("attention", "head_scale")
    with torch.no_grad():
        ref.head_scale_params.copy_(torch.tensor([0.2, 1.0, -0.7, 3.0]).view(1, H, 1, 1))
        ker.gamma.copy_(ref.head_scale_params.flatten())
    x = torch.randn(B, T, D, dtype=torch.float64)
    pad = torch.ones(B, T, dtype=torch.bool)
    pad[0, -3:] = False

    def heads(t):
        return t.view(B, T, H, HD).transpose(1, 2)  # (B, h, T, hd)

    q, k, v = heads(ref.to_q(x)), heads(ref.to_k(x)), heads(ref.to_v(x))
    out, _ = attend(ker, q, k, v, mask=pad[:, None, None, :], is_causal=causal_)
    got = ref.to_out(out.transpose(1, 2).reshape(B, T, D))
    assert diff(got[pad], ref(x, mask=pad)[pad]) < TOL


# ---------------------------------------------------------------------------------- positions
def test_xpos_matches_x_transformers_rotary():
    """RotaryEmbedding(use_xpos=True) + apply_rotary_pos_emb: the logits q'·k'ᵀ agree (each side
    centres positions differently; the centre cancels in q·k, so only the logits are comparable)."""
    ctx = BuildContext.for_heads(H, HD, max_len=64, causal=True)
    pos = make("position", "xpos", ctx=ctx, scale_base=16.0)
    rot = xt.RotaryEmbedding(HD, use_xpos=True, scale_base=16.0).double()
    q, k, _ = qkv(Tq=20, Tk=20)
    t = torch.arange(20)
    qz, kz = pos.rotate(q, k, pos.qk_state(t[None]))
    freqs, scale = rot(t)
    qx = xt.apply_rotary_pos_emb(q, freqs, scale)
    kx = xt.apply_rotary_pos_emb(k, freqs, scale ** -1)
    got, want = qz @ kz.transpose(-2, -1), qx @ kx.transpose(-2, -1)
    assert diff(got, want) / float(want.abs().max()) < 1e-5
    # the decay: a query's logit with a far key is smaller than plain RoPE's would be, on average
    rq, rk = xt.apply_rotary_pos_emb(q, freqs), xt.apply_rotary_pos_emb(k, freqs)
    plain = rq @ rk.transpose(-2, -1)
    assert float((got[..., 19, 0].abs()).mean()) < float(plain[..., 19, 0].abs().mean())


@pytest.mark.parametrize("log_distance", [False, True])
def test_dynamic_bias_matches_x_transformers(log_distance):
    ctx = BuildContext.for_heads(H, HD, max_len=64)
    pos = make("position", "dynamic_bias", ctx=ctx, dim=16, depth=2, log_distance=log_distance)
    ref = xt.DynamicPositionBias(dim=16, heads=H, depth=2, log_distance=log_distance)  # float32
    ours = [m for m in pos.modules() if isinstance(m, torch.nn.Linear)]
    theirs = [m for m in ref.modules() if isinstance(m, torch.nn.Linear)]
    assert len(ours) == len(theirs) == 3
    with torch.no_grad():
        for a, b in zip(ours, theirs):
            a.weight.copy_(b.weight)
            a.bias.copy_(b.bias)
    got = pos.score_bias(torch.arange(4, 9)[None], torch.arange(9)[None])  # 5 queries at an offset
    assert diff(got[0], ref(5, 9).double()) < 1e-5


def _kerple_loop(pos, Tq, Tk, fn):
    out = torch.zeros(H, Tq, Tk, dtype=torch.float64)
    r1, r2 = pos.r1.detach().tolist(), pos.r2.detach().tolist()
    for h in range(H):
        for i in range(Tq):
            for j in range(Tk):
                out[h, i, j] = fn(r1[h], r2[h], abs(i - j))
    return out


def test_kerple_log_matches_the_papers_equation():
    pos = make("position", "kerple_log")
    with torch.no_grad():
        pos.r1.copy_(torch.tensor([0.3, 1.0, 2.0, 0.7]))
        pos.r2.copy_(torch.tensor([0.5, 1.5, 0.1, 3.0]))
    got = pos.score_bias(torch.arange(T)[None], torch.arange(T)[None])[0]
    want = _kerple_loop(pos, T, T, lambda a, c, d: -a * math.log(1 + c * d))
    assert diff(got, want) < 1e-12


def test_kerple_power_matches_the_papers_equation():
    pos = make("position", "kerple_power")
    with torch.no_grad():
        pos.r1.copy_(torch.tensor([0.3, 1.0, 2.0, 0.7]))
        pos.r2.copy_(torch.tensor([0.5, 1.0, 1.7, 2.0]))
    got = pos.score_bias(torch.arange(T)[None], torch.arange(T)[None])[0]
    want = _kerple_loop(pos, T, T, lambda a, c, d: -a * d ** c)
    assert diff(got, want) < 1e-12
    # gradients stay finite at distance 0 (d^r2 at d = 0)
    pos.score_bias(torch.arange(T)[None], torch.arange(T)[None]).sum().backward()
    assert torch.isfinite(pos.r2.grad).all() and torch.isfinite(pos.r1.grad).all()


def test_fire_matches_the_papers_equation():
    """Li et al. (2023), eq. 4 with ψ(x) = log(c·x + 1) and the threshold L, as a float64 loop."""
    ctx = BuildContext.for_heads(H, HD, max_len=64, causal=True)
    pos = make("position", "fire", ctx=ctx, hidden=8, init_L=6.0)
    with torch.no_grad():
        pos.c.fill_(0.7)
        pos.L_mult.fill_(1.0)
    W1, b1 = pos.mlp[0].weight.detach(), pos.mlp[0].bias.detach()
    W2, b2 = pos.mlp[2].weight.detach(), pos.mlp[2].bias.detach()
    got = pos.score_bias(torch.arange(3, 12)[None], torch.arange(12)[None])[0]  # (h, 9, 12)
    for qi, i in enumerate(range(3, 12)):
        for j in range(12):
            x = math.log(0.7 * max(i - j, 0) + 1) / (math.log(0.7 * max(i, 6.0) + 1) + 1e-6)
            hid = torch.relu(W1[:, 0] * x + b1)
            assert diff(got[:, qi, j], W2 @ hid + b2) < 1e-12


def test_scaled_sinusoidal_matches_x_transformers():
    ctx = BuildContext.for_heads(H, HD, max_len=64)
    pos = make("position", "scaled_sinusoidal", ctx=ctx)
    ref = xt.ScaledSinusoidalEmbedding(H * HD).double()
    with torch.no_grad():
        ref.scale.fill_(0.37)
        pos.scale.fill_(0.37)
    x = torch.zeros(1, 10, H * HD, dtype=torch.float64)
    got = pos.embed(x, torch.arange(5, 15)[None])
    want = ref(x, pos=torch.arange(5, 15).double())
    assert diff(got[0], want) < 1e-6  # zoo's table is float32, as the other position schemes'


def test_yarn_matches_hugging_face():
    """transformers' ``ROPE_INIT_FUNCTIONS["yarn"]`` (frequencies, attention factor) and Llama's
    rotary embedding + ``apply_rotary_pos_emb`` on the same queries and keys."""
    tr = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    for factor, original in ((4.0, 64), (8.0, 512), (2.5, 100)):
        cfg = tr.LlamaConfig(hidden_size=H * 16, num_attention_heads=H,
                             max_position_embeddings=int(factor * original),
                             rope_parameters={"rope_type": "yarn", "factor": factor, "rope_theta": 10000.0,
                                              "original_max_position_embeddings": original})
        ctx = BuildContext.for_heads(H, 16, max_len=4096, causal=True)
        pos = make("position", "yarn", ctx=ctx, factor=factor, original_max_len=original)
        inv, att = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
        from zoo.plugins.pos_yarn import yarn_frequencies
        mine, my_att = yarn_frequencies(16, pos.config, original)
        assert diff(mine, inv) < 1e-8 and my_att == pytest.approx(att, abs=1e-12)
        g = torch.Generator().manual_seed(7)
        q = torch.randn(B, H, 50, 16, generator=g)
        k = torch.randn(B, H, 50, 16, generator=g)
        t = torch.arange(1000, 1050)[None]  # far beyond the original context
        qz, kz = pos.rotate(q.double(), k.double(), pos.qk_state(t))
        cos, sin = LlamaRotaryEmbedding(cfg)(q, t)
        qh, kh = apply_rotary_pos_emb(q, k, cos, sin)
        assert diff(qz, qh) < 1e-4 and diff(kz, kh) < 1e-4  # HF's tables are float32 at positions ~1000


# ---------------------------------------------------------------------------------- norms, ffns
def test_dyt_matches_x_transformers():
    D = 16
    ctx = BuildContext.for_heads(2, 8, d_model=D)
    ours = make("norm", "dyt", ctx=ctx, alpha=0.8)
    ref = xt.DynamicTanh(D, init_alpha=0.8).double()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        ref.gamma.copy_(torch.randn(D, generator=g))
        ref.beta.copy_(torch.randn(D, generator=g))
        ours.weight.copy_(ref.gamma)
        ours.bias.copy_(ref.beta)
    assert float(ours.alpha.detach()) == pytest.approx(0.8)
    x = torch.randn(3, 5, D, dtype=torch.float64) * 3
    assert diff(ours(x), ref(x)) < 1e-12


def _ffn_pair(name, **xt_flags):
    D, mult = 16, 2
    ctx = BuildContext.for_heads(2, 8, d_model=D, d_ff=D * mult)
    ours = make("ffn", name, ctx=ctx)
    ref = xt.FeedForward(D, mult=mult, **xt_flags).double()
    lin_o = [m for m in ours.modules() if isinstance(m, torch.nn.Linear)]
    lin_r = [m for m in ref.modules() if isinstance(m, torch.nn.Linear)]
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for a, b in zip(lin_o, lin_r):
            b.weight.copy_(torch.randn(b.weight.shape, generator=g) * 0.3)
            b.bias.copy_(torch.randn(b.bias.shape, generator=g) * 0.3)
            a.weight.copy_(b.weight)
            a.bias.copy_(b.bias)
    return ours, ref, torch.randn(3, 5, D, dtype=torch.float64)


def test_relu_squared_matches_x_transformers():
    ours, ref, x = _ffn_pair("relu_squared", relu_squared=True)
    assert diff(ours(x), ref(x)) < 1e-12


def test_solu_matches_x_transformers():
    ours, ref, x = _ffn_pair("solu", solu=True)
    gamma = torch.linspace(0.5, 2.0, 32, dtype=torch.float64)
    with torch.no_grad():
        ref.ff[0][1].norm.gamma.copy_(gamma)
        ours.norm.weight.copy_(gamma)
    assert diff(ours(x), ref(x)) < 1e-12


def test_normformer_matches_x_transformers():
    ours, ref, x = _ffn_pair("normformer", post_act_ln=True)
    gamma = torch.linspace(0.5, 2.0, 32, dtype=torch.float64)
    with torch.no_grad():
        ref.ff[1].gamma.copy_(gamma)
        ours.norm.weight.copy_(gamma)
    assert diff(ours(x), ref(x)) < 1e-12


def test_bilinear_matches_the_papers_equation():
    """FFN_Bilinear(x) = (xW ⊙ xV)W2 (Shazeer, 2020, eq. 5), per token in float64."""
    ctx = BuildContext.for_heads(2, 4, d_model=8, d_ff=12)
    ffn = make("ffn", "bilinear", ctx=ctx)
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    got = ffn(x)
    W, V, W2 = (m.weight.detach() for m in (ffn.gate, ffn.up, ffn.down))
    for b in range(2):
        for t in range(3):
            h = [sum(float(W[f, d] * x[b, t, d]) for d in range(8)) *
                 sum(float(V[f, d] * x[b, t, d]) for d in range(8)) for f in range(12)]
            want = [sum(float(W2[o, f]) * h[f] for f in range(12)) for o in range(8)]
            assert diff(got[b, t], torch.tensor(want, dtype=torch.float64)) < 1e-12


def test_moe_matches_a_per_token_loop():
    """Mixtral's routing: softmax over the top-k router logits, a gated sum of SwiGLU experts."""
    ctx = BuildContext.for_heads(2, 4, d_model=8, d_ff=6)
    moe = make("ffn", "moe", ctx=ctx, experts=4, top_k=2)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    got = moe(x)
    Wr = moe.router.weight.detach()
    for b in range(2):
        for t in range(5):
            xt_ = x[b, t]
            logits = (Wr @ xt_).tolist()
            top = sorted(range(4), key=lambda e: -logits[e])[:2]
            z = sum(math.exp(logits[e]) for e in top)
            y = torch.zeros(8, dtype=torch.float64)
            for e in top:
                g_ = xt_ @ moe.w_gate[e].detach()
                u = xt_ @ moe.w_up[e].detach()
                y += math.exp(logits[e]) / z * ((g_ * torch.sigmoid(g_) * u) @ moe.w_down[e].detach())
            assert diff(got[b, t], y) < 1e-10
    # the routing is sparse: zeroing an expert the token did not pick changes nothing for it
    picked = (moe.router(x).topk(2, -1).indices == 3).any(-1)  # (2, 5) tokens routed to expert 3
    with torch.no_grad():
        moe.w_down[3].zero_()
    assert diff(moe(x)[~picked], got[~picked]) < 1e-12
    assert picked.any() and diff(moe(x)[picked], got[picked]) > 1e-6


# ---------------------------------------------------------------------------------- placements
def _placement(name, num_layers=4, **params):
    ctx = BuildContext.for_heads(2, 4, d_model=8, num_layers=num_layers)
    reg = zoo.get_registry()
    norm = reg.get("norm", "layernorm")
    return reg.get("placement", name).cls(
        reg.get("placement", name).config(**params) if reg.get("placement", name).config else None,
        ctx, lambda: norm.make(ctx)).double()


def test_rezero_is_x_plus_alpha_f_x():
    p = _placement("rezero")
    x, y = torch.randn(2, 3, 8, dtype=torch.float64), torch.randn(2, 3, 8, dtype=torch.float64)
    assert float(p.alpha) == 0.0 and diff(p.exit(x, y), x) == 0.0  # the identity at initialisation
    with torch.no_grad():
        p.alpha.fill_(0.37)
    assert diff(p.enter(x), x) == 0.0 and diff(p.exit(x, y), x + 0.37 * y) < 1e-15
    assert type(p).final_norm is False and not any(isinstance(m, torch.nn.LayerNorm) for m in p.modules())


def test_rezero_model_starts_as_the_embedding_alone():
    """With every α = 0 a decoder's logits are (scaled) embedding · embeddingᵀ (tied): every block is
    the identity and ReZero leaves no final norm."""
    model = zoo.build("gpt_tiny", num_layers=2, norm={"kind": "layernorm", "placement": "rezero"},
                      positions="none", seed=0).double().eval()
    ids = torch.tensor([[3, 7, 11]])
    E = model.tok_emb.weight
    assert diff(model(ids)[0], (E[ids[0]] * model.embed.scale) @ E.t()) < 1e-10
    with torch.no_grad():
        model.decoder.blocks[0].ffn_res.alpha.fill_(0.5)  # one branch on: the output moves
    assert diff(model(ids)[0], (E[ids[0]] * model.embed.scale) @ E.t()) > 1e-3


def test_layerscale_matches_x_transformers():
    p = _placement("layerscale", num_layers=12)
    assert float(p.gamma[0]) == pytest.approx(0.1)  # CaiT: 0.1 up to 18 layers
    assert float(_placement("layerscale", num_layers=24).gamma[0]) == pytest.approx(1e-5)
    assert float(_placement("layerscale", num_layers=36).gamma[0]) == pytest.approx(1e-6)
    ref = xt.LayerScale(torch.nn.Identity(), 8, init_value=0.1).double()
    g = torch.linspace(-1, 1, 8, dtype=torch.float64)
    with torch.no_grad():
        ref.gamma.copy_(g)
        p.gamma.copy_(g)
    x, y = torch.randn(2, 3, 8, dtype=torch.float64), torch.randn(2, 3, 8, dtype=torch.float64)
    assert diff(p.exit(x, y), x + ref(y)) < 1e-15
    assert diff(p.enter(x), F.layer_norm(x, (8,))) < 1e-12


def test_stochastic_depth_drops_whole_samples_at_rate_p():
    p = _placement("stochastic_depth", p=0.25)
    x, y = torch.randn(4000, 2, 8, dtype=torch.float64), torch.randn(4000, 2, 8, dtype=torch.float64)
    assert diff(p.eval().exit(x, y), x + y) == 0.0  # evaluation: the plain pre-norm block
    torch.manual_seed(0)
    out = p.train().exit(x, y)
    kept = (out - x).abs().amax((1, 2)) > 0  # (4000,) per sample: branch kept or dropped entirely
    assert diff(out[kept], x[kept] + y[kept] / 0.75) < 1e-12 and diff(out[~kept], x[~kept]) == 0.0
    rate = 1 - float(kept.double().mean())
    assert abs(rate - 0.25) < 4 * math.sqrt(0.25 * 0.75 / 4000)  # binomial, 4 sigma


def test_gru_gating_matches_x_transformers():
    p = _placement("gru_gating")
    D = 8
    assert float(p.bias_ih[D:2 * D].mean()) > 1.5  # GTrXL's b_g = 2 opens the "keep" gate
    ref = xt.GRUGating(D).double()
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(ref.gru, name).copy_(getattr(p, name))
    x, y = torch.randn(2, 3, D, dtype=torch.float64), torch.randn(2, 3, D, dtype=torch.float64)
    assert diff(p.exit(x, y), ref(y, x)) < 1e-12  # GRUGating(branch output, residual stream)


def test_deepnorm_is_layernorm_of_alpha_x_plus_f_x():
    p = _placement("deepnorm", num_layers=6)
    alpha = 12 ** 0.25  # (2N)^(1/4), N = 6: 1.8612
    assert p.alpha == pytest.approx(1.86121, abs=1e-5)
    x, y = torch.randn(2, 3, 8, dtype=torch.float64), torch.randn(2, 3, 8, dtype=torch.float64)
    assert diff(p.exit(x, y), F.layer_norm(alpha * x + y, (8,))) < 1e-12
    assert diff(p.enter(x), x) == 0.0 and type(p).final_norm is False


# ---------------------------------------------------------------------------------- masks
def _rule(name, **params):
    return zoo.get_registry().get("mask", name).make(BuildContext.for_heads(2, 4), **params)


def test_strided_mask_matches_a_hand_loop():
    rule = _rule("strided", stride=3)
    got = rule(MaskContext(q_len=10, k_len=10, device=torch.device("cpu")))
    want = torch.tensor([[abs(i - j) < 3 or (i - j) % 3 == 0 for j in range(10)] for i in range(10)])
    assert torch.equal(got, want)
    assert got[9, 0] and got[9, 3] and not got[9, 5]  # 9 sees 0, 3, 6 (strided) and 7, 8, 9 (local)


def test_global_window_mask_matches_a_hand_loop_and_ignores_left_padding():
    rule = _rule("global_window", window=2, globals=1)
    got = rule(MaskContext(q_len=6, k_len=6, device=torch.device("cpu")))
    want = torch.tensor([[abs(i - j) < 2 or i < 1 or j < 1 for j in range(6)] for i in range(6)])
    assert torch.equal(got, want)
    pad = torch.tensor([[False, False, True, True, True, True]])  # two left pads
    got_p = rule(MaskContext(q_len=6, k_len=6, device=torch.device("cpu"), key_padding=pad))
    assert torch.equal(got_p[0, 0, 2:, 2:], want[:4, :4])  # the first real token is the global one


# ---------------------------------------------------------------------------------- the whole set
def test_the_catalogue_is_registered_with_papers_and_lessons():
    reg = zoo.get_registry()
    assert len(KEYS) >= 30
    for key in KEYS:
        comp = reg.get(*key.split(":"))
        assert comp.plugin.startswith("zoo."), key  # a built-in plugin, registered like any other
        assert "20" in comp.doc and ("arXiv" in comp.doc or "Circuits" in comp.doc), (key, comp.doc)
        assert set(comp.lesson) == {"en", "zh"} and len(comp.lesson["en"]) > 250 and len(comp.lesson["zh"]) > 100, key


def test_the_catalogue_passes_the_conformance_kit_with_kv_cache_where_it_decodes():
    """Every check in every architecture the component builds in; the decoder's cached decode equals
    the full forward for every component that is not an encoder-only idea."""
    from zoo.testing import verify

    results = verify(KEYS, checks=["compatible", "forward_backward", "causal", "padding", "kv_cache",
                                   "save_load", "masked_rows", "weights", "mask_offset"])
    failed = [f"{r.subject} {r.check} {r.case}: {r.note}" for r in results if r.status == "fail"]
    assert not failed, "\n".join(failed)
    cached = {r.subject for r in results if r.check == "kv_cache" and r.case == "decoder" and r.status == "pass"}
    assert cached == set(KEYS)


@pytest.mark.parametrize("name", CATALOGUE["attention"])
def test_kernels_say_truthfully_whether_they_are_fused(name, monkeypatch):
    """A kernel whose description starts ``[fused sdpa]`` runs through
    ``F.scaled_dot_product_attention``; an ``[eager]`` one never calls it."""
    calls = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    comp = zoo.get_registry().get("attention", name)
    ctx = BuildContext.for_heads(H, HD, max_len=64, causal=True)
    q, k, v = qkv()
    attend(comp.make(ctx).double(), q, k, v, is_causal=True)
    label = "[fused sdpa]" if comp.doc.startswith("[fused sdpa]") else "[eager]"
    assert comp.doc.startswith(label)
    assert bool(calls) == (label == "[fused sdpa]")


def test_zoo_components_shows_papers_and_lessons():
    """`zoo components FAMILY --lessons`, run as a user would: each catalogue placement with its paper
    in the description line and its lesson in both languages."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "zoo.cli", "components", "placement", "--lessons"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    for name in CATALOGUE["placement"]:
        assert f" {name} " in text
    assert "arXiv 2003.04887" in text and "ReZero" in text  # the paper, in the description
    assert "[en] Problem: deep residual stacks" in text and "[zh] 问题：深的残差网络" in text
    plain_run = subprocess.run([sys.executable, "-m", "zoo.cli", "components", "placement"],
                               capture_output=True, text=True, timeout=120)
    assert "[en]" not in plain_run.stdout  # lessons only when asked


@pytest.mark.parametrize("overrides, where, says", [
    ({"attention": {"kind": "topk", "k": 0}}, "attention", "k must be >= 1"),
    ({"attention": "differential", "d_model": 36}, "attention.kind", "head_dim 9 is odd"),
    ({"positions": {"kind": "kerple_log"}, "attention": "eager", "arch": "encoder", "mask": "bidirectional",
      "tie_embeddings": False}, None, None),  # a valid encoder: builds
    ({"ffn": {"kind": "moe", "experts": 2, "top_k": 3}}, "ffn", "top_k <= experts"),
    ({"norm": {"kind": "layernorm", "placement": {"kind": "stochastic_depth", "p": 1.0}}}, "norm",
     "p must be in [0, 1)"),
])
def test_bad_catalogue_parameters_are_spec_errors(overrides, where, says):
    """Wrong parameters fail at build time with a ZooError naming the field, never a traceback."""
    if says is None:
        zoo.build("gpt_tiny", num_layers=1, **overrides)
        return
    with pytest.raises(zoo.ZooError) as e:
        zoo.build("gpt_tiny", num_layers=1, **overrides)
    assert says in str(e.value) and (e.value.where or "").startswith(where)


def test_xpos_refuses_encoders_with_the_options():
    with pytest.raises(zoo.IncompatibleComponentsError) as e:
        zoo.build("bert_tiny", positions="xpos")
    assert "causal" in str(e.value) and "rope" in e.value.options
