"""DeepSeek-V2 and DeepSeek-V3 (issue 24), as the families before them: random-init 3-layer
``DeepseekV2ForCausalLM`` / ``DeepseekV3ForCausalLM`` models (from config objects, offline) convert
to zoo models whose logits agree to 1e-5 in float32 on a left-padded batch, greedy tokens equal
transformers' ``generate``, HF -> zoo -> HF gives identical tensors (and bit-equal logits), the
parity certificate is written and kept through save/load and the folder route, each refused option
is a ConvertError naming its field, and the ``deepseek_v2_lite`` / ``deepseek_v3`` presets have the
real models' shapes and transformers' parameter counts.  The routers are also checked alone against
transformers' ``DeepseekV2Moe`` / ``DeepseekV3MoE`` on the same weights (float64)."""
import pytest
import torch

import zoo
from zoo.convert import ConvertError, convert_state, from_transformers

T = pytest.importorskip("transformers")
from convert_cases import (_decoder, assert_cached_decode_equals_full, assert_back_to_transformers, assert_decoder_parity,  # noqa: E402
                           assert_preset_is_the_real_model, assert_saved_and_folder)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

#: a small MLA: 4 heads of 6 + 4 query/key features (4 rotated) and 5 value features, a 12-wide
#: latent, a 10-wide query bottleneck; 8 experts (top 3), a dense first layer
MLA = {"num_key_value_heads": 4, "head_dim": 4, "kv_lora_rank": 12, "q_lora_rank": 10, "qk_nope_head_dim": 6,
       "qk_rope_head_dim": 4, "v_head_dim": 5, "n_routed_experts": 8, "num_experts_per_tok": 3,
       "moe_intermediate_size": 12, "first_k_dense_replace": 1, "num_hidden_layers": 3,
       "eos_token_id": None, "pad_token_id": None, "bos_token_id": None}
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 1.0}


def v2(**kw):
    return _decoder("DeepseekV2ForCausalLM", "DeepseekV2Config", **{
        **MLA, "n_shared_experts": 2, "routed_scaling_factor": 1.5, **kw})


def v3(**kw):
    hf = _decoder("DeepseekV3ForCausalLM", "DeepseekV3Config", **{
        **MLA, "n_shared_experts": 1, "routed_scaling_factor": 2.5, "n_group": 4, "topk_group": 2, **kw})
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():  # randomize() leaves buffers alone: give the choice bias something to do
        for name, b in hf.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))
    return hf


CASES = {
    "v2": v2,  # q bottleneck, greedy softmax top-3, 2 shared experts, scaled gates
    "v2_no_q_lora_grouped_biased": lambda: v2(q_lora_rank=None, topk_method="group_limited_greedy", n_group=4,
                                              topk_group=2, attention_bias=True),
    "v2_yarn_all_moe": lambda: v2(rope_parameters=YARN, first_k_dense_replace=0),
    "v3": v3,  # sigmoid, noaux_tc with the choice bias, renormalised
    "v3_halves_unnormalised": lambda: v3(rope_interleave=False, norm_topk_prob=False, first_k_dense_replace=2),
    "v3_all_dense": lambda: v3(first_k_dense_replace=3),
}


@pytest.mark.parametrize("case", list(CASES))
@torch.no_grad()
def test_family(case, tmp_path):
    hf = CASES[case]()
    z = from_transformers(hf)
    st = z.spec.stack("decoder")
    assert st.attention.kind == "mla" and st.head_dim == 4
    cert = assert_decoder_parity(hf, z)
    back = assert_back_to_transformers(hf, z)
    assert type(back).__name__ == type(hf).__name__
    assert_saved_and_folder(hf, z, tmp_path, cert)


@torch.no_grad()
def test_cached_decode_equals_the_full_forward_and_caches_latents():
    cache = assert_cached_decode_equals_full(from_transformers(v3(), certify=False))
    layer = cache.layers[0]
    assert layer.k.shape == (2, 1, 10, 12) and layer.v.shape == (2, 1, 10, 4)  # latent 12 + rope key 4


@torch.no_grad()
def test_yarn_scale_is_transformers_softmax_scale():
    """``mscale_all_dim`` reaches the scores: zoo's scale is transformers' ``self.scaling``."""
    hf = CASES["v2_yarn_all_moe"]()
    z = from_transformers(hf, certify=False)
    assert abs(z.spec.stack("decoder").scale - hf.model.layers[0].self_attn.scaling) < 1e-12
    assert z.spec.stack("decoder").scale != 10 ** -0.5


REFUSED = [("deepseek_v2", "num_key_value_heads", 2), ("deepseek_v2", "mlp_bias", True),
           ("deepseek_v2", "hidden_act", "gelu"), ("deepseek_v2", "topk_method", "noaux_tc"),
           ("deepseek_v2", "n_shared_experts", 0),
           ("deepseek_v2", "rope_parameters", {"rope_type": "su", "rope_theta": 1e4}),
           ("deepseek_v3", "topk_method", "greedy"), ("deepseek_v3", "scoring_func", "softmax"),
           ("deepseek_v3", "num_key_value_heads", 1),
           ("deepseek_v3", "quantization_config", {"quant_method": "fp8", "weight_block_size": [128, 128]})]


@pytest.mark.parametrize("family,field,value", REFUSED, ids=[f"{a}-{b}" for a, b, _ in REFUSED])
def test_refused_options_name_their_field(family, field, value):
    hf = v2() if family == "deepseek_v2" else v3()
    convert_state(hf.config.to_dict(), hf.state_dict())  # the unchanged config converts
    with pytest.raises(ConvertError) as e:
        convert_state({**hf.config.to_dict(), field: value}, hf.state_dict())
    assert e.value.where == f"config.{field}"


def test_another_attention_kernel_is_refused():
    hf = v2()
    with pytest.raises(ConvertError) as e:
        convert_state(hf.config.to_dict(), hf.state_dict(), attention="eager")
    assert e.value.where == "attention" and "mla" in str(e.value)


YARN_REAL = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "original_max_position_embeddings": 4096,
             "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707}


def test_v2_lite_preset_is_the_real_model():
    """DeepSeek-V2-Lite's config.json values: 15,706,484,224 parameters ("15.7B", 2.4B active)."""
    kw = dict(vocab_size=102400, hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
              num_hidden_layers=27, num_attention_heads=16, num_key_value_heads=16, n_shared_experts=2,
              n_routed_experts=64, routed_scaling_factor=1.0, kv_lora_rank=512, q_lora_rank=None,
              qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128, head_dim=64, topk_method="greedy",
              n_group=1, topk_group=1, num_experts_per_tok=6, first_k_dense_replace=1, norm_topk_prob=False,
              max_position_embeddings=163840, rms_norm_eps=1e-6, tie_word_embeddings=False,
              attention_bias=False, rope_parameters=YARN_REAL, bos_token_id=100000, eos_token_id=100001)
    st = assert_preset_is_the_real_model("deepseek_v2_lite", "DeepseekV2ForCausalLM", "DeepseekV2Config",
                                         15_706_484_224, **kw)
    a, f = st.attention.config, st.ffn.config
    assert (a.kv_lora_rank, a.q_lora_rank, st.head_dim, a.nope_dim, a.v_dim) == (512, 0, 64, 128, 128)
    assert (f.experts, f.top_k, f.shared_d_ff, st.dense_layers, st.dense_d_ff) == (64, 6, 2816, 1, 10944)


def test_v3_preset_is_the_real_model():
    """DeepSeek-V3's config.json values: 671,026,404,352 parameters in transformers (the published
    671B; the 14B multi-token-prediction layer is not part of transformers' model)."""
    kw = dict(vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
              num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128, n_shared_experts=1,
              n_routed_experts=256, routed_scaling_factor=2.5, kv_lora_rank=512, q_lora_rank=1536,
              qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128, head_dim=64, n_group=8, topk_group=4,
              num_experts_per_tok=8, first_k_dense_replace=3, norm_topk_prob=True, max_position_embeddings=163840,
              rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False, rope_interleave=True,
              rope_parameters=dict(YARN_REAL, mscale=1.0, mscale_all_dim=1.0), bos_token_id=0, eos_token_id=1)
    st = assert_preset_is_the_real_model("deepseek_v3", "DeepseekV3ForCausalLM", "DeepseekV3Config",
                                         671_026_404_352, **kw)
    f = st.ffn.config
    assert (f.scoring, f.groups, f.topk_groups, f.group_score, f.score_bias, f.scale) == \
        ("sigmoid", 8, 4, "top2", True, 2.5)


# ---------------------------------------------------------------------- the routers, alone
@pytest.mark.parametrize("case", ["v2", "v2_no_q_lora_grouped_biased", "v3", "v3_halves_unnormalised"])
@torch.no_grad()
def test_moe_block_equals_transformers_block(case):
    """zoo's ``moe`` with DeepSeek's router options against transformers' MoE block (router, routed
    and shared experts), float64 on the same weights; every token's chosen experts are the same.
    transformers takes DeepSeek's router in float32 whatever the model's dtype (its gate weight is
    kept in float32), zoo's in float32 from float64 logits: gates agree to ~1e-7, hence 1e-6."""
    hf = CASES[case]().double()
    hf.config._experts_implementation = "eager"  # the per-expert loop (grouped_mm has no float64)
    z = from_transformers(hf, certify=False).double()
    i = hf.config.first_k_dense_replace
    ref, moe = hf.model.layers[i].mlp, z.decoder.blocks[i].ffn
    x = torch.randn(3, 11, 32, dtype=torch.float64)
    assert (ref(x) - moe(x)).abs().max() < 1e-6
    _, _, want = ref.gate(x)
    assert torch.equal(moe.routing.reshape(-1, 3).sort(-1).values, want.sort(-1).values)


def test_dense_layer_fields_are_checked():
    """``dense_layers`` / ``dense_d_ff`` without a ``dense_ffn``, or ``dense_layers`` < 1, are spec
    errors naming the field; more dense layers than layers makes every layer dense (transformers'
    ``first_k_dense_replace`` >= ``num_hidden_layers``)."""
    base = dict(arch="decoder", vocab_size=50, d_model=32, num_layers=2, num_heads=4, ffn={"kind": "moe"})
    with pytest.raises(zoo.SpecError) as e:
        zoo.spec(dict(base, dense_layers=1))
    assert e.value.where == "dense_layers"
    with pytest.raises(zoo.SpecError) as e:
        zoo.spec(dict(base, dense_ffn="swiglu", dense_layers=0))
    assert e.value.where == "dense_layers"
    model = zoo.build(dict(base, dense_ffn="swiglu", dense_layers=5, dense_d_ff=24), seed=0)
    assert [b.ffn.up.out_features for b in model.decoder.blocks] == [24, 24]


def test_v3_multi_token_prediction_layer_is_dropped_and_listed():
    """A V3 folder carries its multi-token-prediction layer as ``model.layers.{L}.*``; transformers
    skips it, zoo drops it and lists it in ``dropped``."""
    hf = v3()
    state = dict(hf.state_dict())
    extra = {"model.layers.3.eh_proj.weight": torch.randn(32, 64), "model.layers.3.enorm.weight": torch.ones(32)}
    cfg = {**hf.config.to_dict(), "num_nextn_predict_layers": 1}
    _, _, dropped = convert_state(cfg, {**state, **extra})
    assert sorted(dropped) == sorted(extra)
    with pytest.raises(ConvertError, match="tensors zoo does not know"):  # when the config has none
        convert_state({**cfg, "num_nextn_predict_layers": 0}, {**state, **extra})
