"""Gemma 3 text (``Gemma3ForCausalLM``, ``gemma3_text``; issue 24), as the families before it: a
random-init ``transformers`` model (from a config object, offline) converts to a zoo model whose
logits agree to 1e-5 in float32 on a padded batch, greedy tokens equal transformers' ``generate``,
HF -> zoo -> HF gives identical tensors, the parity certificate is kept through save/load, each
refused option is a ConvertError naming its field, and the ``gemma3_1b`` preset has the real
shape and transformers' parameter count.  What Gemma 3 adds is checked on its own: the rope tables of
the local and global layers (their own bases, ``rope``'s ``pattern_base``) against transformers'
rotary module, and the cached decode against the full forward."""
import pytest
import torch

import zoo
from zoo.convert import ConvertError, convert_state, from_pretrained, from_transformers, to_transformers

T = pytest.importorskip("transformers")
from convert_cases import (_decoder, assert_back_to_transformers, assert_cached_decode_equals_full,  # noqa: E402
                           assert_decoder_parity, assert_preset_is_the_real_model, assert_saved_and_folder, greedy, maxdiff, run)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

LOCAL, GLOBAL = "sliding_attention", "full_attention"


def gemma3(**kw):
    """7 layers, Gemma 3's default cycle (five local, one global: the 6th, then local again), a
    window of 4 keys, GQA 4:2, head_dim 16."""
    return _decoder("Gemma3ForCausalLM", "Gemma3TextConfig", **{
        "num_hidden_layers": 7, "num_key_value_heads": 2, "head_dim": 16, "sliding_window": 4,
        "query_pre_attn_scalar": 12, "pad_token_id": None, "eos_token_id": None, "bos_token_id": None, **kw})


SCALED = {GLOBAL: {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},  # the 4B-27B models
          LOCAL: {"rope_type": "default", "rope_theta": 1e4}}
CASES = {
    "gemma3": gemma3,
    "gemma3_scaled_global_rope_softcap_bias": lambda: gemma3(rope_parameters=SCALED, final_logit_softcapping=3.0,
                                                             attention_bias=True),
    "gemma3_alternating": lambda: gemma3(num_hidden_layers=4, layer_types=[LOCAL, GLOBAL, LOCAL, GLOBAL],
                                         rope_parameters={GLOBAL: {"rope_type": "default", "rope_theta": 5e5},
                                                          LOCAL: {"rope_type": "default", "rope_theta": 50.0}}),
}


@pytest.mark.parametrize("case", list(CASES))
@torch.no_grad()
def test_family(case, tmp_path):
    hf = CASES[case]()
    z = from_transformers(hf)
    assert z.spec.stack("decoder").qk_norm and z.spec.stack("decoder").positions.config.pattern_base
    cert = assert_decoder_parity(hf, z)
    back = assert_back_to_transformers(hf, z)
    assert type(back).__name__ == "Gemma3ForCausalLM"
    assert back.config.rope_parameters == hf.config.rope_parameters
    assert back.config.layer_types == hf.config.layer_types
    assert_saved_and_folder(hf, z, tmp_path, cert)


@pytest.mark.parametrize("case", ["gemma3", "gemma3_scaled_global_rope_softcap_bias"])
@torch.no_grad()
def test_each_layer_type_has_transformers_rope_tables(case):
    """zoo's tables for each mask-pattern group equal transformers' rotary module for that layer type;
    the two types really differ."""
    hf = CASES[case]()
    z = from_transformers(hf, certify=False)
    rope, types = z.decoder.positions, hf.config.layer_types
    pos = torch.arange(12)[None]  # (1, T)
    state = rope.qk_state(pos)
    tables = {}
    for j in range(len(z.spec.stack("decoder").mask_pattern)):
        cos, sin = rope.group_state(state, j)  # (1, 1, T, hd/2)
        cos_hf, sin_hf = hf.model.rotary_emb(torch.zeros(1), pos, types[j])  # (1, T, hd)
        assert (cos[:, 0] - cos_hf[..., :8]).abs().max() <= 1e-6 and (sin[:, 0] - sin_hf[..., :8]).abs().max() <= 1e-6
        tables[types[j]] = cos
    assert (tables[LOCAL] - tables[GLOBAL]).abs().max() > 0.1


@pytest.mark.parametrize("case", list(CASES))
@torch.no_grad()
def test_cached_decode_equals_full_forward(case):
    """Sliding windows and per-layer rope under a KV cache: a 3-token prompt, then one token at a time
    past the window."""
    assert_cached_decode_equals_full(from_transformers(CASES[case](), certify=False), prompt=3, total=12)


def test_transformers_4_config_json_converts_the_same():
    """A config.json written by transformers 4.x (``rope_theta``, ``rope_local_base_freq``,
    ``rope_scaling``, ``sliding_window_pattern``, no ``layer_types``) gives the same spec."""
    hf = CASES["gemma3_scaled_global_rope_softcap_bias"]()
    cfg = hf.config.to_dict()
    want, _, _ = convert_state(cfg, hf.state_dict())
    old = {k: v for k, v in cfg.items() if k not in ("rope_parameters", "layer_types")}
    old.update(rope_theta=1e6, rope_local_base_freq=1e4, sliding_window_pattern=6,
               rope_scaling={"rope_type": "linear", "factor": 8.0})
    got, _, _ = convert_state(old, hf.state_dict())
    assert got == want


REFUSED = [("use_bidirectional_attention", True), ("attn_logit_softcapping", 50.0),
           ("rope_parameters", {LOCAL: {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4},
                                GLOBAL: {"rope_type": "default", "rope_theta": 1e6}}),
           ("layer_types", [LOCAL, "chunked_attention"] * 3 + [GLOBAL]),
           ("hidden_activation", "silu")]


@pytest.mark.parametrize("field,value", REFUSED, ids=[f for f, _ in REFUSED])
def test_refused_options_name_their_field(field, value):
    hf = gemma3()
    convert_state(hf.config.to_dict(), hf.state_dict())  # the unchanged config converts
    with pytest.raises(ConvertError) as e:
        convert_state({**hf.config.to_dict(), field: value}, hf.state_dict())
    assert e.value.where == f"config.{field}" and e.value.fix


def test_pattern_base_needs_one_entry_per_group():
    spec = zoo.spec("gemma3_1b").to_dict()
    spec["positions"]["pattern_base"] = [1e4, None]  # the pattern has 6 groups
    with pytest.raises(zoo.SpecError) as e:
        zoo.build(dict(spec, num_layers=2, vocab_size=64, d_model=64, head_dim=16, d_ff=64))
    assert e.value.where == "positions.pattern_base"


def test_preset_is_the_real_model():
    """Gemma-3-1B's config.json values (transformers 4.50 form): 999,885,952 parameters."""
    kw = dict(vocab_size=262144, hidden_size=1152, intermediate_size=6912, num_hidden_layers=26,
              num_attention_heads=4, num_key_value_heads=1, head_dim=256, max_position_embeddings=32768,
              rms_norm_eps=1e-6, query_pre_attn_scalar=256, sliding_window=512, sliding_window_pattern=6,
              rope_theta=1e6, rope_local_base_freq=1e4, hidden_activation="gelu_pytorch_tanh",
              final_logit_softcapping=None, attn_logit_softcapping=None, tie_word_embeddings=True)
    st = assert_preset_is_the_real_model("gemma3_1b", "Gemma3ForCausalLM", "Gemma3TextConfig", 999_885_952, **kw)
    assert st.positions.config.pattern_base == (1e4,) * 5 + (None,) and len(st.mask_pattern) == 6
