"""The experiment file: YAML parsed by zoo's bounded loader, validated once into frozen dataclasses.

    name: pos_extrapolation
    title: Positional encodings on a task only positions solve
    claim: relative schemes extrapolate to 2x the training length, absolute ones do not
    base: {preset: gpt_tiny, num_layers: 2, d_model: 64, num_heads: 4, d_ff: 128, max_len: 64}
    variants:                         # a list of named overrides ...
      - {name: sinusoidal, set: {positions: sinusoidal}}
      - {name: rope, set: {positions: rope}}
    # grid: {positions: [sinusoidal, rope], train.lr: [1e-3, 3e-3]}   # ... or a grid
    baseline: sinusoidal              # or {norm.placement: pre}: compare within the other axes
    seeds: 3                          # or a list [0, 1, 2]
    task: {kind: lag, length: 32}
    train: {batch_size: 32, lr: 3e-3, warmup: 20}
    budget: {steps: 400}              # or {tokens: 2e6} or {flops: 1e13}: equal FLOPs, one line
    metrics: [acc, acc_2x, eval_loss]
    probe: null                       # texts for the inside view; null = the task's own example
    plugins: []                       # entry points to load (e.g. [linear_attention])
    quick: {seeds: 2, budget: {steps: 60}}   # merged over the above by --quick

An override key is a dotted path: ``positions``, ``norm.placement`` (spec), ``train.lr`` (the
trainer's knobs), ``task.length`` (the task's parameters).  Every error is an
:class:`ExperimentError` naming the field (``experiment.variants[1].set.positons``).
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import math
import importlib.metadata as md
import importlib.util
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import messages
from ..errors import ZooError, closest
from ..guard.files import load_yaml, read_text, short
from ..registry import get_registry
from ..train.config import TrainConfig, check_thresholds, threshold_name
from .tasks import get_task

try:  # installed, the shipped experiments are package data of zoo.checkpoints
    import zoo.checkpoints as _checkpoints
except ImportError:  # pragma: no cover - a source tree run without the package mapping
    _checkpoints = None

SHIPPED_DIR = Path(__file__).resolve().parents[1] / "checkpoints" / "experiments"
#: metrics every trial records besides its task's own: direction ("min", "max", or None: neither
#: is better, the verdict says "higher" / "lower")
GENERAL_METRICS = {"eval_loss": "min", "train_loss": "min", "entropy_init": None}
#: The smallest difference worth a verdict, per metric (issue 34): a paired interval that excludes 0
#: says a difference is real, not that it matters -- 0.002 nats of eval loss or 0.001 nats of
#: entropy are "no meaningful difference".  A task declares its own (``min_effects``, else
#: :data:`DEFAULT_MIN_EFFECT` for its metrics); an experiment file overrides any of them with
#: ``min_effect: {metric: value}``.
GENERAL_MIN_EFFECTS = {"eval_loss": 0.02, "train_loss": 0.02, "causal_loss": 0.02, "entropy_init": 0.05}
#: for a task metric the task gives no minimum for: accuracies and exact-match rates in [0, 1]
DEFAULT_MIN_EFFECT = 0.02
TOP_KEYS = ("name", "title", "claim", "description", "base", "variants", "grid", "baseline", "seeds",
            "task", "train", "budget", "metrics", "min_effect", "probe", "plugins", "quick", "executor",
            "success", "threshold", "tune")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.=,+-]{1,80}$")
#: a variant name becomes a folder (OUT/trials/<name>): no leading dot (so never '.' or '..'), no
#: '/', NUL or other separator, at most 80 characters -- checked once, here, for listed and grid names
_PATH_NAME_RE = re.compile(r"^[A-Za-z0-9_=,+-][A-Za-z0-9_.=,+-]{0,79}$")
#: the most variants one experiment may plan (a grid's product is counted before it is built)
MAX_VARIANTS = 4096
#: the largest step budget (a finite integer: .inf and nan are refused at parse time)
MAX_STEPS = 10 ** 9


class ExperimentError(ZooError):
    """An experiment file (or its run folder) is not valid; ``where`` names the field."""


def shipped_dir() -> Path:
    """Where shipped experiments live: ``checkpoints/experiments`` (installed: zoo.checkpoints)."""
    if _checkpoints is not None:
        d = Path(_checkpoints.__file__).resolve().parent / "experiments"
        if d.is_dir():
            return d
    return SHIPPED_DIR


@dataclass(frozen=True)
class Variant:
    """One arm of the experiment: a name and dotted overrides (spec / ``train.`` / ``task.``)."""

    name: str
    set: tuple[tuple[str, Any], ...] = ()
    description: str = ""

    @property
    def overrides(self) -> dict[str, Any]:
        return dict(self.set)


@dataclass(frozen=True)
class Budget:
    """Exactly one of ``steps``, ``tokens`` (input tokens seen), ``flops`` (training FLOPs)."""

    steps: int | None = None
    tokens: float | None = None
    flops: float | None = None
    # beside one of those: every variant's width set to this many parameters (zoo.experiment.matching)
    params: float | None = None
    params_tolerance: float = 0.05

    @property
    def kind(self) -> str:
        return next(k for k in ("steps", "tokens", "flops") if getattr(self, k) is not None)


@dataclass(frozen=True)
class Experiment:
    """A validated experiment (see the module docstring for the file format)."""

    name: str
    base: Any                               # a preset name or a spec dict (frozen as JSON text)
    variants: tuple[Variant, ...]
    seeds: tuple[int, ...]
    task: str
    task_params: tuple[tuple[str, Any], ...]
    train: tuple[tuple[str, Any], ...]
    budget: Budget
    metrics: tuple[str, ...]
    baseline: Any = None                    # variant name, or tuple of (key, value) pairs
    title: str = ""
    claim: str = ""
    description: str = ""
    probe: tuple[str, ...] = ()
    plugins: tuple[str, ...] = ()
    quick: bool = False
    min_effect: tuple[tuple[str, float], ...] = ()  # metric -> smallest difference worth a verdict
    success: tuple[tuple[str, float], ...] = ()  # metric -> threshold: a seed that reaches it succeeded
    executor: tuple[tuple[str, Any], ...] = ()   # submitit parameters for --executor slurm
    # ``threshold:`` entries as trainer thresholds ({metric, value, stop}): steps_to_<m>_<v> and
    # reached_<m>_<v> per trial (zoo.train.config.check_thresholds), as JSON text
    thresholds: str = "[]"
    # ``tune:``: (override key, (values...)) pairs swept per variant, each variant compared at
    # its best combination selected on the validation split (zoo.experiment.tune)
    tune: tuple[tuple[str, tuple], ...] = ()
    tune_select: str | None = None          # the metric the selection maximises / minimises
    source: str = ""                        # the YAML text it was read from (empty for dicts)
    raw: str = ""                           # the validated mapping as JSON (before --quick)

    # ------------------------------------------------------------------ derived
    def base_dict(self) -> dict:
        return json.loads(self.base) if isinstance(self.base, str) and self.base.startswith("{") else \
            {"preset": self.base}

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise ExperimentError(f"no variant named {name!r}", where="experiment.variants",
                              options=[v.name for v in self.variants])

    def reference(self, v: Variant) -> Variant | None:
        """The variant ``v`` is compared with (None for the reference itself): the named baseline,
        or (``baseline: {key: value}``) the variant equal to ``v`` except that ``key = value``."""
        if self.baseline is None or isinstance(self.baseline, str):
            ref = self.variant(self.baseline) if self.baseline else self.variants[0]
            return None if ref.name == v.name else ref
        want = {**v.overrides, **dict(self.baseline)}
        if want == v.overrides:
            return None
        for cand in self.variants:
            if cand.overrides == want:
                return cand
        return None

    def metric_direction(self, metric: str, task_metrics: dict) -> str | None:
        if metric in task_metrics:
            return task_metrics[metric]
        return GENERAL_METRICS.get(metric)

    def fingerprint(self) -> str:
        """What identifies the runs: everything but titles and texts (16 hex digits)."""
        keep = {k: v for k, v in json.loads(self.raw).items()
                if k not in ("title", "claim", "description", "quick", "probe", "executor", "min_effect",
                             "success")}
        keep["quick"] = self.quick
        return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------- loading
def load(source: Any, *, quick: bool = False) -> Experiment:
    """An :class:`Experiment` from a shipped name, a path to a YAML file, YAML text, a dict, or an
    Experiment.  ``quick`` merges the file's ``quick:`` block over it.  Errors name the field."""
    if isinstance(source, Experiment):
        if quick and not source.quick:
            return load(json.loads(source.raw), quick=True)
        return source
    text = ""
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source
                                           and ":" not in source.split("/")[-1]):
        path = _find(str(source))
        text = read_text(path, where=str(path.name), error=ExperimentError)
        data = load_yaml(text, where=path.name, error=ExperimentError)
    elif isinstance(source, str):
        text = source
        data = load_yaml(source, where="experiment", error=ExperimentError)
    elif isinstance(source, dict):
        data = copy.deepcopy(source)
    else:
        raise ExperimentError(f"cannot read an experiment from {type(source).__name__}",
                              where="experiment", fix="pass a shipped name, a YAML path or text, or a dict")
    return parse(data, quick=quick, source=text)


def _find(name: str) -> Path:
    p = Path(name)
    try:
        if p.suffix in (".yaml", ".yml") and p.is_file():
            return p
        for cand in (shipped_dir() / f"{name}.yaml", shipped_dir() / name / "experiment.yaml"):
            if cand.is_file():
                return cand
        if p.is_file():
            return p
    except (OSError, ValueError) as exc:  # a name too long for a path, a NUL byte
        raise ExperimentError(f"{str(name)[:80]!r} cannot name a file ({type(exc).__name__})", where="experiment",
                              options=list_shipped(), fix="pass a path to a .yaml file or a shipped name "
                              "(`zoo experiment list`)") from None
    raise ExperimentError(f"no experiment file or shipped experiment named {name!r}", where="experiment",
                          options=list_shipped(), fix="pass a path to a .yaml file or a shipped name "
                          "(`zoo experiment list`)")


def list_shipped() -> list[str]:
    """Names of the shipped experiments (``checkpoints/experiments/<name>/experiment.yaml``)."""
    d = shipped_dir()
    return sorted(p.parent.name for p in d.glob("*/experiment.yaml")) if d.is_dir() else []


def missing_plugins(names) -> list[str]:
    """The plugin entry points among ``names`` that are not installed (nothing is loaded)."""
    installed = {ep.name for ep in md.entry_points(group="zoo")}
    reg = get_registry()
    return [n for n in names if n not in installed and not (n in reg.plugins and reg.plugins[n].ok)]


def plugin_package(name: str) -> tuple[str, bool]:
    """``(package, shipped)`` of the plugin ``name``: its package is ``zoo-NAME``, and ``shipped``
    says whether it lies in the zoo clone's ``plugins/`` folder (the template plugin
    ``zoo-linear-attention`` does; it is not on PyPI, so ``pip install zoo-linear-attention`` fails --
    the newcomer walk of issue 34 followed that first fix)."""
    pkg = "zoo-" + name.replace("_", "-")
    return pkg, any((Path(d) / pkg / "pyproject.toml").is_file() for d in _plugin_folders())


def _plugin_folders() -> list[str]:
    """Where the clone's ``plugins/`` folder is (``zoo.plugins``), found without importing it: the
    engine never runs a plugin's code (tests/core/test_architecture.py), it only looks for a
    package folder there."""
    try:
        found = importlib.util.find_spec("zoo.plugins")
    except (ImportError, ValueError):  # pragma: no cover - a source tree without the package mapping
        found = None
    return list(found.submodule_search_locations or ()) if found is not None else \
        [str(Path(__file__).resolve().parents[2] / "plugins")]


def missing_plugin_message(name: str) -> str:
    """The message id that says how to install the missing plugin ``name``."""
    return "experiment.plugin_missing" if plugin_package(name)[1] else "experiment.plugin_missing_package"


def install_hint(name: str) -> str:
    """How to install the plugin ``name``, in English (``zoo experiment list``)."""
    pkg, _ = plugin_package(name)
    mid = missing_plugin_message(name)
    return messages.render(mid, {"plugin": repr(name), "package": pkg}, (mid,))[1]


def shipped_listing() -> list[tuple[str, str, list[str]]]:
    """``(name, title, missing plugins)`` of every shipped experiment, read from its file without
    loading a plugin or checking it against the registry -- so ``zoo experiment list`` lists all of
    them even when one needs a plugin that is not installed."""
    rows = []
    for name in list_shipped():
        path = shipped_dir() / name / "experiment.yaml"
        data = load_yaml(read_text(path, where=path.name, error=ExperimentError), where=path.name,
                         error=ExperimentError)
        data = data if isinstance(data, dict) else {}
        plugins = data.get("plugins") or []
        plugins = [p for p in plugins if isinstance(p, str)] if isinstance(plugins, list) else []
        rows.append((name, str(data.get("title") or ""), missing_plugins(plugins)))
    return rows


def deep_merge(a: Any, b: Any) -> Any:
    """``b`` deep-merged over ``a`` (mappings merge, everything else replaces)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = deep_merge(a.get(k), v) if k in a else v
        return out
    return copy.deepcopy(b)


def _bad(where: str, msg: str, fix: str | None = None, options=None):
    raise ExperimentError(msg, where=f"experiment.{where}" if where else "experiment", fix=fix,
                          options=options)


def _bad_of(where: str, message_id: str, fix=None, options=None, **params):
    """:func:`_bad` worded from the message catalogue (``zoo.messages``), so a front end translates
    it; an ``example=`` with no ``fix`` gives the shared "e.g. ..." fix."""
    if fix is None and "example" in params:
        fix = "hint.example"
    raise ExperimentError.of(message_id, where=f"experiment.{where}" if where else "experiment", fix=fix,
                             options=options, **params)


def parse(data: Any, *, quick: bool = False, source: str = "") -> Experiment:
    """Validate a mapping into an :class:`Experiment` (``quick``: apply its ``quick:`` block)."""
    if not isinstance(data, dict):
        _bad_of("", "experiment.not_mapping", type=type(data).__name__)
    unknown = [k for k in data if k not in TOP_KEYS]
    if unknown:
        best = closest(str(unknown[0]), TOP_KEYS)
        raise ExperimentError.of("experiment.unknown_field", where=f"experiment.{unknown[0]}",
                                 options=TOP_KEYS, field=short(unknown[0]), suggestion=best,
                                 fix="hint.did_you_mean" if best else "hint.remove_it")
    raw = json.dumps(data, default=str)  # key order kept: grid variant names follow it
    if quick:
        q = data.get("quick")
        if q is not None and not isinstance(q, dict):
            _bad_of("quick", "experiment.overrides_mapping", example="quick: {seeds: 2, budget: {steps: 50}}")
        if q and "quick" in q:
            _bad_of("quick.quick", "experiment.quick_nested")
        data = deep_merge({k: v for k, v in data.items() if k != "quick"}, q or {})
    for req in ("name", "base", "task", "budget"):
        if req not in data:
            raise ExperimentError.of("experiment.missing_field", where=f"experiment.{req}", field=req)
    name = data["name"]
    if not isinstance(name, str) or not re.match(r"^[a-z][a-z0-9_]{0,60}$", name):
        _bad_of("name", "experiment.bad_name", name=short(name))
    base = _parse_base(data["base"])
    variants = _parse_variants(data)
    seeds = _parse_seeds(data.get("seeds", 3))
    task, task_params = _parse_task(data["task"])
    train = _parse_train(data.get("train") or {}, "train")
    budget = _parse_budget(data["budget"])
    metrics = data.get("metrics") or []
    if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
        _bad_of("metrics", "experiment.metric_names", example="metrics: [acc, eval_loss]")
    baseline = data.get("baseline")
    names = [v.name for v in variants]
    if isinstance(baseline, str):
        if baseline not in names:
            _bad_of("baseline", "experiment.no_variant", options=names, name=short(baseline))
    elif isinstance(baseline, dict):
        keys = {k for v in variants for k in v.overrides}
        for k in baseline:
            if k not in keys:
                _bad_of(f"baseline.{k}", "experiment.baseline_key", options=sorted(keys), key=short(k))
        baseline = tuple(sorted(baseline.items()))
    elif baseline is not None:
        _bad_of("baseline", "experiment.baseline_kind")
    probe = data.get("probe") or []
    if isinstance(probe, str):
        probe = [probe]
    if not isinstance(probe, list) or not all(isinstance(p, str) and 0 < len(p) <= 200 for p in probe):
        _bad_of("probe", "experiment.probe_texts")
    plugins = data.get("plugins") or []
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        _bad_of("plugins", "experiment.plugin_names", example="plugins: [linear_attention]")
    for k in ("title", "claim", "description"):
        if not isinstance(data.get(k, ""), str):
            _bad_of(k, "experiment.must_be_text")
    min_effect = data.get("min_effect") or {}
    if not isinstance(min_effect, dict):
        _bad_of("min_effect", "experiment.min_effect_mapping", example="min_effect: {acc: 0.05, eval_loss: 0.01}")
    for k, v in min_effect.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v < float("inf")):
            _bad_of(f"min_effect.{k}", "value.must_be_finite_at_least", minimum=0, value=short(v))
    success = data.get("success") or {}  # metrics that jump: success rate at a threshold (issue 33)
    if not isinstance(success, dict):
        _bad_of("success", "experiment.success_mapping", example="success: {acc: 0.9}")
    for k, v in success.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not abs(v) < float("inf"):
            _bad_of(f"success.{k}", "value.must_be_finite", value=short(v), example="success: {acc: 0.9}")
    executor = data.get("executor") or {}
    if not isinstance(executor, dict) or not all(isinstance(k, str) for k in executor):
        _bad_of("executor", "experiment.executor_mapping", example="executor: {slurm_partition: cpu}")
    try:  # threshold: {metric: acc, value: 0.9, stop: false}, or a list of them
        thresholds = check_thresholds(data.get("threshold") if isinstance(data.get("threshold"), list)
                                      else [data["threshold"]] if data.get("threshold") is not None else [],
                                      where="experiment.threshold")
    except ZooError as exc:
        raise ExperimentError(exc.what, where=exc.where, options=exc.options, fix=exc.fix,  # its words kept
                              message_id=exc.message_id, params=exc.params, fix_ids=exc.fix_ids) from exc
    tune, tune_select = _parse_tune(data.get("tune"))
    exp = Experiment(name=name, base=base, variants=tuple(variants), seeds=seeds, task=task,
                     task_params=task_params, train=train, budget=budget, metrics=tuple(metrics),
                     baseline=baseline, title=data.get("title", ""), claim=data.get("claim", ""),
                     description=data.get("description", ""), probe=tuple(probe),
                     plugins=tuple(plugins), quick=quick,
                     min_effect=tuple(sorted((str(k), float(v)) for k, v in min_effect.items())),
                     success=tuple(sorted((str(k), float(v)) for k, v in success.items())),
                     executor=tuple(sorted((k, _freeze(v)) for k, v in executor.items())),
                     thresholds=json.dumps(thresholds), tune=tune, tune_select=tune_select,
                     source=source, raw=raw)
    primary = _check_against_registry(exp)
    if primary and primary not in exp.metrics:  # every verdict table has the past-only score
        exp = dataclasses.replace(exp, metrics=exp.metrics + (primary,))
    adds = tuple(n for t in thresholds for n in threshold_metrics(t) if n not in exp.metrics)
    if adds:  # each threshold's steps and reached-rate are results of the experiment
        exp = dataclasses.replace(exp, metrics=exp.metrics + adds)
    return exp


def threshold_metrics(t: dict) -> tuple[str, str]:
    """``(steps_to_acc_0.9, reached_acc_0.9)``: the two metrics a threshold adds to every trial
    (the first evaluated step that reached it, None when none did; and 1.0 / 0.0)."""
    name = threshold_name(t["metric"], t["value"])
    return name, "reached_" + name[len("steps_to_"):]


def derived_directions(exp: "Experiment", task) -> dict:
    """The metrics a trial records besides the task's and the general ones, with their direction:
    ``best_<m>`` (the best value over training, the task's direction), and per threshold
    ``steps_to_*`` ("min": fewer steps is better) and ``reached_*`` ("max")."""
    tm = task_metrics(task)
    out = {f"best_{m}": d for m, d in tm.items()}
    for t in json.loads(exp.thresholds):
        steps, hit = threshold_metrics(t)
        out[steps], out[hit] = "min", "max"
    return out


@dataclass(frozen=True)
class TuneRange:
    """A ``tune:`` axis given as a range, ``train.lr: {low: 1e-4, high: 1e-2, log: true}``: searched
    by ``zoo experiment tune`` (an Optuna float distribution; an integer one when both bounds are
    integers), never swept by ``zoo experiment run`` (a grid needs listed values)."""
    low: float
    high: float
    log: bool = False
    integer: bool = False

    def to_dict(self) -> dict:
        return {"low": self.low, "high": self.high, "log": self.log}


RANGE_KEYS = ("low", "high", "log")


def _parse_range(k: str, r: dict) -> TuneRange:
    """``{low, high, log?}`` -> a :class:`TuneRange`; errors name ``tune.<key>.<field>``."""
    where = f"tune.{k}"
    for f in r:
        if f not in RANGE_KEYS:
            _bad_of(f"{where}.{f}", "experiment.range_field", options=list(RANGE_KEYS), field=repr(f),
                    example=f"{k}: {{low: 1.0e-4, high: 1.0e-2, log: true}}")
    vals = {}
    for f in ("low", "high"):
        if f not in r:
            _bad_of(f"{where}.{f}", "experiment.range_missing", field=f,
                    example=f"{k}: {{low: 1.0e-4, high: 1.0e-2, log: true}}")
        v = r[f]
        if isinstance(v, str):  # YAML 1.1 reads 1e-4 as text
            try:
                v = float(v)
            except ValueError:
                _bad_of(f"{where}.{f}", "value.not_a_number", value=short(v))
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            _bad_of(f"{where}.{f}", "value.must_be_finite", value=short(r[f]))
        vals[f] = v
    log = r.get("log", False)
    if not isinstance(log, bool):
        _bad_of(f"{where}.log", "value.must_be_bool", value=short(log))
    low, high = vals["low"], vals["high"]
    if not low < high:
        _bad_of(f"{where}.high", "experiment.range_order", low=f"{low:g}", high=f"{high:g}")
    if log and not low > 0:
        _bad_of(f"{where}.low", "experiment.range_log", low=f"{low:g}")
    integer = isinstance(low, int) and isinstance(high, int)
    if k.startswith("train."):
        for v in (low, high):
            _parse_train({k[6:]: v}, where)
    return TuneRange(float(low) if not integer else low, float(high) if not integer else high, log, integer)


def tune_ranges(exp: "Experiment") -> dict[str, TuneRange]:
    """The ``tune:`` axes of ``exp`` given as ranges (empty: a grid)."""
    return {k: v for k, v in exp.tune if isinstance(v, TuneRange)}


def _parse_tune(tune: Any) -> tuple[tuple, str | None]:
    """``tune: {train.lr: [1e-3, 3e-3], select: acc}`` -> sorted (key, values) pairs and the
    selection metric (None: the task's primary metric).  An axis may be a range instead of a list,
    ``train.lr: {low: 1e-4, high: 1e-2, log: true}``: then the pair is (key, :class:`TuneRange`),
    searched by ``zoo experiment tune`` only."""
    if tune is None:
        return (), None
    if not isinstance(tune, dict) or not tune:
        _bad_of("tune", "experiment.tune_mapping", example="tune: {train.lr: [1.0e-3, 3.0e-3, 1.0e-2]}")
    select = tune.get("select")
    if select is not None and not isinstance(select, str):
        _bad_of("tune.select", "threshold.metric_name", value=short(select), example="select: acc")
    out = []
    for k, vals in tune.items():
        if k == "select":
            continue
        _check_key(k, f"tune.{k}")
        if isinstance(vals, dict):  # a range, for the Optuna search
            out.append((k, _parse_range(k, vals)))
            continue
        if not isinstance(vals, list) or len({json.dumps(_freeze(v)) for v in vals}) < 2:
            _bad_of(f"tune.{k}", "experiment.tune_two_values", values=short(vals), key=k)
        if len(vals) != len({json.dumps(_freeze(v)) for v in vals}):
            _bad_of(f"tune.{k}", "experiment.values_distinct")
        if k.startswith("train."):
            for v in vals:
                _parse_train({k[6:]: v}, "tune.train")
            vals = [float(v) if isinstance(v, str) else v for v in vals]
        out.append((k, tuple(_freeze(v) for v in vals)))
    if not out:
        _bad_of("tune", "experiment.tune_no_key", example="tune: {train.lr: [1.0e-3, 3.0e-3]}")
    return tuple(sorted(out)), select


def _parse_base(base: Any) -> str:
    if isinstance(base, str):
        return base
    if isinstance(base, dict):
        return json.dumps(base, sort_keys=True)
    _bad_of("base", "experiment.base_kind", type=type(base).__name__,
            example="base: gpt_tiny, or base: {preset: gpt_tiny, num_layers: 2}")


def _check_key(key: Any, where: str) -> str:
    if not isinstance(key, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$", key):
        _bad_of(where, "experiment.override_key", key=repr(key))
    return key


def _freeze(v: Any) -> Any:
    """JSON-able values only (what YAML gives), so variants hash and compare by value."""
    return json.loads(json.dumps(v))


def _parse_variants(data: dict) -> list[Variant]:
    has_list, has_grid = data.get("variants") is not None, data.get("grid") is not None
    if has_list == has_grid:
        _bad_of("variants", "experiment.variants_or_grid")
    out: list[Variant] = []
    if has_list:
        items = data["variants"]
        if not isinstance(items, list) or not items:
            _bad_of("variants", "experiment.variants_list")
        for i, it in enumerate(items):
            w = f"variants[{i}]"
            if not isinstance(it, dict) or "name" not in it:
                _bad_of(w, "experiment.variant_mapping")
            extra = set(it) - {"name", "set", "description"}
            if extra:
                _bad_of(f"{w}.{sorted(extra)[0]}", "experiment.variant_field", options=["name", "set", "description"])
            if not isinstance(it["name"], str) or not _PATH_NAME_RE.match(it["name"]):
                _bad_of(f"{w}.name", "experiment.variant_name", name=repr(it["name"]))
            sets = it.get("set") or {}
            if not isinstance(sets, dict):
                _bad_of(f"{w}.set", "experiment.overrides_mapping")
            pairs = tuple(sorted((_check_key(k, f"{w}.set"), _freeze(v)) for k, v in sets.items()))
            out.append(Variant(it["name"], pairs, str(it.get("description", ""))))
    else:
        grid = data["grid"]
        if not isinstance(grid, dict) or not grid or not all(isinstance(v, list) and v for v in grid.values()):
            _bad_of("grid", "experiment.grid_lists",
                    example="grid: {num_layers: [2, 12], norm.placement: [pre, post]}")
        keys = [_check_key(k, "grid") for k in grid]
        size = math.prod(len(grid[k]) for k in keys)
        if size > MAX_VARIANTS:
            _bad_of("grid", "experiment.grid_size", size=f"{size:,}", limit=f"{MAX_VARIANTS:,}")
        for combo in itertools.product(*(grid[k] for k in keys)):
            name = ",".join(f"{k.split('.')[-1]}={_short_val(v)}" for k, v in zip(keys, combo))
            if not _PATH_NAME_RE.match(name):
                _bad("grid", f"the grid value(s) make the variant name {short(name)}, which cannot be "
                     "a folder name", fix="grid values of letters, digits and _ . = , + - (no '/', "
                     "no leading '.', at most 80 characters for the whole name)")
            out.append(Variant(name, tuple(sorted((k, _freeze(v)) for k, v in zip(keys, combo)))))
    if len(out) > MAX_VARIANTS:
        _bad_of("variants", "experiment.variants_count", size=f"{len(out):,}", limit=f"{MAX_VARIANTS:,}")
    seen: set[str] = set()
    dup = None
    for v in out:  # one pass (a 64,000-variant grid was an O(n^2) count)
        if v.name in seen:
            dup = v.name
            break
        seen.add(v.name)
    if dup:
        _bad_of("variants", "experiment.variant_twice", name=repr(dup))
    return out


def _short_val(v: Any) -> str:
    if isinstance(v, dict):
        return str(v.get("kind", "x"))
    return "none" if v is None else str(v)


def _parse_seeds(seeds: Any) -> tuple[int, ...]:
    if isinstance(seeds, bool):
        _bad_of("seeds", "experiment.seeds_kind")
    if isinstance(seeds, int):
        if not 1 <= seeds <= 100:
            _bad_of("seeds", "experiment.seed_count", value=seeds)
        return tuple(range(seeds))
    if isinstance(seeds, list) and seeds and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                  for s in seeds):
        if len(set(seeds)) != len(seeds):
            _bad_of("seeds", "experiment.seeds_distinct")
        return tuple(seeds)
    _bad_of("seeds", "experiment.seeds_values", value=repr(seeds))


def _parse_task(task: Any) -> tuple[str, tuple]:
    if isinstance(task, str):
        return task, ()
    if isinstance(task, dict) and isinstance(task.get("kind"), str):
        params = {k: _freeze(v) for k, v in task.items() if k != "kind"}
        for k, v in params.items():  # a task's data file: confined (see _check_task_path)
            if k == "path" or k.endswith("_path"):
                _check_task_path(v, f"task.{k}")
        return task["kind"], tuple(sorted(params.items()))
    _bad_of("task", "experiment.task_kind", example="task: {kind: mqar, num_kv_pairs: 8}")


def _check_task_path(v: Any, where: str) -> None:
    """The rule for a task's data file (``task: {kind: poems, path: ...}``): empty (the task's
    shipped data) or a relative path without ``..`` and without NUL, so it names a file inside the
    folder the experiment is run from -- never an absolute path or a walk up to any file of the
    machine.  (Symlinks out are refused when the file is read, by the task's reader.)"""
    if v in ("", None):
        return
    if not isinstance(v, str) or "\x00" in v or v.startswith(("/", "~")) or "\\" in v \
            or any(p == ".." for p in v.split("/")) or len(v) > 4096:
        _bad(where, f"a task's data path must be relative and stay inside the folder the experiment "
             f"runs from, got {short(v)}", fix="copy the file below the current folder and name it "
             "relative to it (or leave it empty for the shipped data)")


def _parse_train(train: Any, where: str) -> tuple:
    if not isinstance(train, dict):
        _bad_of(where, "experiment.train_mapping", example="train: {lr: 3e-3, batch_size: 32}")
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    for k in train:
        if k not in names:
            best = closest(str(k), names)
            _bad_of(f"{where}.{k}", "experiment.unknown_train_option", options=names, option=repr(k),
                    suggestion=best, fix=["hint.did_you_mean" if best else None])
        if k in ("steps", "seed", "objective", "progress"):
            _bad_of(f"{where}.{k}", "experiment.set_by_experiment", fix="hint.remove_it", key=k)
    types = {f.name: f.type for f in dataclasses.fields(TrainConfig)}
    out = {}
    for k, v in train.items():
        if isinstance(v, str) and "float" in str(types[k]):  # YAML 1.1 reads 3e-3 as text
            try:
                v = float(v)
            except ValueError:
                _bad_of(f"{where}.{k}", "value.not_a_number", value=repr(v))
        out[k] = _freeze(v)
    try:
        dataclasses.replace(TrainConfig(), **out).validate()
    except ZooError as exc:
        raise ExperimentError(exc.what, where=f"experiment.{where}.{exc.where.split('.', 1)[-1] if exc.where else ''}",
                              fix=exc.fix, message_id=exc.message_id, params=exc.params,  # its words kept
                              fix_ids=exc.fix_ids) from exc
    except TypeError as exc:
        _bad(where, f"invalid trainer option: {exc}")
    return tuple(sorted(out.items()))


def _parse_budget(b: Any) -> Budget:
    """One of steps / tokens / flops, and optionally ``params: N`` (``params_tolerance``: 0.05)."""
    if isinstance(b, dict) and ("params" in b or "params_tolerance" in b):
        rest = {k: v for k, v in b.items() if k not in ("params", "params_tolerance")}
        if "params" not in b:
            _bad_of("budget.params_tolerance", "experiment.tolerance_alone")
        out = {}
        for k, lo, hi in (("params", 1.0, 1e13), ("params_tolerance", 0.0, 1.0)):
            v = b.get(k, 0.05)
            if isinstance(v, str):
                try:
                    v = float(v)
                except ValueError:
                    _bad_of(f"budget.{k}", "value.not_a_number", value=repr(v))
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo <= v <= hi) or (k == "params_tolerance" and v == 0):
                _bad(f"budget.{k}", f"must be a number in {'[1, 1e13]' if k == 'params' else '(0, 1]'}, got {v!r}",
                     fix="e.g. budget: {steps: 400, params: 2.0e5, params_tolerance: 0.05}")
            out[k] = float(v)
        return dataclasses.replace(_parse_budget(rest), **out)
    if not isinstance(b, dict) or len(b) != 1 or next(iter(b)) not in ("steps", "tokens", "flops"):
        _bad_of("budget", "experiment.budget_kind")
    k, v = next(iter(b.items()))
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            _bad_of(f"budget.{k}", "value.not_a_number", value=repr(v))
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not v > 0:
        _bad_of(f"budget.{k}", "value.must_be_finite_positive", value=short(v))
    if k == "steps":
        if v > MAX_STEPS:
            _bad_of("budget.steps", "experiment.max_steps", limit=f"{MAX_STEPS:,}", value=short(v))
        if int(v) != v:
            _bad_of("budget.steps", "experiment.must_be_integer")
        return Budget(steps=int(v))
    return Budget(**{k: float(v)})


def _check_against_registry(exp: Experiment) -> str | None:
    """Task kind and parameters, trainer options of variants, and metric names, checked now;
    returns the task's primary (past-only) metric, which :func:`parse` adds to ``metrics``."""
    load_plugins(exp.plugins)
    task = get_task(exp.task, dict(exp.task_params), where="experiment.task")
    for i, v in enumerate(exp.variants):
        tr = {k[6:]: val for k, val in v.set if k.startswith("train.")}
        _parse_train(tr, f"variants[{i}].set.train")
        tp = {k[5:]: val for k, val in v.set if k.startswith("task.")}
        if tp:
            get_task(exp.task, {**dict(exp.task_params), **tp}, where=f"experiment.variants[{i}].set.task")
    known = {**GENERAL_METRICS, **task_metrics(task), **derived_directions(exp, task)}
    curve = sorted(["eval_loss", *task_metrics(task)])  # what the trainer evaluates as it goes
    for i, t in enumerate(json.loads(exp.thresholds)):
        if t["metric"] not in curve:
            _bad_of(f"threshold[{i}].metric", "experiment.no_task_metric", options=curve, task=exp.task,
                    metric=repr(t["metric"]))
    if exp.tune:
        _check_tune(exp, task, known)
    for i, m in enumerate(exp.metrics):
        if m not in known:
            _bad_of(f"metrics[{i}]", "experiment.unknown_metric", options=sorted(known), metric=repr(m), task=exp.task)
    for m, _ in exp.min_effect:
        if m not in known:
            _bad_of(f"min_effect.{m}", "experiment.unknown_metric", options=sorted(known), metric=repr(m), task=exp.task)
    for m, _ in exp.success:
        if m not in known:
            _bad_of(f"success.{m}", "experiment.unknown_metric", options=sorted(known), metric=repr(m), task=exp.task)
    return getattr(task, "primary", None)  # the past-only metric verdicts use (zoo.experiment.tasks)


def _check_tune(exp: Experiment, task, known: dict) -> None:
    """A tuned experiment needs a task with a validation split and a selection metric it has."""
    if not hasattr(task, "using_split"):
        _bad_of("tune", "experiment.no_validation", task=exp.task)
    select = exp.tune_select or getattr(task, "primary", None) or next(iter(task_metrics(task)), None)
    tm = task_metrics(task)
    if select not in tm or tm[select] is None:
        _bad_of("tune.select", "experiment.select_metric", options=sorted(m for m, d in tm.items() if d),
                metric=repr(select), task=exp.task, example="select: acc")
    overlap = {k for k, _ in exp.tune} & {k for v in exp.variants for k, _ in v.set}
    if overlap:
        _bad_of(f"tune.{sorted(overlap)[0]}", "experiment.tune_overlap")


def tune_select(exp: Experiment, task) -> tuple[str, str]:
    """The selection metric of a tuned experiment and its direction ("max" / "min")."""
    m = exp.tune_select or getattr(task, "primary", None) or next(iter(task_metrics(task)))
    return m, task_metrics(task)[m]


def min_effects(task, overrides=()) -> dict[str, float]:
    """The smallest difference worth a verdict for each metric of ``task`` (see
    :data:`GENERAL_MIN_EFFECTS`), with the experiment's ``min_effect`` overrides."""
    declared = dict(getattr(task, "min_effects", {}) or {})
    out = {**GENERAL_MIN_EFFECTS}
    for m in task_metrics(task):
        out[m] = declared.get(m, GENERAL_MIN_EFFECTS.get(m, DEFAULT_MIN_EFFECT))
    out.update(dict(overrides))
    return out


def task_metrics(task) -> dict:
    return dict(getattr(task, "metrics", {}) or {})


def load_plugins(names) -> None:
    """Load the named plugin entry points (``plugins: [linear_attention]``) if not loaded yet; a
    missing one is an error saying what to install."""
    reg = get_registry()
    for n in names:
        if n in reg.plugins and reg.plugins[n].ok:
            continue
        # only load what is installed: asking the registry for a missing name would record a
        # phantom "broken plugin" that every later unknown-component message would name
        if any(ep.name == n for ep in md.entry_points(group="zoo")):
            reg.load_entry_points(only=[n])
        info = reg.plugins.get(n)
        if info is None or not info.ok:
            raise ExperimentError.of(missing_plugin_message(n), where="experiment.plugins", plugin=repr(n),
                                     package="zoo-" + n.replace("_", "-"))
