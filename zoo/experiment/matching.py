"""Parameter-matched budgets: ``budget: {steps: 400, params: 2.0e5}`` sets each variant's width so
that its parameter count is the stated one, within ``params_tolerance`` (default 5%).

A variant that changes the architecture (GLU feed-forward blocks with three matrices, an extra norm,
more heads of key/value) changes the parameter count at a fixed width, so "A beats B" may just say
"A is bigger".  Matching scales ``d_model`` (in steps that keep every head's width an even integer:
``2 x num_heads``) and ``d_ff`` with it (the spec's ``d_ff / d_model`` ratio kept, ``d_ff`` rounded to a
multiple of 8), picks the width whose exact parameter count (built on the meta device,
shared tensors once, no tensor allocated) is closest to the target, then, at that width and the one
below, moves ``d_ff`` alone (in multiples of 8; the count is linear in it) to come closer still --
so the matched variants differ in their feed-forward width ratio by what matching needed, which
the table's params column shows.  A spec that sets ``head_dim``
keeps it (only the head count's multiple matters then).  A target that no width reaches within the
tolerance is an :class:`~zoo.experiment.spec.ExperimentError` naming ``experiment.budget.params``
with the nearest counts reachable.
"""
from __future__ import annotations

import torch

from ..model.assembly import construct
from ..model.spec import ModelSpec
from .spec import ExperimentError

#: the widest d_model the search tries
MAX_D_MODEL = 8192


def param_count(spec: ModelSpec) -> int:
    """Parameters of ``spec``'s model, built on the meta device (nothing allocated; a tied tensor
    once; buffers such as a sinusoidal table are not parameters), as the tables count them."""
    with torch.device("meta"):
        model = construct(spec)
    return sum(p.numel() for p in model.parameters())


def match_params(spec: ModelSpec, target: float, tolerance: float, where: str) -> tuple[ModelSpec, int]:
    """``(spec at the width closest to target parameters, its count)``; see the module docstring."""
    heads = spec.num_heads
    step = 2 * heads
    ratio = (spec.d_ff or 4 * spec.d_model) / spec.d_model
    best = None
    below = None
    for d in range(step, MAX_D_MODEL + 1, step):
        d_ff = max(8, int(round(ratio * d / 8)) * 8)
        cand = spec.replace(d_model=d, d_ff=d_ff) if spec.d_ff is not None else spec.replace(d_model=d)
        n = param_count(cand)
        if best is None or abs(n - target) < abs(best[1] - target):
            best = (cand, n)
        if n < target:
            below = n
        else:
            break
    # fine: at the chosen width and the one below, d_ff (a multiple of 8) moves the count linearly
    for d in {best[0].d_model, max(step, best[0].d_model - step)}:
        a = param_count(spec.replace(d_model=d, d_ff=8))
        per8 = param_count(spec.replace(d_model=d, d_ff=16)) - a
        if per8 <= 0:
            continue
        d_ff = max(8, 8 + int(round((target - a) / per8)) * 8)
        cand = spec.replace(d_model=d, d_ff=d_ff)
        n = param_count(cand)
        if abs(n - target) < abs(best[1] - target):
            best = (cand, n)
    cand, n = best
    if abs(n - target) > tolerance * target:
        raise ExperimentError(f"no width gives {target:.4g} parameters within {tolerance:.0%} for this "
                              f"variant: the nearest is {n:,} (d_model {cand.d_model})"
                              + (f"; the next below is {below:,}" if below and below != n else ""),
                              where="experiment.budget.params",
                              options=[f"{n:,}"] + ([f"{below:,}"] if below and below != n else []),
                              fix=f"set params to about {n:.3g}, or raise params_tolerance")
    return cand, n
