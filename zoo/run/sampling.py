"""Choosing the next token from the logits: greedy, sampling, and what reshapes the logits first.

- greedy (``do_sample=False``): the most likely token, deterministic;
- sampling: ``softmax(logits / temperature)``; temperature < 1 sharpens, > 1 flattens;
  ``top_k`` keeps the k most likely tokens, ``top_p`` (nucleus sampling, Holtzman et al., 2020) the
  smallest set whose probability reaches p (:func:`warp`).  ``seed`` makes a sampled run
  reproducible;
- before either: ``vocab_limit`` (only ids below it may be chosen), the repetition penalty of
  CTRL (:func:`penalize_repeats`) and the :class:`TokenRules` a converted model's generation config
  sets (or a call): no repeated n-gram (:func:`banned_ngram_tokens`), banned id sequences, a forced
  first or last token, suppressed ids -- in Hugging Face's order, so greedy and beam tokens are
  its ``generate``'s.

When these rules leave a row nothing at all to choose (every score ``-inf``: ``vocab_limit=5`` with
``no_repeat_ngram_size=1`` after five tokens, every id suppressed), decoding stops with a
:class:`~zoo.errors.ZooError` (``generate.nothing_to_choose``) naming the step, the row and the rules
set (:func:`check_choosable`) -- greedy decoding would otherwise return a banned id (``argmax`` of a
row of ``-inf`` is 0) and sampling fail in ``torch.multinomial``.  It is an error rather than a
stop, because the output would silently be shorter than asked for, or contain what was banned.

One row per sequence (greedy decoding, sampling, streaming) goes through a :class:`Chooser`, which
keeps the record of the tokens seen so far; beam search (:mod:`zoo.run.beam`) gets the same
reshaping of its log-probabilities from :func:`beam_processor` and, for beam sampling, its draws
from :func:`beam_sampler`.
"""
from __future__ import annotations

import torch

from ..errors import ZooError
from .options import GenerationOptions, id_list

NEG_INF = float("-inf")


def rules_set(o: GenerationOptions) -> str:
    """The options that can ban tokens, as set in ``o`` (for messages): ``vocab_limit=5,
    no_repeat_ngram_size=1, suppress_tokens (300 ids)``."""
    parts = [f"{n}={getattr(o, n)}" for n in ("vocab_limit", "no_repeat_ngram_size", "top_k")
             if getattr(o, n) not in (None, 0)]
    for n in ("suppress_tokens", "begin_suppress_tokens", "bad_words", "forced_bos_id", "forced_eos_id"):
        v = getattr(o, n)
        if v is not None and v != []:
            parts.append(f"{n} ({len(v)} entries)" if isinstance(v, (list, tuple)) else f"{n}={v}")
    return ", ".join(parts) or "(none)"


def check_choosable(ok: torch.Tensor, step: int, o: GenerationOptions, unit: str = "row") -> None:
    """``ok (N,)`` bool: whether each row (or prompt, for beam search) still has a token it may
    choose; a :class:`ZooError` (``generate.nothing_to_choose``) for the first that has none."""
    if not bool(ok.all()):
        row = int((~ok).nonzero()[0])
        raise ZooError.of("generate.nothing_to_choose", where="generate.options", step=step + 1,
                          row=f"{unit} {row}", rules=rules_set(o))


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



def banned_ngram_tokens(seq: torch.Tensor, real: torch.Tensor | None, n: int, vocab: int
                        ) -> torch.Tensor:
    """``(N, V)`` bool: the tokens that would complete an ``n``-gram already in ``seq (N, L)``.

    Without a loop over rows: every window of ``n`` tokens whose first ``n - 1`` tokens equal the
    row's last ``n - 1`` tokens bans its ``n``-th token.  ``real (N, L)`` (True = a real token):
    windows touching padding do not count.  For ``n = 1`` every token already present is banned."""
    N, L = seq.shape
    if n < 1 or L < n:  # nothing is banned before the sequence holds one n-gram
        return torch.zeros(N, vocab, dtype=torch.bool, device=seq.device)
    win = seq.unfold(1, n, 1)  # (N, W, n) every n-gram, W = L - n + 1
    ok = torch.ones(win.shape[:2], dtype=torch.bool, device=seq.device)
    if real is not None:
        ok = real.unfold(1, n, 1).all(-1)  # (N, W) windows of real tokens only
    if n > 1:
        tail = seq[:, L - n + 1:]  # (N, n - 1) the tokens the next one would follow
        ok = ok & (win[..., :-1] == tail[:, None, :]).all(-1)
    idx = win[..., -1].masked_fill(~ok, vocab)  # (N, W) a window that does not count: column V
    banned = torch.zeros(N, vocab + 1, dtype=torch.bool, device=seq.device)  # (N, V + 1)
    return banned.scatter_(1, idx, True)[:, :vocab]


class TokenRules:
    """Which tokens may come next, by the rules of a generation config (Hugging Face's logits
    processors of the same names, in its order): no repeated ``no_repeat_ngram_size``-gram;
    ``bad_words`` (a one-id entry never chosen unless it is a stop token, a longer one never
    completed); ``forced_bos_id`` the first new token when the sequence so far is one token;
    ``forced_eos_id`` the token of the last step; ``suppress_tokens`` never; and
    ``begin_suppress_tokens`` not as the first new token (the second, after a forced bos).

    ``steps``: the new tokens of the call (the last step is ``steps - 1``); ``short_start``: the
    sequence starts as one token (an encoder-decoder's start token, or a one-token prompt).
    ``rules(scores (N, V), seq (N, L), real (N, L) or None, step) -> scores``, where ``seq`` is the
    sequence so far (only read when :attr:`needs_seq`)."""

    def __init__(self, o: GenerationOptions, vocab: int, device, *, steps: int, short_start: bool):
        stops = set(o.stop_list())
        words = [list(w) for w in (o.bad_words or ()) if not (len(w) == 1 and w[0] in stops)]
        self.ngram = o.no_repeat_ngram_size
        self.banned = _mask([w[0] for w in words if len(w) == 1], vocab, device)  # (V,) or None
        self.sequences = [(torch.tensor(w[:-1], device=device), w[-1]) for w in words if len(w) > 1]
        self.forced_bos = o.forced_bos_id if short_start else None
        self.forced_eos = id_list(o.forced_eos_id) or None
        self.last = steps - 1
        self.suppressed = _mask(id_list(o.suppress_tokens), vocab, device)
        self.begin = _mask(id_list(o.begin_suppress_tokens), vocab, device)
        self.begin_step = 1 if short_start and o.forced_bos_id is not None else 0
        self.needs_seq = bool(self.ngram or self.sequences)
        self.active = self.needs_seq or any(x is not None for x in (
            self.banned, self.forced_bos, self.forced_eos, self.suppressed, self.begin))

    def __call__(self, scores: torch.Tensor, seq: torch.Tensor | None, real: torch.Tensor | None,
                 step: int) -> torch.Tensor:
        V = scores.size(-1)
        if self.ngram:
            scores = scores.masked_fill(banned_ngram_tokens(seq, real, self.ngram, V), NEG_INF)
        if self.banned is not None:
            scores = scores.masked_fill(self.banned, NEG_INF)
        for prefix, last in self.sequences:  # (P,) ids whose next token would complete a bad word
            n = prefix.numel()
            if seq.size(1) >= n:
                hit = (seq[:, -n:] == prefix).all(-1)  # (N,) rows ending with the prefix
                scores = scores.clone()
                scores[hit, last] = NEG_INF
        if step == 0 and self.forced_bos is not None:
            scores = _forced(scores, [self.forced_bos])
        if step == self.last and self.forced_eos is not None:
            scores = _forced(scores, self.forced_eos)
        if self.suppressed is not None:
            scores = scores.masked_fill(self.suppressed, NEG_INF)
        if step == self.begin_step and self.begin is not None:
            scores = scores.masked_fill(self.begin, NEG_INF)
        return scores


def _mask(ids: list[int], vocab: int, device) -> torch.Tensor | None:
    """``(V,)`` bool, True at ``ids``; None for no ids."""
    if not ids:
        return None
    m = torch.zeros(vocab, dtype=torch.bool, device=device)
    m[torch.tensor(ids, dtype=torch.long, device=device)] = True
    return m


def _forced(scores: torch.Tensor, ids: list[int]) -> torch.Tensor:
    """Every score -inf but those of ``ids``, which become 0 (a forced token)."""
    out = torch.full_like(scores, NEG_INF)
    out[:, ids] = 0.0
    return out


class Chooser:
    """Logits ``(B, V)`` -> the next ids ``(B,)``: the vocabulary limit, the repetition penalty
    (with its record of the tokens seen so far), the :class:`TokenRules` (with the sequence so
    far, when a rule reads it), then greedy or sampling (:func:`pick_next`)."""

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
        self.rules = TokenRules(o, model.spec.vocab_size, ids.device, steps=o.max_new_tokens,
                                short_start=start is not None or ids.size(1) == 1)
        self.step, self.seq, self.real = 0, None, None  # the sequence so far, for the rules that read it
        if self.rules.needs_seq:
            if start is None:  # a decoder: the prompt (its padding marked)
                self.seq, self.real = ids, padding
            else:  # an encoder-decoder: its start token
                self.seq = torch.full((ids.size(0), 1), start, dtype=torch.long, device=ids.device)

    def __call__(self, logits: torch.Tensor, finished: torch.Tensor | None = None) -> torch.Tensor:
        """The next ids; ``finished (B,)`` bool: rows that already stopped (their choice is replaced
        by padding), which may have nothing left to choose."""
        o, limit = self.o, self.o.vocab_limit
        if limit is not None and limit < logits.size(-1):
            logits = logits.clone()
            logits[..., limit:] = NEG_INF
        if self.seen is not None:
            logits = penalize_repeats(logits, self.seen, float(o.repetition_penalty))
        if self.rules.active:
            logits = self.rules(logits, self.seq, self.real, self.step)
        if self.rules.active or limit is not None:  # only these can ban every token of a row
            live = (logits > NEG_INF).any(-1)
            check_choosable(live if finished is None else live | finished, self.step, o)
            if not bool(live.all()):  # a stopped row with nothing left: any id, it becomes padding
                logits = logits.masked_fill(~live[:, None], 0.0)
        nxt = pick_next(logits, do_sample=o.do_sample, temperature=self.temperature, top_k=o.top_k,
                        top_p=o.top_p, generator=self.gen)
        if self.seen is not None:
            self.seen.scatter_(1, nxt[:, None], True)  # what was just chosen counts from now on
        if self.seq is not None:
            self.seq = torch.cat([self.seq, nxt[:, None]], dim=1)  # (B, L + 1)
            if self.real is not None:
                self.real = torch.cat([self.real, torch.ones_like(nxt, dtype=torch.bool)[:, None]], dim=1)
        self.step += 1
        return nxt


def beam_processor(o: GenerationOptions, vocab: int, device, start_len: int):
    """Beam search's reshaping of its log-probabilities, as Hugging Face's processors do:
    ``process(lp (B*K, V), seq (B*K, L), real (B*K, L) or None) -> lp`` applies the vocabulary
    limit, the repetition penalty (counted over the real tokens of ``seq``), the
    :class:`TokenRules` (``seq`` began as ``start_len`` tokens) and, for beam sampling,
    temperature / top-k / top-p."""
    limit, penalty = o.vocab_limit, float(o.repetition_penalty)
    rules = TokenRules(o, vocab, device, steps=o.max_new_tokens, short_start=start_len == 1)

    def process(lp, seq, real):  # (B*K, V) log-probabilities
        if limit is not None and limit < lp.size(-1):
            lp = lp.clone()
            lp[..., limit:] = NEG_INF
        if penalty != 1.0:
            counts = torch.zeros(lp.shape, dtype=torch.int32, device=lp.device)
            counts.scatter_add_(1, seq, real.int() if real is not None else torch.ones_like(seq, dtype=torch.int32))
            lp = penalize_repeats(lp, counts > 0, penalty)
        if rules.active:
            lp = rules(lp, seq, real, seq.size(1) - start_len)
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

    # fewer allowed tokens than candidates (vocab_limit=2, 3 beams: 6 drawn) is fine: torch draws the
    # zero-probability ones last, and they score -inf, so they are never kept
    # (tests/run/test_generation_hostile.py)
    return lambda scores, m: torch.multinomial(torch.softmax(scores, -1), m, generator=gen)
