"""Encoder-decoder decoding: encode the source once, then decode step by step from a start token.

A translation or summarisation model (T5, BART, Marian) reads the whole source with its encoder,
once; the decoder then generates the target one token at a time, its self-attention keys and
values cached as a decoder-only model's are, and its cross-attention keys and values (computed from
the encoder's output, the same at every step) cached after the first step.  The decoder starts from
one token (:func:`start_id`: ``decoder_start_id``, else the tokenizer's bos, else ``pad_id`` as in
T5), and ``generate`` returns the decoder sequence ``(B, 1 + N)`` that begins with it.

:func:`seq2seq_logits` is a logits coroutine like :func:`zoo.run.steps.decoder_logits`: it yields
next-token logits ``(B, V)`` and is sent what was chosen (:func:`zoo.run.steps.sent`), and it drops
rows that have stopped (:class:`zoo.run.steps.LiveRows`) with their encoder output.
"""
from __future__ import annotations

import torch

from .options import GenerationOptions
from .steps import LiveRows, sent


def start_id(model, tokenizer, o: GenerationOptions, pad: int) -> int:
    """An encoder-decoder's first decoder token: ``decoder_start_id``, else the tokenizer's bos,
    else ``pad`` (as in T5)."""
    if o.decoder_start_id is not None:
        return o.decoder_start_id
    tok = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    bos = getattr(tok, "bos_id", None)
    return bos if bos is not None and bos < model.spec.vocab_size else pad


def seq2seq_logits(model, src, src_padding, use_cache, start, head, steps):
    """The encoder-decoder coroutine: encode ``src (B, S)`` (``src_padding`` True = real, or None)
    once, then decode step by step from the token ``start`` (cross-attention k/v cached too)."""
    B = src.size(0)
    dev = src.device
    memory, mem_pad = model.encode(src, src_padding)
    explicit = model.spec.pad_id is not None  # the start token is often the pad id (T5)
    tgt = torch.full((B, 1), start, dtype=torch.long, device=dev)
    ones = torch.ones(B, 1, dtype=torch.bool, device=dev) if explicit else None
    if use_cache:
        cache = model.new_cache(capacity=1 + steps)
        logits = head(model.decode(tgt, memory, mem_pad, tgt_padding=ones, cache=cache,
                                   return_hidden=True))
        rows = LiveRows(B)
        while True:
            nxt, order, finished = sent((yield rows.full(logits)))
            if order is not None:
                cache.reorder(order)
            keep = rows.drop(finished, cache)
            if keep is not None:
                memory = memory[keep]
                mem_pad = mem_pad[keep] if mem_pad is not None else None
                ones = ones[keep] if ones is not None else None
            logits = head(model.decode(rows.take(nxt)[:, None], memory, mem_pad, tgt_padding=ones,
                                       cache=cache, return_hidden=True))
    full = ones
    while True:
        nxt, order, _ = sent((yield head(model.decode(tgt, memory, mem_pad, tgt_padding=full,
                                                    return_hidden=True))))
        if order is not None:
            tgt = tgt.index_select(0, order)
        tgt = torch.cat([tgt, nxt[:, None]], dim=1)
        if full is not None:
            full = torch.cat([full, ones], dim=1)
