"""Issue 35: hostile prompts and patterns against the input contracts (zoo.run.input_contract).

- a numeral prompt of 4,301 digits was Python's own ``ValueError`` (``int()`` refuses strings past
  4,300 digits): the validator compares lengths first;
- the poem models' pattern ``[\\s...]`` admitted the separators ``\\x1c``-``\\x1f`` (and ``\\x85``) as
  "Chinese text", because Python's ``\\s`` matches them: no contract admits control characters;
- nested *bounded* repeats (``(?:(?:a|aa){16}){16}``) passed the backtracking check, each bound alone
  being small, and hung ``re``: bounds multiply (zoo.guard.tokenizer_files.regex_hazard).
"""
from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

import zoo
from zoo.guard.tokenizer_files import regex_hazard
from zoo.run.input_contract import InputContract, InputError, admit

NESTED = "(?:(?:a|aa){16}){16}"


@pytest.fixture(scope="module")
def numerals():
    return zoo.load("numerals_t5")


@pytest.fixture(scope="module")
def poet():
    return zoo.load("poet_gpt")


@pytest.mark.parametrize("digits", [4301, 10_000, 100_000])
def test_a_numeral_prompt_of_thousands_of_digits_is_an_input_error(numerals, digits):
    with pytest.raises(InputError, match=f"a number of {digits:,} digits is outside the range 0 to 99,999,999"):
        admit(numerals, numerals.tokenizer, "1" * digits)
    with pytest.raises(InputError):
        numerals.generate("9" * digits)


def test_length_first_keeps_the_answers_of_int():
    """Against int() itself where it can read the number: the same verdicts, for bounds of any size."""
    def verdict(text, **bounds):
        c = InputContract.from_json({"description": "n", "example": "5",
                                     "validator": {"name": "integer", **bounds}})
        return c._refusal(text, ())

    assert verdict("1" * 5000, min=0) is None  # no upper bound: a long number is in range
    assert "below" in verdict("-" + "1" * 5000, min=-10)
    for text in ["99999999", "100000000", "-100", "-99", "12345678901234567890"]:
        for bounds in ({"min": 0, "max": 99_999_999}, {"min": -100, "max": 10**19}, {"min": -99}):
            want = bounds["min"] <= int(text) <= bounds.get("max", int(text)) and not (
                text.startswith("-") and bounds["min"] >= 0)
            assert (verdict(text, **bounds) is None) == want, (text, bounds)


@pytest.mark.parametrize("char", ["\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\x0b", "\x0c", "\x00", "\x7f"])
def test_control_characters_are_outside_every_contract(poet, char):
    import re

    pattern = InputContract.from_json(poet.checkpoint_metadata["zoo.extra.input_contract"]).pattern
    if char not in "\x00\x7f":
        assert re.fullmatch(pattern, char), "Python's \\s matches it: the pattern alone admits it"
    with pytest.raises(InputError, match="control characters"):
        admit(poet, poet.tokenizer, f"床前{char}明月光，")


def test_tab_newline_and_return_stay_text(poet):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert admit(poet, poet.tokenizer, "床前明月光，\n疑是\t地上霜。\r") == "床前明月光，\n疑是\t地上霜。\r"


def test_nested_bounded_repeats_are_refused_and_really_hang_python_re():
    assert "256 times" in regex_hazard(NESTED)
    with pytest.raises(InputError, match="nested quantifiers") as e:
        InputContract.from_json({"description": "x", "example": "a", "pattern": NESTED})
    assert e.value.where.endswith(".pattern")
    # the reference: Python's re itself on a near-miss does not finish in 3 s
    code = f"import re; re.fullmatch({NESTED!r}, 'a' * 300 + 'b')"
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([sys.executable, "-c", code], timeout=3)


@pytest.mark.parametrize("pattern", ["(a|aa){16}", r"\p{N}{1,3}", "[a-z]{100}", "((ab){8}){8}",
                                     "(?:x?){4}(?:y|z){4}"])
def test_bounded_repeats_within_the_limit_stay_accepted(pattern):
    assert regex_hazard(pattern) is None


def test_published_tokenizer_patterns_stay_accepted():
    from test_trust_tokenizer_files import REAL

    assert all(regex_hazard(p) is None for p in REAL.values())
