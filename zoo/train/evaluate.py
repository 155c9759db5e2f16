"""Held-out evaluation: loss (nats per predicted token), perplexity, masked-token accuracy (mlm),
token accuracy and exact match (seq2seq).

Exact match decodes greedily with the model's own ``generate`` (KV cache, the same code users run),
so the number reported is what a user of the checkpoint gets.
"""
from __future__ import annotations

import contextlib
import math

import torch
from torch import nn

from .objectives import MLMObjective, Objective, Seq2SeqObjective, to_device, trim


@torch.no_grad()
def evaluate(model: nn.Module, objective: Objective, device, *, autocast=contextlib.nullcontext,
             exact_match: int = 0) -> dict:
    """Held-out loss (nats/token), perplexity, and accuracy / exact match where defined
    (``exact_match``: how many seq2seq examples to decode, 0 = none)."""
    was = model.training
    model.eval()
    tot = n = correct = 0.0
    for b in objective.eval_set():
        b = to_device(trim(dict(b)), device)
        with autocast():
            s, extra = objective.loss(model, b)
        tot += float(s)
        n += objective.n_tokens(b)
        correct += float(extra.get("correct", 0))
    out: dict = {}
    if n:
        out["eval_loss"] = tot / n
        out["eval_ppl"] = math.exp(min(out["eval_loss"], 50))
        if isinstance(objective, MLMObjective):
            out["eval_masked_acc"] = correct / n
        if isinstance(objective, Seq2SeqObjective):
            out["eval_token_acc"] = correct / n
    if exact_match and isinstance(objective, Seq2SeqObjective) and objective.eval.sources:
        k = min(exact_match, len(objective.eval.sources))
        out["eval_exact_match"] = exact_match_rate(model, objective.tok, objective.eval.sources[:k],
                                                   objective.eval.targets[:k])
        out["eval_exact_match_n"] = k
    model.train(was)
    return out


def greedy_seq2seq(model, tok, sources: list[list[int]], device=None, max_new: int | None = None,
                   batch_size: int = 512) -> list[list[int]]:
    """Greedy ``model.generate`` of an encoder-decoder, ``batch_size`` sources at a time; returns
    the target ids without ``<bos>`` and ``<eos>``.  (``device`` is unused: the model's own is.)"""
    max_new = max_new or model.spec.max_len - 1
    outs: list[list[int]] = []
    for i in range(0, len(sources), batch_size):
        seqs = model.generate(sources[i:i + batch_size], max_new, decoder_start_id=tok.bos_id,
                              stop_tokens=[tok.eos_id], pad_id=tok.pad_id)  # (B, 1 + N)
        for row in seqs[:, 1:].tolist():
            outs.append(row[: row.index(tok.eos_id)] if tok.eos_id in row else row)
    return outs


def exact_match_rate(model, tok, sources, targets, device=None) -> float:
    """Fraction of sources whose greedy output equals the target exactly."""
    pred = greedy_seq2seq(model, tok, sources)
    return sum(p == t for p, t in zip(pred, targets)) / max(1, len(targets))
