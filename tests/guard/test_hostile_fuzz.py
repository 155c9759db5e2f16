"""Property-based fuzzing (hypothesis) of the two surfaces with the most free-form input: specs and
generation options.  The property is issue 12's promise: whatever comes in, the answer is a result or
a ``ZooError`` -- never another exception -- and it comes quickly.  Example counts are fixed and
every example has a deadline, so the time is bounded (about 10-20 s on a shared 2-core box)."""
from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zoo
from zoo.guard.build_budget import resolve_budget
from zoo.run.generate import generate

FIELDS = ("arch", "vocab_size", "d_model", "num_layers", "num_heads", "max_len", "num_kv_heads",
          "head_dim", "d_ff", "dropout", "attn_scale", "qkv_bias", "tie_embeddings", "type_vocab_size",
          "pad_id", "head_scale", "attention", "mask", "positions", "norm", "ffn", "head", "encoder",
          "decoder", "name", "bogus")

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
                    st.sampled_from(["sdpa", "eager", "causal", "rope", "layernorm", "mlp", "decoder",
                                     "encoder", "encoder_decoder", "classifier", "t5_relative"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(["kind", "placement", "window",
                                                                  "num_buckets", "base", "x"]),
                                                 inner, max_size=3)), max_leaves=8)

FUZZ = settings(max_examples=150, deadline=2000, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _spec_or_zoo_error(raw):
    try:
        spec = zoo.spec(raw)
    except zoo.ZooError:
        return None
    return spec


@FUZZ
@given(preset=st.sampled_from(["gpt_tiny", "bert_tiny", "t5_tiny", "llama_tiny"]),
       changes=st.dictionaries(st.sampled_from(FIELDS), values, max_size=4))
def test_mutated_presets_parse_or_raise_zoo_error(preset, changes):
    raw = zoo.spec(preset).to_dict()
    raw.update(changes)
    spec = _spec_or_zoo_error(raw)
    if spec is not None:  # a valid spec: the budget check answers too (arithmetic, no building)
        assert spec.to_dict() == zoo.spec(spec.to_yaml()).to_dict()
        try:
            zoo.guard.build_budget.check(spec, budget=1e9)
        except zoo.SpecError as exc:
            assert exc.where and "budget" in str(exc)


@FUZZ
@given(text=st.text(max_size=300))
def test_any_text_parses_or_raises_zoo_error(text):
    _spec_or_zoo_error(text + "\n")


@FUZZ
@given(lines=st.lists(st.tuples(st.sampled_from(FIELDS), st.sampled_from(
    ["1", "0", "-1", "&a [1, 2]", "*a", "[*a, *a, *a]", "{kind: rope}", "~", ".nan", "!!binary x",
     "'x'", "[[[[[]]]]]", "2020-13-40", "1e999", "{<<: *a}", "|\n  text"])), max_size=8))
def test_yaml_line_soup_parses_or_raises_zoo_error(lines):
    _spec_or_zoo_error("".join(f"{k}: {v}\n" for k, v in lines))


@pytest.fixture(scope="module")
def model():
    return zoo.build("gpt_tiny", num_layers=1, d_model=16, num_heads=2, vocab_size=64, max_len=32,
                     seed=0)


option_values = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                          st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=3),
                          st.lists(st.integers(min_value=-5, max_value=100), max_size=3))


@settings(max_examples=300, deadline=3000, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(options=st.dictionaries(st.sampled_from(
    ["max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop_tokens", "decoder_start_id",
     "pad_id", "prefix_length", "vocab_limit", "do_sample", "use_cache"]), option_values, max_size=4),
    ids=st.one_of(st.lists(st.integers(min_value=-3, max_value=70), max_size=4),
                  st.lists(st.lists(st.integers(min_value=0, max_value=63), max_size=3), max_size=2)))
def test_generation_options_work_or_raise_zoo_error(model, options, ids):
    if isinstance(options.get("max_new_tokens"), int) and options["max_new_tokens"] > 8:
        options["max_new_tokens"] = 8  # bounded work: long runs are not what is being fuzzed
    options.setdefault("max_new_tokens", 2)
    try:
        out = generate(model, ids, **options)
    except zoo.ZooError as exc:
        assert exc.where and exc.where.startswith(("generate.", "model.", "tokenizer"))
        return
    assert out.dtype.is_floating_point is False and int(out.min()) >= 0


def test_the_budget_option_itself_is_checked():
    for bad in (-1, 0, math.nan, "64GB", True):
        with pytest.raises(zoo.SpecError, match="budget"):
            resolve_budget(bad)
