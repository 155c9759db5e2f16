"""Issue 36, goal 5: the source model's generation settings travel.

A transformers model's ``generation_config`` fields that change tokens (eos lists, pad and decoder
start ids, forced first / last tokens, banned words, suppressed tokens, no repeated n-grams, a
default ``max_length``, the beam knobs) are read at conversion (``from_transformers``,
``from_pretrained``), kept as ``model.generation_config`` and in the checkpoint, applied by greedy
decoding and beam search as defaults a call overrides, and written back by ``to_transformers``.

The references are transformers' own ``generate`` on random-weight models built from config
objects (tests/convert_cases.py: every tensor random, norm weights and biases included), each given
the generation config its family ships with -- Marian (``forced_eos_token_id``, ``bad_words_ids =
[[pad]]``, ``decoder_start_token_id = pad``), BART (``forced_bos`` / ``forced_eos``,
``no_repeat_ngram_size``, beams with ``length_penalty`` and ``early_stopping``), T5 (pad-started,
eos-stopped) and a Llama instruct config with an eos list -- and, rule by rule, values chosen from
the model's own unconstrained output so that every rule changes the tokens it is tested on.
"""
from __future__ import annotations

import json

import pytest
import torch

import zoo
from zoo.convert import ConvertError, from_pretrained, from_transformers, to_transformers

T = pytest.importorskip("transformers")
from convert_cases import V, bart, gpt2, llama, marian, padded, t5  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
NEW = 10


def _unconstrained(z, src, am=None, n=NEW):
    """zoo's greedy tokens with every generation-config rule switched off: the new tokens (B, n)."""
    off = dict(stop_tokens=[], forced_bos_id=None, forced_eos_id=None, bad_words=None,
               no_repeat_ngram_size=0)
    out = z.generate(src, n, attention_mask=am, **off) if am is not None else z.generate(src, n, **off)
    return out[:, -n:]


def _family(name):
    """(transformers model with its family's own generation config, zoo model, sources, mask)."""
    if name == "marian":  # opus-mt: eos 0, pad = decoder start = the last id, pad banned, eos forced
        hf = marian(seed=4)
        gc = dict(bos_token_id=0, eos_token_id=0, pad_token_id=V - 1, decoder_start_token_id=V - 1,
                  forced_eos_token_id=0, bad_words_ids=[[V - 1]], max_length=512, num_beams=4)
    elif name == "bart":  # bart-large-cnn's rules (its min_length is not applied: see NOT_APPLIED)
        hf = bart(seed=1)
        gc = dict(bos_token_id=0, eos_token_id=2, pad_token_id=1, decoder_start_token_id=2,
                  forced_bos_token_id=0, forced_eos_token_id=2, no_repeat_ngram_size=3, num_beams=4,
                  early_stopping=True, length_penalty=2.0, max_length=142)
    elif name == "t5":  # t5-small: starts with pad 0, stops at eos; here eos is an id this random
        hf = t5()      # model produces mid-sequence, so that rows stop at different steps
        src = padded()[0]
        free = _unconstrained(from_transformers(hf, certify=False), src)
        gc = dict(decoder_start_token_id=0, pad_token_id=0, eos_token_id=int(free[1, 4]))
    else:  # a Llama 3 style instruct config: an eos list, sampling settings (not applied)
        hf = llama()
        src, am, _ = padded(left=True)
        free = _unconstrained(from_transformers(hf, certify=False), src, am)
        gc = dict(bos_token_id=1, eos_token_id=[2, int(free[0, 3]), int(free[1, 6])], do_sample=True,
                  temperature=0.6, top_p=0.9)
    hf.generation_config = T.GenerationConfig(**gc)
    z = from_transformers(hf, certify=False)
    if name == "llama":
        src, am, _ = padded(left=True)  # left-padded prompts: rows stop at different steps
    else:
        src, am = padded()[0], None  # unpadded sources: BART's positions ignore padding in HF
    return hf, z, src, am


def _hf(hf, src, am, **kw):
    return hf.generate(input_ids=src, attention_mask=am, do_sample=False, **kw)


def _zoo(z, src, am, n, **kw):
    return z.generate(src, n, attention_mask=am, **kw) if am is not None else z.generate(src, n, **kw)


@pytest.mark.parametrize("name", ["marian", "bart", "t5", "llama"])
@pytest.mark.parametrize("beams", [1, 4])
@torch.no_grad()
def test_greedy_and_beam_tokens_are_transformers_with_the_models_own_generation_config(name, beams):
    hf, z, src, am = _family(name)
    ref = _hf(hf, src, am, max_new_tokens=NEW, num_beams=beams)
    out = _zoo(z, src, am, NEW, num_beams=beams)
    assert torch.equal(out, ref), (out.tolist(), ref.tolist())
    # the settings decide something here: without them zoo gives other tokens
    off = _zoo(z, src, am, NEW, num_beams=beams, stop_tokens=[], forced_bos_id=None, forced_eos_id=None,
               bad_words=None, no_repeat_ngram_size=0, length_penalty=1.0, early_stopping=False)
    assert off.shape != out.shape or not torch.equal(off, out)


@pytest.mark.parametrize("name", ["marian", "bart"])
@torch.no_grad()
def test_the_default_length_is_the_models_max_length_and_a_call_overrides_every_setting(name):
    hf, z, src, am = _family(name)
    hf.generation_config.max_length = z.generation_config["max_length"] = 7
    assert torch.equal(z.generate(src), hf.generate(input_ids=src, do_sample=False, num_beams=1))
    assert z.generate(src).shape[1] == 7
    # per call: the settings switched off on both sides, and a stop id of the call's own
    off = dict(forced_eos_token_id=None, forced_bos_token_id=None, bad_words_ids=None, no_repeat_ngram_size=0)
    ref = hf.generate(input_ids=src, max_new_tokens=NEW, do_sample=False, num_beams=1, eos_token_id=5, **off)
    out = z.generate(src, NEW, stop_tokens=5, forced_eos_id=None, forced_bos_id=None, bad_words=None,
                     no_repeat_ngram_size=0)
    assert torch.equal(out, ref)


def _rule_cases(free):
    """One generation-config rule per case, its value taken from the unconstrained tokens ``free``
    (B, NEW) so that it changes them: (transformers' field, value, zoo's option)."""
    first = int(free[0, 0])
    later = int(free[0, 2])
    a, b = int(free[1, 1]), int(free[1, 2])  # a bigram row 1 produces
    unused = next(t for t in range(3, V) if t not in free.flatten().tolist())
    return [("bad_words_ids", [[later]], "bad_words"), ("bad_words_ids", [[a, b]], "bad_words"),
            ("suppress_tokens", [later], "suppress_tokens"),
            ("begin_suppress_tokens", [first], "begin_suppress_tokens"),
            ("forced_bos_token_id", unused, "forced_bos_id"), ("forced_eos_token_id", unused, "forced_eos_id"),
            ("no_repeat_ngram_size", 2, "no_repeat_ngram_size"), ("eos_token_id", [later, a], "stop_tokens")]


@pytest.mark.parametrize("kind", ["encoder_decoder", "decoder"])
@pytest.mark.parametrize("beams", [1, 3])
@torch.no_grad()
def test_every_rule_alone_gives_transformers_tokens(kind, beams):
    """Each field of zoo.io.generation_config.FIELDS that is a rule, alone in the model's
    generation config: the tokens of transformers' generate, greedy and with beams, and not the
    tokens without it.  Decoder prompts are one token long here (``forced_bos_token_id`` acts only
    then) and unpadded (transformers counts left padding into n-grams, zoo does not)."""
    if kind == "decoder":
        hf, src = llama(), torch.tensor([[5], [17], [40]])
    else:
        hf, src = bart(seed=1), padded()[0]
    start = {"decoder_start_token_id": 2} if kind != "decoder" else {}
    # pad 1 (BART's): transformers' beam search fills finished rows with `pad or eos`, eos for a pad of 0
    hf.generation_config = T.GenerationConfig(pad_token_id=1, **start)
    free = _unconstrained(from_transformers(hf, certify=False), src)
    checked = 0
    for field, value, option in _rule_cases(free):
        hf.generation_config = T.GenerationConfig(pad_token_id=1, **{field: value}, **start)
        z = from_transformers(hf, certify=False)
        assert z.generation_config[field] == value
        ref = hf.generate(input_ids=src, max_new_tokens=NEW, do_sample=False, num_beams=beams)
        out = z.generate(src, NEW, num_beams=beams)
        assert torch.equal(out, ref), (field, value, out.tolist(), ref.tolist())
        without = z.generate(src, NEW, num_beams=beams, **{option: None if option != "no_repeat_ngram_size" else 0})
        changed = without.shape != out.shape or not torch.equal(without, out)
        checked += changed
        if beams == 1:  # greedy: every rule, its value chosen from the greedy tokens, bites
            assert changed, (field, value)
    assert checked >= 4


@torch.no_grad()
def test_convert_save_load_generate_and_back_to_transformers(tmp_path):
    """convert -> zoo.save -> zoo.load keeps the settings and the tokens; to_transformers writes the
    same generation config and special ids; the save_pretrained folder converts to the same
    settings without transformers' objects."""
    for name in ("marian", "bart", "llama"):
        hf, z, src, am = _family(name)
        want = {k: v for k, v in hf.generation_config.to_diff_dict().items()
                if k in zoo.io.generation_config.FIELDS}
        assert z.generation_config == want
        zoo.save(z, tmp_path / name)
        z2 = zoo.load(tmp_path / name)
        assert z2.generation_config == want
        for beams in (1, 3):
            assert torch.equal(_zoo(z2, src, am, NEW, num_beams=beams), _zoo(z, src, am, NEW, num_beams=beams))
        zoo.save(z2, tmp_path / f"{name}_again")  # a loaded checkpoint hands its settings on
        assert zoo.load(tmp_path / f"{name}_again").generation_config == want
        back = to_transformers(z2)
        back.set_attn_implementation(hf.config._attn_implementation)  # the same kernels
        got = {k: v for k, v in back.generation_config.to_diff_dict().items()
               if k in zoo.io.generation_config.FIELDS}
        assert got == want
        for k in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
            assert getattr(back.config, k, None) == want.get(k), (name, k)
        for beams in (1, 3):  # the rules came back (the strategy, num_beams, is the caller's)
            assert torch.equal(_hf(back, src, am, max_new_tokens=NEW, num_beams=beams),
                               _hf(hf, src, am, max_new_tokens=NEW, num_beams=beams))
        hf.save_pretrained(tmp_path / f"{name}_hf")
        z3 = from_pretrained(tmp_path / f"{name}_hf")
        assert z3.generation_config == want
        assert "num_beams" in z3.convert_info.get("generation_config_not_applied", []) or name == "llama"


@torch.no_grad()
def test_a_placeholder_special_id_outside_the_vocabulary_is_left_out_and_never_written_back():
    """Every GPT2Config says bos = eos = 50256: on a 101-id vocabulary transformers derives that
    into the generation config.  zoo leaves it out, says so, and to_transformers writes no id
    outside the vocabulary -- the model's own ids when it has them."""
    hf = gpt2()
    z = from_transformers(hf, certify=False)
    notes = z.convert_info["generation_config_not_applied"]
    assert any(n.startswith("bos_token_id=50256") for n in notes) and not hasattr(z, "generation_config")
    back = to_transformers(z)
    assert back.config.bos_token_id is None and back.config.eos_token_id is None
    assert back.generation_config.bos_token_id is None
    hf = gpt2(bos_token_id=0, eos_token_id=0)  # a model whose bos is 0
    z = from_transformers(hf, certify=False)
    assert z.generation_config == {"bos_token_id": 0, "eos_token_id": 0}
    back = to_transformers(z)
    assert back.config.bos_token_id == 0 and back.generation_config.bos_token_id == 0


@pytest.mark.parametrize("field, value, what", [
    ("forced_eos_token_id", "2", "token id"), ("forced_eos_token_id", V, "outside the vocabulary"),
    ("eos_token_id", [2, 500], "outside the vocabulary"), ("eos_token_id", True, "token id"),
    ("bad_words_ids", [5], "lists of token ids"), ("bad_words_ids", [[5, -1]], "outside the vocabulary"),
    ("suppress_tokens", 3.5, "list of token ids"), ("no_repeat_ngram_size", -1, "integer"),
    ("max_length", 0, "integer >= 1"), ("length_penalty", "long", "finite number"),
    ("early_stopping", 1, "true or false"), ("repetition_penalty", 50.0, "repetition_penalty"),
    ("decoder_start_token_id", 1000, "outside the vocabulary"),
])
def test_a_bad_generation_config_value_is_a_convert_error_naming_the_field(tmp_path, field, value, what):
    hf = marian()
    hf.save_pretrained(tmp_path)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 0, field: value}))
    with pytest.raises(ConvertError, match=what) as info:
        from_pretrained(tmp_path)
    assert info.value.where == f"generation_config.{field}" and info.value.fix


def test_a_tampered_checkpoint_setting_is_a_checkpoint_error(tmp_path):
    hf, z, _, _ = _family("marian")
    zoo.save(z, tmp_path / "ck", metadata={"generation_config": {"forced_eos_token_id": 10**6}})
    with pytest.raises(zoo.CheckpointError, match="outside the vocabulary") as info:
        zoo.load(tmp_path / "ck")
    assert info.value.where.endswith("zoo.extra.generation_config.forced_eos_token_id")
    with pytest.raises(zoo.ZooError, match="outside the vocabulary") as info:  # per call too
        z.generate(padded()[0], 3, forced_eos_id=V)
    assert info.value.where == "generate.forced_eos_id[0]"
