"""Statistics over seeds: Student-t intervals, paired differences, and verdicts that claim no more
than the intervals allow.

With ``n`` seeds giving values ``x_1 … x_n``, the 95% interval of the mean is
``mean ± t_{0.975, n-1} · s / sqrt(n)`` (``s``: the sample standard deviation, ``n - 1`` in the
denominator; ``t``: Student's t quantile, since ``s`` is itself estimated from few seeds).  A
variant is compared with its reference over *matched seeds*: ``d_i = x_i(variant) - x_i(reference)``
and the same interval on the mean of ``d`` (a paired t interval: the seed's shared luck -- same
initial draw of the data stream -- cancels).  The verdict is "better" or "worse" only when that
interval excludes zero, otherwise "within noise"; with one seed there is no interval and the
verdict says so.

Three more tools for results a mean ± t cannot describe (issue 33, goal 4):

- **Metrics that jump.**  When a run either learns (accuracy ~1) or plateaus, the outcome of a seed
  is a coin flip and the honest summary is a *success rate* ``k / n`` with its Wilson score interval
  (:func:`wilson`), compared between variants by the difference of rates with Newcombe's score
  interval and Fisher's exact test (:func:`two_proportions`).
- **Diverged seeds.**  NaN / infinite results are counted (``nonfinite`` in :func:`mean_ci` and
  :func:`paired`), never dropped silently; the results table shows them and rates them as a
  proportion.
- **Many verdicts.**  One experiment draws a verdict per (variant, metric); at 5% each, ten of them
  give a false "better" with probability up to 40%.  :func:`holm` adjusts their p-values (Holm's
  step-down method, which controls the family-wise error rate at 5%) and
  :func:`significant_verdict` holds each verdict to its adjusted p.  No scipy at run time: the t quantile comes from the regularised incomplete beta
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
    hi = 1.0
    while t_cdf(hi, df) < q:
        hi *= 2
    return _invert(lambda x: t_cdf(x, df), q, 0.0, hi, 1e-12)


def _invert(cdf, q: float, lo: float, hi: float, tol: float) -> float:
    """The ``x`` in ``[lo, hi]`` where the increasing ``cdf(x)`` reaches ``q``, by bisection to ``tol``."""
    for _ in range(200):
        mid = (lo + hi) / 2
        if cdf(mid) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo < tol:
            break
    return (lo + hi) / 2


def mean_ci(xs: Sequence[float], level: float = 0.95) -> dict:
    """``{"n", "mean", "sd", "half", "lo", "hi", "nonfinite"}``: the Student-t interval of the mean
    of the finite values (``half`` and the bounds are NaN with fewer than two); ``nonfinite`` counts
    the NaN / infinite / None values left out, so a caller shows them (a diverged seed is a result,
    not a gap)."""
    xs = list(xs)
    bad = count_nonfinite(xs)
    xs = [float(x) for x in xs if finite(x)]
    n = len(xs)
    if n == 0:
        return {"n": 0, "mean": math.nan, "sd": math.nan, "half": math.nan, "lo": math.nan, "hi": math.nan,
                "nonfinite": bad}
    m = sum(xs) / n
    if n < 2:
        return {"n": 1, "mean": m, "sd": math.nan, "half": math.nan, "lo": math.nan, "hi": math.nan,
                "nonfinite": bad}
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    half = t_ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": m, "sd": sd, "half": half, "lo": m - half, "hi": m + half, "nonfinite": bad}


def paired(variant: dict, reference: dict, level: float = 0.95) -> dict:
    """The paired difference ``variant - reference`` over the seeds both have (``{seed: value}``
    mappings); :func:`mean_ci` of the differences of the seeds finite in both, plus ``seeds``
    (those seeds), ``p`` (:func:`paired_p`) and ``nonfinite``: how many matched seeds were left out
    because either side is NaN / infinite (diverged) -- counted, so the table can say so."""
    matched = sorted(s for s in variant if s in reference)
    seeds = [s for s in matched if finite(variant[s]) and finite(reference[s])]
    out = mean_ci([variant[s] - reference[s] for s in seeds], level)
    out["seeds"] = seeds
    out["nonfinite"] = len(matched) - len(seeds)
    out["p"] = paired_p(out)
    return out


#: A verdict's id -> the engine's English words (the text of the reports' tables and CSVs).  The
#: results rows carry the id and its params (``verdict_id``, ``verdict_params``), so a front end words
#: a verdict in its language from the id (the UI's ``exp.v.*`` keys), never from this English.
VERDICT_WORDS = {"reference": "reference", "pending": "pending", "better": "better", "worse": "worse",
                 "higher": "higher", "lower": "lower", "noise": "within noise",
                 "noise_holm": "within noise (after Holm)", "no_effect": "no meaningful difference",
                 "na": "n/a", "na_one_seed": "n/a (one seed: no interval)",
                 "sees_future": "not comparable: {variant} sees the future (trained without the look-ahead mask)",
                 "sees_future_tf": "not comparable: {variant} sees the future (teacher-forced metric; judge on "
                                   "{primary})"}
#: what a quick run's verdicts add (a smoke test, not evidence)
SMOKE_SUFFIX = " (smoke test)"


def verdict_words(vid: str, params: dict | None = None) -> str:
    """The English of verdict ``vid`` with its ``params`` (``variant``, ``primary``; ``smoke``: a
    quick run's, which adds " (smoke test)")."""
    params = dict(params or {})
    if params.get("primary", "") is None:
        params["primary"] = "a past-only metric"
    return VERDICT_WORDS[vid].format(**params) + (SMOKE_SUFFIX if params.get("smoke") else "")


def verdict_id(diff: dict, direction: str | None, min_effect: float = 0.0) -> str:
    """The id of :func:`verdict` (a key of :data:`VERDICT_WORDS`)."""
    if diff["n"] < 2 or math.isnan(diff["half"]):
        return "na_one_seed" if diff["n"] == 1 else "na"
    if diff["lo"] > 0:
        up = True
    elif diff["hi"] < 0:
        up = False
    else:
        return "noise"
    if abs(diff["mean"]) < min_effect:
        return "no_effect"
    if direction is None:
        return "higher" if up else "lower"
    return "better" if up == (direction == "max") else "worse"


def verdict(diff: dict, direction: str | None, min_effect: float = 0.0) -> str:
    """"better" / "worse" (``direction`` "max" or "min" says which way is good; None gives
    "higher" / "lower") when the paired interval excludes zero **and** the difference is at least
    ``min_effect``; "no meaningful difference" when the interval excludes zero but the difference
    is smaller than that; else "within noise"."""
    return VERDICT_WORDS[verdict_id(diff, direction, min_effect)]


# ---------------------------------------------------------------------- non-finite results
def finite(x) -> bool:
    """A usable result: a number that is neither None, NaN nor infinite."""
    return x is not None and isinstance(x, (int, float)) and math.isfinite(float(x))


def count_nonfinite(xs) -> int:
    """How many of ``xs`` are NaN / infinite / None: a diverged seed, counted, never dropped
    silently (:func:`mean_ci` and :func:`paired` report it as ``nonfinite``)."""
    return sum(not finite(x) for x in xs)


# ---------------------------------------------------------------------- p-values
def paired_p(diff: dict) -> float:
    """Two-sided p-value of the paired t test behind :func:`paired`'s interval (``t = mean /
    (s / sqrt(n))``, ``n - 1`` degrees of freedom): below 0.05 exactly when the 95% interval
    excludes 0.  NaN with fewer than two pairs; 0 when every difference is the same non-zero value."""
    n = diff.get("n", 0)
    if n < 2 or not finite(diff.get("sd")):
        return math.nan
    if diff["sd"] == 0:
        return 1.0 if diff["mean"] == 0 else 0.0
    t = abs(diff["mean"]) / (diff["sd"] / math.sqrt(n))
    return min(1.0, 2 * (1 - t_cdf(t, n - 1)))


def holm(ps: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979), in the order given; NaN entries (no test)
    stay NaN and do not count in the family.  Sorted ascending, ``p_(i)`` becomes
    ``max_{j <= i} min(1, (m - j + 1) p_(j))``: rejecting where the adjusted p is below ``alpha``
    keeps the chance of *any* false "better"/"worse" among the ``m`` verdicts below ``alpha``."""
    idx = sorted((i for i, p in enumerate(ps) if finite(p)), key=lambda i: ps[i])
    m = len(idx)
    out = [math.nan] * len(ps)
    run = 0.0
    for rank, i in enumerate(idx):
        run = max(run, min(1.0, (m - rank) * ps[i]))
        out[i] = run
    return out


# ---------------------------------------------------------------------- proportions (metrics that jump)
def norm_ppf(q: float) -> float:
    """The ``q`` quantile of the standard normal (bisection on ``erf``, to 1e-15)."""
    if not 0 < q < 1:
        raise ValueError("q must be in (0, 1)")
    return _invert(lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2))), q, -40.0, 40.0, 1e-15)


def wilson(k: int, n: int, level: float = 0.95) -> dict:
    """``{"k", "n", "rate", "lo", "hi"}``: the Wilson score interval of a success rate ``k / n``
    (Wilson 1927; what ``scipy.stats.binomtest(k, n).proportion_ci(method="wilson")`` gives).

    The interval is ``(p + z²/2n ± z sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)`` with ``p = k/n`` and
    ``z`` the normal quantile.  Unlike ``p ± z sqrt(p(1-p)/n)`` it never leaves [0, 1] and is not
    empty at 0 or n successes -- which is what a metric that jumps gives with few seeds: 3 of 3 runs
    that learned is a rate of [0.44, 1], not "1.0 ± 0"."""
    if n <= 0:
        return {"k": 0, "n": 0, "rate": math.nan, "lo": math.nan, "hi": math.nan}
    z = norm_ppf(0.5 + level / 2)
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    lo, hi = max(0.0, centre - half), min(1.0, centre + half)
    if k == 0:
        lo = 0.0
    if k == n:
        hi = 1.0
    return {"k": k, "n": n, "rate": p, "lo": lo, "hi": hi}


def fisher_p(k1: int, n1: int, k2: int, n2: int) -> float:
    """Two-sided p-value of Fisher's exact test on the 2x2 table ``[[k1, n1-k1], [k2, n2-k2]]``
    (the sum of the hypergeometric probabilities of every table no more likely than the observed
    one, as ``scipy.stats.fisher_exact`` computes it).  Exact, so it holds at 3 or 8 seeds where a
    z test of two proportions does not."""
    K, N = k1 + k2, n1 + n2
    if n1 == 0 or n2 == 0:
        return math.nan
    den = math.comb(N, K)

    def prob(a):
        return math.comb(n1, a) * math.comb(n2, K - a) / den

    p_obs = prob(k1)
    lo, hi = max(0, K - n2), min(K, n1)
    return min(1.0, sum(prob(a) for a in range(lo, hi + 1) if prob(a) <= p_obs * (1 + 1e-7)))


def two_proportions(k1: int, n1: int, k2: int, n2: int, level: float = 0.95) -> dict:
    """Compare success rates ``k1/n1`` (variant) and ``k2/n2`` (reference): ``{"n", "mean" (the
    difference of rates), "lo", "hi" (Newcombe's hybrid score interval of the difference, built from
    the two Wilson intervals: Newcombe 1998, method 10), "p" (Fisher's exact two-sided p),
    "half": NaN}``.  Seeds need not be matched: a success rate is a count, not a paired measurement."""
    a, b = wilson(k1, n1, level), wilson(k2, n2, level)
    if not (n1 and n2):
        return {"n": min(n1, n2), "mean": math.nan, "lo": math.nan, "hi": math.nan, "half": math.nan,
                "p": math.nan}
    p1, p2 = a["rate"], b["rate"]
    d = p1 - p2
    lo = d - math.sqrt((p1 - a["lo"]) ** 2 + (b["hi"] - p2) ** 2)
    hi = d + math.sqrt((a["hi"] - p1) ** 2 + (p2 - b["lo"]) ** 2)
    return {"n": min(n1, n2), "mean": d, "lo": lo, "hi": hi, "half": math.nan,
            "p": fisher_p(k1, n1, k2, n2)}


def significant_verdict_id(diff: dict, direction: str | None, min_effect: float = 0.0,
                           p_adj: float | None = None, alpha: float = 0.05) -> str:
    """The id of :func:`significant_verdict` (a key of :data:`VERDICT_WORDS`)."""
    if diff.get("n", 0) < 1 or not finite(diff.get("lo")) or not finite(diff.get("hi")):
        return verdict_id({**diff, "half": math.nan}, direction, min_effect)
    if diff["lo"] > 0:
        up = True
    elif diff["hi"] < 0:
        up = False
    else:
        return "noise"
    if p_adj is not None and finite(p_adj) and not p_adj < alpha:
        raw = diff.get("p")
        return "noise_holm" if finite(raw) and raw < alpha else "noise"
    if abs(diff["mean"]) < min_effect:
        return "no_effect"
    if direction is None:
        return "higher" if up else "lower"
    return "better" if up == (direction == "max") else "worse"


def significant_verdict(diff: dict, direction: str | None, min_effect: float = 0.0,
                        p_adj: float | None = None, alpha: float = 0.05) -> str:
    """:func:`verdict`, also held to the multiple-comparison-adjusted p-value: "better"/"worse"
    (or "higher"/"lower") needs the interval to exclude 0, the difference to reach ``min_effect``
    **and** ``p_adj < alpha``; a difference whose own p (``diff["p"]``) passes but whose
    Holm-adjusted p does not is "within noise (after Holm)", one whose own test fails too (Fisher's
    exact p of 3/3 vs 0/3 is 0.1, though Newcombe's interval excludes 0) is "within noise".  Works for paired t differences and for
    :func:`two_proportions` (whose ``half`` is NaN: its interval is asymmetric)."""
    return VERDICT_WORDS[significant_verdict_id(diff, direction, min_effect, p_adj, alpha)]
