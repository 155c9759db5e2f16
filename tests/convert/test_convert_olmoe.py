"""OLMoE (issue 24), as the families before it: a random-init 2-layer ``OlmoeForCausalLM`` (from a
config object, offline) converts to a zoo model whose logits agree to 1e-5 in float32 on a padded
batch, greedy tokens equal transformers' ``generate``, HF -> zoo -> HF gives identical tensors, the
parity certificate is written and kept through save/load, each refused option is a ConvertError
naming its field, and the ``olmoe_1b_7b`` preset has the real model's shape and transformers'
parameter count.  The parts OLMoE adds are checked on their own against transformers' modules on the
same weights: the q/k RMSNorm over the whole projection (``rmsnorm_qk_full``) and the unnormalised
top-8 softmax mixture (float64)."""
import pytest
import torch

import zoo
from zoo.convert import ConvertError, convert_state, from_pretrained, from_transformers, to_transformers

T = pytest.importorskip("transformers")
from convert_cases import (TOL, _decoder, assert_back_to_transformers, assert_cached_decode_equals_full,  # noqa: E402
                           assert_decoder_parity, assert_preset_is_the_real_model, assert_saved_and_folder,
                           greedy, maxdiff, run)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def olmoe(**kw):
    """8 experts, top 3; 4 query heads and 2 key/value heads, so the q norm (32 features) and the k
    norm (16) have different sizes."""
    return _decoder("OlmoeForCausalLM", "OlmoeConfig", **{
        "num_experts": 8, "num_experts_per_tok": 3, "intermediate_size": 16, "eos_token_id": None,
        "pad_token_id": None, **kw})


CASES = {"olmoe": olmoe,  # norm_topk_prob=False, as released
         "olmoe_renormalised_biased": lambda: olmoe(norm_topk_prob=True, attention_bias=True),
         "olmoe_mha": lambda: olmoe(num_key_value_heads=4, num_experts_per_tok=8)}


@pytest.mark.parametrize("case", list(CASES))
@torch.no_grad()
def test_family(case, tmp_path):
    hf = CASES[case]()
    z = from_transformers(hf)
    assert z.spec.stack("decoder").norm.kind == "rmsnorm_qk_full" and z.spec.stack("decoder").qk_norm
    cert = assert_decoder_parity(hf, z)
    back = assert_back_to_transformers(hf, z)
    assert type(back).__name__ == "OlmoeForCausalLM"
    assert_saved_and_folder(hf, z, tmp_path, cert)


@torch.no_grad()
def test_cached_decode_equals_the_full_forward():
    assert_cached_decode_equals_full(from_transformers(olmoe(), certify=False))


REFUSED = [("clip_qkv", 8.0), ("router_jitter_noise", 0.1), ("hidden_act", "gelu"),
           ("rope_parameters", {"rope_type": "longrope", "rope_theta": 1e4, "factor": 2.0,
                                "short_factor": [1.0] * 4, "long_factor": [2.0] * 3})]


@pytest.mark.parametrize("field,value", REFUSED, ids=[f for f, _ in REFUSED])
def test_refused_options_name_their_field(field, value):
    hf = olmoe()
    convert_state(hf.config.to_dict(), hf.state_dict())  # the unchanged config converts
    with pytest.raises(ConvertError) as e:
        convert_state({**hf.config.to_dict(), field: value}, hf.state_dict())
    assert e.value.where == f"config.{field}"


def test_preset_is_the_real_model():
    """OLMoE-1B-7B-0924's config.json values: 6,919,161,856 parameters ("7B" total, ~1.3B active)."""
    kw = dict(vocab_size=50304, hidden_size=2048, intermediate_size=1024, num_hidden_layers=16,
              num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=4096, rms_norm_eps=1e-5,
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, num_experts=64,
              num_experts_per_tok=8, norm_topk_prob=False, router_aux_loss_coef=0.01, clip_qkv=None,
              tie_word_embeddings=False, pad_token_id=1, eos_token_id=50279)
    c = assert_preset_is_the_real_model("olmoe_1b_7b", "OlmoeForCausalLM", "OlmoeConfig", 6_919_161_856, **kw).ffn.config
    assert (c.experts, c.top_k, c.normalize) == (64, 8, False)


# ---------------------------------------------------------------------- OLMoE's parts, alone
@torch.no_grad()
def test_qk_norm_spans_the_whole_projection_as_transformers_attention():
    """zoo's q/k norm (``rmsnorm_qk_full``, on the split heads) equals transformers' ``q_norm`` /
    ``k_norm`` on the projection before the split, with the same weights (float64); a per-head norm
    would not (the heads' scales differ)."""
    hf = olmoe().double()
    z = from_transformers(hf, certify=False).double()
    ha, za = hf.model.layers[0].self_attn, z.decoder.blocks[0].attn
    assert za.q_norm.weight.shape == (32,) and za.k_norm.weight.shape == (16,)
    x = torch.randn(2, 5, 32, dtype=torch.float64) * torch.linspace(0.1, 3, 32, dtype=torch.float64)
    q, k = ha.q_proj(x), ha.k_proj(x)  # (B, T, h*hd), (B, T, h_kv*hd)
    want_q, want_k = ha.q_norm(q), ha.k_norm(k)
    split = lambda t: t.view(2, 5, -1, 8)  # noqa: E731 - (B, T, h, hd), as the attention hands them over
    got_q, got_k = za.q_norm(split(q)), za.k_norm(split(k))
    assert (got_q.reshape(2, 5, 32) - want_q).abs().max() < 1e-12
    assert (got_k.reshape(2, 5, 16) - want_k).abs().max() < 1e-12
    per_head = split(q) * torch.rsqrt(split(q).pow(2).mean(-1, keepdim=True) + 1e-5)
    assert (per_head.reshape(2, 5, 32) * za.q_norm.weight - want_q).abs().max() > 1e-3


@torch.no_grad()
def test_moe_block_equals_transformers_block():
    """The mixture (softmax top-3 of 8, not renormalised) against ``OlmoeSparseMoeBlock``, float64."""
    hf = olmoe().double()
    hf.config._experts_implementation = "eager"  # the per-expert loop (grouped_mm has no float64)
    z = from_transformers(hf, certify=False).double()
    ref, moe = hf.model.layers[0].mlp, z.decoder.blocks[0].ffn
    assert not moe.config.normalize
    x = torch.randn(3, 11, 32, dtype=torch.float64)
    assert (ref(x) - moe(x)).abs().max() < 1e-12
    assert int(moe.expert_counts.sum()) == 3 * 11 * 3


def test_aux_loss_is_transformers_load_balancing_loss():
    from transformers.models.olmoe.modeling_olmoe import load_balancing_loss_func

    hf = olmoe(router_aux_loss_coef=0.01).double()
    z = from_transformers(hf, certify=False).double()
    moe = z.decoder.blocks[0].ffn
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    moe(x)
    logits = torch.nn.functional.linear(x.reshape(-1, 32), hf.model.layers[0].mlp.gate.weight)
    want = load_balancing_loss_func((logits,), 8, 3)
    assert abs(float(moe.aux_loss) / 0.01 - float(want)) < 1e-6


@pytest.mark.parametrize("family", ["mixtral", "qwen2_moe", "qwen3_moe", "olmoe"])
@torch.no_grad()
def test_moe_checkpoint_folders_convert(family, tmp_path):
    """``save_pretrained`` writes the hub's layout, one tensor per expert (Mixtral's
    ``block_sparse_moe.experts.{e}.w1/w3/w2``, the others' ``mlp.experts.{e}.gate/up/down_proj``),
    not transformers' in-memory fused ``gate_up_proj``: the folder converts to the same model."""
    from test_convert_modern import mixtral, qwen2_moe, qwen3_moe

    hf = {"mixtral": mixtral, "qwen2_moe": qwen2_moe, "qwen3_moe": qwen3_moe, "olmoe": olmoe}[family]()
    z = from_transformers(hf, certify=False)
    hf.save_pretrained(tmp_path)
    from safetensors import safe_open
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert any(".experts.0." in k for k in f.keys()) and not any("gate_up_proj" in k for k in f.keys())
    folder = from_pretrained(tmp_path)
    assert folder.spec == z.spec
    sa, sz = folder.state_dict(), z.state_dict()
    assert all(torch.equal(sa[k], sz[k]) for k in sz)
    ref, out, mask = run("decoder", hf, folder)
    assert maxdiff(ref, out, mask) <= TOL
