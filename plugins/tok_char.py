"""``char``: one id per character, the vocabulary read off a corpus.

The simplest tokenizer that works for any script: every distinct character of the training text
gets an id, after a few reserved special tokens (``<pad> <unk> <bos> <eos> <mask>`` by default).
Chinese needs no word segmentation at this level (each 汉字 is a token), which is why character
models are the classic first step for Chinese text.  A character outside the vocabulary becomes
``<unk>``: text made of known characters round-trips exactly, anything else is lossy (use ``byte``
when every string must survive).  Special tokens written literally in the text (``"北京是<mask>国的首都"``)
are recognised as one token each.
"""
from __future__ import annotations

from dataclasses import dataclass

import zoo
from zoo.components import Tokenizer
from zoo.errors import TokenizerError
from zoo.io.tokenizers import DEFAULT_SPECIALS, check_ids, check_text, split_specials


@dataclass(frozen=True)
class CharConfig:
    text: str = ""  # the corpus the vocabulary is read from (every distinct character)
    specials: tuple[str, ...] = DEFAULT_SPECIALS  # reserved first ids: pad, unk, bos, eos, mask

    def __post_init__(self):
        if not isinstance(self.specials, (tuple, list)) or not all(isinstance(t, str)
                                                                   for t in self.specials):
            raise ValueError(f"specials must be a list of strings, got {type(self.specials).__name__}")
        if not isinstance(self.text, str):
            raise ValueError(f"text must be a string, got {type(self.text).__name__}")
        if len(set(self.specials)) != len(self.specials):
            raise ValueError(f"special tokens must be distinct, got {list(self.specials)}")
        if not all(self.specials):
            raise ValueError("special tokens must be non-empty strings")


class CharTokenizer(Tokenizer):
    def __init__(self, config: CharConfig = CharConfig()):
        self.config = config
        chars = sorted(set(config.text) - set(config.specials))
        self.itos = list(config.specials) + chars  # id -> string
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        named = dict(zip(("pad_id", "unk_id", "bos_id", "eos_id", "mask_id"), range(len(config.specials))))
        for attr, i in named.items():  # the first five specials, by convention, in this order
            setattr(self, attr, i)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        check_text(text)
        specials = set(self.config.specials)
        unk = getattr(self, "unk_id", None)
        ids: list[int] = []
        for piece in split_specials(text, specials):
            if piece in specials:
                ids.append(self.stoi[piece])
                continue
            for ch in piece:
                i = self.stoi.get(ch, unk)
                if i is None:
                    raise TokenizerError(f"character {ch!r} is not in the vocabulary and there is no "
                                         f"<unk> token", where="tokenizer.char",
                                         fix="keep the default specials (the second is <unk>)")
                ids.append(i)
        return ids

    def decode(self, ids, skip_special: bool = False) -> str:
        ids = check_ids(ids)
        n = len(self.config.specials)
        return "".join(self.itos[i] for i in ids
                       if 0 <= i < len(self.itos) and not (skip_special and i < n))

    def to_json(self) -> dict:
        return {"specials": list(self.config.specials), "chars": "".join(self.itos[len(self.config.specials):])}

    @classmethod
    def from_json(cls, data: dict) -> "CharTokenizer":
        chars, specials = data.get("chars"), data.get("specials")
        if not isinstance(chars, str) or not isinstance(specials, list):
            raise TokenizerError("a stored char tokenizer needs 'chars' (a string) and 'specials' "
                                 "(a list of strings)", where="zoo.tokenizer.data",
                                 fix="store tokenizers with zoo.save(model, path, tokenizer=tok)")
        return cls(CharConfig(text=chars, specials=tuple(specials)))


@zoo.hookimpl
def register_tokenizers(register):
    register("char", CharTokenizer, config=CharConfig)
