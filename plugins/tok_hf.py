"""``hf``: a Hugging Face ``tokenizers`` file (``tokenizer.json``), read locally.

Any tokenizer saved by the 🤗 ``tokenizers`` library (BPE as in GPT-2, WordPiece as in BERT,
Unigram as in T5, byte-level or not) in one JSON file.  Nothing is downloaded: pass ``path`` to a
local ``tokenizer.json`` (or ``json``, its text).  The whole file is stored inside the checkpoint, so
a loaded model needs no side files.  Special tokens are found by their usual names (``[PAD]`` /
``<pad>``, ``[MASK]`` / ``<mask>``, ...) or set explicitly (``pad_token: "<|endoftext|>"``).
Whether Chinese round-trips depends on the model: byte-level BPE always does; a WordPiece vocabulary
without a character maps it to ``[UNK]``.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import zoo
from zoo.components import Tokenizer
from zoo.errors import TokenizerError
from zoo.guard.tokenizer_files import check_tokenizer_json, library_call, read_tokenizer_file
from zoo.io.tokenizers import check_ids, check_text

GUESSES = {  # attribute -> names tried in order
    "pad_id": ("<pad>", "[PAD]", "<|pad|>"),
    "unk_id": ("<unk>", "[UNK]", "<|unk|>"),
    "bos_id": ("<s>", "<bos>", "[CLS]", "<|startoftext|>", "<|begin_of_text|>", "<|endoftext|>"),
    "eos_id": ("</s>", "<eos>", "[SEP]", "<|endoftext|>", "<|end_of_text|>"),
    "mask_id": ("<mask>", "[MASK]"),
}


@dataclass(frozen=True)
class HFConfig:
    path: str | None = None  # a local tokenizer.json
    json: str | None = None  # or its text
    pad_token: str | None = None  # override the guessed special tokens
    bos_token: str | None = None
    eos_token: str | None = None
    mask_token: str | None = None
    unk_token: str | None = None

    def __post_init__(self):
        if (self.path is None) == (self.json is None):
            raise ValueError("give exactly one of `path` (a local tokenizer.json) or `json`")
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None and not isinstance(v, str):
                raise ValueError(f"{f.name} must be a string, got {type(v).__name__}")


class HFTokenizer(Tokenizer):
    def __init__(self, config: HFConfig):
        from tokenizers import Tokenizer as _HF  # imported lazily: an optional dependency

        self.config = config
        text = config.json
        if text is None:  # a regular file of bounded size only: not a FIFO, a device or a folder
            text = read_tokenizer_file(config.path)
        # the rules are checked before the library runs any of them (regex backtracking, expansion)
        check_tokenizer_json(text, where=f"tokenizer.hf.{'path' if config.json is None else 'json'}")
        self.json_text = text
        self.tok = library_call(_HF.from_str, text, where="tokenizer.hf", what="reading the file")
        vocab = self.tok.get_vocab(with_added_tokens=True)
        for attr, names in GUESSES.items():
            explicit = getattr(config, attr.replace("_id", "_token"))
            if explicit is not None:
                if explicit not in vocab:
                    raise ValueError(f"{attr.replace('_id', '_token')} {explicit!r} is not in the vocabulary")
                setattr(self, attr, vocab[explicit])
                continue
            setattr(self, attr, next((vocab[n] for n in names if n in vocab), None))

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        check_text(text)
        return library_call(self.tok.encode, text, add_special_tokens=False, where="tokenizer.hf",
                            what="encoding").ids

    def decode(self, ids, skip_special: bool = False) -> str:
        ids = check_ids(ids)
        if any(not 0 <= i < 2 ** 32 for i in ids):  # the library takes u32 ids
            raise TokenizerError("an id is outside [0, 2**32)", where="tokenizer.hf.decode",
                                 fix="pass ids produced by this tokenizer")
        return library_call(self.tok.decode, ids, skip_special_tokens=skip_special,
                            where="tokenizer.hf", what="decoding")

    def to_json(self) -> dict:
        over = {k: getattr(self.config, k) for k in ("pad_token", "bos_token", "eos_token",
                                                     "mask_token", "unk_token")}
        return {"json": self.json_text, **{k: v for k, v in over.items() if v is not None}}

    @classmethod
    def from_json(cls, data: dict) -> "HFTokenizer":
        """Typed: ``data`` must hold ``json`` (the file's text) and may hold the token overrides."""
        if not isinstance(data, dict) or not isinstance(data.get("json"), str):
            raise TokenizerError("a stored hf tokenizer needs its tokenizer.json text under 'json'",
                                 where="zoo.tokenizer.data.json",
                                 fix="store tokenizers with zoo.save(model, path, tokenizer=tok)")
        names = {f.name for f in fields(HFConfig)} - {"path"}
        return cls(HFConfig(**{k: v for k, v in data.items() if k in names}))


@zoo.hookimpl
def register_tokenizers(register):
    register("hf", HFTokenizer, config=HFConfig)
