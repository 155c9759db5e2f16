"""Multi-head latent attention (``mla``, plugins/attention_mla.py) against references nobody here wrote:

- transformers' ``DeepseekV2Attention`` / ``DeepseekV3Attention`` on the same weights (float64, a
  causal mask with a left-padded row; both libraries turn the rope in float32, hence 1e-6);
- a float64 loop written from the paper's equations (DeepSeek-V2, arXiv 2405.04434, eqs. 9-19) in
  the *absorbed* form: scores ``(W_UKᵀ q_C)·c_j + q_R·k_R,j`` and outputs ``W_O [W_UV Σ_j p_j c_j]``
  straight from the latents, never building a key or value -- checked at prefill and at every
  cached decoding step, and the cache checked to hold exactly ``c`` and ``k_R`` (r + d_r numbers
  per token per layer);
- the KV-cache bytes of the real DeepSeek-V2-Lite attention shape (16 heads, r = 512, d_r = 64,
  d_n = d_v = 128) counted from the cache tensors zoo allocates, against the formula, for MLA, MHA
  and GQA.
"""
import math

import pytest
import torch

import zoo
from zoo.run.compiled import StaticCache
from zoo.convert import from_transformers
from zoo.model.layers import AttnArgs

T = pytest.importorskip("transformers")
from convert_cases import _decoder  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SMALL = {"num_key_value_heads": 4, "head_dim": 4, "kv_lora_rank": 12, "qk_nope_head_dim": 6,
         "qk_rope_head_dim": 4, "v_head_dim": 5, "n_routed_experts": 4, "num_experts_per_tok": 2,
         "moe_intermediate_size": 8, "n_shared_experts": 1, "first_k_dense_replace": 1, "num_hidden_layers": 1,
         "n_group": 1, "topk_group": 1}


@pytest.mark.parametrize("cls,q_lora,extra", [
    ("DeepseekV2", 10, {}), ("DeepseekV2", None, {"attention_bias": True}),
    ("DeepseekV3", 10, {"rope_interleave": True}), ("DeepseekV3", None, {"rope_interleave": False})],
    ids=["v2_q_lora", "v2_no_q_lora_biased", "v3_interleaved", "v3_halves"])
@torch.no_grad()
def test_layer_equals_transformers_attention(cls, q_lora, extra):
    hf = _decoder(f"{cls}ForCausalLM", f"{cls}Config", **{**SMALL, "q_lora_rank": q_lora, **extra}).double()
    z = from_transformers(hf, certify=False).double()
    ha, za = hf.model.layers[0].self_attn, z.decoder.blocks[0].attn
    B, L = 2, 7
    x = torch.randn(B, L, 32, dtype=torch.float64)
    real = torch.ones(B, L, dtype=torch.bool)
    real[1, :2] = False  # row 1 left-padded by two
    pos = (real.long().cumsum(-1) - 1).clamp(min=0)
    allowed = torch.ones(L, L, dtype=torch.bool).tril()[None, None] & real[:, None, None, :]  # (B, 1, L, L)
    additive = torch.zeros(B, 1, L, L, dtype=torch.float64).masked_fill(~allowed, torch.finfo(torch.float64).min)
    want, _ = ha(hidden_states=x, attention_mask=additive, position_embeddings=hf.model.rotary_emb(x, pos))
    rope = z.decoder.positions
    got = za(x, AttnArgs.make(L, L, x.device, mask=allowed, rotary=rope, rot_state=rope.qk_state(pos)))
    d = (got - want).abs()[real]  # fully masked (padding) queries: NaN in transformers, 0 in zoo
    assert want[real].abs().max() > 0.1 and d.max() < 1e-6, d.max()


def _rms(v, g, eps=1e-6):
    return v / math.sqrt(sum(e * e for e in v) / len(v) + eps) * g


def _rope(v, t, base, interleaved):
    """RoPE by hand: pair i turns by t · base^(-2i/d) (pairs (2i, 2i+1) or (i, i + d/2))."""
    d = len(v)
    out = v.clone()
    for i in range(d // 2):
        a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + d // 2)
        th = t * base ** (-2 * i / d)
        out[a] = v[a] * math.cos(th) - v[b] * math.sin(th)
        out[b] = v[a] * math.sin(th) + v[b] * math.cos(th)
    return out


def _reference(attn, xs, scale, base, interleaved):
    """The paper's equations, token by token, in the absorbed form; ``xs (T, D)`` the layer's inputs
    at positions 0..T-1.  Returns ``(outputs (T, D), latents c (T, r), rope keys k_R (T, d_r))``."""
    h, dn, dr, dv, r = attn.h, attn.dn, attn.dr, attn.dv, attn.r
    W_kv = attn.kv_b.weight.view(h, dn + dv, r)  # per head: W_UK (dn, r) over W_UV (dv, r)
    cs, krs, outs = [], [], []
    for t, x in enumerate(xs):
        ckr = attn.kv_a.weight @ x + attn.kv_a.bias  # [W_DKV; W_KR] x
        cs.append(_rms(ckr[:r], attn.kv_norm.weight))  # eq. 9: c = W_DKV x (normalised)
        krs.append(_rope(ckr[r:], t, base, interleaved))  # eq. 14: k_R = RoPE(W_KR x), shared by the heads
        cq = _rms(attn.q_a.weight @ x + attn.q_a.bias, attn.q_norm.weight)  # eq. 12: c_Q = W_DQ x
        q = (attn.q_b.weight @ cq).view(h, dn + dr)  # eq. 13 + 15: q_C and q_R
        heads = []
        for i in range(h):
            q_abs = W_kv[i, :dn].T @ q[i, :dn]  # W_UKᵀ q_C: the query in latent space (r,)
            q_r = _rope(q[i, dn:], t, base, interleaved)
            s = torch.stack([(q_abs @ cs[j] + q_r @ krs[j]) * scale for j in range(t + 1)])  # eq. 17-18
            p = torch.softmax(s, 0)
            heads.append(W_kv[i, dn:] @ sum(p[j] * cs[j] for j in range(t + 1)))  # W_UV Σ p_j c_j (dv,)
        outs.append(attn.out.weight @ torch.cat(heads) + attn.out.bias)  # eq. 19
    return torch.stack(outs), torch.stack(cs), torch.stack(krs)


@pytest.mark.parametrize("absorb", ["decode", "never", "always"])
@pytest.mark.parametrize("interleaved", [False, True])
@torch.no_grad()
def test_latent_cache_path_equals_the_papers_equations(interleaved, absorb):
    """A 1-layer float64 zoo model: prefill 5 tokens, then 3 cached steps, with keys and values
    rebuilt from the latents (``never``), attention in latent space (``always``), or rebuilt in the
    prefill and absorbed in the steps (``decode``).  Every output of the attention layer equals the
    absorbed-form loop, and the cache holds exactly the latents c and the rotated shared keys k_R,
    nothing per head.  (zoo and the loop differ in the rope only,
    which zoo turns in float32, hence 1e-6.)"""
    spec = dict(arch="decoder", vocab_size=40, d_model=24, num_layers=1, num_heads=3, head_dim=4, attn_scale=0.3,
                attention={"kind": "mla", "kv_lora_rank": 6, "q_lora_rank": 5, "nope_dim": 5, "v_dim": 3,
                           "absorb": absorb},
                positions={"kind": "rope", "base": 100.0, "interleaved": interleaved}, norm="rmsnorm", ffn="swiglu")
    model = zoo.build(spec, seed=0, dtype="float64").eval()
    attn = model.decoder.blocks[0].attn
    for p in attn.parameters():  # norm weights and biases away from their 1 / 0 inits
        p.add_(0.2 * torch.randn_like(p))
    seen = []
    hook = attn.register_forward_hook(lambda m, args, out: seen.append((args[0], out)))
    ids = torch.randint(0, 40, (1, 8), generator=torch.Generator().manual_seed(1))
    cache = model.new_cache(8)
    model(ids[:, :5], cache=cache)
    for t in range(5, 8):
        model(ids[:, t:t + 1], cache=cache)
    hook.remove()
    xs = torch.cat([x for x, _ in seen], 1)[0]  # (8, D) the layer's inputs, prefill then steps
    got = torch.cat([o for _, o in seen], 1)[0]  # (8, D)
    want, c, k_r = _reference(attn, xs, 0.3, 100.0, interleaved)
    assert (got - want).abs().max() < 1e-6 and want.abs().max() > 0.1
    layer = cache.layers[0]
    assert layer.k.shape == (1, 1, 8, 6) and layer.v.shape == (1, 1, 8, 4)  # r and d_r per token, one "head"
    assert (layer.k[0, 0] - c).abs().max() < 1e-12
    assert (layer.v[0, 0] - k_r).abs().max() < 1e-6


# ---------------------------------------------------------------------- what the cache costs
LITE = dict(heads=16, rank=512, rope=64, nope=128, v=128, layers=27)


def _twin(attention: dict, kv_heads: int | None = None, head_dim: int = 64, layers: int = 2):
    """DeepSeek-V2-Lite's attention shape in a narrow model (d_model 64: the cache does not depend on it)."""
    return zoo.build(dict(arch="decoder", vocab_size=64, d_model=64, num_layers=layers, num_heads=LITE["heads"],
                          num_kv_heads=kv_heads, head_dim=head_dim, d_ff=32, attention=attention,
                          positions="rope", norm="rmsnorm", ffn="swiglu"), seed=0, dtype="bfloat16").eval()


def cache_bytes_per_token(model, T: int = 6) -> tuple[float, float]:
    """Bytes per token of the cache tensors zoo allocates for a ``T``-token prompt: ``(per layer,
    whole model)``, from the buffers themselves (``nbytes`` / capacity)."""
    cache = model.new_cache(T)
    with torch.no_grad():
        model(torch.randint(0, 64, (1, T)), cache=cache)
    per = [(c.k.nbytes + c.v.nbytes) / c.k.size(2) for c in cache.layers]
    return per[0], sum(per)


def test_cache_bytes_per_token_mla_mha_gqa():
    mla = {"kind": "mla", "kv_lora_rank": LITE["rank"], "nope_dim": LITE["nope"], "v_dim": LITE["v"]}
    rows = {"mla": (_twin(mla, head_dim=LITE["rope"]), LITE["rank"] + LITE["rope"]),
            "mha": (_twin("sdpa", head_dim=128), 2 * 16 * 128),
            "gqa8": (_twin("sdpa", kv_heads=8, head_dim=128), 2 * 8 * 128),
            "gqa4": (_twin("sdpa", kv_heads=4, head_dim=128), 2 * 4 * 128)}
    got = {}
    for name, (model, numbers) in rows.items():
        per_layer, total = cache_bytes_per_token(model)
        assert per_layer == 2 * numbers and total == 2 * 2 * numbers, name  # bfloat16: 2 bytes a number
        got[name] = per_layer
    assert got["mla"] == 1152 and got["mha"] / got["mla"] == 4096 / 576  # 7.1x smaller than MHA
    assert got["mla"] < got["gqa4"] < got["gqa8"] < got["mha"]  # 576 = GQA with 2.25 groups of 128
    whole = cache_bytes_per_token(_twin(mla, head_dim=LITE["rope"], layers=LITE["layers"]))[1]
    assert whole == 27 * 1152  # 31,104 bytes per token for the whole model in bfloat16


def test_static_cache_for_compiled_decoding_holds_the_latents():
    """Compiled decoding's fixed-shape cache asks each layer for its ``cache_layout``: latents for MLA."""
    mla = {"kind": "mla", "kv_lora_rank": 32, "nope_dim": 8, "v_dim": 8}
    model = _twin(mla, head_dim=16)
    cache = StaticCache(model, 2, 10, False, torch.bfloat16, "cpu")
    assert cache.layers[0].k.shape == (2, 1, 10, 32) and cache.layers[0].v.shape == (2, 1, 10, 16)


@torch.no_grad()
def test_generic_mla_model_cache_equals_no_cache_with_padding():
    """An MLA model outside any converted family (no q bottleneck, rope halves, GQA setting ignored):
    greedy generation with the latent cache equals generation without a cache, on a left-padded batch."""
    model = zoo.build(dict(arch="decoder", vocab_size=50, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                           head_dim=8, attention={"kind": "mla", "kv_lora_rank": 16, "nope_dim": 8, "v_dim": 6},
                           positions="rope", norm="rmsnorm", ffn="swiglu"), seed=0).eval()
    ids = torch.randint(1, 50, (2, 6), generator=torch.Generator().manual_seed(2))
    am = torch.ones(2, 6, dtype=torch.long)
    am[1, :3] = 0
    a = model.generate(ids, 6, attention_mask=am)
    assert torch.equal(a, model.generate(ids, 6, attention_mask=am, use_cache=False))


@torch.no_grad()
def test_absorbed_and_rebuilt_attention_agree_under_padding():
    """The three ``absorb`` settings give the same logits (float64, to rounding) on a left-padded
    batch, with and without the cache; the absorbed kernel call is multi-query shaped."""
    outs = []
    for absorb in ("never", "always", "decode"):
        model = zoo.build(dict(arch="decoder", vocab_size=50, d_model=32, num_layers=2, num_heads=4, head_dim=8,
                               attention={"kind": "mla", "kv_lora_rank": 16, "nope_dim": 8, "v_dim": 6,
                                          "absorb": absorb},
                               positions="rope", norm="rmsnorm", ffn="swiglu"), seed=0, dtype="float64").eval()
        ids = torch.randint(1, 50, (2, 9), generator=torch.Generator().manual_seed(4))
        am = torch.ones(2, 9, dtype=torch.long)
        am[1, :3] = 0
        cache = model.new_cache(9)
        steps = [model(ids[:, :5], attention_mask=am[:, :5], cache=cache)]
        steps += [model(ids[:, t:t + 1], attention_mask=am[:, t:t + 1], cache=cache) for t in range(5, 9)]
        outs += [model(ids, attention_mask=am)[am.bool()], torch.cat(steps, 1)[am.bool()]]
        if absorb == "decode":  # a prefill rebuilds 4 heads of keys (8 + 8 features), a step attends over latents
            attn, shapes = model.decoder.blocks[0].attn, []
            call = attn.run_kernel
            attn.run_kernel = lambda q, k, v, a, tap=None: shapes.append((tuple(k.shape), tuple(v.shape))) or call(q, k, v, a, tap)
            cache = model.new_cache(9)
            model(ids[:, :5], cache=cache)
            model(ids[:, 5:6], cache=cache)
            del attn.run_kernel
            assert shapes == [((2, 4, 5, 16), (2, 4, 5, 6)), ((2, 1, 6, 24), (2, 1, 6, 16))]
    assert outs[0].abs().max() > 0.1
    assert all((o - outs[0]).abs().max() < 1e-12 for o in outs[1:])


@pytest.mark.slow  # compiles a prefill and a decoding graph (~50 s on a CPU)
def test_compiled_decoding_over_the_static_latent_cache():
    """Compiled decoding (fixed-shape latent cache, every step attending over all its slots behind
    a mask, absorbed) gives eager decoding's logits step by step on a left-padded batch."""
    from test_compiled_decode import assert_same_logits

    model = zoo.build(dict(arch="decoder", vocab_size=50, d_model=32, num_layers=2, num_heads=4, head_dim=8,
                           attention={"kind": "mla", "kv_lora_rank": 16, "nope_dim": 8, "v_dim": 6},
                           positions="rope", norm="rmsnorm", ffn="swiglu"), seed=0).eval()
    ids, padding = zoo.run.arguments.left_pad([[5, 6, 7, 8, 9, 10, 11], [40, 41, 42]], 0)
    assert_same_logits(model, ids, padding, 8)


@pytest.mark.parametrize("q_lora", [0, 12])
def test_flops_and_cache_accounting_of_mla_and_dense_layers(q_lora):
    """zoo.inside.costs (from the layer the kernel brings: its weight matrices, d_n + d_r and d_v
    features, its latent cache_layout; dense_ffn layers counted as dense) equals what
    FlopCounterMode counts in a forward (float64: the experts run as ordinary matmuls), and the
    DeepSeek-V2-Lite preset's cache is its latents: 27 layers x 576 numbers per token."""
    from torch.utils.flop_counter import FlopCounterMode

    from zoo.inside import costs as accounting

    model = zoo.build(dict(arch="decoder", vocab_size=60, d_model=32, num_layers=3, num_heads=4, head_dim=8,
                           attention={"kind": "mla", "kv_lora_rank": 16, "q_lora_rank": q_lora, "nope_dim": 8,
                                      "v_dim": 6, "absorb": "never"},
                           positions="rope", norm="rmsnorm", ffn={"kind": "moe", "experts": 4, "top_k": 2,
                                                                   "shared_d_ff": 8, "shared_gate": False},
                           dense_ffn="swiglu", dense_layers=1, dense_d_ff=40), seed=0, dtype="float64").eval()
    ids = torch.randint(0, 60, (2, 11))
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(ids)
    assert accounting.forward_cost(model, 11, batch=2)["total_flops"] == fc.get_total_flops()
    T = 100
    assert accounting.forward_cost(zoo.spec("deepseek_v2_lite"), T)["kv_cache_bytes"] == 27 * 576 * T * 4
    twin = _twin({"kind": "mla", "kv_lora_rank": 512, "nope_dim": 128, "v_dim": 128}, head_dim=64)
    assert accounting.decode_bytes(twin, 6)["kv_cache"] == cache_bytes_per_token(twin)[1] * 6
