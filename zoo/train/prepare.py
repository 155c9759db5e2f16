"""Data preparation: read the data file for an objective, pick the tokenizer, split off the held-out
part, check it all against the spec, and build the :class:`~zoo.train.objectives.Objective`.

Documents (blank-line separated) become one token stream ``doc1 <eos> doc2 <eos> ...``; a pairs file
(``source<TAB>target`` lines) becomes id lists.  Whole documents / examples are held out, never
pieces of one.  For ``clm`` the held-out loss of a unigram model is computed too: a language model
must beat it to have learned anything about context.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch

from . import data as D
from ..errors import DataError
from ..io.tokenizers import tokenizer as make_tokenizer
from .config import TrainConfig
from .objectives import PAIRS_OBJECTIVES, STREAM_OBJECTIVES


def data_fingerprint(path: str | os.PathLike) -> str:
    """First 16 hex digits of the file's SHA-256 (a resumed run refuses changed data)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def prepare(data: str | os.PathLike, cfg: TrainConfig, spec, tok=None, *, fit_vocab: bool = False):
    """Read ``data`` for ``cfg.objective``, pick / build the tokenizer, split off the held-out part
    and check everything against the spec.  Returns ``(objective, tokenizer, spec, info)``; ``spec``
    may come back with ``vocab_size`` fitted to the tokenizer when ``fit_vocab``.

    ``data`` may also be a generated data source instead of a file: an object with
    ``prepare_objective(cfg, spec, tok, fit_vocab=...)`` returning the same four things (the tasks
    of :mod:`zoo.experiment` are; a trial is then an ordinary run of this trainer)."""
    if hasattr(data, "prepare_objective"):
        return data.prepare_objective(cfg, spec, tok, fit_vocab=fit_vocab)
    where = str(data)
    pairs_mode = cfg.objective == "seq2seq" or (cfg.objective == "prefix_lm" and D.is_pairs_file(data))
    if pairs_mode:
        items = D.read_pairs(data)
        corpus = "".join(s + t for s, t in items)
    else:
        items = D.read_documents(data)
        corpus = "\n".join(items)
    if not items:
        raise DataError("no examples in the data file", where=where, fix="check the file format")

    tok, own_tok = _pick_tokenizer(tok, cfg, corpus)
    if not own_tok:  # a checkpoint's tokenizer meets new data: every character must be known
        D.check_known(tok, items if not pairs_mode else [s + t for s, t in items], where)
    spec = _fit_spec(spec, tok, fit_vocab, where)

    train_items, eval_items = D.split_holdout(items, cfg.holdout, cfg.seed)
    info = {"data": where, "data_sha256": data_fingerprint(data), "examples": len(items),
            "train_examples": len(train_items), "eval_examples": len(eval_items),
            "tokenizer": getattr(tok, "kind", type(tok).__name__), "vocab_size": tok.vocab_size}
    if pairs_mode:
        objective = _pairs_objective(tok, cfg, spec, train_items, eval_items, where, info)
    else:
        tr, ev = D.encode_documents(tok, train_items), D.encode_documents(tok, eval_items)
        objective = STREAM_OBJECTIVES[cfg.objective](tok, cfg, spec, tr, ev, where)
        info["train_tokens"], info["eval_tokens"] = int(tr.numel()), int(ev.numel())
        if cfg.objective == "clm" and ev.numel():
            info["unigram_baseline_loss"] = unigram_loss(tr, ev, tok.vocab_size)
    return objective, tok, spec, info


def _pick_tokenizer(tok, cfg: TrainConfig, corpus: str):
    """``(tokenizer, made here?)``: a given Tokenizer is kept; a name or nothing makes one (``char``
    reads its vocabulary off the corpus)."""
    name = tok if isinstance(tok, str) else cfg.tokenizer if tok is None else None
    if name is None:
        return tok, False
    return (make_tokenizer("char", text=corpus) if name == "char" else make_tokenizer(name)), True


def _fit_spec(spec, tok, fit_vocab: bool, where: str):
    """The spec, with ``vocab_size`` fitted (when asked) and ``pad_id`` taken from the tokenizer;
    a tokenizer larger than the embedding table is an error."""
    if tok.vocab_size != spec.vocab_size and fit_vocab:
        spec = spec.replace(vocab_size=tok.vocab_size)
    if tok.vocab_size > spec.vocab_size:
        raise DataError(f"vocabulary mismatch: the tokenizer has {tok.vocab_size} tokens but the "
                        f"spec's vocab_size is {spec.vocab_size}", where=f"{where} / vocab_size",
                        fix=f"set vocab_size to {tok.vocab_size} (--set vocab_size={tok.vocab_size}, "
                            "or --fit-vocab / fit_vocab=True to do it automatically)")
    if spec.pad_id is not None and tok.pad_id is not None and spec.pad_id != tok.pad_id:
        spec = spec.replace(pad_id=tok.pad_id)
    return spec


def _pairs_objective(tok, cfg, spec, train_items, eval_items, where, info):
    # seq2seq: source + <eos>, and <bos> + target, must fit; prefix_lm: source <bos> target <eos>
    room = spec.max_len - 1 if cfg.objective == "seq2seq" else spec.max_len - 2
    tr = D.encode_pairs(tok, train_items, room, room, where)
    ev = (D.encode_pairs(tok, eval_items, room, room, where) if eval_items
          else D.Encoded(sources=[], targets=[]))
    if cfg.objective == "prefix_lm":
        over = [i for i, (s, t) in enumerate(zip(tr.sources, tr.targets))
                if len(s) + len(t) + 1 > spec.max_len]
        if over:
            raise DataError(f"example {over[0] + 1} is longer than max_len {spec.max_len} once "
                            "source and target are joined", where=where,
                            fix="raise max_len (--set max_len=N) or shorten the examples")
    info["train_tokens"] = sum(len(s) + len(t) for s, t in zip(tr.sources, tr.targets))
    return PAIRS_OBJECTIVES[cfg.objective](tok, cfg, spec, tr, ev)


def unigram_loss(train_ids: torch.Tensor, eval_ids: torch.Tensor, vocab: int) -> float:
    """Held-out cross-entropy (nats/token) of the best context-free model: training-set token
    frequencies with add-one smoothing.  A language model must beat this to have learned context."""
    counts = torch.bincount(train_ids, minlength=vocab).double() + 1.0
    logp = (counts / counts.sum()).log()
    return float(-logp[eval_ids].mean())
