"""Statistics of zoo.experiment against scipy.stats (a reference nobody here wrote) and by hand."""
import math

import pytest

from zoo.experiment.stats import mean_ci, paired, t_cdf, t_ppf, verdict

stats = pytest.importorskip("scipy.stats")


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 7, 10, 19, 30, 100])
@pytest.mark.parametrize("q", [0.6, 0.9, 0.95, 0.975, 0.995, 0.9995])
def test_t_quantile_matches_scipy(df, q):
    assert t_ppf(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-9, abs=1e-9)
    assert t_ppf(1 - q, df) == pytest.approx(stats.t.ppf(1 - q, df), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("t", [-5.0, -1.3, 0.0, 0.4, 2.2, 9.0])
def test_t_cdf_matches_scipy(t):
    for df in (1, 2, 5, 29):
        assert t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), abs=1e-12)


def test_interval_by_hand():
    # 1, 2, 3: mean 2, s = 1, t_{0.975, 2} = 4.302652729911275 (tables), half = t * 1 / sqrt(3)
    ci = mean_ci([1.0, 2.0, 3.0])
    assert ci["mean"] == 2.0 and ci["sd"] == pytest.approx(1.0)
    assert ci["half"] == pytest.approx(4.302652729911275 / math.sqrt(3), rel=1e-10)
    assert (ci["lo"], ci["hi"]) == pytest.approx((2 - 2.4841377, 2 + 2.4841377), abs=1e-6)


@pytest.mark.parametrize("xs", [[0.81, 0.84, 0.79], [3.2, 2.9, 3.5, 3.1, 2.7], [1e-3, 2e-3]])
def test_interval_matches_scipy(xs):
    ci = mean_ci(xs)
    lo, hi = stats.t.interval(0.95, len(xs) - 1, loc=sum(xs) / len(xs), scale=stats.sem(xs))
    assert (ci["lo"], ci["hi"]) == pytest.approx((lo, hi), rel=1e-9)


def test_paired_difference_matches_scipy_ttest_rel():
    a = {0: 0.91, 1: 0.88, 2: 0.95, 3: 0.90}
    b = {0: 0.85, 1: 0.86, 2: 0.87, 3: 0.84, 9: 0.1}  # seed 9 has no partner: ignored
    d = paired(a, b)
    ref = stats.ttest_rel([a[s] for s in range(4)], [b[s] for s in range(4)]).confidence_interval(0.95)
    assert d["seeds"] == [0, 1, 2, 3]
    assert (d["lo"], d["hi"]) == pytest.approx((ref.low, ref.high), rel=1e-9)
    # pairing matters: the unpaired interval of the difference of means would be wider here
    assert d["mean"] == pytest.approx(0.055)


def test_verdict_never_exceeds_the_interval():
    up = {"n": 3, "mean": 0.1, "half": 0.05, "lo": 0.05, "hi": 0.15}
    straddle = {"n": 3, "mean": 0.1, "half": 0.2, "lo": -0.1, "hi": 0.3}
    assert verdict(up, "max") == "better" and verdict(up, "min") == "worse"
    assert verdict(up, None) == "higher"
    assert verdict(straddle, "max") == "within noise"
    down = {"n": 3, "mean": -0.1, "half": 0.05, "lo": -0.15, "hi": -0.05}
    assert verdict(down, "min") == "better" and verdict(down, None) == "lower"
    one = mean_ci([0.5])
    assert math.isnan(one["half"]) and verdict({**one, "lo": math.nan, "hi": math.nan}, "max").startswith("n/a")
    # the same mean difference with two noisy seeds is not significant: t_{0.975,1} = 12.7
    assert verdict(paired({0: 0.9, 1: 0.5}, {0: 0.6, 1: 0.4}), "max") == "within noise"


def test_a_real_but_tiny_difference_is_no_meaningful_difference():
    """Issue 34: ``attn_scale --quick`` called an entropy difference of 0.001 "lower" and
    ``pos_extrapolation --quick`` a 0.002 difference in eval loss "better".  An interval that
    excludes 0 says the difference is real, the minimum effect says whether it matters."""
    tiny = paired({0: 1.001, 1: 1.0011, 2: 1.0012}, {0: 1.0, 1: 1.0, 2: 1.0})
    assert tiny["lo"] > 0  # real...
    assert verdict(tiny, "min") == "worse"  # ...and without a minimum effect it would be a finding
    assert verdict(tiny, "min", min_effect=0.02) == "no meaningful difference"
    assert verdict(tiny, None, min_effect=0.05) == "no meaningful difference"
    big = paired({0: 0.9, 1: 0.91, 2: 0.92}, {0: 0.5, 1: 0.5, 2: 0.51})
    assert verdict(big, "max", min_effect=0.02) == "better"
    straddle = paired({0: 0.9, 1: 0.5}, {0: 0.6, 1: 0.7})
    assert verdict(straddle, "max", min_effect=0.02) == "within noise"


def test_minimum_effects_come_from_the_task_and_the_experiment_file():
    from zoo.experiment import load
    from zoo.experiment.spec import DEFAULT_MIN_EFFECT, ExperimentError, min_effects
    from zoo.experiment.tasks import get_task

    exp = load("attn_scale")
    task = get_task(exp.task, dict(exp.task_params))
    floors = min_effects(task)
    assert floors["eval_loss"] == 0.02 and floors["entropy_init"] == 0.05
    assert all(floors[m] == DEFAULT_MIN_EFFECT for m in getattr(task, "metrics", {})
               if m not in ("eval_loss", "causal_loss"))
    raw = load("attn_scale").raw
    import json

    data = json.loads(raw)
    data["min_effect"] = {"entropy_init": 0.5}
    custom = load(data)
    assert min_effects(task, custom.min_effect)["entropy_init"] == 0.5
    assert custom.fingerprint() == exp.fingerprint()  # reporting only: the runs are the same
    for bad, where in (({"entropy_init": -1}, "min_effect.entropy_init"), ({"nope": 0.1}, "min_effect.nope"),
                       ([0.1], "min_effect")):
        with pytest.raises(ExperimentError) as info:
            load({**data, "min_effect": bad})
        assert info.value.where == f"experiment.{where}"


# ---------------------------------------------------------------------- issue 33, goal 4
@pytest.mark.parametrize("k,n", [(0, 3), (1, 3), (3, 3), (1, 8), (4, 8), (8, 8), (0, 1), (17, 40)])
def test_wilson_interval_matches_scipy_binomtest(k, n):
    from zoo.experiment.stats import wilson

    w = wilson(k, n)
    ref = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert w["rate"] == k / n
    assert (w["lo"], w["hi"]) == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_wilson_at_the_extremes_is_not_a_zero_width_interval():
    """3 of 3 runs that learned is not "1.0 ± 0": the Wilson interval is [0.44, 1] (pinned)."""
    from zoo.experiment.stats import wilson

    w = wilson(3, 3)
    assert w["hi"] == 1.0 and w["lo"] == pytest.approx(0.4385029682449547, abs=1e-12)
    assert math.isnan(wilson(0, 0)["rate"])


@pytest.mark.parametrize("table", [(3, 3, 0, 3), (1, 8, 5, 8), (0, 5, 0, 5), (7, 10, 2, 9), (2, 3, 3, 3),
                                   (6, 20, 14, 20)])
def test_two_proportions_fisher_p_and_newcombe_interval(table):
    from zoo.experiment.stats import two_proportions

    k1, n1, k2, n2 = table
    d = two_proportions(k1, n1, k2, n2)
    assert d["mean"] == pytest.approx(k1 / n1 - k2 / n2)
    p_ref = stats.fisher_exact([[k1, n1 - k1], [k2, n2 - k2]]).pvalue
    assert d["p"] == pytest.approx(p_ref, rel=1e-9, abs=1e-12)
    # Newcombe (1998) method 10 from scipy's Wilson bounds, written out independently
    a = stats.binomtest(k1, n1).proportion_ci(method="wilson")
    b = stats.binomtest(k2, n2).proportion_ci(method="wilson")
    p1, p2 = k1 / n1, k2 / n2
    lo = p1 - p2 - math.sqrt((p1 - a.low) ** 2 + (b.high - p2) ** 2)
    hi = p1 - p2 + math.sqrt((a.high - p1) ** 2 + (p2 - b.low) ** 2)
    assert (d["lo"], d["hi"]) == pytest.approx((lo, hi), abs=1e-12)
    sm = pytest.importorskip("statsmodels.stats.proportion") if table == (7, 10, 2, 9) else None
    if sm is not None:
        ref = sm.confint_proportions_2indep(k1, n1, k2, n2, method="newcomb", compare="diff")
        assert (d["lo"], d["hi"]) == pytest.approx(tuple(map(float, ref)), abs=1e-12)


def _holm_naive(ps):
    """Holm (1979) by its definition: step down the sorted p-values, reject while p_(i) <= alpha /
    (m - i); the adjusted p is the smallest alpha at which each hypothesis is rejected."""
    m = len(ps)
    out = []
    for p in ps:
        best = 1.0
        for a in sorted(set(min(1.0, x * k) for x in ps for k in range(1, m + 1)) | {1.0}):
            order = sorted(ps)
            rejected = set()
            for i, q in enumerate(order):
                if q * (m - i) <= a * (1 + 1e-12):
                    rejected.add(i)
                else:
                    break
            if any(order[i] == p for i in rejected):
                best = a
                break
        out.append(best)
    return out


def test_holm_matches_its_definition_and_statsmodels():
    import random

    from zoo.experiment.stats import holm

    rng = random.Random(0)
    for _ in range(40):
        ps = [rng.random() ** 3 for _ in range(rng.randint(1, 7))]
        assert holm(ps) == pytest.approx(_holm_naive(ps), abs=1e-12)
    ps = [0.01, 0.04, 0.03, 0.005]
    assert holm(ps) == pytest.approx([0.03, 0.06, 0.06, 0.02])  # by hand: 4p, 3p, 2p, max-running
    assert math.isnan(holm([0.01, math.nan])[1]) and holm([0.01, math.nan])[0] == 0.01  # NaN: no test
    try:
        from statsmodels.stats.multitest import multipletests
    except ImportError:
        return
    for _ in range(20):
        ps = [rng.random() ** 2 for _ in range(rng.randint(2, 12))]
        assert holm(ps) == pytest.approx(list(multipletests(ps, method="holm")[1]), abs=1e-12)


def test_paired_p_is_scipys_ttest_rel_and_agrees_with_the_interval():
    from zoo.experiment.stats import paired_p

    a = {0: 0.91, 1: 0.88, 2: 0.95, 3: 0.90}
    b = {0: 0.85, 1: 0.86, 2: 0.87, 3: 0.84}
    d = paired(a, b)
    assert d["p"] == pytest.approx(stats.ttest_rel(list(a.values()), list(b.values())).pvalue, rel=1e-9)
    assert paired_p(d) == d["p"] and (d["p"] < 0.05) == (d["lo"] > 0)


def test_nan_results_are_counted_never_dropped_silently():
    """Before issue 33 a NaN seed vanished from the mean and from the paired difference, and the
    table showed n=2 with nothing to say why.  Now both say how many were not finite."""
    ci = mean_ci([0.5, math.nan, 0.7, math.inf])
    assert ci["n"] == 2 and ci["nonfinite"] == 2 and ci["mean"] == pytest.approx(0.6)
    d = paired({0: 1.0, 1: math.nan, 2: 3.0, 3: 2.0}, {0: 0.5, 1: 0.5, 2: math.nan, 3: 1.0})
    assert d["seeds"] == [0, 3] and d["nonfinite"] == 2 and d["mean"] == pytest.approx(0.75)


def test_significant_verdict_is_held_to_the_adjusted_p():
    from zoo.experiment.stats import significant_verdict, two_proportions

    up = {"n": 3, "mean": 0.1, "half": 0.05, "lo": 0.05, "hi": 0.15, "p": 0.01}
    assert significant_verdict(up, "max", p_adj=0.03) == "better"
    assert significant_verdict(up, "max", p_adj=0.06) == "within noise (after Holm)"
    # 3/3 vs 0/3: Newcombe's interval excludes 0 but Fisher's exact p is 0.1 -- not a finding
    d = two_proportions(3, 3, 0, 3)
    assert d["lo"] > 0 and d["p"] == pytest.approx(0.1)
    assert significant_verdict(d, "max", p_adj=d["p"]) == "within noise"
    d8 = two_proportions(8, 8, 0, 8)
    assert significant_verdict(d8, "max", p_adj=d8["p"]) == "better"
