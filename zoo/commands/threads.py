"""``--threads N``: how many CPU threads a command's tensor work uses (``zoo run``, ``chat``,
``train``, ``ui``, ``bench``, ``convert``: one option, :func:`threads_option`).

PyTorch starts one intra-op thread per physical core it sees, whatever else runs on the machine
and whatever the process is allowed.  On a 2-core machine that is busy, two OpenMP threads spin on
each other and on the other work: training ran 11x and decoding 8-53x slower than with one thread
(issue 36; docs/PERFORMANCE.md, "Threads"), while a quiet machine's second core gains at most ~1.5x.  So the default is the CPUs this process
may use (:func:`usable_cpus`: its affinity mask, lowered to the cgroup's CPU quota) less the ones
already busy (the 1-minute load average, :func:`default_threads`), at least one.  ``--threads N``
sets it; more than :func:`usable_cpus` is refused (a thread beyond the CPUs you have only waits).
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable

from ..errors import ZooError

#: cgroup v2's quota file, and v1's pair (quota and period, microseconds)
CGROUP_V2 = Path("/sys/fs/cgroup/cpu.max")
CGROUP_V1 = (Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))


def _cgroup_quota() -> float | None:
    """The cgroup's CPU quota in CPUs (``quota / period``), or None when none is set."""
    try:
        quota, period = CGROUP_V2.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota, period = (int(p.read_text().strip()) for p in CGROUP_V1)
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def usable_cpus() -> tuple[int, str]:
    """How many CPUs this process may run on, and why: the CPUs it is pinned to
    (``os.sched_getaffinity``), lowered to the cgroup's quota (``cpu.max``; rounded up) when one is
    set."""
    try:
        pinned = len(os.sched_getaffinity(0))
        why = f"{pinned} CPUs in this process's affinity mask"
    except (AttributeError, OSError):  # not Linux
        pinned = os.cpu_count() or 1
        why = f"{pinned} CPUs"
    quota = _cgroup_quota()
    if quota is not None and math.ceil(quota) < pinned:
        return max(1, math.ceil(quota)), f"the cgroup's CPU quota of {quota:g} CPUs (cpu.max)"
    return max(1, pinned), why


def default_threads() -> int:
    """The CPUs this process may use that are not already busy: :func:`usable_cpus` less the
    1-minute load average (rounded), at least 1 -- two threads on a quiet 2-core machine, one on a
    busy one."""
    n, _ = usable_cpus()
    try:
        busy = round(os.getloadavg()[0])
    except OSError:
        busy = 0
    return max(1, min(n, n - busy))


def check_threads(value: Any, where: str = "--threads") -> int | None:
    """``value`` (a ``--threads`` argument: None, or text / an int) as a thread count: a positive
    integer no larger than :func:`usable_cpus`; anything else is a :class:`ZooError` naming the
    limit."""
    if value is None:
        return None
    text = str(value).strip()
    n, why = usable_cpus()
    if isinstance(value, bool) or not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise ZooError(f"expected a positive whole number of threads, got {text[:40]!r}", where=where,
                       fix=f"pass a number from 1 to {n}, or leave --threads out for the default "
                           f"({default_threads()} now)")
    if int(text) > n:
        raise ZooError(f"{int(text)} threads is more than this machine gives the process ({why})",
                       where=where, fix=f"pass a number from 1 to {n}")
    return int(text)


def apply_threads(value: Any = None, where: str = "--threads") -> int:
    """Set PyTorch's intra-op thread count to ``value`` (checked by :func:`check_threads`), or to
    :func:`default_threads` when it is None; returns the count set."""
    import torch

    n = check_threads(value, where)
    n = default_threads() if n is None else n
    torch.set_num_threads(n)
    return n


def threads_option(fn: Callable) -> Callable:
    """The ``--threads N`` option of a command: checked and applied while the command line is read,
    before any model is loaded (a bad value is one line, exit 2)."""
    import click

    def apply(ctx, param, value):
        return apply_threads(value)

    return click.option("--threads", default=None, metavar="N", callback=apply, expose_value=False,
                        help="CPU threads for tensor work [default: the CPUs this process may use "
                             "that are not busy now, at least 1].")(fn)
