"""Rope scaling types ``dynamic`` (dynamic NTK) and ``longrope`` (LongRoPE, Phi-3 128k) in every
Llama-shaped family (issue 24), checked against transformers, which nobody here wrote:

- the cos/sin tables of zoo's ``rope`` equal transformers' rotary-embedding module for sequences
  shorter and longer than the pre-training length (float32, 1e-6);
- whole models convert as every family does: padded-batch logits within 1e-5, greedy tokens equal
  to transformers' ``generate`` (also across the length where the scaling switches on), HF -> zoo ->
  HF identical, the parity certificate kept through save/load;
- under a KV cache each call rotates its new keys with its own length, step by step as
  transformers' cached forward does; within one regime the cache equals the full forward.
  transformers' Phi-3 ``generate`` alone drops its cache when the sequence first passes the
  original length and re-encodes everything with the long factors: that is zoo's ``generate``
  with ``use_cache=False`` (tested), not its cached path.

transformers' dynamic rope is stateful (it keeps the longest length it has seen until a call
shorter than ``max_position_embeddings`` resets it); zoo's is a function of the call.  They agree on a
fresh model and on a growing sequence (generation); the tests reset transformers' rotary module
before each independent call (:func:`fresh`)."""
import pytest
import torch

import zoo
from zoo.convert import ConvertError, convert_state, from_pretrained, from_transformers, to_transformers

T = pytest.importorskip("transformers")
from convert_cases import (TOL, V, _decoder, assert_back_to_transformers, assert_decoder_parity,  # noqa: E402
                           assert_saved_and_folder, greedy, llama, maxdiff, padded, phi3, qwen2,
                           randomize, run)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def fresh(hf):
    """transformers' dynamic rope as on a fresh model: forget the longest length seen so far."""
    for m in hf.modules():
        if hasattr(m, "original_inv_freq") and hasattr(m, "max_seq_len_cached"):
            m.inv_freq = m.original_inv_freq.clone()
            m.max_seq_len_cached = m.original_max_seq_len
    return hf


def longrope(pairs: int, **kw) -> dict:
    """LongRoPE parameters: distinct divisors per pair, larger ones beyond the original length."""
    return {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0 + 0.1 * i for i in range(pairs)],
            "long_factor": [1.5 + 0.7 * i for i in range(pairs)], **kw}


DYNAMIC = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}


def gpt_neox_dynamic():
    cfg = T.GPTNeoXConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=64, max_position_embeddings=8, attn_implementation="eager",
                          rope_parameters={**DYNAMIC, "factor": 3.0, "partial_rotary_factor": 0.5})
    return randomize(T.GPTNeoXForCausalLM(cfg))


# max_position_embeddings 8 (dynamic) / original length 8 (longrope) < the 9-token test batch: the
# scaling acts; "short" keeps every call within the original length
CASES = {
    "llama_dynamic": lambda: llama(max_position_embeddings=8, rope_parameters=DYNAMIC),
    "qwen2_dynamic": lambda: qwen2(max_position_embeddings=8, rope_parameters={**DYNAMIC, "factor": 2.5}),
    "gpt_neox_dynamic": gpt_neox_dynamic,
    "mixtral_dynamic": lambda: _decoder("MixtralForCausalLM", "MixtralConfig", num_local_experts=4,
                                        num_experts_per_tok=2, max_position_embeddings=8, head_dim=8,
                                        rope_parameters=DYNAMIC),
    "llama_longrope": lambda: llama(rope_parameters=longrope(4, original_max_position_embeddings=8)),
    "llama_longrope_attention_factor": lambda: llama(rope_parameters=longrope(
        4, original_max_position_embeddings=8, attention_factor=1.25)),
    "phi3_longrope": lambda: phi3(original_max_position_embeddings=8,
                                  rope_parameters=longrope(2, partial_rotary_factor=0.5)),
    "phi3_longrope_short": lambda: phi3(original_max_position_embeddings=32,
                                        rope_parameters=longrope(2, partial_rotary_factor=0.5)),
    # the 9-token prompt is within 12; generation crosses it on the 4th new token
    "llama_longrope_crossing": lambda: llama(rope_parameters=longrope(4, original_max_position_embeddings=12)),
    "phi3_longrope_crossing": lambda: phi3(original_max_position_embeddings=12,
                                           rope_parameters=longrope(4, partial_rotary_factor=1.0)),
}


@pytest.mark.parametrize("case", list(CASES))
@torch.no_grad()
def test_family(case, tmp_path):
    hf = CASES[case]()
    z = from_transformers(hf)
    rc = z.spec.stack("decoder").positions.config
    assert rc.scaling in case
    cert = assert_decoder_parity(hf, z, reset=fresh, check_greedy=False)
    r, o = greedy("decoder", fresh(hf), z)
    if case == "phi3_longrope_crossing":  # transformers' Phi-3 drops its cache at the switch: zoo without one
        src, am, _ = padded(left=True)
        o = z.generate(src, max_new_tokens=6, attention_mask=am, use_cache=False)
    assert torch.equal(r, o)
    back = assert_back_to_transformers(hf, z, reset=fresh, atol=1e-6)
    assert back.config.rope_parameters["rope_type"] == hf.config.rope_parameters["rope_type"]
    assert back.config.max_position_embeddings == hf.config.max_position_embeddings
    assert_saved_and_folder(hf, z, tmp_path, cert)


def test_dynamic_context_is_factor_times_longer():
    """Dynamic NTK exists to run past max_position_embeddings: zoo's max_len is factor times it, and the
    threshold stays in original_max_len."""
    z = from_transformers(CASES["llama_dynamic"](), certify=False)
    rc = z.spec.stack("decoder").positions.config
    assert (z.spec.max_len, rc.original_max_len, rc.factor) == (32, 8, 4.0)


# ---------------------------------------------------------------------- the tables themselves
@pytest.mark.parametrize("case", ["llama_dynamic", "gpt_neox_dynamic", "llama_longrope",
                                  "llama_longrope_attention_factor", "phi3_longrope"])
@pytest.mark.parametrize("length", [3, 8, 9, 20])
@torch.no_grad()
def test_cos_sin_equal_transformers_rotary_module(case, length):
    hf = CASES[case]()
    z = from_transformers(hf, certify=False)
    rope = z.decoder.positions
    emb = hf.gpt_neox.rotary_emb if hasattr(hf, "gpt_neox") else hf.model.rotary_emb
    pos = torch.arange(length)[None]  # (1, T)
    cos_hf, sin_hf = fresh(hf) and emb(torch.zeros(1, dtype=torch.float32), pos)  # (1, T, rot)
    cos, sin = rope.qk_state(pos)  # (1, 1, T, rot/2)
    half = cos.size(-1)
    assert cos_hf.size(-1) == 2 * half
    assert (cos[:, 0] - cos_hf[..., :half]).abs().max() <= 1e-6
    assert (sin[:, 0] - sin_hf[..., :half]).abs().max() <= 1e-6
    rc = rope.config
    plain = torch.outer(torch.arange(length, dtype=torch.float32), 1.0 / rc.base ** (
        torch.arange(0, 2 * half, 2, dtype=torch.float32) / (2 * half)))
    differs = (cos[0, 0] - plain.cos()).abs().max() > 1e-3
    # dynamic acts only past the original length; longrope always divides by its factors
    assert differs == (rc.scaling == "longrope" or length > rc.original_max_len)


@pytest.mark.parametrize("case", ["llama_dynamic", "phi3_longrope_crossing"])
@torch.no_grad()
def test_cached_steps_equal_transformers_cached_steps_across_the_switch(case):
    """A 5-token prompt, then one token at a time past the original length: every step's logits
    equal transformers' cached forward (keys cached before the switch keep their rotation)."""
    hf = fresh(CASES[case]())
    z = from_transformers(hf, certify=False)
    fresh(hf)
    ids = torch.randint(3, 101, (2, 16))
    want = hf(ids[:, :5], use_cache=True)
    pkv, steps = want.past_key_values, [want.logits]
    for t in range(5, 16):
        o = hf(ids[:, t:t + 1], past_key_values=pkv, use_cache=True)
        pkv = o.past_key_values
        steps.append(o.logits)
    cache = z.new_cache(16)
    got = [z(ids[:, :5], cache=cache)] + [z(ids[:, t:t + 1], cache=cache) for t in range(5, 16)]
    assert (torch.cat(got, 1) - torch.cat(steps, 1)).abs().max() <= TOL
    # past the switch a full forward rotates every key with the final length: not the cached result
    assert (z(ids) - torch.cat(got, 1)).abs().max() > 1e-4


@pytest.mark.parametrize("case,prompt", [("llama_longrope", 10), ("phi3_longrope_short", 4),
                                         ("llama_dynamic", 3)])
@torch.no_grad()
def test_cache_equals_full_forward_within_one_regime(case, prompt):
    """longrope past its original length from the first call, or any scaling within it: the cached
    decode equals the full forward."""
    z = from_transformers(CASES[case](), certify=False)
    rc = z.spec.stack("decoder").positions.config
    n = 16 if prompt > rc.original_max_len else rc.original_max_len  # stay on one side of the switch
    ids = torch.randint(3, 101, (2, n))
    cache = z.new_cache(n)
    got = [z(ids[:, :prompt], cache=cache)] + [z(ids[:, t:t + 1], cache=cache) for t in range(prompt, n)]
    assert (torch.cat(got, 1) - z(ids)).abs().max() <= TOL


def test_phi3_legacy_names_su_and_yarn_mean_longrope():
    hf = CASES["phi3_longrope"]()
    cfg = hf.config.to_dict()
    want, _, _ = convert_state(cfg, hf.state_dict())
    for legacy in ("su", "yarn"):
        rp = {k: v for k, v in cfg["rope_parameters"].items() if k != "rope_type"}
        spec, _, _ = convert_state({**cfg, "rope_parameters": {**rp, "type": legacy}}, hf.state_dict())
        assert spec["positions"] == want["positions"] and spec["positions"]["scaling"] == "longrope"


REFUSED = [
    (lambda: CASES["phi3_longrope"](), "rope_parameters", {"rope_type": "dynamic", "factor": 2.0}),
    (llama, "rope_parameters", longrope(3)),  # head_dim 8: four pairs
    (llama, "rope_parameters", {**longrope(4), "long_factor": [1.0, 1.0, 0.0, 1.0]}),  # a zero divisor
    (llama, "rope_parameters", {"rope_type": "dynamic", "rope_theta": 1e4}),  # no factor
    (llama, "rope_parameters", {"rope_type": "dynamic", "rope_theta": 1e4, "factor": -1.0}),
]


@pytest.mark.parametrize("make,field,value", REFUSED, ids=["phi3-dynamic", "longrope-length", "longrope-zero",
                                                           "dynamic-no-factor", "dynamic-negative"])
def test_refused_options_name_their_field(make, field, value):
    hf = make()
    convert_state(hf.config.to_dict(), hf.state_dict())
    with pytest.raises(ConvertError) as e:
        convert_state({**hf.config.to_dict(), field: value}, hf.state_dict())
    assert e.value.where.startswith(f"config.{field}")
    assert e.value.fix


def _families():
    from convert_cases import gemma, gemma2, mistral, qwen3
    from test_convert_modern import qwen2_moe, qwen3_moe
    from test_convert_olmoe import olmoe
    return {"qwen3": qwen3, "mistral": mistral, "gemma": gemma, "gemma2": gemma2, "qwen2_moe": qwen2_moe,
            "qwen3_moe": qwen3_moe, "olmoe": olmoe}


@pytest.mark.parametrize("kind", ["dynamic", "longrope"])
@pytest.mark.parametrize("family", ["qwen3", "mistral", "gemma", "gemma2", "qwen2_moe", "qwen3_moe", "olmoe"])
@torch.no_grad()
def test_every_llama_shaped_family_takes_both(family, kind):
    """The other families that read their rope through zoo/convert/llama.py: padded-batch logits and
    the round trip, with the scaling active (9 tokens past an original length of 8)."""
    make = _families()[family]
    head_dim = 16 if family in ("qwen3", "mistral", "gemma", "gemma2", "qwen3_moe") else 8
    if kind == "dynamic":
        hf = make(max_position_embeddings=8, rope_parameters={**DYNAMIC, "factor": 3.0})
    else:
        hf = make(rope_parameters=longrope(head_dim // 2, original_max_position_embeddings=8))
    z = from_transformers(hf)
    assert z.spec.stack("decoder").positions.config.scaling == kind
    ref, out, mask = run("decoder", fresh(hf), z)
    assert maxdiff(ref, out, mask) <= TOL and z.convert_info["parity"]["max_abs_diff"] <= TOL
    a, b = hf.state_dict(), to_transformers(z).state_dict()
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
