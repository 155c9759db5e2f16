"""Beam search: keep the ``num_beams`` most likely continuations instead of one.

Greedy decoding commits to the single most likely token at every step; a slightly less likely
token can lead to a much more likely sentence, and greedy never finds it.  Beam search keeps ``K =
num_beams`` partial sequences (*beams*) per prompt.  Each step scores every one-token extension of
every beam by its total log-probability, ``score(beam) + log p(token | beam)``, and keeps the best
``K`` of those ``K x V`` candidates.  A candidate that ends with a stop token is set aside as a
finished *hypothesis*, scored ``sum log p / length ** length_penalty`` (``length_penalty > 0``
favours longer outputs, ``< 0`` shorter ones, ``0`` compares raw sums).  Translation and
summarisation models (Marian, BART, T5) are published with beam search (Wu et al., 2016; the
length penalty is theirs in spirit, Hugging Face's in form).

This module is the algorithm only, on tensors: it drives a *logits coroutine* (see
:mod:`zoo.run.steps`), which yields next-token logits ``(B*K, V)`` and is sent ``(next_ids (B*K,),
order (B*K,))``: the new beam ``j`` continues old beam ``order[j]``, so the coroutine first
reorders its KV cache rows in place (:meth:`zoo.model.layers.KVCache.reorder`), then feeds the new
tokens.  The bookkeeping is Hugging Face ``transformers``' vectorised beam search (version 4.50 on),
step for step, so that the same model gives the same tokens (tests/run/test_beam.py):

- ``2K`` candidates are taken per prompt (``max(2, 1 + number of stop tokens) * K``), so that at
  least ``K`` of them are still running even when the best ``K`` all stopped;
- only a stop among the best ``K`` candidates may become a hypothesis;
- at ``max_new_tokens`` every running beam is a hypothesis;
- a prompt is done when no running beam can beat its worst kept hypothesis, judged at the current
  length (``early_stopping=False``, HF's default heuristic), or as soon as it has ``K`` hypotheses
  (``early_stopping=True``).

What may be chosen at all (no repeated n-gram, banned or forced tokens, the repetition penalty) is
the caller's ``process``: :func:`zoo.run.sampling.beam_processor`, the rules greedy decoding uses.

Shapes: ``B`` prompts, ``K`` beams, ``V`` vocabulary, ``L`` tokens so far.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..deprecation import moved

#: The score of a candidate that may not be chosen (Hugging Face's value, kept for equal ties).
NEG = -1.0e9


@dataclass
class BeamResult:
    """``sequences (B*R, L0 + n)``: for each prompt its ``R = num_return_sequences`` best
    hypotheses, best first, after the ``L0`` starting tokens (the prompt, or an encoder-decoder's
    start token), padded with ``pad`` after the stop token; ``scores (B*R,)``: their length-penalised
    log-probabilities; ``lengths (B*R,)``: the new tokens of each (its stop token included)."""
    sequences: torch.Tensor
    scores: torch.Tensor
    lengths: torch.Tensor


def search(steps, seq: torch.Tensor, real: torch.Tensor | None, *, num_beams: int,
           max_new_tokens: int, stops: torch.Tensor, pad: int, length_penalty: float = 1.0,
           early_stopping: bool = False, num_return_sequences: int = 1, process=None,
           sample=None, stuck=None) -> BeamResult:
    """Run beam search over the logits coroutine ``steps`` (not yet started).

    ``seq (B*K, L0)``: the starting tokens, each prompt repeated ``K`` times (row ``b*K + k``);
    ``real (B*K, L0)`` bool or None: which of them are real (not padding).  ``stops (S,)``: stop
    token ids.  ``process(log_probs (B*K, V), seq (B*K, L), real) -> log_probs``: the caller's
    processors (vocabulary limit, repetition penalty, no repeated n-gram, forced tokens...).  ``sample(scores (B, K*V), m) -> (B, m)``
    indices: beam *sampling* instead of the top ``m`` (None: deterministic beam search).
    ``stuck(ok (B,), step)``: called when ``process`` left some prompt no candidate at all (every
    beam's every token banned); it raises (:func:`zoo.run.sampling.check_choosable`).

    A stop list covering (nearly) the whole vocabulary is valid: the candidates asked for are at most
    the ``K x V`` there are, every beam ends at its first token, and the best of those is returned."""
    K, N = num_beams, max_new_tokens
    BK, L0 = seq.shape
    B, dev = BK // K, seq.device
    keep = max(2, 1 + stops.numel()) * K  # candidates per prompt, so K stay running (at most K x V: below)
    top_k_mask = None  # only the best K may become hypotheses
    running = torch.full((B, K, L0 + N), pad, dtype=torch.long, device=dev)
    running[:, :, :L0] = seq.view(B, K, L0)
    run_scores = torch.zeros(B, K, device=dev)
    run_scores[:, 1:] = NEG  # all beams start equal: only the first one's extensions count
    done_seq = running.clone()
    done_scores = torch.full((B, K), NEG, device=dev)
    done_len = torch.zeros(B, K, dtype=torch.long, device=dev)
    finished = torch.zeros(B, K, dtype=torch.bool, device=dev)
    can_improve = torch.ones(B, 1, dtype=torch.bool, device=dev)
    real_all = None
    if real is not None:  # (B*K, L0 + N): generated tokens are all real
        real_all = torch.ones(BK, L0 + N, dtype=torch.bool, device=dev)
        real_all[:, :L0] = real
    batch_offset = torch.arange(B, device=dev)[:, None] * K  # (B, 1)
    try:
        logits = next(steps) if N else None
        for t in range(N):
            L = L0 + t  # tokens so far
            flat = running.view(BK, -1)[:, :L]
            flat_real = None if real_all is None else real_all[:, :L]
            lp = torch.log_softmax(logits.float(), dim=-1)  # (B*K, V)
            V = lp.size(-1)
            if process is not None:
                lp = process(lp, flat, flat_real)
            total = (lp.view(B, K, V) + run_scores[:, :, None]).view(B, K * V)
            if top_k_mask is None:
                keep = min(keep, K * V)  # every token a stop token: 1 + S candidates per beam is more than exist
                top_k_mask = torch.arange(keep, device=dev) < K
            if stuck is not None:  # a beam at NEG (not yet started, or ended) is no candidate
                # a prompt already done (a hypothesis kept, or nothing can beat them) may be stuck
                ok = (total > NEG / 2).any(-1) | finished.any(-1) | ~can_improve[:, 0]
                if not bool(ok.all()):
                    stuck(ok, t)
            if sample is None:
                top_scores, top_idx = total.topk(keep, dim=-1)  # (B, 2K)
            else:
                top_idx = sample(total, keep)
                top_scores, order = total.gather(1, top_idx).sort(dim=-1, descending=True)
                top_idx = top_idx.gather(1, order)
            src_beam, token = top_idx // V, top_idx % V  # (B, 2K) which beam, which token
            cand = running.gather(1, src_beam[:, :, None].expand(-1, -1, L0 + N)).clone()
            cand[:, :, L] = token
            hits = torch.isin(token, stops) if stops.numel() else torch.zeros_like(token, dtype=torch.bool)
            if t == N - 1:
                hits = torch.ones_like(hits)  # the length limit ends every beam
            # the K best candidates that did not stop keep running
            alive_scores = top_scores + hits.float() * NEG
            nxt = alive_scores.topk(K, dim=-1).indices  # (B, K)
            running = cand.gather(1, nxt[:, :, None].expand(-1, -1, L0 + N))
            run_scores = alive_scores.gather(1, nxt)
            # stops among the best K become hypotheses if they beat the worst one kept
            new = hits & top_k_mask[None, :]
            scored = top_scores / float((L + 1 - L0) ** length_penalty)
            full = finished.all(-1, keepdim=True) & early_stopping
            scored = scored + full.float() * NEG + (~can_improve).float() * NEG + (~new).float() * NEG
            m_scores = torch.cat([done_scores, scored], dim=1)  # (B, 3K)
            best = m_scores.topk(K, dim=-1).indices
            done_scores = m_scores.gather(1, best)
            done_seq = torch.cat([done_seq, cand], 1).gather(1, best[:, :, None].expand(-1, -1, L0 + N))
            done_len = torch.cat([done_len, torch.full_like(token, t + 1)], 1).gather(1, best)
            finished = torch.cat([finished, new], 1).gather(1, best)
            # can a running beam still beat the worst hypothesis (at the current length)?
            best_running = run_scores[:, :1] / float((L + 1 - L0) ** length_penalty)
            worst = torch.where(finished, done_scores.min(dim=1, keepdim=True).values,
                                torch.full_like(done_scores, NEG))
            can_improve = can_improve & (best_running > worst).any(-1, keepdim=True)
            stop = not bool(can_improve.any()) or (early_stopping and bool(finished.all())) \
                or bool(hits.all())
            if stop:
                break
            order = (src_beam.gather(1, nxt) + batch_offset).view(BK)  # new beam j <- old order[j]
            if real_all is not None:
                real_all = real_all.index_select(0, order)
            logits = steps.send((running[:, :, L].reshape(BK), order))
    finally:
        steps.close()
    R = num_return_sequences
    lengths = done_len[:, :R].reshape(B * R)
    n = int(lengths.max()) if N else 0
    seqs = done_seq[:, :R, :L0 + n].reshape(B * R, L0 + n)
    return BeamResult(seqs, done_scores[:, :R].reshape(B * R), lengths)


__getattr__ = moved(__name__)  # banned_ngram_tokens: zoo.run.sampling (zoo.deprecation)
