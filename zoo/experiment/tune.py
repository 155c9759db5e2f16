"""``zoo experiment tune FILE --trials N``: an Optuna search over an experiment's ``tune:`` space.

Where the grid of ``tune:`` (:mod:`.selection`) trains every setting, a search asks Optuna (its
default TPE sampler, seeded) for ``N`` settings per variant -- one **study** per variant, so each
variant gets its own best setting, as the fair comparison wants.  An Optuna trial is the variant at
the suggested setting on every seed of the experiment: ordinary experiment trials
(``trials/<variant>@lr=0.003/seed0/``, run in this process), each scored on the validation half
(``val_<select>``; its other metrics on the test half), and the study's value is their mean over
seeds.  A setting whose seeds all diverged is a failed Optuna trial, never a number.

The study lives beside the results as an Optuna journal file (``OUT/optuna.journal``), so the same
command resumes: ``--trials N`` is the total per variant, the trials already in the journal count,
and a setting suggested again reuses its finished trial folders.  ``OUT`` is an ordinary results
folder: ``zoo experiment report OUT`` tabulates each variant at its best *evaluated* setting,
selected on validation, reported on test.  A ``tune:`` axis given as a list is categorical (its
listed values); one given as a range, ``train.lr: {low: 1e-4, high: 1e-2, log: true}``, is an
Optuna float distribution (an integer one when both bounds are integers), each suggested float
rounded to 4 significant digits so that it names its trial folder exactly
(``softmax@lr=0.002154``); with a range the trials are planned as the study suggests them and
``OUT/experiment.json`` lists those evaluated so far.  ``OUT/search.json`` holds every study's
trials and best setting.

The whole search holds the folder's lock (:func:`zoo.guard.transaction.lock`), as ``zoo
experiment run`` does: the journal has one writer, and a second ``tune`` (or a ``run``) on the
same folder is refused naming the holder.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any, Callable

from ..errors import ZooError
from ..guard.transaction import lock
from ..io.checkpoint import atomic_write
from .results import Results
from .run import finished, plan, run_trial
from .selection import VAL_PREFIX, base_of, combos, label, setting_of
from .spec import Experiment, ExperimentError, TuneRange, load, tune_ranges, tune_select
from .tasks import get_task
from .trial import EXPERIMENT, TRIAL

JOURNAL = "optuna.journal"
SUMMARY = "search.json"


def _optuna():
    try:  # an optional extra, imported only when a search is asked for
        import optuna
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend
    except ImportError as exc:
        raise ZooError("`zoo experiment tune` needs the optuna package", where="experiment.tune",
                       fix="pip install 'zoo-transformers[tune]' (or pip install optuna); "
                           "`zoo experiment run` sweeps the tune: grid without it") from exc
    return optuna, JournalStorage, JournalFileBackend


def _claim(exp: Experiment, trials, out: Path, *, add: bool = False) -> None:
    """``OUT/experiment.json`` as :func:`zoo.experiment.run` writes it (so Results reads OUT), or a
    refusal when OUT holds another experiment.  ``add``: ``trials`` join those it lists already (a
    range search plans its trials as they are suggested)."""
    f = out / EXPERIMENT
    rec = {"name": exp.name, "fingerprint": exp.fingerprint(), "quick": exp.quick,
           "experiment": json.loads(exp.raw), "trials": [t.to_dict() for t in trials]}
    if f.is_file():
        old = json.loads(f.read_text(encoding="utf-8") or "{}")
        if old.get("fingerprint") != rec["fingerprint"]:
            raise ExperimentError("the folder holds the results of another experiment", where="experiment.out",
                                  fix="pass another --out, or delete the folder")
        if add:
            known = {(t["variant"], t["seed"]) for t in old.get("trials", [])}
            rec["trials"] = old.get("trials", []) + [t for t in rec["trials"]
                                                     if (t["variant"], t["seed"]) not in known]
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(rec, indent=1, ensure_ascii=False)
    atomic_write(f, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def search(experiment: Any, *, trials: int, out: str | os.PathLike | None = None, quick: bool = False,
           threads: int | None = 1, sampler_seed: int = 0,
           progress: Callable[[dict], None] | None = None) -> dict:
    """Run (or resume) an Optuna study per variant of ``experiment`` over its ``tune:`` space, up to
    ``trials`` Optuna trials each; returns (and writes to ``OUT/search.json``) per variant the best
    setting, its mean validation score and every trial.  See the module docstring."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ZooError(f"--trials must be a positive integer, got {trials!r}", where="experiment.tune.trials",
                       fix="e.g. --trials 20")
    optuna, JournalStorage, JournalFileBackend = _optuna()
    exp = load(experiment, quick=quick)
    if not exp.tune:
        raise ExperimentError("the experiment has no tune: space to search", where="experiment.tune",
                              fix="add e.g. tune: {train.lr: [1.0e-4, 3.0e-4, 1.0e-3, 3.0e-3, 1.0e-2]}")
    metric, direction = tune_select(exp, get_task(exp.task, dict(exp.task_params)))
    ranges = tune_ranges(exp)
    planned = [] if ranges else plan(exp)  # a range: planned point by point, as suggested
    by_name: dict[str, list] = {}
    for t in planned:
        by_name.setdefault(t.variant, []).append(t)
    out = Path(out) if out is not None else Path("runs") / "experiments" / (exp.name + "-tune" + ("-quick" if quick else ""))
    # one writer: the journal, experiment.json and the trial folders are written under the
    # folder's lock; a second `tune` (or `run`) on it is refused, naming the holder
    with lock(out, where="experiment.out", error=ExperimentError):
        return _search(exp, out, trials, planned, by_name, ranges, metric, direction, threads,
                       sampler_seed, progress, optuna, JournalStorage, JournalFileBackend)


def _suggest(trial, k: str, axis) -> Any:
    """One axis's value for an Optuna trial: a listed value (categorical, by index: Optuna stores
    JSON-able choices), or a point of a range (a float rounded to 4 significant digits, kept inside
    the range; an integer)."""
    if isinstance(axis, TuneRange):
        if axis.integer:
            return trial.suggest_int(k, int(axis.low), int(axis.high), log=axis.log)
        x = trial.suggest_float(k, axis.low, axis.high, log=axis.log)
        return min(max(float(f"{x:.4g}"), axis.low), axis.high)
    return axis[trial.suggest_categorical(k, list(range(len(axis))))]


def _search(exp, out, trials, planned, by_name, ranges, metric, direction, threads, sampler_seed,
            progress, optuna, JournalStorage, JournalFileBackend) -> dict:
    _claim(exp, planned, out, add=bool(ranges))  # a range search keeps the trials it listed
    storage = JournalStorage(JournalFileBackend(str(out / JOURNAL)))
    emit = progress or (lambda e: None)
    space = {k: (vals if isinstance(vals, TuneRange) else list(vals)) for k, vals in exp.tune}
    keys = list(space)
    summary: dict = {"metric": metric, "direction": direction, "split": "validation", "variants": {}}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for v in exp.variants:
        study = optuna.create_study(study_name=f"{exp.name}:{v.name}", storage=storage, load_if_exists=True,
                                    direction="maximize" if direction == "max" else "minimize",
                                    sampler=optuna.samplers.TPESampler(seed=sampler_seed))

        def objective(trial, v=v):
            combo = {k: _suggest(trial, k, space[k]) for k in keys}
            if ranges:  # this point's trials, planned now and listed in experiment.json
                point = dataclasses.replace(exp, tune=tuple((k, (combo[k],)) for k in keys))
                todo = [t for t in plan(point) if base_of(t.variant) == v.name]
                _claim(exp, todo, out, add=True)
                name = todo[0].variant
            else:
                name = next(n for n in by_name if base_of(n) == v.name
                            and setting_of(n) == label(combo))
                todo = by_name[name]
            scores = []
            for t in todo:
                rec = finished(t, out)
                if rec is None:
                    d = t.folder(out)
                    d.mkdir(parents=True, exist_ok=True)
                    text = json.dumps(t.to_dict(), indent=1, ensure_ascii=False)
                    atomic_write(d / TRIAL, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
                    rec = run_trial(t, d, threads)
                val = rec["metrics"].get(VAL_PREFIX + metric)
                if isinstance(val, (int, float)) and math.isfinite(val):
                    scores.append(float(val))
            trial.set_user_attr("setting", label(combo))
            trial.set_user_attr("seeds", len(scores))
            emit({"event": "tune", "variant": v.name, "setting": label(combo), "n": len(scores),
                  "value": sum(scores) / len(scores) if scores else None})
            if not scores:  # every seed diverged: a failed trial, never a made-up score
                raise optuna.TrialPruned(f"{name}: no finite {VAL_PREFIX + metric}")
            return sum(scores) / len(scores)

        done = [t for t in study.trials if t.state.is_finished()]
        if len(done) < trials:
            study.optimize(objective, n_trials=trials - len(done))
        rows = [{"number": t.number, "setting": t.user_attrs.get("setting"), "value": t.value,
                 "state": t.state.name, "seeds": t.user_attrs.get("seeds")} for t in study.trials]
        complete = [t for t in study.trials if t.state.name == "COMPLETE"]
        best = study.best_trial if complete else None
        summary["variants"][v.name] = {
            "best_setting": best.user_attrs.get("setting") if best else None,
            "best_value": best.value if best else None, "trials": rows}
    text = json.dumps(summary, indent=1, ensure_ascii=False)
    atomic_write(out / SUMMARY, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    res = Results.from_dir(out)
    res.write_report(inside=False)
    summary["out"] = str(out)
    return summary


__all__ = ["search", "JOURNAL", "SUMMARY", "combos"]
