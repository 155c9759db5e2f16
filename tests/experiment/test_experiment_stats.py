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
