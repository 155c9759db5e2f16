"""Statistics over seeds: Student-t intervals, paired differences, and verdicts that claim no more
than the intervals allow.

With ``n`` seeds giving values ``x_1 … x_n``, the 95% interval of the mean is
``mean ± t_{0.975, n-1} · s / sqrt(n)`` (``s``: the sample standard deviation, ``n - 1`` in the
denominator; ``t``: Student's t quantile, since ``s`` is itself estimated from few seeds).  A
variant is compared with its reference over *matched seeds*: ``d_i = x_i(variant) - x_i(reference)``
and the same interval on the mean of ``d`` (a paired t interval: the seed's shared luck -- same
initial draw of the data stream -- cancels).  The verdict is "better" or "worse" only when that
interval excludes zero, otherwise "within noise"; with one seed there is no interval and the
verdict says so.  No scipy at run time: the t quantile comes from the regularised incomplete beta
function (a continued fraction, Numerical Recipes' ``betacf``); the tests check it against
``scipy.stats.t.ppf``.
"""
from __future__ import annotations

import math
from typing import Sequence


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        de = d * c
        h *= de
        if abs(de - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function ``I_x(a, b)``."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function with ``df`` degrees of freedom."""
    x = df / (df + t * t)
    tail = 0.5 * betainc(df / 2, 0.5, x)
    return 1 - tail if t > 0 else tail


def t_ppf(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t (bisection on :func:`t_cdf`, to 1e-12)."""
    if not 0 < q < 1:
        raise ValueError("q must be in (0, 1)")
    if q < 0.5:
        return -t_ppf(1 - q, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2


def mean_ci(xs: Sequence[float], level: float = 0.95) -> dict:
    """``{"n", "mean", "sd", "half", "lo", "hi"}``: the Student-t interval of the mean (``half``
    and the bounds are NaN with fewer than two values)."""
    xs = [float(x) for x in xs if x is not None and math.isfinite(float(x))]
    n = len(xs)
    if n == 0:
        return {"n": 0, "mean": math.nan, "sd": math.nan, "half": math.nan, "lo": math.nan, "hi": math.nan}
    m = sum(xs) / n
    if n < 2:
        return {"n": 1, "mean": m, "sd": math.nan, "half": math.nan, "lo": math.nan, "hi": math.nan}
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    half = t_ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": m, "sd": sd, "half": half, "lo": m - half, "hi": m + half}


def paired(variant: dict, reference: dict, level: float = 0.95) -> dict:
    """The paired difference ``variant - reference`` over the seeds both have (``{seed: value}``
    mappings); :func:`mean_ci` of the differences plus ``seeds``."""
    seeds = sorted(s for s in variant if s in reference and variant[s] is not None
                   and reference[s] is not None)
    out = mean_ci([variant[s] - reference[s] for s in seeds], level)
    out["seeds"] = seeds
    return out


def verdict(diff: dict, direction: str | None, min_effect: float = 0.0) -> str:
    """"better" / "worse" (``direction`` "max" or "min" says which way is good; None gives
    "higher" / "lower") when the paired interval excludes zero **and** the difference is at least
    ``min_effect``; "no meaningful difference" when the interval excludes zero but the difference
    is smaller than that; else "within noise"."""
    if diff["n"] < 2 or math.isnan(diff["half"]):
        return "n/a (one seed: no interval)" if diff["n"] == 1 else "n/a"
    if diff["lo"] > 0:
        up = True
    elif diff["hi"] < 0:
        up = False
    else:
        return "within noise"
    if abs(diff["mean"]) < min_effect:
        return "no meaningful difference"
    if direction is None:
        return "higher" if up else "lower"
    return "better" if up == (direction == "max") else "worse"
