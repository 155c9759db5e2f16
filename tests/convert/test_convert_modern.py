"""The families of issue 24 (mixtures of experts: Mixtral, Qwen2-MoE, Qwen3-MoE; YaRN rope scaling
in the Llama-shaped families; Qwen2 / Qwen3 sliding-window layers), as the sixteen
before them: a random-init 2-layer transformers model (from a config object, offline) converts to a
zoo model whose logits agree to 1e-5 in float32 on a padded batch, greedy tokens equal transformers'
``generate``, HF -> zoo -> HF gives identical tensors, the parity certificate is written and kept
through save/load, each refused option is a ConvertError naming its field, and a preset with the
real shape has transformers' parameter count.  The MoE block itself is checked against
transformers' block on the same weights (float64), and its load-balancing loss against
transformers' ``load_balancing_loss_func``."""
import pytest
import torch

import zoo
from zoo.convert import ConvertError, convert_state, from_transformers, to_transformers

T = pytest.importorskip("transformers")
from convert_cases import (TOL, _decoder, assert_back_to_transformers, assert_decoder_parity,  # noqa: E402
                           assert_preset_is_the_real_model, assert_saved_and_folder, greedy, llama, maxdiff, qwen2, qwen3, run)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def mixtral(**kw):
    return _decoder("MixtralForCausalLM", "MixtralConfig", **{
        "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 5, "router_aux_loss_coef": 0.02, **kw})


def qwen2_moe(**kw):
    return _decoder("Qwen2MoeForCausalLM", "Qwen2MoeConfig", **{
        "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
        "shared_expert_intermediate_size": 24, **kw})


def qwen3_moe(**kw):
    return _decoder("Qwen3MoeForCausalLM", "Qwen3MoeConfig", **{
        "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "head_dim": 16,
        "norm_topk_prob": True, **kw})


YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16}
CASES = {"mixtral": mixtral, "qwen2_moe": qwen2_moe, "qwen3_moe": qwen3_moe,
         "qwen3_moe_unnormalised": lambda: qwen3_moe(norm_topk_prob=False),
         # YaRN rope scaling (Qwen2.5's long context): default ramp, and every option set
         "llama_yarn": lambda: llama(rope_parameters=YARN),
         "qwen2_yarn": lambda: qwen2(rope_parameters={**YARN, "beta_fast": 8.0, "beta_slow": 2.0,
                                                      "attention_factor": 1.3, "truncate": False}),
         # Qwen2 / Qwen3 sliding-window layers (from max_window_layers on): the spec's mask_pattern
         "qwen2_sliding": lambda: qwen2(num_hidden_layers=3, use_sliding_window=True, sliding_window=3,
                                        max_window_layers=1),
         "qwen3_sliding": lambda: qwen3(num_hidden_layers=3, use_sliding_window=True, sliding_window=3,
                                        max_window_layers=1)}


@pytest.mark.parametrize("case", list(CASES))
@torch.no_grad()
def test_family(case, tmp_path):
    hf = CASES[case]()
    z = from_transformers(hf)
    cert = assert_decoder_parity(hf, z)
    assert_back_to_transformers(hf, z)
    assert_saved_and_folder(hf, z, tmp_path, cert)


REFUSED = [
    (mixtral, "router_jitter_noise", 0.1), (mixtral, "hidden_act", "gelu"),
    (mixtral, "rope_parameters", {"rope_type": "longrope", "rope_theta": 1e4, "factor": 2.0}),  # no factors
    (qwen2_moe, "mlp_only_layers", [0]), (qwen2_moe, "decoder_sparse_step", 2),
    (qwen2_moe, "use_sliding_window", True), (qwen3_moe, "mlp_only_layers", [1]),
    (qwen3_moe, "layer_types", ["sliding_attention", "full_attention"]),
    (llama, "rope_parameters", {"rope_type": "longrope", "rope_theta": 1e4, "factor": 2.0,
                                "short_factor": [1.0] * 3, "long_factor": [2.0] * 3}),  # 4 pairs
    (qwen2, "rope_parameters", {"rope_type": "ntk_by_parts", "rope_theta": 1e4, "factor": 2.0}),  # unknown
    (qwen3, "layer_types", ["full_attention", "sliding_attention"]),  # sliding without use_sliding_window
]


@pytest.mark.parametrize("make,field,value", REFUSED, ids=[f"{m.__name__}-{f}" for m, f, _ in REFUSED])
def test_refused_options_name_their_field(make, field, value):
    hf = make()
    convert_state(hf.config.to_dict(), hf.state_dict())  # the unchanged config converts
    with pytest.raises(ConvertError) as e:
        convert_state({**hf.config.to_dict(), field: value}, hf.state_dict())
    assert e.value.where == f"config.{field}"


ROPE = {"rope_type": "default", "rope_theta": 1000000.0}
#: preset -> (transformers class, config class, the real config's values, transformers' count)
REAL = {
    "mixtral_8x7b": ("MixtralForCausalLM", "MixtralConfig", dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, max_position_embeddings=32768, rms_norm_eps=1e-5, rope_parameters=ROPE,
        num_local_experts=8, num_experts_per_tok=2, router_aux_loss_coef=0.02, sliding_window=None,
        tie_word_embeddings=False), 46_702_792_704, "Mixtral-8x7B-v0.1"),
    "qwen1_5_moe_a2_7b": ("Qwen2MoeForCausalLM", "Qwen2MoeConfig", dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24, num_attention_heads=16,
        num_key_value_heads=16, max_position_embeddings=8192, rms_norm_eps=1e-6, rope_parameters=ROPE,
        num_experts=60, num_experts_per_tok=4, moe_intermediate_size=1408, shared_expert_intermediate_size=5632,
        norm_topk_prob=False, router_aux_loss_coef=0.001, tie_word_embeddings=False), 14_315_784_192,
        "Qwen1.5-MoE-A2.7B"),
    "qwen3_30b_a3b": ("Qwen3MoeForCausalLM", "Qwen3MoeConfig", dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=48, num_attention_heads=32,
        num_key_value_heads=4, head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6, rope_parameters=ROPE,
        num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True,
        router_aux_loss_coef=0.001, tie_word_embeddings=False), 30_532_122_624, "Qwen3-30B-A3B"),
}


@pytest.mark.parametrize("preset", list(REAL))
def test_preset_is_the_real_model(preset):
    cls, cfg, kw, count, _ = REAL[preset]
    assert_preset_is_the_real_model(preset, cls, cfg, count, **kw)


# ---------------------------------------------------------------------- the MoE block itself
def _blocks(case):
    """transformers' MoE block of layer 0 and zoo's, same weights, float64."""
    hf = CASES[case]().double()
    hf.config._experts_implementation = "eager"  # the per-expert loop (grouped_mm has no float64)
    z = from_transformers(hf, certify=False).double()
    return hf.model.layers[0].mlp, z.decoder.blocks[0].ffn


@pytest.mark.parametrize("case", ["mixtral", "qwen2_moe", "qwen3_moe_unnormalised"])
@torch.no_grad()
def test_moe_block_equals_transformers_block(case):
    ref, moe = _blocks(case)
    x = torch.randn(3, 11, 32, dtype=torch.float64)
    assert (ref(x) - moe(x)).abs().max() < 1e-12
    assert int(moe.expert_counts.sum()) == 3 * 11 * moe.config.top_k  # every token routed top_k times
    assert (moe.expert_counts > 0).sum() >= 2


@pytest.mark.parametrize("case", ["mixtral", "qwen3_moe"])
def test_aux_loss_is_transformers_load_balancing_loss(case):
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    ref, moe = _blocks(case)
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    moe(x)
    logits = torch.nn.functional.linear(x.reshape(-1, 32), ref.gate.weight)
    want = load_balancing_loss_func((logits,), moe.config.experts, moe.config.top_k)
    coef = moe.config.aux_loss_coef
    assert moe.config.aux_loss_coef > 0
    assert abs(float(moe.aux_loss) / coef - float(want)) < 1e-6  # both from float32 router softmaxes


def test_model_reports_its_aux_loss_and_it_trains_the_router():
    hf = mixtral()
    z = from_transformers(hf, certify=False).train()
    z(torch.randint(3, 101, (2, 8)))
    aux = z.auxiliary_loss()
    blocks = [b.ffn for b in z.decoder.blocks]
    assert torch.allclose(aux, sum(b.aux_loss for b in blocks))
    aux.backward()
    assert all(b.router.weight.grad.abs().sum() > 0 for b in blocks)
