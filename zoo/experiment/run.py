"""Planning and running an experiment: variants x seeds -> trials -> ordinary training runs.

A **trial** is one call of the trainer (:func:`zoo.train.train`) on the task's generated data, in its
own run folder ``OUT/trials/<variant>/seed<k>/`` (``model.safetensors``, ``metrics.jsonl``, trainer
state), so ``zoo.load(trial_dir)`` opens it and the Inspect tab can look inside.  When the trainer
returns, the worker scores the task's exact metrics and writes ``result.json`` *atomically*: that
file is the trial's completion record.  Running the same command again skips every trial that has
one; a trial killed half-way resumes from its last trainer save (``save_every``), so nothing
finished is ever lost or re-run.

Executors (``executor=``):

``local``    (default) ``jobs`` worker processes at a time, each ``python -m zoo.experiment.worker``
             with ``threads`` intra-op threads (``OMP_NUM_THREADS``); workers die with the parent
             (Linux ``PR_SET_PDEATHSIG``: SIGTERM, so the trainer saves before it exits).
``inline``   one trial after another in this process (debugging; no parallelism).
``submitit`` a job array through submitit's ``LocalExecutor`` (real subprocesses, same code path as
             a cluster); ``slurm``: submitit's Slurm executor (``executor: {slurm_partition: ...}`` in
             the experiment file passes parameters).  Only the scheduling differs: a trial is the
             same function everywhere, and the results folder must be on a shared filesystem.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from .. import messages
from ..errors import ZooError
from ..inside.costs import forward_cost
from ..inside.trace import trace
from ..components import FAMILIES
from ..guard.files import clip
from ..guard.transaction import LOCK, disk_error, lock, target, write_file
from ..io.checkpoint import atomic_write
from ..model.build import build
from ..model.spec import apply_overrides, parse_spec
from ..registry import get_registry
from ..train import train as train_model
from ..train.config import TrainConfig
from ..train.metrics import read_metrics
from ..train.state import STATE_FILE
from ..version import __version__
from .results import Results
from .matching import match_params
from .selection import VAL_PREFIX, combos, tuned_name
from .spec import (Experiment, ExperimentError, Variant, deep_merge, load, load_plugins, threshold_metrics,
                   tune_ranges,
                   tune_select)
from .tasks import future_leak, get_task
from .trial import EXPERIMENT, RESULT, TRIAL, Trial  # noqa: F401 - re-exported
from .trial import check_record, code_changes, file_sha256, read_record, record_sha256

#: logits at positions <= c that move by more than this fraction of their scale when the tokens
#: after c change mean the model sees the future (a causal model's move is exactly 0: masked scores
#: weigh exp(-inf); float32 reordering noise would be ~1e-7)
LEAK_TOL = 1e-4




# ---------------------------------------------------------------------- planning
def resolve_spec(exp: Experiment, overrides: dict, where: str):
    """The variant's model spec: the base (a preset plus fields, or a full spec) with the
    variant's dotted spec overrides applied by the one override rule of ``zoo build --set`` and
    ``zoo.build(**overrides)`` (:func:`zoo.model.spec.apply_overrides`: ``norm.kind: rmsnorm`` drops
    LayerNorm's parameters and keeps the placement), validated by the spec parser.  A refusal is the
    spec's own error, placed at this variant: one where, one problem, one fix."""
    base = exp.base_dict()
    preset = base.pop("preset", None)
    try:
        d = parse_spec(preset).to_dict() if preset else {}
        d = deep_merge(d, base)
        return parse_spec(apply_overrides(d, overrides))
    except ZooError as exc:  # the spec's message, id and fix kept (was: its text and a second fix)
        raise ExperimentError(exc.what, where=f"{where}, {exc.where}" if exc.where else where,
                              options=exc.options,
                              fix=exc.fix or "check the base spec and this variant's overrides",
                              message_id=exc.message_id, params=exc.params, fix_ids=exc.fix_ids) from exc


def plan(exp: Experiment | Any, *, quick: bool = False) -> list[Trial]:
    """The trials of ``exp`` (variants x seeds, variants outermost), with each variant's steps from
    the budget: ``steps`` as given; ``tokens`` / (batch_size x sequence length); ``flops`` /
    training FLOPs per step (3 x the forward FLOPs of :func:`zoo.inside.costs.forward_cost`: the
    backward pass costs about twice the forward), so equal-FLOPs is one line."""
    exp = load(exp, quick=quick)
    load_plugins(exp.plugins)
    trials: list[Trial] = []
    for i, v in enumerate(planned_variants(exp)):
        where = f"experiment.variants[{i}] ({v.name})"
        ov = v.overrides
        spec_ov = {k: x for k, x in ov.items() if not k.startswith(("train.", "task."))}
        train = {**dict(exp.train), **{k[6:]: x for k, x in ov.items() if k.startswith("train.")}}
        if json.loads(exp.thresholds):  # only then: the keys of trials without thresholds stay
            train["thresholds"] = json.loads(exp.thresholds)
        tparams = {**dict(exp.task_params), **{k[5:]: x for k, x in ov.items() if k.startswith("task.")}}
        task = get_task(exp.task, tparams, where=where)
        spec = resolve_spec(exp, spec_ov, where)
        if spec.arch != task.arch:
            raise ExperimentError.of("experiment.task_arch", where=where, task=exp.task, task_arch=task.arch,
                                     arch=spec.arch)
        if exp.budget.params is not None:  # parameter-matched: this variant's width for the count
            fitted, _ = match_params(spec.replace(vocab_size=task.tokenizer().vocab_size), exp.budget.params,
                                     exp.budget.params_tolerance, where)
            spec = spec.replace(d_model=fitted.d_model, d_ff=fitted.d_ff)
        fitted = spec.replace(vocab_size=task.tokenizer().vocab_size)
        check_fits(task, spec, v, where)
        cfg = dataclasses.replace(TrainConfig(), **train)
        seq = task.seq_len() if hasattr(task, "seq_len") else (cfg.block_size or min(spec.max_len, 128))
        cost = forward_cost(fitted, seq, batch=cfg.batch_size)
        per_step = 3.0 * cost["total_flops"]
        b = exp.budget
        if b.steps is not None:
            steps = b.steps
        elif b.tokens is not None:
            steps = math.ceil(b.tokens / (cfg.batch_size * seq))
        else:
            steps = int(b.flops // per_step)
        if steps < 1:
            raise ExperimentError.of("experiment.no_step", where="experiment.budget", variant=repr(v.name),
                                     flops=f"{per_step:.3g}")
        params = int(cost["params_bytes"] // 4)
        for s in exp.seeds:
            trials.append(Trial(variant=v.name, seed=s, spec=spec.to_dict(), train=train, task=exp.task,
                                task_params=tparams, steps=int(steps), seq_len=int(seq), params=params,
                                flops_per_step=per_step, metrics=trial_metrics(exp), probe=exp.probe,
                                plugins=exp.plugins, code=code_identity(spec.to_dict(), exp.task)))
    return trials


def check_fits(task, spec, v: Variant, where: str) -> None:
    """Refuse, at planning, a variant whose spec cannot hold the task's sequences (``task.max_len``,
    the message the trainer's own check raises inside every worker), naming the experiment file's
    key to change: the variant's ``set: max_len`` when it sets one, else the base spec's ``max_len``.
    (The vocabulary needs no check here: a trial's vocab_size is always fitted to the task's.)"""
    need = task.needed_len() if hasattr(task, "needed_len") else None
    if need is None or need <= spec.max_len:
        return
    if "max_len" in v.overrides:
        raise ExperimentError.of("task.max_len", where=f"{where}.set.max_len", need=need, max_len=spec.max_len,
                                 fix="experiment.fix_variant_max_len", variant=v.name)
    raise ExperimentError.of("task.max_len", where=f"experiment.base.max_len (variant {v.name})", need=need,
                             max_len=spec.max_len)


def planned_variants(exp: Experiment) -> list[Variant]:
    """The variants trials are planned for: the file's, or with ``tune:`` each of them at every
    setting of the sweep (``softmax@lr=0.003``, :mod:`.selection`)."""
    if not exp.tune:
        return list(exp.variants)
    ranges = tune_ranges(exp)
    if ranges:  # a range has no grid: only the Optuna search draws its points
        k = next(iter(ranges))
        raise ExperimentError.of("experiment.tune_range_run", where=f"experiment.tune.{k}", key=k)
    return [Variant(tuned_name(v.name, c), tuple(sorted({**v.overrides, **c}.items())), v.description)
            for v in exp.variants for c in combos(exp.tune)]


def trial_metrics(exp: Experiment) -> tuple:
    """What each trial records: the experiment's metrics, and with ``tune:`` the selection metric
    on the validation half (``val_<metric>``: what picks each variant's setting)."""
    if not exp.tune:
        return exp.metrics
    select, _ = tune_select(exp, get_task(exp.task, dict(exp.task_params)))
    return exp.metrics + (VAL_PREFIX + select,)


def task_scores(trial: Trial, task, res) -> dict:
    """The task's metrics of a trained trial, and what its trainer measured along the way: the
    best value of each task metric over training (``best_<m>``), and per threshold the first step
    that reached it (``steps_to_*``; None when never reached, so a mean never counts it) and
    ``reached_*`` (1.0 / 0.0: the rate a success interval is drawn from).  A tuned trial (it asks
    for a ``val_<m>`` metric) is scored on the test half of the held-out set, and its ``val_``
    metrics on the validation half (:meth:`~zoo.experiment.tasks.SyntheticTask.using_split`)."""
    val = [m[len(VAL_PREFIX):] for m in trial.metrics if m.startswith(VAL_PREFIX)]
    if val:
        with task.using_split("validation"):
            on_val = task.evaluate(res.model)
        with task.using_split("test"):
            metrics = dict(task.evaluate(res.model))
        metrics.update({VAL_PREFIX + m: on_val.get(m) for m in val})
    else:
        metrics = dict(task.evaluate(res.model))
    for k, v in res.final.items():
        if k.startswith("best_") and k != "best_step" and not k.endswith("_step") and k != "best_eval_loss":
            metrics[k] = v
    for t in trial.train.get("thresholds") or []:
        steps, hit = threshold_metrics(t)
        metrics[steps] = res.final.get(steps)
        metrics[hit] = 0.0 if res.final.get(steps) is None else 1.0
    return metrics


# ---------------------------------------------------------------------- provenance
def _kinds(entry) -> list[str]:
    if isinstance(entry, str):
        return [entry]
    if isinstance(entry, dict) and isinstance(entry.get("kind"), str):
        return [entry["kind"]]
    if isinstance(entry, list):
        return [k for e in entry for k in _kinds(e)]
    return []


def used_components(spec: dict, task_kind: str) -> list[tuple[str, str]]:
    """``(family, kind)`` of every registered component a model spec (its shared fields and its
    ``encoder:`` / ``decoder:`` sections) and the task use; activations named by a feed-forward
    entry count too."""
    out = {("task", task_kind)}
    sections = [spec] + [spec[k] for k in ("encoder", "decoder") if isinstance(spec.get(k), dict)]
    for sec in sections:
        for f in FAMILIES:
            if f.field is None:
                continue
            entry = sec.get(f.parent, {}).get(f.field) if f.parent else sec.get(f.field)
            if f.parent and not isinstance(sec.get(f.parent), dict):
                entry = None
            out.update((f.name, k) for k in _kinds(entry))
        ffn = sec.get("ffn")
        if isinstance(ffn, dict) and isinstance(ffn.get("activation"), str):
            out.add(("activation", ffn["activation"]))
    return sorted(out)


_GIT: dict = {}


def git_state() -> tuple[dict | None, str]:
    """``({"commit", "dirty"}, "")`` of the git checkout zoo runs from, or ``(None, why)`` outside
    one (an installed package) or without git.  Read once per process."""
    if "v" not in _GIT:
        root = Path(__file__).resolve().parents[2]
        try:
            head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                  text=True, timeout=10)
            if head.returncode != 0:
                _GIT["v"] = (None, "not a git checkout: no commit recorded")
            else:
                st = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                     "--untracked-files=no"], capture_output=True, text=True, timeout=30)
                _GIT["v"] = ({"commit": head.stdout.strip(), "dirty": bool(st.stdout.strip())}, "")
        except (OSError, subprocess.SubprocessError):
            _GIT["v"] = (None, "git is not available: no commit recorded")
    return _GIT["v"]


def source_digests(spec: dict, task_kind: str) -> dict[str, str]:
    """``{module: sha256}`` of the source file of every plugin module the model and the task use
    (the registry knows each component's class, hence its module), read now from disk."""
    reg = get_registry()
    out: dict[str, str] = {}
    for fam, kind in used_components(spec, task_kind):
        try:
            cls = reg.get(fam, kind).cls
        except ZooError:
            continue  # not a registered name (the spec parser already refused real unknowns)
        mod = sys.modules.get(cls.__module__)
        f = getattr(mod, "__file__", None)
        if f and cls.__module__ not in out:
            out[cls.__module__] = file_sha256(Path(f)) or "unreadable"
    return out


def code_identity(spec: dict, task_kind: str) -> dict:
    """The code a trial runs: the zoo version, the git commit and dirty flag (None outside a
    checkout, with ``git_note`` saying so) and :func:`source_digests`.  It is part of the trial
    (so of its key) and of its ``result.json``."""
    git, note = git_state()
    return {"zoo": __version__, "git": git, "git_note": note, "sources": source_digests(spec, task_kind)}


# ---------------------------------------------------------------------- one trial (the worker)
def attention_entropy(model, ids: list[int]) -> float:
    """Mean entropy (nats) of the attention rows of every layer and head on ``ids``: ``log(T)``
    would be uniform attention, 0 one-hot (saturated softmax)."""
    tr = trace(model, torch.tensor([ids]))
    w = tr.attention_stack()  # (L, B, h, Tq, Tk)
    ent = -(w.clamp_min(1e-30).log() * w).sum(-1)  # (L, B, h, Tq)
    return float(ent.mean())


def run_trial(trial: Trial, out: str | os.PathLike, threads: int | None = None) -> dict:
    """Train one trial in ``out`` (resuming a killed one), score it, write ``result.json``."""
    out = Path(out)
    if threads:
        torch.set_num_threads(threads)
    load_plugins(trial.plugins)
    task = get_task(trial.task, trial.task_params)
    spec = parse_spec(trial.spec)
    code = code_identity(trial.spec, trial.task)
    if trial.code and code["sources"] != trial.code.get("sources"):
        raise ExperimentError.of("experiment.code_changed", where=f"trial {trial.id}",
                                 changes=", ".join(code_changes(trial.code, code)))
    knobs = {**trial.train, "progress": False}
    extra: dict = {}
    if "entropy_init" in trial.metrics:  # the same initial weights the trainer starts from
        cfg = dataclasses.replace(TrainConfig(), **trial.train, seed=trial.seed)
        _, _, fitted, _ = task.prepare_objective(cfg, spec, None, fit_vocab=True)
        extra["entropy_init"] = attention_entropy(build(fitted, seed=trial.seed), task.probe())
    resume = (out / STATE_FILE).is_file()
    res = train_model(spec, task, out=out, steps=trial.steps, seed=trial.seed, resume=resume,
                overwrite=not resume, fit_vocab=True, tokenizer=task.tokenizer(), **knobs)
    if res.interrupted:
        raise KeyboardInterrupt(f"trial {trial.id} stopped at step {res.step}")
    metrics = task_scores(trial, task, res)
    logs = [r for r in res.history if "loss" in r]
    if logs:
        metrics["train_loss"] = logs[-1]["loss"]
    if "eval_loss" in res.final:
        metrics.setdefault("eval_loss", res.final["eval_loss"])
    metrics.update(extra)
    leak = future_leak(res.model, task.probe(), res.model.spec.vocab_size)
    tps = [r["tokens_per_s"] for r in res.history if "tokens_per_s" in r]
    record = {"key": trial.key(), "variant": trial.variant, "seed": trial.seed, "steps": res.step,
              "params": trial.params, "train_flops": trial.train_flops, "metrics": metrics,
              "wall_time_s": res.wall_time, "pid": os.getpid(), "tokens_per_s": (sum(tps[1:]) / len(tps[1:])) if len(tps) > 1
              else (tps[0] if tps else None), "finished": time.time(),
              "causality": {"max_logit_change": leak, "sees_future": leak > LEAK_TOL},
              "code": trial.code or code, "spec_sha256": trial.spec_sha256(),
              "weights_sha256": file_sha256(out / "model.safetensors")}
    record["record_sha256"] = record_sha256(record)
    text = json.dumps(record, indent=1, ensure_ascii=False)
    atomic_write(out / RESULT, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return record


#: a failed trial's error as its worker raised it (message id and params, for a front end's language)
FAILURE = "error.json"


def write_failure(folder: Path, exc: ZooError) -> None:
    """Record the ``ZooError`` a trial failed with in ``folder/error.json``: its English, message id
    and params (:mod:`zoo.messages`), so that the experiment's "trial(s) failed" error can be worded
    again in a front end's language (:func:`read_failure`).  Best effort: a record that cannot be
    written leaves the worker's log line as the only account."""
    rec = {"what": getattr(exc, "what", None) or str(exc), "message_id": getattr(exc, "message_id", None),
           "params": dict(getattr(exc, "params", None) or {})}
    try:
        text = json.dumps(rec, ensure_ascii=False, default=str)
        atomic_write(Path(folder) / FAILURE, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    except (OSError, ValueError, ZooError):
        pass


def read_failure(folder: Path) -> dict | None:
    """The record :func:`write_failure` left in ``folder``, or None.  It is read only for a trial
    that failed: the inline executor writes it on every failure, and a worker removes the last
    attempt's before it trains (one killed before it could write leaves none), so it is this
    attempt's."""
    rec, _ = read_record(Path(folder) / FAILURE)
    if rec is None or not isinstance(rec.get("params"), dict) or not isinstance(rec.get("message_id"), (str, type(None))):
        return None
    return {"what": str(rec.get("what") or ""), "message_id": rec["message_id"], "params": rec["params"]}


def finished(trial: Trial, out: Path) -> dict | None:
    """The trial's completion record, if it finished (and is this very trial)."""
    rec, why = read_record(trial.folder(out) / RESULT)
    return rec if rec is not None and not check_record(trial, trial.folder(out), rec, why) else None


def mismatched(trials: list[Trial], out: Path) -> dict[str, str]:
    """``{trial id: why}`` for every trial whose folder holds a ``result.json`` that cannot stand
    for it (:func:`check_record`): other code, edited, swapped checkpoint, damaged."""
    bad = {}
    for t in trials:
        rec, why = read_record(t.folder(out) / RESULT)
        if why == "missing":
            continue
        reason = check_record(t, t.folder(out), rec, why)
        if reason:
            bad[t.id] = reason
    return bad


# ---------------------------------------------------------------------- the whole experiment
def default_jobs(n_trials: int, threads: int | None = None) -> tuple[int, int]:
    """``(processes, threads each)`` from the core count: one single-threaded process per core
    (small models gain little from intra-op threads and much from running side by side), never
    more processes than trials; with fewer trials than cores the spare cores become threads."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    jobs = max(1, min(cores, n_trials))
    return jobs, threads or max(1, cores // jobs)


def run(experiment: Any, *, out: str | os.PathLike | None = None, jobs: int | None = None,
        threads: int | None = None, quick: bool = False, executor: str = "local",
        progress: Callable[[dict], None] | None = None, report: bool = True,
        poll_s: float = 0.5, rerun_mismatched: bool = False, wait: Any = False,
        fresh: bool = False) -> "Results":
    """Run (or resume) an experiment and return its :class:`~zoo.experiment.results.Results`.

    ``experiment``: a shipped name, YAML path or text, dict, or :class:`Experiment`.  ``out``: the
    results folder (default ``runs/experiments/<name>[-quick]``).  ``jobs`` x ``threads``: worker
    processes and intra-op threads each (default :func:`default_jobs`).  ``progress(event)`` is
    called with dicts ``{"event": "start" | "trial" | "done" | "failed" | "end", ...}``: per trial
    ``id``, ``variant``, ``seed``, ``step``, ``steps``, ``loss``, ``eta_s``; overall ``finished``,
    ``total``, ``eta_s``.  ``report=False`` skips writing the report files.

    A trial folder whose ``result.json`` cannot stand for its trial (:func:`check_record`: written
    by other code -- the changed plugin sources are named --, edited, its checkpoint swapped or
    replaced, damaged) is refused with an :class:`ExperimentError` listing them, before anything
    runs; ``rerun_mismatched=True`` (``--rerun-mismatched``) clears those trial folders and trains
    them again instead.

    Finished trials are taken from an earlier run into the same folder (resuming is the design),
    and the ``start`` event counts them (``skipped``) for a front end to say so.  ``fresh=True``
    (``--fresh``) starts from nothing instead: the earlier folder is moved aside whole, atomically,
    to ``<out>.earlier-<k>`` (:func:`set_aside`; kept, never deleted) and the ``start`` event names
    it (``set_aside``).
    """
    exp = load(experiment, quick=quick)
    out = Path(out) if out is not None else Path("runs") / "experiments" / (exp.name + ("-quick" if quick else ""))
    out = _check_out(out, jobs, threads)  # the cheap refusals first, before any model is built
    if executor not in ("local", "inline", "submitit", "slurm"):
        raise ZooError(f"unknown executor {executor!r}", where="executor",
                       options=["local", "inline", "submitit", "slurm"])
    trials = plan(exp)
    aside = set_aside(out) if fresh else None  # after the plan: a refused plan moves nothing
    # one writer per results folder: a second `zoo experiment run` on it is refused naming the
    # holder's pid (wait=True / seconds: waits); the kernel drops the lock if this process dies
    with lock(out, where="experiment.out", wait=wait, error=ExperimentError):
        _claim_folder(exp, trials, out)
        bad = mismatched(trials, out)
        if bad and not rerun_mismatched:
            # cut to fit a message part whole (zoo.messages.MAX_PART), so a front end can quote it
            shown = clip("; ".join(f"{k}: {v}" for k, v in list(bad.items())[:3]), 400)
            raise ExperimentError.of("experiment.mismatched", where="experiment.out", n=len(bad), shown=shown,
                                     more=f"; and {len(bad) - 3} more" if len(bad) > 3 else "")
        for t in trials:
            if t.id in bad:  # cleared: trained afresh (no resume from a state of other code)
                _clear_trial(t, out)
        todo = [t for t in trials if finished(t, out) is None]
        jobs, threads = default_jobs(len(todo) or 1, threads) if jobs is None else (jobs, threads or 1)
        emit = progress or (lambda e: None)
        emit({"event": "start", "total": len(trials), "skipped": len(trials) - len(todo), "jobs": jobs,
              "threads": threads, "out": str(out), "todo": [t.id for t in todo],
              "set_aside": str(aside) if aside is not None else None})
        failures: dict[str, str] = {}
        if executor == "inline":
            for t in todo:
                try:
                    _write_trial(t, out)
                    run_trial(t, t.folder(out), threads)
                    emit({"event": "done", "id": t.id})
                except ZooError as exc:
                    failures[t.id] = str(exc)
                    write_failure(t.folder(out), exc)  # its id and params, as a worker writes them
                    emit({"event": "failed", "id": t.id, "error": str(exc)})
        elif executor == "local":
            failures = _run_local(todo, trials, out, jobs, threads, emit, poll_s)
        elif executor in ("submitit", "slurm"):
            failures = _run_submitit(todo, trials, out, jobs, threads, emit, poll_s, executor, exp)
        else:
            raise ZooError(f"unknown executor {executor!r}", where="executor",
                           options=["local", "inline", "submitit", "slurm"])
        res = Results.from_dir(out)
        emit({"event": "end", "finished": sum(1 for t in trials if finished(t, out)), "total": len(trials),
              "failed": failures})
        if report:
            res.write_report()
        if failures:
            first = next(iter(failures.items()))
            by_id = {t.id: t for t in trials}
            said = read_failure(by_id[first[0]].folder(out)) if first[0] in by_id else None
            # the trial's own error (its id and params, for a front end's language) or the worker's line
            inner = messages.cause({**said, "what": first[1]} if said else first[1])
            raise ZooError.of("experiment.trials_failed", where=f"experiment {exp.name}", n=len(failures),
                              trial=first[0], **inner)
        return res


#: how many earlier runs :func:`set_aside` keeps beside one results folder
MAX_ASIDE = 100


def set_aside(out: Path) -> Path | None:
    """Move the results folder ``out`` aside whole, to the first free ``<out>.earlier-<k>`` beside
    it, so that a run starts fresh while the earlier results stay (nothing is deleted); None when
    ``out`` does not exist.  Under ``out``'s lock (a run writing it refuses this), one rename: a
    reader sees the folder whole at the old name or whole at the new one."""
    if not os.path.lexists(out):
        return None
    with lock(out, where="experiment.out", error=ExperimentError):
        aside = next((p for p in (out.with_name(f"{out.name}.earlier-{k}") for k in range(1, MAX_ASIDE + 1))
                      if not os.path.lexists(p)), None)
        if aside is None:
            raise ExperimentError.of("experiment.aside_full", where="experiment.out", folder=out.name,
                                     limit=MAX_ASIDE)
        try:
            os.rename(out, aside)
        except OSError as exc:
            raise disk_error(exc, f"moving '{out.name}' aside", where="experiment.out", error=ExperimentError) from exc
        with contextlib.suppress(OSError):  # the lock file moved with it: the held lock is ours to end
            os.unlink(aside / LOCK)
    return aside


def _check_out(out: Path, jobs: Any, threads: Any) -> Path:
    """The results folder and the worker counts, checked before anything is written: ``out`` must
    name a folder (not '', not a file, FIFO or device such as /dev/null, not a symlink); ``jobs``
    and ``threads`` positive integers."""
    if str(out) in ("", "."):
        raise ExperimentError("the results folder is empty (it would be the current folder)",
                              where="experiment.out", fix="pass --out NEW_FOLDER")
    for name, v in (("jobs", jobs), ("threads", threads)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 4096):
            raise ExperimentError(f"--{name} must be a whole number from 1 to 4096, got {v!r}",
                                  where=f"experiment.{name}", fix=f"e.g. --{name} 2")
    if os.path.lexists(out):
        if os.path.islink(out):
            raise ExperimentError.of("experiment.out_symlink", where="experiment.out", folder=out.name)
        if not out.is_dir():
            raise ExperimentError.of("experiment.out_not_folder", where="experiment.out", folder=out.name)
    return out


def _claim_folder(exp: Experiment, trials: list[Trial], out: Path) -> None:
    """Record the experiment in ``out`` (or check that ``out`` holds this very experiment)."""
    f = out / EXPERIMENT
    rec = {"name": exp.name, "fingerprint": exp.fingerprint(), "quick": exp.quick,
           "experiment": json.loads(exp.raw), "trials": [t.to_dict() for t in trials]}
    if os.path.lexists(f):
        old, why = read_record(f)
        if old is None:
            raise ExperimentError.of("experiment.record_bad", where="experiment.out", record=EXPERIMENT, reason=why)
        if old.get("fingerprint") != rec["fingerprint"]:
            raise ExperimentError.of("experiment.other_experiment", where="experiment.out",
                                     name=repr(old.get("name")))
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(rec, indent=1, ensure_ascii=False)
    atomic_write(f, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def _clear_trial(t: Trial, out: Path) -> None:
    """Remove a trial's folder (refused when it, or a folder above it inside ``out``, is a
    symlink: zoo never deletes through a link)."""
    import shutil

    d = t.folder(out)
    rel = d.relative_to(out)
    here = Path(out)
    for part in rel.parts:
        here = here / part
        if here.is_symlink():
            raise ExperimentError.of("experiment.trial_symlink", where="experiment.out", folder=str(rel))
    if d.is_dir():
        shutil.rmtree(d)


def _write_trial(t: Trial, out: Path) -> Path:
    """The trial's folder, made inside ``out`` (a symlink at any step refused: a trial is never
    trained into a folder a link points to), with its ``trial.json``."""
    d = t.folder(out)
    rel = str(d.relative_to(out))
    target(out, rel, where=f"trial {t.id}", error=ExperimentError, folder=True)
    d.mkdir(parents=True, exist_ok=True)
    text = json.dumps(t.to_dict(), indent=1, ensure_ascii=False)
    write_file(d / TRIAL, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"), root=out,
               where=f"trial {t.id}", error=ExperimentError)
    return d


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def worker_env(threads: int) -> dict:
    env = dict(os.environ)
    for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[v] = str(threads)
    return env


def trial_status(t: Trial, out: Path) -> dict:
    """Step, last train loss and an ETA for a (running) trial, read from its ``metrics.jsonl``."""
    recs = read_metrics(t.folder(out))
    logs = [r for r in recs if "loss" in r]
    last = logs[-1] if logs else {}
    step = last.get("step", 0)
    el = last.get("elapsed_s")
    eta = el / step * (t.steps - step) if el and step else None
    return {"event": "trial", "id": t.id, "variant": t.variant, "seed": t.seed, "step": step,
            "steps": t.steps, "loss": last.get("loss"), "eta_s": eta}


def _overall(trials, out, running, jobs) -> dict:
    """Finished count and an ETA: the running trials' own ETAs, plus for each pending trial the
    wall time of a finished trial of its variant (else of any trial, finished or projected)."""
    recs = {t.id: finished(t, out) for t in trials}
    done = sum(1 for r in recs.values() if r)
    status = {t.id: trial_status(t, out) for t in trials if not recs[t.id] and t.id in running}
    walls = [r["wall_time_s"] for r in recs.values() if r]
    for t in trials:
        st = status.get(t.id)
        if st and st["eta_s"] is not None and st["step"]:
            walls.append(st["eta_s"] * st["step"] / max(1, t.steps - st["step"]) + st["eta_s"])
    typical = sum(walls) / len(walls) if walls else None
    left = 0.0
    for t in trials:
        if recs[t.id]:
            continue
        st = status.get(t.id)
        if st and st["eta_s"] is not None:
            left += st["eta_s"]
        else:
            ref = next((recs[u.id] for u in trials if u.variant == t.variant and recs[u.id]), None)
            if ref is None and typical is None:  # no trial has logged a step yet: nothing to project
                left = None
                break
            left += ref["wall_time_s"] if ref else typical
    # None until a pace is known (printed "?"): an ETA of 0 s before the first logged step read as
    # "almost done" (the newcomer walk of issue 34)
    return {"event": "overall", "finished": done, "total": len(trials), "running": running,
            "eta_s": None if left is None else left / max(1, jobs)}


def _run_local(todo, trials, out, jobs, threads, emit, poll_s) -> dict:
    queue = list(todo)
    running: dict[str, tuple[Trial, subprocess.Popen, Any]] = {}
    failures: dict[str, str] = {}
    env = worker_env(threads)
    last_emit = 0.0
    try:
        while queue or running:
            while queue and len(running) < jobs:
                t = queue.pop(0)
                d = _write_trial(t, out)
                log = open(d / "worker.log", "wb")  # this attempt's output (a retry starts afresh)
                p = subprocess.Popen([sys.executable, "-m", "zoo.experiment.worker", str(d / TRIAL),
                                      str(threads)], stdout=log, stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
                running[t.id] = (t, p, log)
            for tid, (t, p, log) in list(running.items()):
                rc = p.poll()
                if rc is None:
                    continue
                log.close()
                del running[tid]
                if rc == 0 and finished(t, out):
                    emit({"event": "done", "id": tid, **(finished(t, out) or {})})
                else:
                    tail = (t.folder(out) / "worker.log").read_text(encoding="utf-8", errors="replace")
                    msg = next((ln for ln in reversed(tail.splitlines()) if ln.strip()), f"exit {rc}")
                    failures[tid] = msg[-300:]
                    emit({"event": "failed", "id": tid, "error": failures[tid]})
            now = time.monotonic()
            if now - last_emit >= 2.0:
                for t, _, _ in running.values():
                    emit(trial_status(t, out))
                emit(_overall(trials, out, [t.id for t, _, _ in running.values()], jobs))
                last_emit = now
            time.sleep(poll_s)
    finally:
        for t, p, log in running.values():  # Ctrl-C / an error here: let the trainers save and stop
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for t, p, log in running.values():
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
            log.close()
    return failures


def submitit_job(trial_json: str, threads: int) -> str:
    """What a submitit job runs: one trial from its ``trial.json`` (module-level: picklable), as
    :mod:`.worker` runs it; a ZooError is the job's exception, which submitit reports."""
    path = Path(trial_json)
    run_trial(Trial.from_dict(json.loads(path.read_text(encoding="utf-8"))), path.parent, threads)
    return trial_json


def _run_submitit(todo, trials, out, jobs, threads, emit, poll_s, kind, exp) -> dict:
    try:  # an optional cluster scheduler, imported only when an experiment asks for it
        import submitit
    except ImportError as exc:
        raise ZooError("the submitit executor needs the submitit package", where="executor",
                       fix="pip install 'zoo-transformers[experiments]' (or pip install submitit)") from exc
    folder = out / "submitit"
    if kind == "slurm":
        try:
            ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
        except Exception as exc:  # noqa: BLE001 - submitit's RuntimeError when no cluster answers
            raise ZooError(f"no Slurm cluster is reachable from here ({type(exc).__name__})",
                           where="executor", fix="run on a Slurm login node, or use --executor "
                           "local / submitit") from exc
    else:
        ex = submitit.LocalExecutor(folder=folder)
    params = {"timeout_min": 24 * 60}
    if kind == "slurm":
        params.update({"slurm_array_parallelism": jobs, "cpus_per_task": threads})
        params.update(dict(exp.executor))  # the file's `executor:` block (slurm_partition, ...)
    ex.update_parameters(**params)
    paths = [str(_write_trial(t, out) / TRIAL) for t in todo]
    old = {v: os.environ.get(v) for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    os.environ.update({"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)})
    try:
        js = ex.map_array(submitit_job, paths, [threads] * len(paths)) if paths else []
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    failures: dict[str, str] = {}
    pending = dict(zip([t.id for t in todo], zip(todo, js)))
    last = 0.0
    while pending:
        for tid, (t, j) in list(pending.items()):
            if not j.done():
                continue
            del pending[tid]
            try:
                j.result()
                emit({"event": "done", "id": tid, **(finished(t, out) or {})})
            except Exception as exc:  # noqa: BLE001 - submitit wraps the worker's failure
                failures[tid] = str(exc).strip().splitlines()[-1][-300:] if str(exc).strip() else repr(exc)
                emit({"event": "failed", "id": tid, "error": failures[tid]})
        if time.monotonic() - last >= 2.0:
            for t, _ in pending.values():
                emit(trial_status(t, out))
            last = time.monotonic()
        time.sleep(poll_s)
    return failures
