"""The modern components (rope, alibi, t5_relative, rmsnorm, sandwich, swiglu/geglu/reglu) and
grouped-query attention, each checked against a formula written independently of the plugin."""
import math

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.components import BuildContext
from zoo.model.layers import attend
from zoo.registry import get_registry

NEW = {"position": ["rope", "alibi", "t5_relative"], "norm": ["rmsnorm"], "placement": ["sandwich"],
       "ffn": ["swiglu", "geglu", "reglu"]}


def ctx(heads=4, kv=None, hd=8, role="decoder", d_ff=24):
    return BuildContext.for_heads(heads, hd, num_kv_heads=kv, d_ff=d_ff, causal=role == "decoder")


def component(family, name, c=None, **params):
    return get_registry().get(family, name).make(c or ctx(), **params)


def spec(**over):
    s = dict(name="m", arch="decoder", vocab_size=50, max_len=64, d_model=32, num_layers=2,
             num_heads=4, d_ff=48)
    s.update(over)
    return s


# ---------------------------------------------------------------------- rope
@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_preserves_norms(interleaved):
    rope = component("position", "rope", interleaved=interleaved)
    q, k = torch.randn(2, 4, 9, 8, dtype=torch.float64), torch.randn(2, 2, 9, 8, dtype=torch.float64)
    pos = torch.arange(9)[None] * 7 + 3
    q2, k2 = rope.rotate(q, k, rope.qk_state(pos))
    assert not torch.allclose(q2, q)  # it did rotate
    torch.testing.assert_close(q2.norm(dim=-1), q.norm(dim=-1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(k2.norm(dim=-1), k.norm(dim=-1), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_dot_product_depends_only_on_offset(interleaved):
    rope = component("position", "rope", interleaved=interleaved, base=500.0)
    q, k = torch.randn(1, 1, 1, 8, dtype=torch.float64), torch.randn(1, 1, 1, 8, dtype=torch.float64)

    def score(m, n):
        qm, _ = rope.rotate(q, k, rope.qk_state(torch.tensor([[m]])))
        _, kn = rope.rotate(q, k, rope.qk_state(torch.tensor([[n]])))
        return float((qm * kn).sum())

    for m, n in [(0, 3), (5, 2), (11, 11)]:
        for shift in (1, 17, 40):
            assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-5)
    assert score(0, 3) != pytest.approx(score(0, 4), abs=1e-3)  # but it does depend on the offset


def test_rope_matches_complex_rotation_formula():
    """The paper's definition: pair (2i, 2i+1) is the complex number x_2i + i x_2i+1, multiplied by
    exp(i * pos * base^(-2i/d)).  ``interleaved: false`` is the same rotation of a permuted layout."""
    d, base = 8, 10000.0
    x = torch.randn(1, 1, 5, d, dtype=torch.float64)
    pos = torch.arange(5)[None] + 2
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    z = torch.complex(x[..., 0::2], x[..., 1::2]) * torch.exp(1j * pos[0, :, None] * theta)
    expected = torch.stack([z.real, z.imag], -1).flatten(-2)
    inter = component("position", "rope", c=ctx(hd=d), interleaved=True)
    got, _ = inter.rotate(x, x, inter.qk_state(pos))
    torch.testing.assert_close(got, expected.to(got.dtype), rtol=1e-5, atol=1e-5)
    half = component("position", "rope", c=ctx(hd=d), interleaved=False)
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # (x0, x2, .. | x1, x3, ..)
    got_h, _ = half.rotate(x[..., perm], x[..., perm], half.qk_state(pos))
    torch.testing.assert_close(got_h, expected[..., perm].to(got_h.dtype), rtol=1e-5, atol=1e-5)


def test_rope_fraction_leaves_the_rest_alone_and_offset_is_absolute():
    rope = component("position", "rope", fraction=0.5)
    q = torch.randn(1, 4, 6, 8)
    q2, _ = rope.rotate(q, q[:, :1], rope.qk_state(torch.arange(6)[None]))
    assert torch.equal(q2[..., 4:], q[..., 4:]) and not torch.allclose(q2[..., :4], q[..., :4])
    # a query at offset 4 under a cache is rotated exactly as position 4 of a full pass
    q_last, _ = rope.rotate(q[:, :, 4:5], q[:, :1, 4:5], rope.qk_state(torch.tensor([[4]])))
    torch.testing.assert_close(q_last, q2[:, :, 4:5])


def test_rope_in_a_model_is_translation_invariant():
    """With RoPE and no other positions, shifting every position by s changes nothing."""
    model = zoo.build(spec(positions="rope", num_kv_heads=2), seed=0).eval()
    ids = torch.randint(0, 50, (2, 7))
    stack = model.decoder
    x = model.tok_emb(ids)  # (B, T, D): no embedding-level positions with rope
    a = stack(x, torch.arange(7)[None])
    b = stack(x, torch.arange(7)[None] + 13)
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------- alibi
def test_alibi_slopes_follow_the_paper():
    from zoo.plugins.pos_alibi import alibi_slopes

    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    # 6 heads: the 4-head slopes, then every other slope of the 8-head sequence
    expected = [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8, 2.0 ** -1, 2.0 ** -3]
    torch.testing.assert_close(alibi_slopes(6), torch.tensor(expected))


@pytest.mark.parametrize("heads", [4, 6])
def test_alibi_bias_equals_direct_formula(heads):
    from zoo.plugins.pos_alibi import alibi_slopes

    alibi = component("position", "alibi", c=ctx(heads=heads))
    pos_q, pos_k = torch.tensor([[3, 4, 5]]), torch.arange(6)[None]
    bias = alibi.score_bias(pos_q, pos_k)
    assert bias.shape == (1, heads, 3, 6)
    m = alibi_slopes(heads)
    for h in range(heads):
        for i in range(3):
            for j in range(6):
                assert float(bias[0, h, i, j]) == pytest.approx(-float(m[h]) * abs(int(pos_q[0, i]) - j))


# ---------------------------------------------------------------------- t5 relative buckets
def test_t5_buckets_match_hand_values_and_transformers():
    from zoo.plugins.pos_t5_relative import relative_bucket

    rel = torch.arange(-300, 301)
    # small offsets get their own bucket; the bidirectional upper half holds keys after the query
    b = relative_bucket(rel, True, 32, 128)
    assert int(b[300]) == 0 and int(b[299]) == 1 and int(b[301]) == 17 and int(b[300 + 7]) == 23
    assert int(b.max()) == 31 and int(b.min()) == 0
    u = relative_bucket(rel, False, 32, 128)
    assert int(u[301]) == 0 and int(u[299]) == 1 and int(u[0]) == 31  # future keys all in bucket 0
    T5Attention = pytest.importorskip("transformers.models.t5.modeling_t5").T5Attention
    for bidi in (True, False):
        ref = T5Attention._relative_position_bucket(rel, bidirectional=bidi, num_buckets=32, max_distance=128)
        assert torch.equal(relative_bucket(rel, bidi, 32, 128), ref)


def test_t5_relative_direction_follows_the_stack_and_is_shift_invariant():
    enc = component("position", "t5_relative", c=ctx(role="encoder"))
    dec = component("position", "t5_relative", c=ctx(role="decoder"))
    assert enc.bidirectional and not dec.bidirectional
    p = torch.arange(5)[None]
    torch.testing.assert_close(enc.score_bias(p, p), enc.score_bias(p + 9, p + 9))
    assert enc.score_bias(p, p).shape == (1, 4, 5, 5)


# ---------------------------------------------------------------------- norms, placement, ffn
def test_rmsnorm_formula_and_half_precision():
    n = component("norm", "rmsnorm", eps=1e-6)
    with torch.no_grad():
        n.weight.copy_(torch.linspace(0.5, 2.0, 32))
    x = torch.randn(3, 5, 32) * 4 + 1
    expected = x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + 1e-6) * n.weight
    torch.testing.assert_close(n(x), expected)
    assert not torch.allclose(n(x), F.layer_norm(x, (32,), n.weight))  # no mean subtraction
    y = n.to(torch.bfloat16)(x.to(torch.bfloat16))
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()


def test_sandwich_normalises_the_branch_output():
    c = ctx()
    comp = get_registry().get("placement", "sandwich")
    norms = []

    def make_norm():
        norms.append(component("norm", "rmsnorm", c=c))
        return norms[-1]

    p = comp.cls(None, c, make_norm)
    assert len(norms) == 2 and comp.cls.final_norm
    with torch.no_grad():
        norms[1].weight.fill_(0.5)
    x, y = torch.randn(2, 3, 32), torch.randn(2, 3, 32) * 100
    torch.testing.assert_close(p.enter(x), norms[0](x))
    out = p.exit(x, y)
    torch.testing.assert_close(out, x + norms[1](y))
    assert (out - x).pow(2).mean(-1).sqrt().max() < 0.51  # the branch's contribution is capped


@pytest.mark.parametrize("kind,act", [("swiglu", F.silu), ("geglu", F.gelu), ("reglu", F.relu)])
def test_glu_family_formula(kind, act):
    ffn = component("ffn", kind)
    x = torch.randn(2, 3, 32)
    expected = ffn.down(act(ffn.gate(x)) * ffn.up(x))
    torch.testing.assert_close(ffn(x), expected)
    assert ffn.gate.bias is None  # biases off by default, as in Llama / T5 v1.1
    assert component("ffn", kind, bias=True).gate.bias is not None
    tanh = component("ffn", "geglu", activation="gelu_tanh")
    tanh.load_state_dict(ffn.state_dict())
    torch.testing.assert_close(tanh(x), tanh.down(F.gelu(tanh.gate(x), approximate="tanh") * tanh.up(x)))


def test_bad_params_are_spec_errors():
    with pytest.raises(zoo.SpecError, match="positions"):
        zoo.build(spec(positions={"kind": "rope", "base": 0.5}))
    with pytest.raises(zoo.SpecError, match="fraction"):
        zoo.build(spec(positions={"kind": "rope", "fraction": 0.05}))
    with pytest.raises(zoo.SpecError, match="eps"):
        zoo.build(spec(norm={"kind": "rmsnorm", "eps": 0}))
    with pytest.raises(zoo.SpecError, match="activation"):
        zoo.build(spec(ffn={"kind": "swiglu", "activation": "tanh"}))


# ---------------------------------------------------------------------- whole models
@pytest.mark.parametrize("family,name", [(f, n) for f, names in NEW.items() for n in names])
def test_new_components_build_forward_backward(family, name):
    field = {"position": "positions", "norm": "norm", "placement": "norm", "ffn": "ffn"}[family]
    value = {"kind": "layernorm", "placement": name} if family == "placement" else name
    for arch in ("decoder", "encoder_decoder"):
        model = zoo.build(spec(arch=arch, num_kv_heads=2, **{field: value}), seed=0)
        ids = torch.randint(0, 50, (2, 6))
        out = model(ids) if arch == "decoder" else model(ids, ids[:, :4])
        out.float().pow(2).mean().backward()
        grads = [p.grad for p in model.parameters() if p.requires_grad]
        assert torch.isfinite(out).all() and all(g is not None and torch.isfinite(g).all() for g in grads)


def _reference(q, k, v, mask, bias, scale):
    kk = k.repeat_interleave(q.size(1) // k.size(1), 1)  # explicit head repetition: (B, h, T, hd)
    vv = v.repeat_interleave(q.size(1) // v.size(1), 1)
    scores = (q @ kk.transpose(-1, -2)) * scale + (0 if bias is None else bias)
    w = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1).nan_to_num(0.0)
    return (w @ vv).masked_fill(~mask.any(-1, keepdim=True), 0.0)


@pytest.mark.parametrize("kv", [2, 1])
def test_every_attention_kernel_with_grouped_query_attention(kv):
    """GQA (kv=2) and MQA (kv=1) through each registered exact kernel equal explicit head
    repetition, with a padding mask and a score bias where the kernel supports them."""
    B, h, T, hd = 2, 4, 6, 8
    tested = []
    for comp in get_registry().list("attention"):
        caps = comp.capabilities
        if not caps.exact:
            continue
        dt = torch.float64 if "float64" in caps.dtypes else torch.float32
        tol = 1e-7 if dt == torch.float64 else 1e-4
        g = torch.Generator().manual_seed(0)
        q = torch.randn(B, h, T, hd, generator=g, dtype=dt)
        k, v = torch.randn(B, kv, T, hd, generator=g, dtype=dt), torch.randn(B, kv, T, hd, generator=g, dtype=dt)
        causal = torch.ones(T, T, dtype=torch.bool).tril()[None, None].expand(B, 1, T, T)
        if caps.supports_mask and not caps.causal_only:
            mask = causal.clone()
            mask[1, ..., :2] = False  # row 1 left-padded by two
            kwargs = {"mask": mask}
        else:
            mask, kwargs = causal, {"is_causal": True}
        bias = torch.randn(1, h, T, T, generator=g, dtype=dt) if caps.supports_bias else None
        kern = comp.make(ctx(heads=h, kv=kv, hd=hd))
        out, _ = attend(kern, q, k, v, bias=bias, **kwargs)  # as a model calls it
        torch.testing.assert_close(out, _reference(q, k, v, mask, bias, hd ** -0.5), rtol=tol, atol=tol,
                                   msg=f"kernel {comp.name}")
        tested.append(comp.name)
    assert {"eager", "sdpa", "naive"} <= set(tested)


@pytest.mark.parametrize("positions", ["rope", "alibi", "t5_relative"])
@torch.no_grad()
def test_kv_cache_matches_full_forward_with_gqa(positions):
    model = zoo.build(spec(positions=positions, num_kv_heads=1, attention="eager"), seed=0).eval()
    ids = torch.randint(0, 50, (2, 8))
    full = model(ids)
    cache = model.new_cache()
    steps = [model(ids[:, :5], cache=cache)] + [model(ids[:, t:t + 1], cache=cache) for t in range(5, 8)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-4, atol=1e-5)
    assert math.isfinite(float(full.sum()))


@pytest.mark.parametrize("positions", ["rope", "alibi", "t5_relative"])
@torch.no_grad()
def test_bfloat16_with_every_kernel(positions):
    """Score biases and rotations follow the model's dtype, whichever kernel adds them."""
    ids = torch.randint(0, 50, (2, 6))
    am = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    for comp in get_registry().list("attention"):
        if "bfloat16" not in comp.capabilities.dtypes or not comp.capabilities.supports_bias:
            continue
        # each kernel against its own float32 model (not every kernel computes softmax attention)
        sp = spec(positions=positions, num_kv_heads=2, attention=comp.name)
        ref = zoo.build(sp, seed=0).eval()(ids, attention_mask=am)
        m = zoo.build(sp, seed=0, dtype="bfloat16")
        out = m.eval()(ids, attention_mask=am)
        assert out.dtype == torch.bfloat16, comp.name
        assert (out.float() - ref).abs().max() < 0.1 * ref.abs().max(), comp.name
