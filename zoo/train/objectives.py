"""Objectives: what a model learns to predict, one class per objective.

An :class:`Objective` turns a prepared dataset into global batches (dicts of tensors, batch
dimension first) and a batch into ``(sum of token losses, extra sums)``.  Every rank builds the same
global batch from the same ``(seed, step)`` generator and keeps its slice; the loop divides the
summed loss by the global count of predicted tokens (:meth:`Objective.n_tokens`).

``clm``        causal LM (GPT): every next token of windows cut from the document stream.  A window
               of ``block + 1`` tokens gives the input ``w[:-1]`` and the labels ``w[1:]``: label
               ``t`` is the token *after* input ``t`` (the shift by one; no shift would teach copying).
``mlm``        masked LM (BERT): 15% of tokens are picked; of those 80% become ``<mask>``, 10% a
               random token, 10% stay; the model predicts the originals.
``prefix_lm``  a decoder whose prefix is seen bidirectionally (UniLM, T5's prefix LM): on a pairs
               file the source is the prefix; on documents a random split of each window.  Loss only
               on the part after the prefix.
``seq2seq``    encoder-decoder (T5): the encoder reads the source, the decoder predicts the target
               after ``<bos>`` and ends with ``<eos>``.

Labels use ``IGNORE`` (-100, PyTorch's ``ignore_index``) where nothing is predicted.

(These were called ``Task``/``CLMTask``/...; ``zoo.run.pipelines`` is something else -- inference helpers
such as fill-mask -- so the training side is now called *objectives*.  The old names remain as
aliases in :mod:`zoo.train`.)
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .data import pad_batch
from ..errors import DataError

IGNORE = -100


def ce_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Summed cross-entropy over the labelled positions (float32 even under autocast)."""
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), labels.reshape(-1),
                           ignore_index=IGNORE, reduction="sum")


class Objective:
    """Base class: data -> batches, batch -> summed loss."""

    def __init__(self, tok, cfg, spec):
        self.tok, self.cfg, self.spec = tok, cfg, spec

    def train_batch(self, gen: torch.Generator, size: int) -> dict:
        raise NotImplementedError

    def eval_set(self) -> list[dict]:
        raise NotImplementedError

    def loss(self, model, batch: dict) -> tuple[torch.Tensor, dict]:
        raise NotImplementedError

    def n_tokens(self, batch: dict) -> int:
        """Predicted tokens in ``batch`` (the loss is normalised by this, summed over ranks)."""
        return int((batch["labels"] != IGNORE).sum())


# ---------------------------------------------------------------------- objectives on a token stream
class _Stream(Objective):
    """Windows of ``block_size`` (+ ``extra``) tokens cut at random offsets of the training stream;
    the held-out stream is cut into consecutive windows, the same every evaluation."""

    extra = 1  # one more token than the input, for the shifted labels

    def __init__(self, tok, cfg, spec, train_ids: torch.Tensor, eval_ids: torch.Tensor, where):
        super().__init__(tok, cfg, spec)
        self.block = cfg.block_size or min(spec.max_len, 128)
        if self.block > spec.max_len:
            raise DataError(f"block_size {self.block} is above the spec's max_len {spec.max_len}",
                            where="train.block_size",
                            fix=f"use block_size <= {spec.max_len} or raise max_len (--set max_len=N)")
        need = self.block + self.extra
        if train_ids.numel() < need:
            raise DataError(f"the training text has only {train_ids.numel()} tokens, fewer than one "
                            f"window of {need}", where=where,
                            fix="give more text or a smaller --block-size")
        self.train_ids, self.eval_ids = train_ids, eval_ids
        self.starts = self.allowed_starts(train_ids, need, cfg.window_starts, where)

    def allowed_starts(self, ids: torch.Tensor, need: int, rule: str, where) -> torch.Tensor | None:
        """Offsets where a training window may begin under ``cfg.window_starts`` (None: anywhere):
        the first token and every token right after a separator (the document separator, and for
        ``line`` the newline too), as long as a whole window fits after it."""
        if rule == "any":
            return None
        seps = [self.tok.eos_id]
        if rule == "line":
            nl = self.tok.encode("\n")
            if len(nl) != 1 or nl[0] == getattr(self.tok, "unk_id", None):
                raise DataError("window_starts 'line' needs a tokenizer that reads a newline as one "
                                "known token", where="train.window_starts",
                                fix="use window_starts: document (or any), or the char / byte tokenizer")
            seps.append(nl[0])
        after = torch.isin(ids[:-1], torch.tensor([s for s in seps if s is not None]))
        starts = torch.cat([torch.zeros(1, dtype=torch.long), after.nonzero().squeeze(1) + 1])
        starts = starts[starts <= ids.numel() - need]
        if not starts.numel():
            raise DataError(f"no {rule} start leaves room for a window of {need} tokens", where=where,
                            fix="give more text, a smaller --block-size, or window_starts: any")
        return starts

    def windows(self, gen, size):
        need = self.block + self.extra
        if self.starts is None:
            starts = torch.randint(0, self.train_ids.numel() - need + 1, (size,), generator=gen)
        else:
            starts = self.starts[torch.randint(0, self.starts.numel(), (size,), generator=gen)]
        return torch.stack([self.train_ids[s:s + need] for s in starts.tolist()])  # (B, need)

    def make_batch(self, w: torch.Tensor, gen: torch.Generator) -> dict:
        """One batch from windows ``w (B, block + extra)``; ``gen`` draws any randomness (masking)."""
        raise NotImplementedError

    def train_batch(self, gen, size):
        return self.make_batch(self.windows(gen, size), gen)

    def eval_set(self):
        gen = torch.Generator().manual_seed(1234)  # the same held-out batches every evaluation
        return [self.make_batch(w, gen) for w in self.eval_windows()]

    def eval_windows(self) -> list[torch.Tensor]:
        need = min(self.block + self.extra, self.eval_ids.numel())
        if need < 2:
            return []
        n = self.eval_ids.numel() // need
        rows = self.eval_ids[: n * need].view(n, need)  # (n, need) consecutive windows
        rows = rows[: self.cfg.eval_batches * self.cfg.batch_size]
        bs = self.cfg.batch_size
        return [rows[i:i + bs] for i in range(0, rows.size(0), bs)]


class CLMObjective(_Stream):
    """Causal LM: input ``w[:, :-1]``, labels ``w[:, 1:]`` -- position t predicts token t + 1."""

    @staticmethod
    def shift(w: torch.Tensor) -> dict:
        return {"ids": w[:, :-1], "labels": w[:, 1:]}  # (B, block) each

    def make_batch(self, w, gen):
        return self.shift(w)

    def loss(self, model, b):
        return ce_sum(model(b["ids"]), b["labels"]), {}


class MLMObjective(_Stream):
    """Masked LM: ``mask_prob`` of the tokens are picked; ``mask_token_frac`` of those become
    ``<mask>`` and the rest are split evenly between a random token and the token itself (BERT's
    80/10/10 at the default 0.8).  Also counts correctly predicted picked tokens."""

    extra = 0

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        if self.tok.mask_id is None:
            raise DataError("the tokenizer has no <mask> token", where="train.objective",
                            fix="use the char or byte tokenizer, which reserve <mask>")
        specials = [getattr(self.tok, f"{n}_id") for n in ("pad", "unk", "bos", "eos", "mask")]
        self.specials = torch.tensor([s for s in specials if s is not None], dtype=torch.long)
        self.n_special = int(self.specials.max()) + 1 if len(self.specials) else 0

    def mask(self, ids: torch.Tensor, gen) -> dict:
        """Pick ``mask_prob`` of the (non-special) tokens and corrupt them as the class says."""
        pick = torch.rand(ids.shape, generator=gen) < self.cfg.mask_prob
        pick &= ~torch.isin(ids, self.specials)
        labels = torch.where(pick, ids, torch.full_like(ids, IGNORE))
        r = torch.rand(ids.shape, generator=gen)
        rand_ids = torch.randint(0, self.tok.vocab_size, ids.shape, generator=gen)
        rand_ids = torch.where(rand_ids < self.n_special, ids, rand_ids)  # never inject a special
        to_mask = self.cfg.mask_token_frac
        to_random = to_mask + (1 - to_mask) / 2
        x = torch.where(pick & (r < to_mask), torch.full_like(ids, self.tok.mask_id), ids)
        x = torch.where(pick & (r >= to_mask) & (r < to_random), rand_ids, x)
        return {"ids": x, "labels": labels}

    make_batch = mask

    def loss(self, model, b):
        sel = b["labels"] != IGNORE  # (B, T)
        labels = b["labels"][sel]  # (N,)
        logits = model(b["ids"], select=sel)  # (N, V): the vocabulary projection only where asked
        correct = (logits.argmax(-1) == labels).sum()
        return ce_sum(logits, labels), {"correct": correct}


class PrefixDocObjective(_Stream):
    """prefix_lm on documents: each window gets a random prefix length; loss after it."""

    def split(self, w, gen):
        T = w.size(1) - 1
        plen = torch.randint(1, max(2, T), (w.size(0),), generator=gen)  # (B,)
        ids, labels = w[:, :-1], w[:, 1:].clone()
        labels[torch.arange(T)[None, :] < (plen[:, None] - 1)] = IGNORE
        return {"ids": ids, "labels": labels, "prefix": plen}

    make_batch = split

    def loss(self, model, b):
        return ce_sum(model(b["ids"], prefix_lengths=b["prefix"]), b["labels"]), {}


# ------------------------------------------------------------ objectives on (source, target) pairs
class _Pairs(Objective):
    def __init__(self, tok, cfg, spec, train_pairs, eval_pairs):
        super().__init__(tok, cfg, spec)
        for name in ("bos_id", "eos_id", "pad_id"):
            if getattr(tok, name, None) is None:
                raise DataError(f"the tokenizer has no {name[:-3]} token", where="train.tokenizer",
                                fix="use the char or byte tokenizer")
        self.train, self.eval = train_pairs, eval_pairs

    def train_batch(self, gen, size):
        idx = torch.randint(0, len(self.train.sources), (size,), generator=gen).tolist()
        return self.collate([self.train.sources[i] for i in idx], [self.train.targets[i] for i in idx])

    def eval_set(self):
        n = min(len(self.eval.sources), self.cfg.eval_batches * self.cfg.batch_size)
        bs = self.cfg.batch_size
        return [self.collate(self.eval.sources[i:i + bs], self.eval.targets[i:i + bs])
                for i in range(0, n, bs)]


class Seq2SeqObjective(_Pairs):
    """The source ends with ``<eos>`` (as in T5 and Marian, and as ``model.generate(text)`` encodes
    a prompt); the decoder reads ``<bos> target`` and predicts ``target <eos>``.  Batches are
    right-padded; ``src_padding`` / ``tgt_padding`` are True at real tokens."""

    def __init__(self, tok, cfg, spec, train_pairs, eval_pairs):
        super().__init__(tok, cfg, spec, train_pairs, eval_pairs)
        for enc in (self.train, self.eval):
            enc.sources = [s + [tok.eos_id] for s in enc.sources]

    def collate(self, srcs, tgts):
        t = self.tok
        src = pad_batch(srcs, t.pad_id)                            # (B, S)
        tin = pad_batch([[t.bos_id] + s for s in tgts], t.pad_id)  # (B, T) decoder input
        tout = pad_batch([s + [t.eos_id] for s in tgts], IGNORE)   # (B, T) labels
        tlen = torch.tensor([len(s) + 1 for s in tgts])  # (B,) <bos> + target
        return {"src": src, "src_padding": src != t.pad_id, "tgt": tin,
                "tgt_padding": torch.arange(tin.size(1))[None, :] < tlen[:, None], "labels": tout}

    def loss(self, model, b):
        logits = model(b["src"], b["tgt"], src_padding=b["src_padding"], tgt_padding=b["tgt_padding"])
        sel = b["labels"] != IGNORE
        correct = (logits.argmax(-1)[sel] == b["labels"][sel]).sum()
        return ce_sum(logits, b["labels"]), {"correct": correct}


class PrefixPairsObjective(_Pairs):
    """prefix_lm on pairs: ``source <bos> target <eos>``, the source and <bos> are the prefix."""

    def collate(self, srcs, tgts):
        t = self.tok
        seqs = [s + [t.bos_id] + g + [t.eos_id] for s, g in zip(srcs, tgts)]
        ids = pad_batch([q[:-1] for q in seqs], t.pad_id)     # (B, T)
        labels = pad_batch([q[1:] for q in seqs], IGNORE)     # (B, T) shifted by one
        plen = torch.tensor([len(s) + 1 for s in srcs])       # (B,)
        labels[torch.arange(labels.size(1))[None, :] < (plen[:, None] - 1)] = IGNORE
        mask = torch.arange(ids.size(1))[None, :] < torch.tensor([len(q) - 1 for q in seqs])[:, None]
        return {"ids": ids, "mask": mask, "labels": labels, "prefix": plen}

    def loss(self, model, b):
        logits = model(b["ids"], attention_mask=b["mask"], prefix_lengths=b["prefix"])
        return ce_sum(logits, b["labels"]), {}


#: the objective class for each (objective, data kind)
STREAM_OBJECTIVES = {"clm": CLMObjective, "mlm": MLMObjective, "prefix_lm": PrefixDocObjective}
PAIRS_OBJECTIVES = {"seq2seq": Seq2SeqObjective, "prefix_lm": PrefixPairsObjective}


# ------------------------------------------------------------ batch helpers (loop and evaluation)
def slice_batch(batch: dict, lo: int, hi: int) -> dict:
    """Rows ``lo:hi`` of every tensor (a rank's share, or a micro-batch)."""
    return {k: v[lo:hi] for k, v in batch.items()}


def to_device(batch: dict, device) -> dict:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def trim(batch: dict) -> dict:
    """Drop right padding columns that are padding in every row of this (micro-)batch."""
    for key, real in (("src", "src_padding"), ("tgt", "tgt_padding"), ("ids", "mask")):
        if real in batch:
            keep = int(batch[real].any(0).nonzero().max()) + 1 if bool(batch[real].any()) else 1
            batch[key], batch[real] = batch[key][:, :keep], batch[real][:, :keep]
            if key in ("tgt", "ids"):
                batch["labels"] = batch["labels"][:, :keep]
    return batch
