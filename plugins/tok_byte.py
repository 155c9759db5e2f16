"""``byte``: UTF-8 bytes as tokens, ids 0-255, then the special tokens.

No training and no unknown tokens: every string is a sequence of bytes, so every string round-trips
exactly, Chinese included (a 汉字 is three bytes in UTF-8, so Chinese text costs three tokens per
character; that is the price of a 261-entry vocabulary).  ByT5 (Xue et al., 2022) showed byte-level
models are competitive and robust to spelling noise.  Decoding a cut-off multi-byte character (e.g.
mid-stream) yields U+FFFD until the remaining bytes arrive.
"""
from __future__ import annotations

from dataclasses import dataclass

import zoo
from zoo.components import Tokenizer
from zoo.errors import TokenizerError
from zoo.io.tokenizers import DEFAULT_SPECIALS, check_ids, check_text, split_specials


@dataclass(frozen=True)
class ByteConfig:
    specials: tuple[str, ...] = DEFAULT_SPECIALS  # ids 256, 257, ...: pad, unk, bos, eos, mask

    def __post_init__(self):
        if not isinstance(self.specials, (tuple, list)) or not all(isinstance(t, str)
                                                                   for t in self.specials):
            raise ValueError(f"specials must be a list of strings, got {type(self.specials).__name__}")
        if len(set(self.specials)) != len(self.specials):
            raise ValueError(f"special tokens must be distinct, got {list(self.specials)}")
        if not all(self.specials):
            raise ValueError("special tokens must be non-empty strings")


class ByteTokenizer(Tokenizer):
    def __init__(self, config: ByteConfig = ByteConfig()):
        self.config = config
        self.special_ids = {s: 256 + i for i, s in enumerate(config.specials)}
        for i, attr in enumerate(("pad_id", "unk_id", "bos_id", "eos_id", "mask_id")[: len(config.specials)]):
            setattr(self, attr, 256 + i)

    @property
    def vocab_size(self) -> int:
        return 256 + len(self.config.specials)

    def encode(self, text: str) -> list[int]:
        check_text(text)
        ids: list[int] = []
        for piece in split_specials(text, self.special_ids):
            if piece in self.special_ids:
                ids.append(self.special_ids[piece])
                continue
            try:
                ids.extend(piece.encode("utf-8"))  # one id per byte
            except UnicodeEncodeError as exc:  # a lone surrogate such as "\ud800" has no UTF-8 form
                raise TokenizerError(f"character {piece[exc.start]!r} at offset {exc.start} of a "
                                     f"piece has no UTF-8 encoding (a lone surrogate)",
                                     where="tokenizer.byte",
                                     fix="pass valid Unicode text (e.g. decode bytes with "
                                         "errors='replace')") from exc
        return ids

    def decode(self, ids, skip_special: bool = False) -> str:
        ids = check_ids(ids)
        out, buf = [], bytearray()
        for i in ids:
            if 0 <= i < 256:
                buf.append(i)
                continue
            out.append(buf.decode("utf-8", errors="replace"))
            buf = bytearray()
            if not skip_special and 256 <= i < self.vocab_size:
                out.append(self.config.specials[i - 256])
        out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)

    def to_json(self) -> dict:
        return {"specials": list(self.config.specials)}

    @classmethod
    def from_json(cls, data: dict) -> "ByteTokenizer":
        specials = data.get("specials", list(DEFAULT_SPECIALS))
        if not isinstance(specials, list):
            raise TokenizerError(f"a stored byte tokenizer's 'specials' must be a list of strings, "
                                 f"got {type(specials).__name__}", where="zoo.tokenizer.data.specials",
                                 fix="store tokenizers with zoo.save(model, path, tokenizer=tok)")
        return cls(ByteConfig(specials=tuple(specials)))


@zoo.hookimpl
def register_tokenizers(register):
    register("byte", ByteTokenizer, config=ByteConfig)
