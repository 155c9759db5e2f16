"""Components against numbers computed by hand (or printed in the lecture seeds), so that a swapped
sin/cos, a flipped relative-position direction, pre-norm computed as post-norm or an ignored
LayerNorm ``eps`` fails here even where ``transformers`` (the parity tests) is not installed.

Each component is made on its own through the registry and read through its family's interface
(``embed``, ``score_bias``, ``enter``/``exit``), the way the engine uses it.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.components import BuildContext

from helpers import tiny


def make(family, name, ctx, **params):
    return zoo.get_registry().get(family, name).make(ctx, **params)


# ---------------------------------------------------------------------- sinusoidal positions
#: seed 000 (the lecture's d_model = 4 example): PE[pos=2] = [sin 2, cos 2, sin 0.02, cos 0.02]
SEED_PE_POS2 = [0.9093, -0.4161, 0.0200, 0.9998]


def test_sinusoidal_table_matches_the_seed():
    scheme = make("position", "sinusoidal", BuildContext.for_heads(1, 4, max_len=8))
    pe = scheme.embed(torch.zeros(1, 8, 4), torch.arange(8)[None])[0]  # what it adds: the table
    assert pe[2].tolist() == pytest.approx(SEED_PE_POS2, abs=1e-4)
    assert pe[0].tolist() == pytest.approx([0.0, 1.0, 0.0, 1.0], abs=1e-7)  # sin 0, cos 0


def test_a_model_adds_the_seed_table_to_its_token_embeddings():
    model = zoo.build(tiny(d_model=4, num_heads=1, max_len=8, scale_embeddings=False,
                           positions="sinusoidal", num_layers=1), seed=0).eval()
    tr = zoo.trace(model, torch.tensor([[5, 6, 7, 8]]))
    added = tr["decoder.embeddings"] - tr["decoder.token_embeddings"]  # (1, T, D)
    assert added[0, 2].tolist() == pytest.approx(SEED_PE_POS2, abs=1e-4)


# ---------------------------------------------------------------------- T5 relative buckets
#: offsets key - query, and their buckets for T5's defaults (32 buckets, max_distance 128), worked
#: out by hand from the T5 formula: bidirectional: 16 buckets per direction, offsets 0..7 exact,
#: e.g. |-20| -> 8 + floor(ln(20/8) / ln(128/8) * 8) = 8 + floor(2.64) = 10, keys *after* the query
#: in the upper half (+16); one-way (causal): 0..15 exact, 20 -> 16 + floor(ln(20/16) / ln(8) * 16)
#: = 17, keys after the query all in bucket 0; beyond max_distance the last bucket of the half.
OFFSETS = [-200, -20, -3, -1, 0, 1, 3, 20, 200]
BIDIRECTIONAL = [15, 10, 3, 1, 0, 17, 19, 26, 31]
CAUSAL = [31, 17, 3, 1, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("causal,want", [(False, BIDIRECTIONAL), (True, CAUSAL)],
                         ids=["bidirectional", "causal"])
def test_t5_relative_buckets_and_their_direction(causal, want):
    scheme = make("position", "t5_relative", BuildContext.for_heads(2, 4, causal=causal))
    with torch.no_grad():  # bias table row b = b: the score bias then reads out the bucket ids
        scheme.bias.weight.copy_(torch.arange(32.0)[:, None].expand(32, 2))
    q = 200
    pos_q, pos_k = torch.tensor([[q]]), torch.tensor([[q + r for r in OFFSETS]])
    bias = scheme.score_bias(pos_q, pos_k)  # (1, h, 1, Tk)
    assert bias.shape == (1, 2, 1, len(OFFSETS))
    assert bias[0, 0, 0].long().tolist() == want
    assert torch.equal(bias[0, 0], bias[0, 1])


# ---------------------------------------------------------------------- norms and placements
def test_layernorm_honours_eps():
    """x = [-a, a] with a = 1e-3: mean 0, variance 1e-6, so eps is not negligible:
    y = ±a / sqrt(1e-6 + eps) = ±0.30151 (eps 1e-5), ±0.70711 (eps 1e-6); ±1 if eps were ignored."""
    x = torch.tensor([[-1e-3, 1e-3]])
    ctx = BuildContext.for_heads(1, 2)
    for eps, want in ((1e-5, 0.30151), (1e-6, 0.70711)):
        y = make("norm", "layernorm", ctx, eps=eps)(x)
        assert y[0].tolist() == pytest.approx([-want, want], abs=1e-5), eps
    assert make("norm", "layernorm", ctx)(x)[0, 1].item() == pytest.approx(0.30151, abs=1e-5)  # default


def test_rmsnorm_honours_eps():
    """RMSNorm of [a, a] with a = 1e-3: a / sqrt(a² + eps) = 0.70711 (eps 1e-6), 0.30151 (eps 1e-5)."""
    x = torch.tensor([[1e-3, 1e-3]])
    ctx = BuildContext.for_heads(1, 2)
    for eps, want in ((1e-6, 0.70711), (1e-5, 0.30151)):
        y = make("norm", "rmsnorm", ctx, eps=eps)(x)
        assert y[0].tolist() == pytest.approx([want, want], abs=1e-5), eps


#: x = [1, 2, 3, 4] (mean 2.5, variance 1.25), sub-layer f(h) = 2h, LayerNorm eps 1e-5, by hand:
#: LN(x) = (x - 2.5) / sqrt(1.25001) = [-1.3416, -0.4472, 0.4472, 1.3416]
#: pre:  x + f(LN(x)) = x + 2 LN(x)          = [-1.6833, 1.1056, 3.8944, 6.6833]
#: post: LN(x + f(x)) = LN([3, 6, 9, 12])     = [-1.3416, -0.4472, 0.4472, 1.3416]
PLACED = {"pre": [-1.6833, 1.1056, 3.8944, 6.6833], "post": [-1.3416, -0.4472, 0.4472, 1.3416]}


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_pre_and_post_norm_by_hand(placement):
    ctx = BuildContext.for_heads(1, 4)
    comp = zoo.get_registry().get("placement", placement)
    wrap = comp.cls(None, ctx, lambda: make("norm", "layernorm", ctx))
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    out = wrap.exit(x, 2 * wrap.enter(x))  # the block's residual step with f(h) = 2h
    assert out[0].tolist() == pytest.approx(PLACED[placement], abs=1e-4)
    assert comp.cls.final_norm == (placement == "pre")  # pre-norm stacks end with a norm


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_a_block_places_its_norm_as_declared(placement):
    """In a real model: the residual stream after attention is ``x + attn(LN(x))`` (pre) or
    ``LN(x + attn(x))`` (post), checked on the captured tensors."""
    model = zoo.build(tiny(num_layers=1, norm={"kind": "layernorm", "placement": placement}),
                      seed=0).eval()
    tr = zoo.trace(model, torch.tensor([[3, 9, 4, 1, 5]]))
    x, y = tr["decoder.embeddings"], tr["decoder.blocks.0.attn.out"]
    norm = model.decoder.blocks[0].attn_res.norm
    ln = lambda t: F.layer_norm(t, (t.size(-1),), norm.weight, norm.bias, 1e-5)  # noqa: E731
    want = x + y if placement == "pre" else ln(x + y)
    torch.testing.assert_close(tr["decoder.blocks.0.resid_attn"], want, rtol=0, atol=1e-6)
    if placement == "pre":  # the attention read LN(x): its values are the v-projection of LN(x)
        attn = model.decoder.blocks[0].attn
        h, hd = attn.h, attn.hd
        v = attn.qkv(ln(x))[..., (h + attn.h_kv) * hd:].view(1, 5, attn.h_kv, hd).transpose(1, 2)
        torch.testing.assert_close(tr["decoder.blocks.0.attn.v"], v, rtol=0, atol=1e-6)
    assert math.isfinite(float(tr.logits.sum()))
