"""Issue 22, goal 5: tokenizer files are checked for what their rules can do before the library runs
them, a panic inside the ``tokenizers`` library is a ``TokenizerError``, stored tokenizers are read
by type, and a tokenizer path must be a regular file (stat before open)."""
from __future__ import annotations

import json
import os
import resource
import threading
import time

import pytest

import zoo
from zoo.guard.tokenizer_files import (MAX_EXPANSION, check_tokenizer_json, library_call, min_width,
                                 regex_hazard)
from zoo.io.tokenizers import from_json, tokenizer

tokenizers = pytest.importorskip("tokenizers")


def _file(pre_tokenizer=None, normalizer=None, decoder=None) -> str:
    """A small WordLevel tokenizer.json written by the library itself, with the given rules."""
    from tokenizers import Tokenizer, models

    tok = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    if pre_tokenizer is not None:
        tok.pre_tokenizer = pre_tokenizer
    if normalizer is not None:
        tok.normalizer = normalizer
    if decoder is not None:
        tok.decoder = decoder
    return tok.to_str()


def _split(pattern: str):
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Split(Regex(pattern), "isolated")


# ---------------------------------------------------------------------- regexes
REAL = {  # pre-tokenizer patterns of published tokenizers: all accepted
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
              r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "digits": r"\p{N}{1,3}", "spaces": r" {2,}", "posix class": r"[[:alpha:]]+",
}
BACKTRACKING = ["(a+)+b", "(a|aa)*c", r"(\w+\s?)*$", "(a*)*b", "(?:x?y?)+z", r"(a*)\1",
                "(a{1,100})+b", r"(?:(?:a|b)+)+c", r"(\p{L}+ ?)+!"]


@pytest.mark.parametrize("name", sorted(REAL))
def test_published_patterns_are_accepted(name):
    assert regex_hazard(REAL[name]) is None
    tok = tokenizer("hf", json=_file(_split(REAL[name])))
    ids = tok.encode("a b " * 1000 + "c")  # a long near-miss input runs quickly
    assert ids and all(isinstance(i, int) for i in ids)


@pytest.mark.parametrize("pattern", BACKTRACKING)
def test_backtracking_patterns_are_refused_before_use(pattern):
    assert regex_hazard(pattern)
    t0 = time.perf_counter()
    with pytest.raises(zoo.TokenizerError, match="backreference|several ways") as info:
        tokenizer("hf", json=_file(_split(pattern)))
    assert time.perf_counter() - t0 < 1.0
    assert "pre_tokenizer.pattern.Regex" in str(info.value)


def test_the_refused_pattern_really_backtracks_in_the_library():
    """The reference nobody here wrote: the tokenizers library itself, given ``(a+)+b`` and a
    30-character near-match, panics (Oniguruma's retry limit) -- the failure the check prevents."""
    from tokenizers import Tokenizer

    raw = Tokenizer.from_str(_file(_split("(a+)+b")))
    with pytest.raises(BaseException) as info:
        raw.encode("a" * 30 + "c")
    assert type(info.value).__name__ == "PanicException"


def test_a_panic_inside_the_library_is_a_tokenizer_error():
    from tokenizers import Tokenizer

    raw = Tokenizer.from_str(_file(_split("(a+)+b")))
    with pytest.raises(zoo.TokenizerError, match="panicked while encoding"):
        library_call(raw.encode, "a" * 30 + "c", where="tokenizer.hf", what="encoding")
    with pytest.raises(KeyboardInterrupt):  # what is not the library's failure passes through
        library_call(lambda: (_ for _ in ()).throw(KeyboardInterrupt()), where="x", what="y")


@pytest.mark.parametrize("pattern, width", [("a", 1), ("a*", 0), ("(ab|c)d", 2), ("(?=x)", 0),
                                            ("x{3}", 3), (r"\p{L}+", 1), ("[ab]?c", 1), ("", 0)])
def test_min_width(pattern, width):
    assert min_width(pattern) == width


# ---------------------------------------------------------------------- expansion
def test_an_expanding_normalizer_is_refused_before_use():
    from tokenizers import normalizers

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    text = _file(normalizer=normalizers.Replace("a", "x" * 20_000))
    with pytest.raises(zoo.TokenizerError, match="20,000"):
        tokenizer("hf", json=text)
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) < 100 * 1024  # KiB


@pytest.mark.parametrize("rules, ok", [
    (lambda n: n.Replace("a", "x" * MAX_EXPANSION), True),
    (lambda n: n.Replace("a", "x" * (MAX_EXPANSION + 1)), False),
    (lambda n: n.Replace("ab", "x" * 20), True),  # 10 per character
    (lambda n: n.Sequence([n.Replace("a", "xxxx"), n.Replace("x", "yyyyy")]), False),  # 4 x 5
    (lambda n: n.Sequence([n.NFKC(), n.Lowercase(), n.Prepend("▁"), n.Replace(" ", "▁")]), True),
])
def test_expansion_is_the_product_over_the_chain(rules, ok):
    from tokenizers import normalizers

    text = _file(normalizer=rules(normalizers))
    if ok:
        tokenizer("hf", json=text)
    else:
        with pytest.raises(zoo.TokenizerError, match="normalizer can turn one character"):
            tokenizer("hf", json=text)


def test_an_empty_regex_match_counts_as_an_insertion_everywhere():
    from tokenizers import Regex, normalizers

    with pytest.raises(zoo.TokenizerError, match="normalizer"):
        tokenizer("hf", json=_file(normalizer=normalizers.Replace(Regex("x*"), "y" * 20)))


def test_an_expanding_decoder_is_refused_too():
    from tokenizers import decoders

    with pytest.raises(zoo.TokenizerError, match="decoder can turn one character"):
        tokenizer("hf", json=_file(decoder=decoders.Replace("a", "x" * 1000)))


# ---------------------------------------------------------------------- stored tokenizers, typed
GOOD_HF = None


@pytest.mark.parametrize("stored", [
    "{nope", "[1, 2]", "5", "null", '"text"', "[" * 100000, '{"kind": 5}', '{"kind": ["byte"]}',
    '{"kind": "byte", "data": []}', '{"kind": "byte", "data": {"specials": 5}}',
    '{"kind": "byte", "data": {"specials": [1, 2]}}', '{"kind": "byte", "data": {"specials": ["a", "a"]}}',
    '{"kind": "char", "data": {}}', '{"kind": "char", "data": {"chars": 5, "specials": []}}',
    '{"kind": "char", "data": {"chars": "ab", "specials": "xy"}}',
    '{"kind": "char", "data": {"chars": "ab", "specials": [null]}}',
    '{"kind": "hf", "data": {}}', '{"kind": "hf", "data": {"json": 5}}',
    '{"kind": "hf", "data": {"json": "{nope"}}', '{"kind": "hf", "data": {"json": "[]"}}',
    '{"kind": "hf", "data": {"json": "{\\"model\\": {\\"type\\": \\"Nope\\"}}"}}',
    '{"kind": "hf", "data": {"json": "{\\"model\\": 5}"}}',
    '{"kind": "nope", "plugin": [1], "version": {}}',
])
def test_from_json_with_garbage_is_a_tokenizer_error(stored):
    with pytest.raises(zoo.TokenizerError) as info:
        from_json(stored)
    assert info.value.where.startswith(("zoo.tokenizer", "tokenizer")) and info.value.fix
    assert len(str(info.value)) < 1200


def test_from_json_of_an_hf_file_with_a_bad_token_override():
    stored = json.dumps({"kind": "hf", "data": {"json": _file(), "pad_token": "<nope>"}})
    with pytest.raises(zoo.TokenizerError, match="pad_token"):
        from_json(stored)


# ---------------------------------------------------------------------- tokenizer paths
def test_a_fifo_as_tokenizer_path_is_refused_at_once(tmp_path):
    fifo = tmp_path / "tokenizer.json"
    os.mkfifo(fifo)
    done = {}

    def attempt():
        try:
            tokenizer("hf", path=str(fifo))
        except zoo.TokenizerError as exc:
            done["err"] = exc

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(5)
    if t.is_alive():  # unblock the reader so the test process can end
        with open(fifo, "w"):
            pass
        pytest.fail("reading a FIFO as a tokenizer blocked")
    assert "not a regular file" in str(done["err"])


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/urandom", "/dev/null", "/proc/self", "/"])
def test_devices_and_folders_as_tokenizer_path_are_refused(path):
    t0 = time.perf_counter()
    with pytest.raises(zoo.TokenizerError, match="not a regular file"):
        tokenizer("hf", path=path)
    assert time.perf_counter() - t0 < 1.0


@pytest.mark.parametrize("path", ["a\x00b", ""])
def test_odd_tokenizer_paths(path):
    with pytest.raises(zoo.ZooError):
        tokenizer("hf", path=path)


def test_a_huge_tokenizer_file_is_refused_by_its_size(tmp_path, monkeypatch):
    import zoo.guard.tokenizer_files as rules

    monkeypatch.setattr(rules, "MAX_TOKENIZER_JSON_BYTES", 100)
    p = tmp_path / "tokenizer.json"
    p.write_text(_file())
    with pytest.raises(zoo.TokenizerError, match="more than 100"):
        tokenizer("hf", path=str(p))


def test_check_tokenizer_json_needs_a_model_object():
    with pytest.raises(zoo.TokenizerError, match="'model' object"):
        check_tokenizer_json('{"normalizer": null}')
    assert check_tokenizer_json(_file())["model"]["type"] == "WordLevel"


# ---------------------------------------------------------------------- read by the schema (issue 36)
def _loads(text: str):
    """The library's own reading of ``text`` (the reference: what it would run)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_str(text)


def test_vocabulary_entries_and_special_tokens_named_like_rules_are_data():
    """Gemma's and DeepSeek's vocabularies have a token "Regex" (a key whose value is its id); a
    template post-processor may name a special token "Regex" too.  Neither is a pattern."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, processors

    words = ["Regex", "pattern", "String", "normalizers", "pretokenizers", "content", "[UNK]", "[CLS]"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), _split(r"\p{L}+")])
    tok.post_processor = processors.TemplateProcessing(single="Regex $A", special_tokens=[("Regex", 0)])
    tok.add_special_tokens([AddedToken("[CLS]", special=True)])
    text = tok.to_str()
    assert json.loads(text)["model"]["vocab"]["Regex"] == 0
    assert json.loads(text)["post_processor"]["special_tokens"]["Regex"]["id"] == "Regex"
    ours = tokenizer("hf", json=text)
    assert ours.encode("Regex pattern String") == [0, 1, 2] == _loads(text).encode(
        "Regex pattern String", add_special_tokens=False).ids


CORPUS = ["Regex patterns split text before BPE.", "A String pattern is a literal; a Regex is not.",
          "normalizers, pretokenizers, decoders and processors", "数字 12345 and ünïcödé too"] * 20


@pytest.mark.parametrize("kind", ["ByteLevelBPETokenizer", "CharBPETokenizer", "SentencePieceBPETokenizer",
                                  "SentencePieceUnigramTokenizer", "BertWordPieceTokenizer"])
def test_tokenizers_trained_by_the_library_are_accepted(kind):
    """Each pipeline the tokenizers library ships (GPT-2's byte-level BPE, the original BPE,
    SentencePiece BPE and Unigram, BERT's WordPiece), trained here on text with the word "Regex" in
    it: accepted, and zoo's tokenizer encodes as the library does."""
    from tokenizers import implementations

    tok = getattr(implementations, kind)()
    tok.train_from_iterator(CORPUS, vocab_size=300, show_progress=False)
    text = tok.to_str()
    data = json.loads(text)
    vocab = data["model"]["vocab"]
    if isinstance(vocab, dict):  # BPE, WordPiece: the word is a key of the vocabulary (Unigram: a list)
        assert any("regex" in t.lower() for t in vocab)
    check_tokenizer_json(text)
    sample = "Regex patterns, 数字 12345"
    assert tokenizer("hf", json=text).encode(sample) == _loads(text).encode(sample, add_special_tokens=False).ids


def _with(slot: str, rule) -> str:
    data = json.loads(_file())
    data[slot] = rule
    return json.dumps(data)


NESTED = {"type": "Sequence", "pretokenizers": [{"type": "Sequence", "pretokenizers": [
    {"type": "Whitespace"}, {"type": "Split", "pattern": {"Regex": "(a+)+b"}, "behavior": "Isolated",
                             "invert": False}]}]}


def test_a_pattern_inside_nested_sequences_is_found():
    text = _with("pre_tokenizer", NESTED)
    assert "Split" in repr(_loads(text).pre_tokenizer)  # the library would run it
    with pytest.raises(zoo.TokenizerError,
                       match=r"pre_tokenizer\.pretokenizers\[0\]\.pretokenizers\[1\]\.pattern\.Regex .*several ways"):
        tokenizer("hf", json=text)


@pytest.mark.parametrize("rule", [
    {"type": "Bogus", "pattern": {"Regex": "(a+)+b"}, "content": "y"},  # unknown type: read by its shape
    {"pattern": {"Regex": "(a+)+b"}, "content": "y"},                   # no type at all
    {"normalizers": [{"pattern": {"Regex": "(a+)+b"}, "content": "y"}]},  # an untyped Sequence
])
def test_a_rule_is_read_by_its_fields_not_the_type_it_names(rule):
    """The library loads a rule of unknown (or no) type by its shape: these run as ``Replace``."""
    text = _with("normalizer", rule)
    assert "Replace" in repr(_loads(text).normalizer)
    with pytest.raises(zoo.TokenizerError, match="normalizer.*several ways"):
        tokenizer("hf", json=text)


@pytest.mark.parametrize("slot, rule", [
    ("normalizer", {"type": "Bogus", "pattern": {"String": "a"}, "content": "x" * 20_000}),
    ("decoder", {"pattern": {"String": "a"}, "content": "x" * 1000}),
    ("normalizer", {"normalizers": [{"type": "NFC"}, {"pattern": {"String": "a"}, "content": "x" * 20}]}),
])
def test_an_expanding_rule_of_no_known_type_is_counted(slot, rule):
    text = _with(slot, rule)
    assert "Replace" in repr(getattr(_loads(text), slot))  # the library would expand with it
    with pytest.raises(zoo.TokenizerError, match=f"{slot} can turn one character"):
        tokenizer("hf", json=text)


def test_a_decoder_replace_inside_a_sequence_is_checked():
    rule = {"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "Replace",
                                             "pattern": {"Regex": r"(\w+\s?)*$"}, "content": " "}]}
    with pytest.raises(zoo.TokenizerError, match=r"decoder\.decoders\[1\]\.pattern\.Regex"):
        tokenizer("hf", json=_with("decoder", rule))


@pytest.mark.parametrize("slot, rule, what", [
    ("normalizer", 5, "must be an object"),
    ("pre_tokenizer", {"type": "Sequence", "pretokenizers": {"a": 1}}, "lists its parts"),
    ("decoder", {"type": "Sequence", "decoders": [None]}, "must be an object"),
])
def test_malformed_rules_are_tokenizer_errors(slot, rule, what):
    with pytest.raises(zoo.TokenizerError, match=what):
        check_tokenizer_json(_with(slot, rule))
