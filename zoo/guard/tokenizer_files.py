"""Bounds on what a foreign tokenizer file may make the ``tokenizers`` library do.

A Hugging Face ``tokenizer.json`` is not just data: its normalizer and pre-tokenizer are *rules*
that the library runs on every prompt.  Two kinds of rule turn a small file into unbounded work:

* **a regular expression that backtracks catastrophically.**  ``(a+)+b`` tried on ``"aaaa...c"``
  explores every way of splitting the run of ``a`` among the two ``+`` (2**n ways).  The library's
  regex engine (Oniguruma) gives up after a retry limit by *panicking*, which reaches Python as a
  ``pyo3_runtime.PanicException`` (a ``BaseException``, not an ``Exception``); below that limit it
  can still spend seconds per prompt.  :func:`regex_hazard` reads the pattern and refuses the
  features that make backtracking exponential: a quantifier that may repeat a group which itself
  contains a variable quantifier or an alternation (``(a+)+``, ``(a|aa)*``, ``(\\w+\\s?)*``), and
  backreferences (``(a*)\\1``).  Real tokenizers (GPT-2, Llama 3, Qwen) use none of these.
* **a normalizer that multiplies the text.**  ``Replace("a" -> 20,000 characters)`` turns a
  4,000-character prompt into 80 million characters (gigabytes).  :func:`expansion` computes, from
  the rules, how many characters each input character can become at most, and a file above
  :data:`MAX_EXPANSION` is refused.  (Unicode normalizations such as NFKC are bounded by Unicode
  itself -- at most 18 characters for one -- and count as 1 here; user-written ``Replace`` and
  ``Prepend`` rules are what this bounds.)

:func:`check_tokenizer_json` applies both to a whole file before the library sees it, reading the
file by its schema: patterns only where the library compiles them (the ``pattern`` of a rule in the
normalizer, pre-tokenizer, decoder or post-processor, nested ``Sequence`` parts included:
:func:`rules`), never a vocabulary entry or special token that happens to be spelled ``Regex``.
:func:`library_call` turns anything the library raises -- a panic included -- into a
:class:`~zoo.errors.TokenizerError`.
"""
from __future__ import annotations

import json
import os
import stat
from typing import Any, Callable

from ..errors import TokenizerError
from .files import clip, read_bytes, short

#: Largest tokenizer.json accepted (bytes); real ones are 0.5-35 MB.
MAX_TOKENIZER_JSON_BYTES = 128 * 1024 * 1024
#: Most characters one input character may become through the normalizer (or decoder) rules.
MAX_EXPANSION = 16
#: Longest regular expression accepted (characters); real pre-tokenizer patterns are < 300.
MAX_PATTERN_CHARS = 4096
#: A bounded repeat ``{n,m}`` with ``m - n`` above this counts as unbounded.
_WIDE = 16
_FIX = "use a tokenizer.json written by the tokenizers library for a published model, or remove the rule"


# ---------------------------------------------------------------------- calling the library
def is_panic(exc: BaseException) -> bool:
    """A Rust panic surfaced by pyo3 (``pyo3_runtime.PanicException``, a ``BaseException``)."""
    return type(exc).__name__ == "PanicException"


def library_call(fn: Callable, *args: Any, where: str, what: str, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, with any failure of the foreign library -- an ``Exception`` or a
    Rust panic -- turned into a :class:`TokenizerError` naming ``where``.  ``KeyboardInterrupt``,
    ``SystemExit`` and zoo's own errors pass through unchanged."""
    try:
        return fn(*args, **kwargs)
    except TokenizerError:
        raise
    except BaseException as exc:  # noqa: BLE001 - PanicException derives from BaseException
        if not (isinstance(exc, Exception) or is_panic(exc)):
            raise
        kind = "panicked" if is_panic(exc) else f"failed ({type(exc).__name__})"
        raise TokenizerError(f"the tokenizers library {kind} while {what}: {clip(exc, 200)}",
                             where=where, fix=_FIX) from exc


# ---------------------------------------------------------------------- the whole file
def read_tokenizer_file(path: Any, where: str = "tokenizer.hf.path", root: Any = None) -> str:
    """The text of a tokenizer.json at ``path``, read the one way zoo reads a user's file
    (:func:`zoo.guard.files.read_bytes`: a regular file -- ``stat`` before ``open``, so a FIFO or
    ``/dev/zero`` is refused at once -- confined to ``root`` when given, at most
    :data:`MAX_TOKENIZER_JSON_BYTES`), decoded as UTF-8."""
    if not isinstance(path, (str, os.PathLike)) or not str(path) or "\x00" in str(path):
        raise TokenizerError(f"expected a file path, got {short(path)}", where=where,
                             fix="pass the path of a tokenizer.json file")
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None and stat.S_ISREG(st.st_mode) and st.st_size > MAX_TOKENIZER_JSON_BYTES:
        raise TokenizerError(f"the file has {st.st_size:,} bytes, more than "
                             f"{MAX_TOKENIZER_JSON_BYTES:,}", where=where,
                             fix="pass the path of a tokenizer.json file")
    data = read_bytes(path, where=where, root=root, kind="tokenizer", error=TokenizerError)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TokenizerError(f"{short(str(path))} is not UTF-8 text", where=where,
                             fix="pass the path of a tokenizer.json file") from exc


def check_tokenizer_json(text: Any, where: str = "tokenizer.json") -> dict:
    """Parse ``text`` (a tokenizer.json) and check its rules; return the parsed object.

    Refused with a :class:`TokenizerError`: text that is not a str, larger than
    :data:`MAX_TOKENIZER_JSON_BYTES`, not JSON (or nested too deep to parse), not a JSON object,
    without a ``model`` object; any regex that can backtrack catastrophically; any normalizer or
    decoder whose expansion exceeds :data:`MAX_EXPANSION`."""
    if not isinstance(text, str):
        raise TokenizerError(f"expected the text of a tokenizer.json, got {type(text).__name__}",
                             where=where, fix="pass the file's path, or its text as a str")
    if len(text) > MAX_TOKENIZER_JSON_BYTES:
        raise TokenizerError(f"the tokenizer file has {len(text):,} characters, more than "
                             f"{MAX_TOKENIZER_JSON_BYTES:,}", where=where, fix=_FIX)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise TokenizerError(f"not a tokenizer.json (invalid JSON: {clip(exc, 120)})", where=where,
                             fix="pass a tokenizer.json written by the tokenizers library") from exc
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise TokenizerError(f"not a tokenizer.json (a JSON object with a 'model' object), got "
                             f"{short(data)}", where=where,
                             fix="pass a tokenizer.json written by the tokenizers library")
    for path, pattern in _regexes(data, where):
        hazard = regex_hazard(pattern)
        if hazard:
            raise TokenizerError(f"the regex {short(pattern)} at {path} {hazard}", where=where,
                                 fix=_FIX)
    for key in ("normalizer", "decoder"):
        factor = expansion(data.get(key), key, where)
        if factor > MAX_EXPANSION:
            raise TokenizerError(f"the {key} can turn one character into {factor:,.0f} (more than "
                                 f"{MAX_EXPANSION}): a short prompt would become gigabytes",
                                 where=where, fix=_FIX)
    return data


#: The parts of a tokenizer.json that hold rules the library runs -- the only places it compiles a
#: pattern from (the ``pattern`` of a ``Split`` pre-tokenizer, of a ``Replace`` normalizer or
#: decoder).  The model (vocabulary, merges) and the added tokens are data: Gemma's vocabulary has
#: a token spelled ``Regex``, a template processor may name a special token ``Regex``.
RULE_SLOTS = ("normalizer", "pre_tokenizer", "decoder", "post_processor")
#: The field under which a ``Sequence`` lists its parts, in each slot.
SEQUENCE_FIELDS = ("normalizers", "pretokenizers", "decoders", "processors")


def rules(rule: Any, path: str, where: str):
    """``(json_path, rule)`` for ``rule`` (one slot of a tokenizer.json, :data:`RULE_SLOTS`; None
    is no rule) and every rule inside it, through the parts of each ``Sequence``, nested ones
    included, in order.  A rule is read by the fields it has, not by the type it names: the library
    matches a rule of an unknown (or no) ``type`` by its shape -- ``{"type": "Bogus", "pattern":
    ..., "content": ...}`` loads as a ``Replace`` normalizer -- so every rule's ``pattern`` and
    every list of parts counts, whatever its ``type`` says.  Iterative: a deep file that json.loads
    accepted cannot reach the recursion limit here."""
    stack = [(rule, path)]
    while stack:
        node, at = stack.pop()
        if node is None and at == path:
            continue
        if not isinstance(node, dict):
            raise TokenizerError(f"{at} must be an object, got {short(node)}", where=where, fix=_FIX)
        yield at, node
        for field in SEQUENCE_FIELDS:
            if field not in node:
                continue
            parts = node[field]
            if not isinstance(parts, list):
                raise TokenizerError(f"{at} lists its parts as {short(parts)}", where=where, fix=_FIX)
            stack.extend((part, f"{at}.{field}[{i}]") for i, part in reversed(list(enumerate(parts))))


def _regexes(data: dict, where: str):
    """Every regular expression the library would compile from the file -- the ``{"Regex": ...}``
    of a rule's ``pattern`` in one of the :data:`RULE_SLOTS` -- with its JSON path."""
    for slot in RULE_SLOTS:
        for path, rule in rules(data.get(slot), slot, where):
            pattern = rule.get("pattern")
            if isinstance(pattern, dict) and "Regex" in pattern:
                yield f"{path}.pattern.Regex", pattern["Regex"]


def expansion(rule: Any, path: str, where: str) -> float:
    """The most characters one input character can become through ``rule`` (a normalizer or
    decoder entry of a tokenizer.json; ``None`` is the identity): the product over the rules in it
    (:func:`rules`: a ``Sequence`` multiplies its parts).  ``Replace(pattern -> content)`` gives
    ``len(content) / shortest match`` (a regex that can match the empty string inserts ``content``
    between every two characters: ``1 + len(content)``); ``Prepend`` adds its text once, which the
    1 + ... of the first character covers; rules of Unicode and case (NFC, NFKC, Lowercase, ...)
    count as 1.  A rule counts as a ``Replace`` when it says so or has a ``pattern`` and a
    ``content`` (the shape the library would load it by), as a ``Prepend`` likewise."""
    total = 1.0
    for at, node in rules(rule, path, where):
        total *= _factor(node, at, where)
        if total > 1e12:
            break
    return total


def _factor(node: dict, path: str, where: str) -> float:
    """What one rule (not its parts) multiplies a character by; see :func:`expansion`."""
    factor = 1.0
    if node.get("type") == "Replace" or ("pattern" in node and "content" in node):
        pattern, content = node.get("pattern"), node.get("content")
        if not isinstance(content, str) or not isinstance(pattern, dict):
            raise TokenizerError(f"{path} (Replace) needs a pattern and a content string",
                                 where=where, fix=_FIX)
        if isinstance(pattern.get("String"), str):
            shortest = len(pattern["String"])
        elif isinstance(pattern.get("Regex"), str):
            shortest = min_width(pattern["Regex"])
        else:
            raise TokenizerError(f"{path} (Replace) has a pattern {short(pattern)}", where=where,
                                 fix=_FIX)
        factor *= 1.0 + len(content) if shortest == 0 else max(1.0, len(content) / shortest)
    if node.get("type") == "Prepend" or "prepend" in node:
        text = node.get("prepend", "")
        factor *= 1.0 + (len(text) if isinstance(text, str) else 0)
    return factor


# ---------------------------------------------------------------------- regular expressions
class _Node:
    """One node of a parsed pattern: ``kind`` is seq / alt / group / atom / quant / backref."""

    __slots__ = ("kind", "children", "lo", "hi", "width")

    def __init__(self, kind, children=(), lo=1, hi=1, width=1):
        self.kind, self.children, self.lo, self.hi, self.width = kind, list(children), lo, hi, width


class _Parser:
    """A recursive-descent reader of the regex syntax tokenizer files use (Oniguruma / PCRE-like):
    enough structure to find quantifiers, alternations, groups and backreferences -- character
    classes and escapes are read as single atoms, lookarounds and anchors as zero-width ones."""

    def __init__(self, text: str):
        self.s, self.i = text, 0

    def parse(self) -> _Node:
        node = self.alt()
        if self.i < len(self.s):  # an unbalanced ')'
            raise ValueError(f"unbalanced ')' at {self.i}")
        return node

    def alt(self) -> _Node:
        branches = [self.seq()]
        while self.i < len(self.s) and self.s[self.i] == "|":
            self.i += 1
            branches.append(self.seq())
        return branches[0] if len(branches) == 1 else _Node("alt", branches)

    def seq(self) -> _Node:
        items = []
        while self.i < len(self.s) and self.s[self.i] not in "|)":
            items.append(self.quantified(self.atom()))
        return _Node("seq", items)

    def atom(self) -> _Node:
        c = self.s[self.i]
        if c == "(":
            return self.group()
        if c == "[":
            self.char_class()
            return _Node("atom")
        if c == "\\":
            return self.escape()
        self.i += 1
        if c in "^$":
            return _Node("atom", width=0)
        if c in "*+?" or (c == "{" and self._repeat_at(self.i - 1)):
            raise ValueError(f"nothing to repeat at {self.i - 1}")
        return _Node("atom")  # a literal or '.'

    def group(self) -> _Node:
        s = self.s
        self.i += 1
        zero = False
        if s.startswith("?", self.i):
            head = s[self.i:self.i + 4]
            if head.startswith("?#"):  # a comment
                end = s.find(")", self.i)
                if end < 0:
                    raise ValueError("unterminated comment")
                self.i = end + 1
                return _Node("atom", width=0)
            if head.startswith(("?=", "?!")):
                zero, self.i = True, self.i + 2
            elif head.startswith(("?<=", "?<!")):
                zero, self.i = True, self.i + 3
            elif head.startswith(("?:", "?>", "?|")):
                self.i += 2
            elif head.startswith(("?<", "?P<", "?'")):
                close = ">" if not head.startswith("?'") else "'"
                end = s.find(close, self.i + 2)
                if end < 0:
                    raise ValueError("unterminated group name")
                self.i = end + 1
            else:  # inline flags: (?i) or (?i-m:...)
                j = self.i + 1
                while j < len(s) and (s[j].isalpha() or s[j] == "-"):
                    j += 1
                if j < len(s) and s[j] == ")":
                    self.i = j + 1
                    return _Node("atom", width=0)
                if j < len(s) and s[j] == ":":
                    self.i = j + 1
                else:
                    raise ValueError(f"unknown group syntax at {self.i}")
        inner = self.alt()
        if self.i >= len(s) or s[self.i] != ")":
            raise ValueError("missing ')'")
        self.i += 1
        node = _Node("group", [inner])
        if zero:
            node.width = 0
        return node

    def char_class(self) -> None:
        s = self.s
        depth, self.i = 0, self.i + 1
        if s.startswith("^", self.i):
            self.i += 1
        if s.startswith("]", self.i):  # a leading ']' is a literal
            self.i += 1
        while self.i < len(s):
            c = s[self.i]
            if c == "\\":
                self.i += 2
                continue
            if c == "[":
                depth += 1
            elif c == "]":
                if depth == 0:
                    self.i += 1
                    return
                depth -= 1
            self.i += 1
        raise ValueError("unterminated character class")

    def escape(self) -> _Node:
        s = self.s
        if self.i + 1 >= len(s):
            raise ValueError("trailing backslash")
        c = s[self.i + 1]
        self.i += 2
        if c.isdigit() and c != "0":
            return _Node("backref", width=0)
        if c == "k" and self.i < len(s) and s[self.i] in "<'{":
            return _Node("backref", width=0)
        if c in "pPx" and self.i < len(s) and s[self.i] == "{":
            end = s.find("}", self.i)
            if end < 0:
                raise ValueError("unterminated \\p{...}")
            self.i = end + 1
        if c in "bBAzZG":
            return _Node("atom", width=0)
        return _Node("atom")

    def _repeat_at(self, i: int) -> tuple[int, int | None, int] | None:
        """``(lo, hi or None, end)`` when a ``{n}``, ``{n,}``, ``{n,m}`` or ``{,m}`` starts at i."""
        s = self.s
        end = s.find("}", i)
        if end < 0:
            return None
        body = s[i + 1:end]
        if "," in body:
            a, b = body.split(",", 1)
        else:
            a, b = body, body
        if not (a.isdigit() or a == "") or not (b.isdigit() or b == "") or (a == "" and b == ""):
            return None
        lo = int(a) if a else 0
        hi = int(b) if b else None
        return lo, hi, end + 1

    def quantified(self, node: _Node) -> _Node:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in "*+?":
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                self.i += 1
            elif c == "{" and (rep := self._repeat_at(self.i)):
                lo, hi, self.i = rep
            else:
                return node
            if self.i < len(s) and s[self.i] in "?+":  # lazy or possessive
                self.i += 1
            node = _Node("quant", [node], lo=lo, hi=hi)
        return node


def _walk(node: _Node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


def _variable(node: _Node) -> bool:
    """Does ``node`` contain something that can match in more than one way: a quantifier whose
    count is not fixed, or an alternation?"""
    return any((n.kind == "quant" and n.hi != n.lo) or n.kind == "alt" for n in _walk(node))


def _repeats_a_lot(node: _Node) -> bool:
    return node.kind == "quant" and (node.hi is None or node.hi - node.lo > _WIDE)


def regex_hazard(pattern: Any) -> str | None:
    """Why ``pattern`` could backtrack catastrophically (a phrase for a message), or None.

    Refused: a pattern that is not a str, longer than :data:`MAX_PATTERN_CHARS` or not readable;
    a backreference; a quantifier that repeats without bound (``*``, ``+``, ``{n,}``, or ``{n,m}``
    with ``m - n > 16``) a sub-pattern that itself can match in several ways (a variable
    quantifier or an alternation inside): ``(a+)+``, ``(a|aa)*``, ``(?:\\s*x?)+``; and such a
    sub-pattern repeated more than 16 times in all by nested bounded quantifiers
    (``(?:(?:a|aa){16}){16}``: 256)."""
    if not isinstance(pattern, str):
        return f"is not a string ({type(pattern).__name__})"
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"is longer than {MAX_PATTERN_CHARS} characters"
    try:
        root = _Parser(pattern).parse()
    except (ValueError, IndexError, RecursionError) as exc:
        return f"cannot be read ({exc})"
    for n in _walk(root):
        if n.kind == "backref":
            return "uses a backreference, which can make matching take exponential time"
        if _repeats_a_lot(n) and _variable(n.children[0]):
            return ("repeats without bound a part that can itself match in several ways (a nested "
                    "quantifier or an alternation, as in '(a+)+' or '(a|aa)*'), which backtracks "
                    "catastrophically on inputs that almost match")
    # bounded repeats multiply: (?:(?:a|aa){16}){16} repeats the alternation 256 times, and each
    # bound alone (16) passed the check above (issue 35: it hung); a part that can match in several
    # ways may be repeated at most _WIDE times in all, counting every enclosing quantifier
    stack = [(root, 1)]
    while stack:
        n, times = stack.pop()
        if n.kind == "quant":
            times *= n.hi if n.hi is not None else _WIDE + 1
            if times > _WIDE and _variable(n.children[0]):
                return (f"repeats a part that can itself match in several ways {times} times in all "
                        f"through nested quantifiers (as in '(?:(?:a|aa){{16}}){{16}}'; at most {_WIDE}), "
                        "which backtracks catastrophically on inputs that almost match")
        stack.extend((c, times) for c in n.children)
    return None


def min_width(pattern: str) -> int:
    """The fewest characters a match of ``pattern`` can consume (0 when it can match the empty
    string); an unreadable pattern counts as 0, the most cautious answer for :func:`expansion`."""
    try:
        root = _Parser(pattern).parse()
    except (ValueError, IndexError, RecursionError):
        return 0

    def width(n: _Node) -> int:
        if n.kind == "seq":
            return sum(width(c) for c in n.children)
        if n.kind == "alt":
            return min(width(c) for c in n.children)
        if n.kind == "group":
            return 0 if n.width == 0 else width(n.children[0])
        if n.kind == "quant":
            return n.lo * width(n.children[0])
        return n.width

    try:
        return width(root)
    except RecursionError:
        return 0
