"""Input contracts (issue 23): a checkpoint declares the text it was made for, and every text entry
point refuses what lies outside it; tokenizers report unknown characters.

References nobody here wrote: ``cn2an`` for the numerals the model must still write after a
normalised prompt, Python's ``re`` for what a pattern admits, and the tokenizer's own vocabulary
for which characters are unknown.
"""
from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import zoo
from zoo.run.input_contract import META_KEY, InputContract, InputError, InputWarning, contract_of, unknown_characters
from zoo.run.generate import generate_text, stream_text

ROOT = Path(__file__).resolve().parents[2]
NUMERALS_REFUSED = ["100000000", "123456789", "-5", "1.5", "00012", "abc", "1,000", "", "4 2"]


@pytest.fixture(scope="module")
def numerals():
    return zoo.load("numerals_t5")


@pytest.fixture(scope="module")
def poet():
    return zoo.load("poet_gpt")


@pytest.fixture(scope="module")
def bert():
    return zoo.load("poet_bert")


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args, **kwargs)
    return out, [str(w.message) for w in caught if issubclass(w.category, InputWarning)]


# ---------------------------------------------------------------------- numerals_t5
@pytest.mark.parametrize("prompt", NUMERALS_REFUSED)
def test_numerals_refuses_input_outside_0_to_99999999(numerals, prompt):
    for call in (lambda: numerals.generate(prompt), lambda: generate_text(numerals, prompt),
                 lambda: list(stream_text(numerals, prompt))):
        with pytest.raises(InputError) as err:
            call()
        msg = str(err.value)
        assert "numerals_t5's input contract" in msg and "0 to 99,999,999" in msg, msg
        assert "'10086'" in msg, msg  # a valid example


def test_numerals_normalises_spaces_and_full_width_digits_with_a_note(numerals):
    import cn2an

    for prompt, number in ((" 42 ", 42), ("１００８６", 10086), ("\t7\n", 7)):
        out, notes = _quiet(numerals.generate, prompt)
        assert out == cn2an.an2cn(number), (prompt, out)
        assert len(notes) == 1 and f"as '{number}'" in notes[0], notes


def test_numerals_admits_the_whole_range_without_a_note(numerals):
    import cn2an

    for n in (0, 7, 10086, 99_999_999):
        out, notes = _quiet(numerals.generate, str(n))
        assert out == cn2an.an2cn(n) and notes == [], (n, out, notes)


# ---------------------------------------------------------------------- the poem models
@pytest.mark.parametrize("prompt", ["hello", "10086", "床前明月光 hi"])
def test_poet_gpt_refuses_text_that_is_not_chinese(poet, prompt):
    with pytest.raises(InputError, match="poet_gpt's input contract.*'床前明月光，'"):
        poet.generate(prompt, 4)


def test_poet_bert_refuses_through_fill_mask_and_answers_its_example(bert):
    with pytest.raises(InputError, match="poet_bert's input contract"):
        zoo.fill_mask(bert, "hello <mask>")
    example = contract_of(bert).example
    assert zoo.fill_mask(bert, example)[0][0]["text"] == "啼"  # 春眠不觉晓，处处闻啼鸟。


def test_shipped_checkpoints_declare_their_contract_and_the_card_shows_it():
    for name in ("poet_gpt", "poet_bert", "numerals_t5"):
        meta = zoo.read_metadata(name)
        contract = InputContract.from_json(meta[META_KEY])
        card = (ROOT / "checkpoints" / name / "README.md").read_text(encoding="utf-8")
        assert contract.summary() in card, name
        assert contract_of(zoo.load(name)) == contract


# ---------------------------------------------------------------------- unknown characters
@pytest.fixture(scope="module")
def tiny_char():
    """A decoder with a char tokenizer over 'abcdefgh' and no contract."""
    tok = zoo.tokenizer("char", text="abcdefgh")
    model = zoo.build("gpt_tiny", seed=0, num_layers=1, vocab_size=tok.vocab_size, max_len=32)
    model.tokenizer = tok
    return model


def test_unknown_characters_are_those_the_tokenizer_encodes_as_unk(tiny_char):
    tok = tiny_char.tokenizer
    text = "abxyc<mask>z"
    got, counted = unknown_characters(tok, text)
    expect = [c for c in text.replace("<mask>", "") if c not in "abcdefgh"]
    assert got == expect and counted == len(text) - len("<mask>")
    assert all(tok.encode(c) == [tok.unk_id] for c in got)
    assert unknown_characters(zoo.tokenizer("byte"), "你好 abc") == ([], 6)  # bytes know everything


def test_a_prompt_mostly_unknown_is_refused_and_some_unknown_warns(tiny_char):
    with pytest.raises(InputError, match="3 of the 4 characters.*unknown"):
        tiny_char.generate("axyz", 2)
    out, notes = _quiet(tiny_char.generate, "abcx", 2)
    assert isinstance(out, str) and len(notes) == 1 and "1 of 4" in notes[0] and "'x'" in notes[0]
    out, notes = _quiet(tiny_char.generate, "abcd", 2)
    assert notes == []


def test_a_contract_saved_with_a_model_comes_back(tmp_path, tiny_char):
    contract = {"description": "letters a to h", "pattern": "[a-h]+", "example": "abc"}
    zoo.save(tiny_char, tmp_path / "m", metadata={"input_contract": contract})
    again = zoo.load(tmp_path / "m")
    assert contract_of(again).to_json() == contract
    with pytest.raises(InputError, match="letters a to h.*characters outside it: 'A'"):
        again.generate("abA", 2)
    assert isinstance(again.generate("abc", 2), str)
    zoo.save(again, tmp_path / "m2")  # load -> save hands the contract on (zoo.io.checkpoint.CARRIED_EXTRAS)
    assert contract_of(zoo.load(tmp_path / "m2")).to_json() == contract


@pytest.mark.parametrize("bad, words", [
    ({"description": "x", "example": "a", "validator": {"name": "nope"}}, "unknown validator"),
    ({"description": "x", "example": "a", "pattern": "(a+)+"}, "backtrack"),
    ({"description": "x", "example": "a", "normalize": ["lower"]}, "unknown normalisation"),
    ({"description": "x", "example": "b", "pattern": "a"}, "own example"),
    ({"description": "x", "example": "1", "validator": {"name": "integer", "top": 3}}, "do not fit"),
    ({"example": "1"}, "'description'"),
    ("{not json", "not JSON"),
])
def test_malformed_contracts_are_input_errors(bad, words):
    with pytest.raises(InputError, match=words):
        InputContract.from_json(bad)


# ---------------------------------------------------------------------- zoo run
def _zoo(*args):
    return subprocess.run([sys.executable, "-m", "zoo.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_zoo_run_refuses_in_one_line_and_notes_on_stderr():
    bad = _zoo("run", "numerals_t5", "--prompt", "123456789")
    assert bad.returncode == 2 and bad.stdout == "", bad
    assert len(bad.stderr.strip().splitlines()) == 1 and "input contract" in bad.stderr
    ok = _zoo("run", "numerals_t5", "--prompt", " 42 ")
    assert ok.returncode == 0 and ok.stdout.strip() == "四十二", ok
    assert "note:" in ok.stderr and "as '42'" in ok.stderr
    gpt = _zoo("run", "poet_gpt", "--prompt", "hello", "-n", "4")
    assert gpt.returncode == 2 and gpt.stdout == "" and "input contract" in gpt.stderr, gpt


def test_input_error_is_a_zoo_error():
    assert issubclass(InputError, zoo.ZooError) and torch  # the CLI and the UI catch ZooError
