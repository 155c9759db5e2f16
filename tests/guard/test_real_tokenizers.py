"""The tokenizer-file rules on real tokenizers (issue 36): every published tokenizer we can get from
the package registry (tests/real_models.py) is accepted and encodes exactly as the tokenizers library
does, and a hostile edit of the same real file is still refused -- the rules read a file by its schema
(where patterns can occur), so a vocabulary entry spelled "Regex" is a word.

- Gemma 3 270M and SmolLM2-135M: the tokenizer zoo.convert.gguf rebuilds from the GGUF file;
- DeepSeek-V4: its published tokenizer.json (a byte-level BPE, three Split regexes in a Sequence);
- AI21 Jurassic-2: its SentencePiece model, made a tokenizer.json by the library's own
  ``SentencePieceUnigramTokenizer.from_spm`` (a precompiled normalizer, a Unigram vocabulary).

Before: Gemma's and DeepSeek's files were refused (``the regex 69386 at model.vocab.Regex is not a
string (int)``)."""
from __future__ import annotations

import json
import sys

import pytest

import real_models
import zoo
from zoo.guard.tokenizer_files import check_tokenizer_json

tokenizers = pytest.importorskip("tokenizers")
pytestmark = pytest.mark.slow  # fetched from the registry once; Gemma's 262,144-token file takes seconds

SAMPLES = ["Regex patterns: ünïcödé, 数字 12345,   spaces and\ttabs.\n", "The capital of France is",
           "  leading spaces", "emoji 🦁 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "def f(x):\n    return x ** 2  # comment"]


def _gguf(name: str) -> str:
    from zoo.convert.gguf import GGUFFile, hf_config, tokenizer_json

    g = GGUFFile(real_models.gguf_path(name))
    _, arch, _ = hf_config(g)
    return tokenizer_json(g, arch)


def _ai21() -> str:
    import sentencepiece.sentencepiece_model_pb2 as pb
    from tokenizers.implementations import SentencePieceUnigramTokenizer

    sys.modules.setdefault("sentencepiece_model_pb2", pb)  # the module name from_spm imports
    return SentencePieceUnigramTokenizer.from_spm(str(real_models.tokenizer_file("ai21-j2"))).to_str()


SOURCES = {
    "gemma3-270m (GGUF)": lambda: _gguf("gemma3-270m"),
    "smollm2-135m (GGUF)": lambda: _gguf("smollm2-135m"),
    "deepseek-v4 (tokenizer.json)": lambda: real_models.tokenizer_file("deepseek-v4").read_text("utf-8"),
    "ai21-j2 (SentencePiece)": _ai21,
}
_CACHE: dict[str, tuple] = {}


def real(name: str) -> tuple[str, dict, object]:
    """The file's text, its parsed JSON and zoo's tokenizer of it (made once per run)."""
    if name not in _CACHE:
        text = SOURCES[name]()
        _CACHE[name] = text, json.loads(text), zoo.tokenizer("hf", json=text)
    return _CACHE[name]


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_real_tokenizer_is_accepted_and_encodes_as_the_library_does(name):
    text, _, ours = real(name)  # zoo.tokenizer ran check_tokenizer_json on it
    ref = tokenizers.Tokenizer.from_str(text)
    for s in SAMPLES:
        assert ours.encode(s) == ref.encode(s, add_special_tokens=False).ids, s


@pytest.mark.parametrize("name, token", [("gemma3-270m (GGUF)", 69386), ("deepseek-v4 (tokenizer.json)", 115011)])
def test_a_vocabulary_entry_spelled_regex_is_a_word(name, token):
    """The entries the old rules read as patterns (``model.vocab.Regex``)."""
    _, data, ours = real(name)
    assert data["model"]["vocab"]["Regex"] == token
    assert ours.encode("Regex") == [token]


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_hostile_edit_of_a_real_file_is_still_refused(name):
    """The same real file, with a backtracking pattern put where the library compiles one (a Split
    appended to its pre-tokenizer, nested in a Sequence) and, separately, an expanding Replace
    appended to its normalizer: both refused."""
    data = real(name)[1]
    split = {"type": "Split", "pattern": {"Regex": "(a+)+b"}, "behavior": "Isolated", "invert": False}
    hostile = dict(data, pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Sequence", "pretokenizers": [p for p in [data.get("pre_tokenizer"), split] if p]}]})
    with pytest.raises(zoo.TokenizerError, match="several ways"):
        check_tokenizer_json(json.dumps(hostile))
    grow = {"type": "Replace", "pattern": {"String": "e"}, "content": "x" * 100}
    hostile = dict(data, normalizer={"type": "Sequence", "normalizers": [
        p for p in [data.get("normalizer"), grow] if p]})
    with pytest.raises(zoo.TokenizerError, match="normalizer can turn one character into 100"):
        check_tokenizer_json(json.dumps(hostile))
