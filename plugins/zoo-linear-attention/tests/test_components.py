"""The plugin's own checks: the maths against loops written straight from the papers."""
import math

import pytest
import torch

import zoo
from zoo.components import BuildContext
from zoo.errors import ZooError
from zoo.model.layers import attend
from zoo_linear_attention import LinearAttention, LinearAttentionConfig, ScaleNorm, ScaleNormConfig
from zoo_linear_attention.linear_attention import feature_map

pytestmark = pytest.mark.zoo_conformance(plugin="linear_attention")  # for the zoo_registry fixture
HERE = __import__("pathlib").Path(__file__).resolve().parent.parent


def ctx(h=4, h_kv=2, hd=8):
    return BuildContext.for_heads(h, hd, num_kv_heads=h_kv, d_ff=64, causal=True)


def loop_reference(q, k, v, causal, mask=None):
    """out_i = Σ_j φ(q_i)·φ(k_j) v_j / Σ_j φ(q_i)·φ(k_j), one query at a time (Katharopoulos eq. 4)."""
    B, h, T, hd = q.shape
    k = k.repeat_interleave(h // k.size(1), 1)
    v = v.repeat_interleave(h // v.size(1), 1)
    out = torch.zeros(B, h, T, v.size(-1), dtype=torch.float64)
    for b in range(B):
        for hh in range(h):
            for i in range(T):
                num, den = torch.zeros(v.size(-1), dtype=torch.float64), 0.0
                for j in range(k.size(2)):
                    if causal and j > i or (mask is not None and not mask[b, 0, i, j]):
                        continue
                    s = float(feature_map(q[b, hh, i].double()) @ feature_map(k[b, hh, j].double()))
                    num += s * v[b, hh, j].double()
                    den += s
                out[b, hh, i] = num / (den + 1e-6) if den else 0.0
    return out


def qkv(T=13, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, 4, T, 8, generator=g), torch.randn(2, 2, T, 8, generator=g),
            torch.randn(2, 2, T, 8, generator=g))


@pytest.mark.parametrize("chunk", [1, 4, 64])
def test_causal_chunks_match_the_loop(chunk):
    kernel = LinearAttention(LinearAttentionConfig(chunk_size=chunk), ctx())
    q, k, v = qkv()
    out, w = kernel(q, k, v, is_causal=True)
    assert w is None
    assert (out.double() - loop_reference(q, k, v, causal=True)).abs().max() < 1e-5


def test_non_causal_and_masked_match_the_loop():
    kernel = LinearAttention(LinearAttentionConfig(), ctx())
    q, k, v = qkv(T=9, seed=1)
    out, _ = kernel(q, k, v)
    assert (out.double() - loop_reference(q, k, v, causal=False)).abs().max() < 1e-5
    mask = torch.rand(2, 1, 9, 9, generator=torch.Generator().manual_seed(2)) > 0.5
    mask[0, 0, 3] = False  # a query with nothing to attend to
    out, w = kernel(q, k, v, mask=mask, need_weights=True)
    assert (out.double() - loop_reference(q, k, v, causal=False, mask=mask)).abs().max() < 1e-5
    assert torch.equal(out[0, :, 3], torch.zeros_like(out[0, :, 3]))
    assert torch.allclose(w.sum(-1)[mask.any(-1).expand(2, 4, 9)], torch.ones(()), atol=1e-4)


def test_it_is_an_rnn():
    """The paper's point: causal linear attention is a recurrence over the state (S, z)."""
    kernel = LinearAttention(LinearAttentionConfig(chunk_size=5), ctx(h=2, h_kv=2))
    q, k, v = (t[:, :2] for t in qkv(T=11, seed=3))
    parallel, _ = kernel(q, k, v, is_causal=True)
    fq, fk = feature_map(q), feature_map(k)
    S = torch.zeros(2, 2, 8, 8)
    z = torch.zeros(2, 2, 8)
    for i in range(11):
        S = S + fk[:, :, i, :, None] * v[:, :, i, None, :]  # S_i = S_{i-1} + φ(k_i) v_iᵀ
        z = z + fk[:, :, i]
        step = (fq[:, :, i, None, :] @ S).squeeze(-2) / ((fq[:, :, i] * z).sum(-1, keepdim=True) + 1e-6)
        assert (step - parallel[:, :, i]).abs().max() < 1e-5


def test_not_softmax_and_no_bias():
    assert LinearAttention.capabilities.exact is False
    assert LinearAttention.capabilities.supports_bias is False
    kernel = LinearAttention(LinearAttentionConfig(), ctx())
    q, k, v = qkv(T=5)
    with pytest.raises(ZooError, match="no additive score bias"):
        attend(kernel, q, k, v, bias=torch.zeros(1, 4, 5, 5))


def test_bfloat16_is_computed_in_float32():
    kernel = LinearAttention(LinearAttentionConfig(), ctx())
    q, k, v = qkv(T=40, seed=4)
    ref, _ = kernel(q, k, v, is_causal=True)
    out, _ = kernel(q.bfloat16(), k.bfloat16(), v.bfloat16(), is_causal=True)
    assert out.dtype == torch.bfloat16
    assert (out.float() - ref).abs().max() / ref.abs().max() < 0.03


def test_scalenorm_formula_and_rmsnorm_at_init():
    c = ctx()
    norm = ScaleNorm(ScaleNormConfig(), c)
    assert norm.g.numel() == 1 and math.isclose(float(norm.g.detach()), math.sqrt(c.d_model), rel_tol=1e-6)
    x = torch.randn(3, 5, c.d_model, generator=torch.Generator().manual_seed(5)) * 3
    y = norm(x)
    want = math.sqrt(c.d_model) * x / x.norm(dim=-1, keepdim=True)
    assert (y - want).abs().max() < 1e-5
    rms = x / x.pow(2).mean(-1, keepdim=True).sqrt()  # RMSNorm with all gains 1
    assert (y - rms).abs().max() < 1e-4
    assert torch.allclose(y.norm(dim=-1), torch.full((3, 5), math.sqrt(c.d_model)), atol=1e-4)
    with pytest.raises(ValueError):
        ScaleNormConfig(init=-1.0)


def test_builds_from_yaml_and_round_trips(zoo_registry, tmp_path):
    assert zoo_registry.get("attention", "linear").plugin == "linear_attention"
    model = zoo.build(HERE / "examples" / "linear_gpt_tiny.yaml", num_layers=2, seed=0).eval()
    assert model.spec.attention.kind == "linear" and model.spec.norm.kind == "scalenorm"
    ids = torch.randint(5, 512, (2, 20), generator=torch.Generator().manual_seed(6))
    logits = model(ids)
    assert logits.shape == (2, 20, 512) and torch.isfinite(logits).all()
    zoo.save(model, tmp_path / "m")
    again = zoo.load(tmp_path / "m")
    assert torch.equal(again(ids), logits)
    assert '"linear_attention": "0.1.0"' in again.checkpoint_metadata["zoo.plugins"]


def test_capabilities_reject_a_score_bias_position(zoo_registry):
    with pytest.raises(zoo.IncompatibleComponentsError) as err:
        zoo.build("gpt_tiny", attention="linear", positions="alibi")
    msg = str(err.value)
    assert "alibi" in msg and "linear" in msg and "fix:" in msg
