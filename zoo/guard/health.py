"""Numeric health of generation: non-finite logits stop decoding with their cause (issue 22).

A checkpoint whose weights hold NaN (a diverged run, a converted file accepted with
``allow_nonfinite=True``) or a model whose activations overflow (float16) gives NaN or infinite
logits.  Without a check, sampling fails inside ``torch.multinomial`` ("probability tensor contains
either inf, nan or element < 0") and greedy decoding silently returns token 0 forever.

:func:`finite_steps` wraps a logits coroutine (see :mod:`zoo.run.steps`: it yields next-token logits
``(B, V)`` and is sent the chosen ids) and checks each step's logits with one sum read back as a
Python float (NaN and infinity propagate through it; 7-13 us on a 512- or 50,257-entry row on one
CPU thread, where ``torch.isfinite(x).all()`` takes 36-360 us), measured in ``docs/TRUST.md``.  Only when the
check fails are the weights scanned, to name the cause.
"""
from __future__ import annotations

import math
from typing import Any, Generator

import torch

from ..errors import ZooError


def nonfinite_weights(model: torch.nn.Module, limit: int = 3) -> list[str]:
    """Names of (up to ``limit``) parameters and buffers of ``model`` holding NaN or infinity."""
    bad = []
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad.append(name)
            if len(bad) >= limit:
                break
    return bad


def nonfinite_logits(model: torch.nn.Module, logits: torch.Tensor, step: int,
                     where: str = "generate") -> ZooError:
    """The error for non-finite ``logits`` at decoding ``step`` (0 = the prompt's), with its cause."""
    nan, inf = int(torch.isnan(logits).sum()), int(torch.isinf(logits).sum())
    what = f"the logits of step {step} hold {nan} NaN and {inf} infinite values (of {logits.numel()})"
    bad = nonfinite_weights(model)
    if bad:
        return ZooError(f"{what}: the model's weights hold NaN or infinity ({', '.join(bad)})",
                        where=where, fix="check the checkpoint with `zoo check PATH` and use a "
                                         "checkpoint saved before training diverged")
    dtype = next(model.parameters()).dtype
    return ZooError(f"{what}, though every weight is finite: the activations overflowed in {dtype}",
                    where=where, fix="run the model in float32 (model.float()) or bfloat16; or "
                                     "check a plugin component's outputs")


def finite_steps(steps: Generator, model: torch.nn.Module, where: str = "generate"
                 ) -> Generator[torch.Tensor, Any, None]:
    """``steps`` (a logits coroutine) with each step's logits checked before anyone samples them."""
    try:
        try:
            logits = next(steps)
        except StopIteration:
            return
        step = 0
        while True:
            # one reduction to a Python float: NaN and infinity propagate through a sum; a sum
            # that overflows although every logit is finite (|logit| ~ 1e34) is re-checked exactly
            if not math.isfinite(logits.sum().item()) and not bool(torch.isfinite(logits).all()):
                raise nonfinite_logits(model, logits, step, where)
            sent = yield logits
            try:
                logits = steps.send(sent)
            except StopIteration:
                return
            step += 1
    finally:
        steps.close()
