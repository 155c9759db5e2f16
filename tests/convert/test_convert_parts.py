"""The parts the new families brought, each checked against something nobody here wrote: a
per-query loop, the formula by hand, or the transformers module that defines the part."""
import math

import pytest
import torch

import zoo
from zoo.model.layers import attend

T = pytest.importorskip("transformers")


def _kernel(kind, **params):
    """The kernel of a built model: 4 heads of 4 features over 2 key/value heads, scale 0.5."""
    z = zoo.build({"arch": "decoder", "vocab_size": 11, "d_model": 16, "num_layers": 1, "num_heads": 4,
                   "num_kv_heads": 2, "attention": {"kind": kind, **params}})
    return z.decoder.blocks[0].attn.kernel


def softcap_loop(q, k, v, cap, scale, mask):
    """One query at a time, in float64: scores, cap*tanh(s/cap), mask, softmax, weighted sum."""
    B, h, Tq, hd = q.shape
    out = torch.zeros(B, h, Tq, hd, dtype=torch.float64)
    for b in range(B):
        for head in range(h):
            kh, vh = k[b, head // (h // k.size(1))].double(), v[b, head // (h // k.size(1))].double()
            for i in range(Tq):
                s = [cap * math.tanh(float(q[b, head, i].double() @ kh[j]) * scale / cap)
                     for j in range(kh.size(0)) if mask[b, 0, i, j]]
                idx = [j for j in range(kh.size(0)) if mask[b, 0, i, j]]
                w = torch.softmax(torch.tensor(s, dtype=torch.float64), 0)
                out[b, head, i] = (w[:, None] * vh[idx]).sum(0)
    return out


def test_softcap_kernel_against_a_per_query_loop():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, n, 5, 4, generator=g) * 3 for n in (4, 2, 2))
    mask = torch.rand(2, 1, 5, 5, generator=g) > 0.3
    mask[..., 0] = True
    out, w = attend(_kernel("softcap", cap=2.0), q, k, v, mask=mask, need_weights=True)
    ref = softcap_loop(q, k, v, 2.0, 0.5, mask)
    assert (out.double() - ref).abs().max() < 1e-5
    assert torch.allclose(w.sum(-1), torch.ones(2, 4, 5))
    eager, _ = attend(_kernel("eager"), q, k, v, mask=mask)
    assert (out - eager).abs().max() > 0.05  # the cap changed the result: the scores were large
    wide, _ = attend(_kernel("softcap", cap=1e6), q, k, v, mask=mask)
    assert (wide - eager).abs().max() < 1e-5  # a cap far above every score is no cap


def test_rmsnorm_plus1_against_gemma_and_the_formula():
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    z = zoo.build({"arch": "decoder", "vocab_size": 11, "d_model": 8, "num_layers": 1, "num_heads": 2,
                   "norm": {"kind": "rmsnorm_plus1", "eps": 1e-6}}, seed=0)
    norm = z.decoder.final_norm
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(-0.5, 0.5, 8))
    ref = GemmaRMSNorm(8, eps=1e-6)
    ref.weight.data.copy_(norm.weight.data)
    x = torch.randn(3, 5, 8) * 4
    by_hand = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + torch.linspace(-0.5, 0.5, 8))
    assert (norm(x) - ref(x)).abs().max() < 1e-6 and (norm(x) - by_hand).abs().max() < 1e-5
    norm.reset_parameters()
    assert torch.equal(norm.weight.data, torch.zeros(8))  # starts as the identity scale 1 + 0


def test_learned_offset_reads_row_p_plus_offset():
    z = zoo.build({"arch": "decoder", "vocab_size": 11, "d_model": 4, "num_layers": 1, "num_heads": 1,
                   "max_len": 6, "positions": {"kind": "learned_offset", "offset": 2}}, seed=0)
    table = z.decoder.positions.table.weight
    assert table.shape == (8, 4)  # max_len + offset rows, as OPT / BART store them
    x = torch.zeros(1, 3, 4)
    out = z.decoder.positions.embed(x, torch.tensor([[0, 1, 5]]))
    assert torch.equal(out[0], table[[2, 3, 7]])


def test_sinusoidal_split_is_marians_table():
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    from zoo.plugins.pos_sinusoidal_split import split_table

    t = split_table(40, 16)
    assert torch.equal(t, MarianSinusoidalPositionalEmbedding(40, 16).create_weight())
    # by hand, position 3: sin(3 * 10000^(-2i/16)) for i < 8, then the cosines
    f = [10000 ** (-2 * i / 16) for i in range(8)]
    hand = torch.tensor([math.sin(3 * x) for x in f] + [math.cos(3 * x) for x in f])
    assert (t[3] - hand).abs().max() < 1e-6


BASE = {"arch": "decoder", "vocab_size": 23, "d_model": 16, "num_layers": 2, "num_heads": 4,
        "positions": "rope", "norm": {"kind": "rmsnorm"}, "attention": "eager"}


@torch.no_grad()
def test_logit_softcap_caps_what_the_head_computes():
    raw = zoo.build(BASE, seed=1)
    capped = zoo.build({**BASE, "logit_softcap": 0.05}, seed=1)
    ids = torch.randint(0, 23, (2, 7))
    a, b = raw(ids), capped(ids)
    assert a.abs().max() > 0.1 and b.abs().max() < 0.05
    assert (b - 0.05 * torch.tanh(a / 0.05)).abs().max() < 1e-6
    assert torch.equal(raw.generate(ids, max_new_tokens=5), capped.generate(ids, max_new_tokens=5))


@torch.no_grad()
def test_parallel_residual_is_x_plus_both_branches():
    z = zoo.build({**BASE, "parallel_residual": True, "num_layers": 1, "positions": "learned"}, seed=2)
    block = z.decoder.blocks[0]
    x = torch.randn(2, 5, 16)
    args = zoo.model.layers.AttnArgs.make(5, 5, x.device, is_causal=True)
    by_hand = x + block.attn(block.attn_res.norm(x), args) + block.ffn(block.ffn_res.norm(x))
    assert (block(x, args) - by_hand).abs().max() < 1e-6


@torch.no_grad()
def test_qk_norm_normalises_each_head():
    z = zoo.build({**BASE, "qk_norm": True, "num_layers": 1}, seed=3)
    attn = z.decoder.blocks[0].attn
    assert attn.q_norm.weight.shape == (4,)  # one head's features
    seen = {}
    attn.q_norm.register_forward_hook(lambda m, i, o: seen.setdefault("q", o))
    z(torch.randint(0, 23, (1, 6)))
    rms = seen["q"].pow(2).mean(-1).sqrt()  # (B, h, T): weight 1 -> unit RMS per head and token
    assert torch.allclose(rms, torch.ones_like(rms), atol=1e-3)


@torch.no_grad()
def test_mask_pattern_gives_each_layer_its_masks():
    """Layer 0 local (window 2), layer 1 global: the same as two one-layer models chained by hand."""
    spec = {**BASE, "mask_pattern": [["causal", {"kind": "sliding_window", "window": 2}], "causal"]}
    z = zoo.build(spec, seed=4)
    assert zoo.spec(zoo.spec(spec).to_yaml()) == zoo.spec(spec)
    ids = torch.randint(0, 23, (2, 8))
    local = zoo.build({**BASE, "mask": ["causal", {"kind": "sliding_window", "window": 2}]}, seed=4)
    glob = zoo.build(BASE, seed=4)
    hidden = z(ids, return_hidden=True)
    for m in (local, glob):
        m.load_state_dict(z.state_dict())
    x = z.embed(ids, torch.arange(8)[None], z.tok_emb, z.decoder.positions)
    st = z.decoder
    pos = torch.arange(8)[None]
    from zoo.components import MaskContext
    outs = []
    for i, model in enumerate((local, glob)):
        mctx = MaskContext(q_len=8, k_len=8, device=x.device, q_offset=0, batch_size=2)
        m, causal = model.decoder.build_mask(mctx)
        rs = model.decoder.positions.qk_state(pos)
        a = zoo.model.layers.AttnArgs.make(8, 8, x.device, mask=m, is_causal=causal, rotary=model.decoder.positions,
                                     rot_state=rs)
        x = st.blocks[i](x, a)
        outs.append(x)
    assert (st.final_norm(x) - hidden).abs().max() < 1e-5
    assert (local(ids) - glob(ids)).abs().max() > 1e-3  # the window matters at this length
