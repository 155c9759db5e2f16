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
    except zoo.errors.ZooInternalError:  # a bug the API's boundary caught: fail
        raise
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
    except zoo.errors.ZooInternalError:  # a bug the API's boundary caught: fail
        raise
    except zoo.ZooError as exc:
        assert exc.where and exc.where.startswith(("generate.", "model.", "tokenizer"))
        return
    assert out.dtype.is_floating_point is False and int(out.min()) >= 0


def test_the_budget_option_itself_is_checked():
    for bad in (-1, 0, math.nan, "64GB", True):
        with pytest.raises(zoo.SpecError, match="budget"):
            resolve_budget(bad)


# ---------------------------------------------------------------------- issue 35: the new surfaces
@settings(max_examples=200, deadline=3000, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(options=st.dictionaries(st.sampled_from(
    ["num_beams", "num_return_sequences", "no_repeat_ngram_size", "vocab_limit", "suppress_tokens",
     "bad_words", "begin_suppress_tokens", "forced_eos_id", "stop_tokens", "do_sample", "length_penalty",
     "early_stopping", "repetition_penalty"]),
    st.one_of(option_values, st.integers(min_value=1, max_value=4),
              st.lists(st.lists(st.integers(min_value=0, max_value=63), min_size=1, max_size=2), max_size=70),
              st.lists(st.integers(min_value=0, max_value=63), min_size=50, max_size=64)), max_size=5),
    ids=st.lists(st.integers(min_value=0, max_value=63), min_size=1, max_size=4))
def test_beam_and_rule_options_work_or_raise_zoo_error(model, options, ids):
    """Beams, vocabulary limits, n-gram bans, banned and suppressed ids and stop tokens together (the
    combinations that were 'selected index k out of range' and 'probability tensor contains inf'):
    a result whose new tokens obey vocab_limit and suppress_tokens, or a ZooError."""
    options.update(max_new_tokens=4, seed=0)
    try:
        out = generate(model, ids, **options)
    except zoo.errors.ZooInternalError:  # a bug the API's boundary caught: fail
        raise
    except zoo.ZooError as exc:
        assert exc.where and exc.where.startswith(("generate.", "model.", "tokenizer"))
        return
    new = out[..., len(ids):].flatten().tolist() if out.dim() == 2 else []
    stops = set(options.get("stop_tokens") or []) if isinstance(options.get("stop_tokens"), list) else set()
    limit = options.get("vocab_limit")
    if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1 and not stops:
        assert all(t < limit for t in new), (new, limit)
    banned = options.get("suppress_tokens")
    if isinstance(banned, list) and not stops:
        assert not set(new) & set(banned), (new, banned)


@settings(max_examples=300, deadline=2000, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=0, max_value=400),
       edits=st.lists(st.tuples(st.integers(min_value=0, max_value=399), st.integers(min_value=0, max_value=255)),
                      max_size=6),
       grow=st.sampled_from([None, 0xFF, 0x7F, 0x10]))
def test_mutated_gguf_headers_are_refused_quickly(tmp_path_factory, cut, edits, grow):
    """A small valid GGUF file (metadata of every value type, two tensors), cut, with bytes
    overwritten or a count byte set high: a ConvertError or a model, quickly, without memory
    growth -- the reader budgets every count against the file (zoo.convert.gguf_header)."""
    import resource
    import time

    pytest.importorskip("gguf")
    from zoo.convert import from_gguf

    data = bytearray(_small_gguf(tmp_path_factory))
    for at, value in edits:
        if at < len(data):
            data[at] = value
    if grow is not None:
        for at in (16, 23, 31):  # the high bytes of the two counts and of the first string length
            data[at] = grow
    p = tmp_path_factory.mktemp("fuzz") / "m.gguf"
    p.write_bytes(bytes(data[:len(data) - cut]))
    before, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter()
    try:
        from_gguf(p)
    except zoo.errors.ZooInternalError:  # a bug the API's boundary caught: fail
        raise
    except zoo.ZooError:
        pass
    assert time.perf_counter() - t0 < 2
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024 < 256 << 20


_GGUF: list = []


def _small_gguf(factory) -> bytes:
    if not _GGUF:
        import gguf
        import numpy as np

        p = factory.mktemp("gguf") / "small.gguf"
        w = gguf.GGUFWriter(str(p), "llama")
        w.add_name("fuzz")
        w.add_block_count(1)
        w.add_context_length(16)
        w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
        w.add_bool("x.flag", True)
        w.add_token_list(["<unk>", "a", "b", "ab"])
        w.add_token_merges(["a b"])
        w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
        w.add_tensor("blk.0.attn_norm.weight", np.ones(8, np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        _GGUF.append(p.read_bytes())
    return _GGUF[0]
