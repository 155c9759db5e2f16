"""Input contracts: the text a trained checkpoint was made for, declared in its metadata.

A small model answers anything with the same confidence: ``numerals_t5`` was trained on the integers
0 to 99,999,999, yet it "translates" ``-5``, ``1.5`` or ``abc`` without a word.  A checkpoint can
therefore declare its *input contract*, and every text entry point -- ``model.generate`` /
:func:`zoo.run.generate.generate_text` / ``stream_text``, :func:`zoo.fill_mask`, ``zoo run`` and the UI's
Run tab -- checks a prompt against it before the model sees it.

A contract is data, stored as JSON under ``zoo.extra.input_contract`` (write it with
``zoo.save(model, path, metadata={"input_contract": {...}})``) and shown on the model card::

    {"description": "an integer from 0 to 99,999,999 in Arabic digits",
     "normalize": ["nfkc", "strip"],                          # applied first, in order
     "pattern": "[0-9]+",                                     # must match the whole (normalised) text
     "validator": {"name": "integer", "min": 0, "max": 99999999},   # a named check, with params
     "example": "10086"}                                      # a valid input, quoted in errors

Every field but ``description`` and ``example`` is optional.  Whatever the pattern says, a
contract admits no control character but tab, newline and carriage return (Python's ``\\s`` matches
the separators ``\\x1c``-``\\x1f`` and ``\\x85``, so the poem models' ``[\\s...]`` let them through as
"Chinese text"); a validator's number is compared by its length before ``int()`` reads it.

The pattern is matched with the tokenizer's special tokens (``<mask>``, ...) taken out, so one
pattern serves a fill-mask model; it is refused when it could backtrack catastrophically
(:func:`zoo.guard.tokenizer_files.regex_hazard`), as metadata comes from files other people made.

Independently of any contract, the tokenizer's unknown characters are reported: a prompt with more
than :data:`MAX_UNKNOWN` of its characters unknown to the tokenizer is refused (the model would see a
row of ``<unk>``), and a prompt with some is admitted with an :class:`InputWarning` naming them.  A
normalisation that changed the prompt (``' 42 '`` -> ``'42'``) is also reported by an
:class:`InputWarning`: the API warns (``warnings.warn``), ``zoo run`` prints the note on stderr, the
UI shows it in the tab's message.
"""
from __future__ import annotations

import json
import re
import unicodedata
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import ZooError
from ..guard.tokenizer_files import regex_hazard
from ..io.tokenizers import DEFAULT_SPECIALS, split_specials
from ..guard.files import short

#: Metadata key of the contract (``zoo.save(..., metadata={"input_contract": ...})`` writes it).
META_KEY = "zoo.extra.input_contract"
#: A prompt with more than this share of its characters unknown to the tokenizer is refused.
MAX_UNKNOWN = 0.5


class InputError(ZooError):
    """A prompt is outside the model's input contract, or mostly unknown to its tokenizer."""


class InputWarning(UserWarning):
    """A prompt was admitted, but changed (normalised) or partly unknown to the tokenizer."""


# ---------------------------------------------------------------------- normalisations
#: Named normalisations a contract may list; each maps text to text.
NORMALIZERS: dict[str, Callable[[str], str]] = {
    "strip": str.strip,                                   # surrounding white space
    "nfkc": lambda s: unicodedata.normalize("NFKC", s),   # full-width digits ０-９ -> 0-9
    "remove_spaces": lambda s: re.sub(r"\s+", "", s),     # every white space character
}


# ---------------------------------------------------------------------- validators
def _integer(text: str, *, min: int = 0, max: int | None = None) -> str | None:  # noqa: A002
    """Why ``text`` is not a plain decimal integer in ``[min, max]`` (no sign unless negative
    numbers are allowed, no decimal point, no leading zeros, no separators), or None."""
    if text.startswith("-") and min >= 0:
        return "negative numbers are outside the range"
    if not re.fullmatch(r"-?[0-9]+", text):
        if re.fullmatch(r"-?[0-9]*[.,][0-9]*", text) and any(c.isdigit() for c in text):
            return "only whole numbers, without a decimal point or separators"
        return "only the digits 0-9"
    digits = text.lstrip("-")
    if len(digits) > 1 and digits.startswith("0"):
        return "no leading zeros"
    # by length first: a bound has at most a few hundred digits, and int() of a string of more
    # than 4,300 digits is Python's own ValueError (sys.int_info.str_digits_check_threshold)
    longest = sorted(len(str(abs(b))) for b in (min, max) if b is not None)[-1]  # min, max: the bounds
    if len(digits) > longest:
        shown = text if len(digits) <= 40 else f"a number of {len(digits):,} digits"
        if text.startswith("-"):  # more negative than min (a negative number passed the check above)
            return f"{shown} is outside the range {min:,} to {max:,}" if max is not None \
                else f"{shown} is below {min:,}"
        if max is not None:
            return f"{shown} is outside the range {min:,} to {max:,}"
        return None  # above min, and no upper bound
    value = int(text)
    if value < min or (max is not None and value > max):
        return f"{text} is outside the range {min:,} to {max:,}" if max is not None \
            else f"{text} is below {min:,}"
    return None


#: Named validators: ``name -> check(text, **params)`` returning why the text is refused, or None.
VALIDATORS: dict[str, Callable[..., str | None]] = {"integer": _integer}


# ---------------------------------------------------------------------- the contract
@dataclass(frozen=True)
class InputContract:
    """A checkpoint's declared input: see the module docstring for the JSON form."""

    description: str
    example: str
    normalize: tuple[str, ...] = ()
    pattern: str | None = None
    validator: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, value: Any, where: str = META_KEY) -> "InputContract":
        """Read a stored contract, checking every field's type and every name (a ZooError naming
        the field otherwise)."""
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise InputError(f"the input contract is not JSON: {short(value)}", where=where,
                                 fix="store a JSON object (see zoo.run.input_contract)") from exc
        if not isinstance(value, dict):
            raise InputError(f"the input contract must be a JSON object, got {short(value)}",
                             where=where, fix="store a JSON object (see zoo.run.input_contract)")
        unknown = set(value) - {"description", "example", "normalize", "pattern", "validator"}
        if unknown:
            raise InputError(f"unknown field(s) {', '.join(sorted(map(str, unknown)))}", where=where,
                             options=["description", "example", "normalize", "pattern", "validator"],
                             fix="remove them")
        for key in ("description", "example"):
            if not isinstance(value.get(key), str) or not value[key]:
                raise InputError(f"'{key}' must be a non-empty string", where=f"{where}.{key}",
                                 fix="describe the input in words and give one valid example")
        norm = value.get("normalize", [])
        if not isinstance(norm, list) or any(n not in NORMALIZERS for n in norm):
            raise InputError(f"unknown normalisation in {short(norm)}", where=f"{where}.normalize",
                             options=list(NORMALIZERS), fix="list names from the valid options")
        pattern = value.get("pattern")
        if pattern is not None:
            hazard = regex_hazard(pattern)
            if hazard:
                raise InputError(f"the pattern {short(pattern)} {hazard}", where=f"{where}.pattern",
                                 fix="use a simpler pattern, or a named validator")
        val = value.get("validator", {})
        if not isinstance(val, dict) or (val and val.get("name") not in VALIDATORS):
            raise InputError(f"unknown validator {short(val)}", where=f"{where}.validator",
                             options=list(VALIDATORS), fix="name one of the valid options")
        contract = cls(description=value["description"], example=value["example"],
                       normalize=tuple(norm), pattern=pattern, validator=dict(val))
        try:  # the parameters must fit the validator: try them on the contract's own example
            why = contract._refusal(contract.clean(contract.example), DEFAULT_SPECIALS)
        except TypeError as exc:
            raise InputError(f"validator parameters do not fit: {exc}", where=f"{where}.validator",
                             fix="give only the parameters the validator takes") from exc
        if why:
            raise InputError(f"the contract's own example {short(contract.example)} is refused: {why}",
                             where=f"{where}.example", fix="give an example the contract accepts")
        return contract

    def to_json(self) -> dict:
        out: dict[str, Any] = {"description": self.description, "example": self.example}
        if self.normalize:
            out["normalize"] = list(self.normalize)
        if self.pattern is not None:
            out["pattern"] = self.pattern
        if self.validator:
            out["validator"] = dict(self.validator)
        return out

    def clean(self, text: str) -> str:
        """``text`` after the contract's normalisations, in order."""
        for name in self.normalize:
            text = NORMALIZERS[name](text)
        return text

    def _refusal(self, text: str, specials) -> str | None:
        control = [c for c in dict.fromkeys(text) if unicodedata.category(c) == "Cc" and c not in "\t\n\r"]
        if control:  # Python's \s matches \x1c-\x1f and \x85: no contract admits control characters
            return f"control characters {', '.join(repr(c) for c in control[:8])}"
        if self.pattern is not None:
            bare = "".join(p for p in split_specials(text, specials) if p not in specials)
            if not re.fullmatch(self.pattern, bare):
                odd = [c for c in dict.fromkeys(bare) if not re.fullmatch(self.pattern, c)]
                fine = len(set(bare)) > len(odd) or re.fullmatch(self.pattern, "")
                if odd and fine:  # a pattern of allowed characters: name the others
                    return f"characters outside it: {short(''.join(odd), 30)}"
                return f"it does not match the pattern {short(self.pattern)}"
        if self.validator:
            params = {k: v for k, v in self.validator.items() if k != "name"}
            return VALIDATORS[self.validator["name"]](text, **params)
        return None

    def summary(self, words: "dict[str, str] | None" = None) -> str:
        """One line for a model card or a message: the description, the rules and the example.

        ``words``: the templates it is made of, for a front end to word it in its own language
        (:data:`SUMMARY_WORDS` is the English; ``zoo.ui.i18n`` has the Chinese).  The description and
        the example are the checkpoint author's text, shown as written (a front end may quote them)."""
        w = {**SUMMARY_WORDS, **(words or {})}
        rules = [w["normalize"].format(names=w["list_sep"].join(self.normalize))] if self.normalize else []
        if self.pattern is not None:
            rules.append(w["pattern"].format(pattern=self.pattern))
        if self.validator:
            params = ", ".join(f"{k}={v}" for k, v in self.validator.items() if k != "name")
            rules.append(w["validator"].format(call=f"{self.validator['name']}({params})"))
        described = w["description"].format(description=self.description)
        if rules:
            described += w["rules"].format(rules=w["rule_sep"].join(rules))
        return described + w["example"].format(example=self.example)


#: The English of :meth:`InputContract.summary`: ``description (rules); example: `...```.
SUMMARY_WORDS = {"description": "{description}", "rules": " ({rules})", "rule_sep": "; ",
                 "normalize": "normalised by {names}", "list_sep": ", ", "pattern": "pattern `{pattern}`",
                 "validator": "validator `{call}`", "example": "; example: `{example}`"}


def contract_of(model: Any) -> InputContract | None:
    """The model's input contract: ``model.input_contract`` if set (an :class:`InputContract` or its
    JSON), else the one in the metadata of the checkpoint it was loaded from, else None."""
    value = getattr(model, "input_contract", None)
    if isinstance(value, InputContract):
        return value
    if value is None:
        value = (getattr(model, "checkpoint_metadata", None) or {}).get(META_KEY)
    return None if value is None else InputContract.from_json(value)


# ---------------------------------------------------------------------- unknown characters
def _specials(tok: Any) -> set[str]:
    specials = set(getattr(getattr(tok, "config", None), "specials", ()) or ())
    for attr in ("pad_id", "unk_id", "bos_id", "eos_id", "mask_id"):
        i = getattr(tok, attr, None)
        if i is not None:
            try:
                specials.add(tok.decode([i]))
            except Exception:  # noqa: BLE001 - a third-party tokenizer that cannot spell it
                pass
    return {s for s in specials if s}


def unknown_characters(tok: Any, text: str) -> tuple[list[str], int]:
    """``(unknown, counted)``: the characters of ``text`` (special tokens such as ``<mask>`` left
    out) that ``tok`` encodes as its unknown token, in order with repeats, and how many characters
    were looked at.  A tokenizer without an unknown token (bytes) knows everything."""
    unk = getattr(tok, "unk_id", None)
    specials = _specials(tok)
    chars = [c for p in split_specials(text, specials) if p not in specials for c in p]
    if unk is None:
        return [], len(chars)
    memo: dict[str, bool] = {}
    for c in set(chars):
        memo[c] = tok.encode(c) == [unk]
    return [c for c in chars if memo[c]], len(chars)


# ---------------------------------------------------------------------- the gate
def _quote(text: str) -> str:
    return short(text, 40)


def admit(model: Any, tok: Any, text: str, *, where: str = "prompt", contract: bool = True) -> str:
    """The prompt ``text`` as the model should see it, or an :class:`InputError`.

    Applies the model's contract (:func:`contract_of`): normalises, then refuses text outside it
    with an error that names the contract and gives its example.  Then counts the characters the
    tokenizer does not know: more than :data:`MAX_UNKNOWN` of them is refused; some is admitted
    with an :class:`InputWarning`.  A normalisation that changed the text warns as well.
    ``contract=False`` checks the unknown characters only (the UI's Inspect tab looks inside a model
    on any text, but a row of ``<unk>`` shows nothing)."""
    contract = contract_of(model) if contract else None
    name = getattr(getattr(model, "spec", None), "name", "the model")
    if contract is not None:
        cleaned = contract.clean(text)
        why = contract._refusal(cleaned, _specials(tok) if tok is not None else ())
        if why:
            raise InputError.of("input.outside_contract", where=where, text=_quote(text), name=name,
                                description=contract.description, reason=why, example=repr(contract.example))
        if cleaned != text:
            warnings.warn(InputWarning(f"{where}: read {_quote(text)} as {_quote(cleaned)} "
                                       f"({', '.join(contract.normalize)})"), stacklevel=3)
        text = cleaned
    if tok is None:
        return text
    unknown, counted = unknown_characters(tok, text)
    if unknown:
        shown = "".join(dict.fromkeys(unknown))
        if len(unknown) > MAX_UNKNOWN * counted:
            raise InputError.of("input.unknown_characters", where=where, count=len(unknown), counted=counted,
                                text=_quote(text), name=name, shown=_quote(shown),
                                fix="input.like" if contract is not None else "input.alphabet",
                                example=repr(contract.example) if contract is not None else None)
        warnings.warn(InputWarning(f"{where}: {len(unknown)} of {counted} characters unknown to "
                                   f"{name}'s tokenizer, read as <unk>: {_quote(shown)}"), stacklevel=3)
    return text


def notes(caught: list) -> list[str]:
    """The messages of the :class:`InputWarning` s among ``warnings.catch_warnings(record=True)``'s
    list (for the CLI and the UI, which show them instead of Python's warning format)."""
    return [str(w.message) for w in caught if issubclass(w.category, InputWarning)]


class route_notes:
    """A context manager sending each :class:`InputWarning` raised inside it to ``show(message)``
    (``zoo run``: a line on stderr; the UI: the tab's message), every time it happens; other
    warnings keep Python's usual display."""

    def __init__(self, show: Callable[[str], None]):
        self.show = show
        self._ctx = warnings.catch_warnings()

    def __enter__(self) -> "route_notes":
        self._ctx.__enter__()
        warnings.simplefilter("always", InputWarning)
        previous = warnings.showwarning

        def showwarning(message, category, *args, **kwargs):
            if issubclass(category, InputWarning):
                self.show(str(message))
            else:
                previous(message, category, *args, **kwargs)

        warnings.showwarning = showwarning
        return self

    def __exit__(self, *exc) -> None:
        self._ctx.__exit__(*exc)
