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

from dataclasses import dataclass

import zoo
from zoo.components import Tokenizer

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


class HFTokenizer(Tokenizer):
    def __init__(self, config: HFConfig):
        from tokenizers import Tokenizer as _HF  # imported lazily: an optional dependency

        self.config = config
        text = config.json
        if text is None:
            with open(config.path, encoding="utf-8") as fh:
                text = fh.read()
        self.json_text = text
        self.tok = _HF.from_str(text)
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
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids, skip_special: bool = False) -> str:
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        return self.tok.decode(ids, skip_special_tokens=skip_special)

    def to_json(self) -> dict:
        over = {k: getattr(self.config, k) for k in ("pad_token", "bos_token", "eos_token",
                                                     "mask_token", "unk_token")}
        return {"json": self.json_text, **{k: v for k, v in over.items() if v is not None}}

    @classmethod
    def from_json(cls, data: dict) -> "HFTokenizer":
        return cls(HFConfig(**data))


@zoo.hookimpl
def register_tokenizers(register):
    register("hf", HFTokenizer, config=HFConfig)
