"""Decoding steps: the *logits coroutines* that run the model, prefill first, then one token a step.

A coroutine yields the next-token logits ``(B, V)`` of every row and is sent what was chosen
(:func:`sent`): the ids ``(B,)``; from beam search ``(ids, order)``, the new row ``j`` continuing old
row ``order[j]`` (the cache is reordered in place, :meth:`zoo.model.layers.KVCache.reorder`); from
the stop-token loop ``(ids, None, finished)``.  The driver -- :func:`zoo.run.generate.stream`'s loop
or :func:`zoo.run.beam.search` -- never touches the model, and :func:`zoo.guard.health.finite_steps`
wraps any coroutine to refuse NaN logits.  This module holds the decoder-only coroutine
(:func:`decoder_logits`) and what the encoder-decoder one (:mod:`zoo.run.seq2seq`) shares with it.

The KV cache: a language model predicts the next token from all the previous ones.  Generating
``N`` tokens naively runs the whole growing sequence through the model ``N`` times, recomputing the
keys and values of every earlier token at every step: ``O(N²)`` projections.  The cache keeps each
layer's keys and values (:class:`zoo.model.layers.KVCache`), so after one *prefill* pass over the
prompt every step feeds just the newest token: its query attends to the cached keys.  Every
position scheme stays right because positions are absolute (embedding tables and RoPE use the
token's own position; ALiBi and T5 biases are computed between the query's position and each
cached key's, ``cache.key_pos``), and every mask rule sees the query offset
(``MaskContext.q_offset``).  ``use_cache=False`` runs the slow way and must give the same tokens
(the test suite checks it for every position scheme).

The cache is **static**: its buffers are allocated once, for prompt + ``max_new_tokens`` slots, and
each step writes its keys into the next slots in place, so decoding allocates nothing per token and
its speed is set by reading the weights (batch-1 decoding is memory-bound: ``zoo bench`` shows the
fraction of the memory roofline reached).  A left-padded batch with much padding is prefilled row
by row (:func:`ragged_prefill`); rows that have stopped are dropped from the batch the model
computes once they are 1/8 of it (:class:`LiveRows`); the LM head runs on the last position only
(:func:`make_head`).  The compiled counterpart is :func:`zoo.run.compiled.decoder_logits`.
"""
from __future__ import annotations

import torch


def sent(value) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """What a logits coroutine is sent, as ``(ids, order, finished)``: the chosen ids ``(B,)``;
    from beam search ``(ids, order)``, where ``order (B,)`` says which old row each new row
    continues; from :func:`zoo.run.generate.stream`'s loop, with stop tokens, ``(ids, None,
    finished)``, ``finished (B,)`` the rows that have stopped (see :class:`LiveRows`)."""
    if not isinstance(value, tuple):
        return value, None, None
    return (*value, None)[:3]


#: LM heads with at least this many weights get a transposed copy for CPU decoding (see make_head)
TRANSPOSED_HEAD_MIN = 1 << 22


def make_head(model, steps: int):
    """The next-token logits of the last position, soft-capped when the spec says so."""
    head = _linear_head(model, steps)
    if model.spec.logit_softcap is None:
        return head
    return lambda hidden: model.head_output(head(hidden))


def _linear_head(model, steps: int):
    """``hidden (B, T, D) -> logits (B, V)`` of the last position only: the LM head over every
    prompt position would cost ``T x D x V`` for nothing.

    On a CPU the LM head of a large vocabulary dominates a decoding step (GPT-2: 50257 x 768, a
    third of all weights), and a matrix-vector product reads a ``(D, V)`` matrix about 1.6x faster
    than ``nn.Linear``'s ``(V, D)`` layout.  So for long enough runs a transposed copy is made once
    per call (it pays for itself within a few steps) and dropped afterwards; the weights
    themselves are untouched.  GPUs read both layouts alike, so they skip this."""
    head_in = model.head_input
    if not isinstance(model.lm_head, torch.nn.Linear):  # e.g. int8 weights (zoo.run.precision)
        return lambda hidden: model.lm_head(head_in(hidden[:, -1]))
    weight, bias = model.lm_head.weight, model.lm_head.bias
    if weight.device.type == "cpu" and steps >= 16 and weight.numel() >= TRANSPOSED_HEAD_MIN:
        wt = weight.detach().t().contiguous()  # (D, V)

        def head(hidden):
            logits = head_in(hidden[:, -1]) @ wt  # (B, V)
            return logits + bias if bias is not None else logits

        return head
    return lambda hidden: model.lm_head(head_in(hidden[:, -1]))


#: a left-padded batch whose padding is at least this share of its prompt tokens is prefilled
#: row by row (:func:`ragged_prefill`) instead of as one padded block
RAGGED_MIN_PADDING = 0.25


def ragged_prefill(model, ids, padding, prefix_length, head, steps):
    """Prefill a left-padded batch of prompts one prompt at a time, without their padding, and
    merge the caches into the batch's (:meth:`zoo.model.layers.KVCache.from_rows`): ``(cache, logits (B, V))``, or
    None where the padded prefill is used (little padding, an explicit ``prefix_length``, positions
    that depend on the call's length such as dynamic or longrope rope scaling, a cache that is not
    plain self-attention keys/values).

    Why: a batch of prompts of 8..256 tokens padded to 256 spends about half of its prefill
    matmuls, and more of its attention (quadratic in the padded length), on padding.  Each prompt
    alone computes exactly what its padded row would (positions count from the row's first real
    token either way, and padding is masked), so the batch continues with the same cache it would
    have had -- and each prompt's first token is the one it gets when generated alone."""
    if padding is None or prefix_length is not None or ids.size(0) < 2:
        return None
    if getattr(model.decoder.positions, "length_dependent", False):
        return None  # dynamic / longrope rotate by the batch's longest length: a row alone differs
    lengths = padding.sum(-1).tolist()  # real tokens per row (left padding: the last ones)
    B, T0 = ids.shape
    if 1 - sum(lengths) / (B * T0) < RAGGED_MIN_PADDING:
        return None
    explicit = model.spec.pad_id is not None
    rows, hidden = [], []
    for i, n in enumerate(lengths):
        row = ids[i:i + 1, T0 - n:]  # (1, n): the prompt without its padding
        c = model.new_cache(capacity=n)
        mask = torch.ones_like(row, dtype=torch.bool) if explicit else None
        hidden.append(model(row, attention_mask=mask, cache=c, return_hidden=True,
                            prefix_lengths=torch.full((1,), n, dtype=torch.long, device=ids.device)
                            )[:, -1:])  # (1, 1, D): the last position is all the head needs
        rows.append(c)
    try:
        cache = type(rows[0]).from_rows(rows, lengths, T0 + steps)
    except (AttributeError, ValueError):
        return None  # not a plain self-attention cache: the padded prefill handles it
    return cache, head(torch.cat(hidden, 0))  # (B, V)


#: drop finished rows from the batch once they are at least this share of the rows still computed
#: (:class:`LiveRows`); None keeps every row to the end (the benchmark's "no compaction" run)
COMPACT_SHARE: float | None = 1 / 8


class LiveRows:
    """Which rows of a generated batch the model still computes.

    A row that has produced a stop token only yields ``pad_id`` from then on, so computing its next
    token is waste: with rows ending at different steps, a fixed-shape batch spends the finished
    rows' share of every later step for nothing.  So once the finished rows are at least
    :data:`COMPACT_SHARE` of the rows still computed, a KV-cached coroutine *compacts* the batch:
    the cache keeps only the live rows (:meth:`zoo.model.layers.KVCache.keep`), as do the per-row inputs
    of each step (:meth:`take`), and the model runs on the smaller batch.  The logits handed out
    stay ``(B, V)`` (:meth:`full`; a dropped row's are zeros, and its token is replaced by
    ``pad_id``), so the caller -- choosing, sampling with its random stream, the repetition record,
    streaming -- sees the batch it asked for, and a live row gets the tokens it got before.
    Compiled decoding (:mod:`zoo.run.compiled`) keeps its fixed batch; so does ``use_cache=False``."""

    __slots__ = ("B", "index")

    def __init__(self, B: int):
        self.B = B
        self.index: torch.Tensor | None = None  # (B',) the original rows still computed; None: all

    def drop(self, finished: torch.Tensor | None, cache) -> torch.Tensor | None:
        """Drop the rows ``finished (B,)`` marks, if enough of them; returns the positions kept
        within the previous live rows (to slice the caller's per-row tensors), or None."""
        if finished is None or COMPACT_SHARE is None or self.B == 1:
            return None  # a single row that finishes ends the generation: nothing to drop
        f = finished if self.index is None else finished.index_select(0, self.index)
        dead, n = int(f.sum()), f.numel()
        if not dead or dead == n or dead < COMPACT_SHARE * n:
            return None
        keep = (~f).nonzero().squeeze(1)  # (B',)
        cache.keep(keep)
        self.index = keep if self.index is None else self.index.index_select(0, keep)
        return keep

    def take(self, x: torch.Tensor) -> torch.Tensor:
        """The live rows of a full-batch tensor ``x (B, ...)``."""
        return x if self.index is None else x.index_select(0, self.index)

    def full(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits (B', V)`` of the live rows as ``(B, V)``, zeros for the dropped rows."""
        if self.index is None:
            return logits
        out = logits.new_zeros(self.B, logits.size(-1))
        return out.index_copy_(0, self.index, logits)


def _fused_plan(model, B, padding, prefix_length, capacity):
    """The fused decoding step of a q4 model (:func:`zoo.run.qstep.plan_for`), or None: every
    other model, and a q4 one it does not cover (``model.qstep_reason`` says why), takes the
    module path below."""
    if getattr(model, "quantized", None) != "q4":
        return None
    from . import qstep

    return qstep.plan_for(model, B, padding, prefix_length, capacity)


def decoder_logits(model, ids, padding, use_cache, prefix_length, head, steps):
    """The decoder-only coroutine: yields next-token logits ``(B, V)``; is sent what was chosen
    (:func:`sent`).  ``ids (B, T0)`` the prompts, ``padding (B, T0)`` True = real (left padding) or
    None, ``prefix_length`` a prefix LM's bidirectional prefix (None: the whole prompt), ``head``
    from :func:`make_head`, ``steps`` the new tokens the cache is sized for."""
    B, T0 = ids.shape
    dev = ids.device
    # explicit padding whenever ids alone could be mistaken for padding (a generated pad_id token)
    explicit = padding is not None or model.spec.pad_id is not None
    full = padding if padding is not None else (torch.ones(B, T0, dtype=torch.bool, device=dev)
                                          if explicit else None)
    ones = torch.ones(B, 1, dtype=torch.bool, device=dev) if explicit else None
    plen = torch.full((B,), T0 if prefix_length is None else prefix_length, dtype=torch.long,
                      device=dev)
    if use_cache:
        start = ragged_prefill(model, ids, padding, prefix_length, head, steps)
        if start is None:
            cache = model.new_cache(capacity=T0 + steps)  # preallocated: written in place each step
            logits = head(model(ids, attention_mask=full, cache=cache, prefix_lengths=plen,
                                return_hidden=True))
        else:
            cache, logits = start
        plan = _fused_plan(model, B, padding, prefix_length, T0 + steps)
        if plan is not None:  # a q4 Llama at batch 1: one C++ call a token (zoo.run.qstep)
            plan.attach(cache)
            pos = T0
            while True:
                nxt, _, _ = sent((yield logits))
                logits = plan.step(int(nxt[0]), pos)
                pos += 1
        rows = LiveRows(B)
        while True:
            nxt, order, finished = sent((yield rows.full(logits)))
            if order is not None:
                cache.reorder(order)  # beam search: row j continues old row order[j]
            keep = rows.drop(finished, cache)
            if keep is not None:
                ones, plen = ones[keep] if ones is not None else None, plen[keep]
            logits = head(model(rows.take(nxt)[:, None], attention_mask=ones, cache=cache,
                                prefix_lengths=plen, return_hidden=True))  # (B', V)
    seq = ids
    while True:
        nxt, order, _ = sent((yield head(model(seq, attention_mask=full, prefix_lengths=plen,
                                                return_hidden=True))))
        if order is not None:
            seq = seq.index_select(0, order)
            full = full.index_select(0, order) if full is not None else None
        seq = torch.cat([seq, nxt[:, None]], dim=1)  # (B, T + 1): recompute everything
        if full is not None:
            full = torch.cat([full, ones], dim=1)
