"""Choosing the next token from the logits: greedy, sampling, and what reshapes the logits first.

- greedy (``do_sample=False``): the most likely token, deterministic;
- sampling: ``softmax(logits / temperature)``; temperature < 1 sharpens, > 1 flattens;
  ``top_k`` keeps the k most likely tokens, ``top_p`` (nucleus sampling, Holtzman et al., 2020) the
  smallest set whose probability reaches p (:func:`warp`).  ``seed`` makes a sampled run
  reproducible;
- before either: ``vocab_limit`` (only ids below it may be chosen) and the repetition penalty of
  CTRL (:func:`penalize_repeats`), in Hugging Face's order.

One row per sequence (greedy decoding, sampling, streaming) goes through a :class:`Chooser`, which
keeps the record of the tokens seen so far; beam search (:mod:`zoo.run.beam`) gets the same
reshaping of its log-probabilities from :func:`beam_processor` and, for beam sampling, its draws
from :func:`beam_sampler`.
"""
from __future__ import annotations

import torch

from .options import GenerationOptions


def pick_next(logits: torch.Tensor, *, do_sample: bool = False, temperature: float = 1.0,
              top_k: int | None = None, top_p: float | None = None,
              generator: torch.Generator | None = None) -> torch.Tensor:
    """``logits (B, V)`` -> next ids ``(B,)``: argmax, or a sample after temperature/top-k/top-p."""
    if not do_sample:
        return logits.argmax(dim=-1)
    probs = torch.softmax(warp(logits, temperature, top_k, top_p), dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def warp(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
         top_p: float | None = None) -> torch.Tensor:
    """Sampling's reshaping of ``logits (B, V)``: divide by the temperature, then set to -inf every
    token outside the ``top_k`` most likely and outside the nucleus of mass ``top_p``."""
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # (B, 1) the k-th largest logit
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        before = probs.cumsum(-1) - probs  # probability mass of the tokens ranked above each one
        drop_sorted = before >= top_p  # the most likely token always survives (before = 0)
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def penalize_repeats(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """The repetition penalty of CTRL (Keskar et al., 2019), as Hugging Face applies it: the logit
    of every token already in the sequence (``seen (B, V)`` bool) is divided by ``penalty`` when
    positive and multiplied by it when negative, so with ``penalty > 1`` a repeat always becomes
    less likely, whatever the logit's sign.  Applied before temperature, top-k and top-p."""
    hit = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, hit, logits)



class Chooser:
    """Logits ``(B, V)`` -> the next ids ``(B,)``: the vocabulary limit, the repetition penalty
    (with its record of the tokens seen so far), then greedy or sampling (:func:`pick_next`)."""

    def __init__(self, model, o: GenerationOptions, ids: torch.Tensor, padding, start: int | None):
        self.o, self.temperature = o, float(o.temperature)  # an int like 2**64 would overflow torch
        self.gen = None
        if o.do_sample and o.seed is not None:
            self.gen = torch.Generator(device=ids.device)
            self.gen.manual_seed(o.seed)
        self.seen = None  # (B, V) bool: the tokens a repetition penalty applies to
        if o.repetition_penalty != 1.0:
            seen = torch.zeros(ids.size(0), model.spec.vocab_size, dtype=torch.int32, device=ids.device)
            if start is None:  # a decoder: the prompt's real tokens
                real = padding.int() if padding is not None else torch.ones_like(ids, dtype=torch.int32)
                seen.scatter_add_(1, ids, real)  # a count, so a pad never erases a real token's mark
            else:  # an encoder-decoder: its start token
                seen[:, start] = 1
            self.seen = seen > 0

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        o, limit = self.o, self.o.vocab_limit
        if limit is not None and limit < logits.size(-1):
            logits = logits.clone()
            logits[..., limit:] = float("-inf")
        if self.seen is not None:
            logits = penalize_repeats(logits, self.seen, float(o.repetition_penalty))
        nxt = pick_next(logits, do_sample=o.do_sample, temperature=self.temperature, top_k=o.top_k,
                        top_p=o.top_p, generator=self.gen)
        if self.seen is not None:
            self.seen.scatter_(1, nxt[:, None], True)  # what was just chosen counts from now on
        return nxt


def beam_processor(o: GenerationOptions):
    """Beam search's reshaping of its log-probabilities, as Hugging Face's processors do:
    ``process(lp (B*K, V), seq (B*K, L), real (B*K, L) or None) -> lp`` applies the vocabulary
    limit, the repetition penalty (counted over the real tokens of ``seq``) and, for beam sampling,
    temperature / top-k / top-p."""
    limit, penalty = o.vocab_limit, float(o.repetition_penalty)

    def process(lp, seq, real):  # (B*K, V) log-probabilities
        if limit is not None and limit < lp.size(-1):
            lp = lp.clone()
            lp[..., limit:] = float("-inf")
        if penalty != 1.0:
            counts = torch.zeros(lp.shape, dtype=torch.int32, device=lp.device)
            counts.scatter_add_(1, seq, real.int() if real is not None else torch.ones_like(seq, dtype=torch.int32))
            lp = penalize_repeats(lp, counts > 0, penalty)
        if o.do_sample:
            lp = warp(lp, float(o.temperature), o.top_k, o.top_p)
        return lp
    return process


def beam_sampler(o: GenerationOptions, device):
    """Beam *sampling*'s draw, ``sample(scores (B, K*V), m) -> (B, m)`` candidate indices from one
    seeded random stream; None for deterministic beam search."""
    if not o.do_sample:
        return None
    gen = torch.Generator(device=device)
    if o.seed is not None:
        gen.manual_seed(o.seed)
    return lambda scores, m: torch.multinomial(torch.softmax(scores, -1), m, generator=gen)
