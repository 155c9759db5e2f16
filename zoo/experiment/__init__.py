"""Experiments: which variant is better, and why -- variants x seeds x a task, under one budget.

An experiment is data (a YAML file, :mod:`zoo.experiment.spec`), a trial is one ordinary training
run (:func:`zoo.train.train`: a run folder, ``metrics.jsonl``, a checkpoint that ``zoo.load`` opens),
and this package only plans, schedules, collects and reports.  Statistics are Student-t intervals
over seeds and paired differences against a reference variant (:mod:`zoo.experiment.stats`).

Command line::

    zoo experiment list                                   # shipped experiments, name first
    zoo experiment run pos_extrapolation --quick          # a shipped one, its quick version
    zoo experiment run my_exp.yaml --out runs/x --jobs 2 --threads 1
    zoo experiment report runs/x                          # (re)write the report of a folder

The API (what the UI's Experiments tab uses)::

    import zoo.experiment as ze

    ze.list_shipped()                      # ['attn_scale', 'lookahead_mask', ...]
    exp = ze.load("pos_extrapolation")     # or a path, YAML text, a dict; quick=True for --quick
                                           # invalid input: ExperimentError (a ZooError) whose
                                           # .where names the field, e.g. experiment.variants[1].set
    exp.variants, exp.seeds, exp.task, exp.budget, exp.metrics, exp.source   # frozen dataclass
    trials = ze.plan(exp)                  # [Trial(variant, seed, steps, params, train_flops, ...)]
    res = ze.run(exp, out="runs/x", jobs=2, threads=1, quick=True,
                 progress=lambda event: ...)   # blocks; run it in a thread to poll meanwhile
    res = ze.Results.from_dir("runs/x")    # readable WHILE the run is going: call .refresh()
    res.trials                             # [TrialState(id, variant, seed, folder, steps, status,
                                           #   step, history, result)]; .curve = [(step, loss)]
    res.table()                            # rows: variant, reference, params, train_flops, steps,
                                           #   metric, n, mean, lo, hi, half, diff, diff_lo,
                                           #   diff_hi, verdict
    res.markdown(); res.curves_figure(); res.metrics_figure(); res.attention_figures()
    res.figures(folder)                    # name -> PNG path; res.write_report() -> file paths
    zoo.load(res.trials[0].folder)         # a trial's checkpoint, for the Inspect tab

Progress events passed to ``progress``: ``{"event": "start", "total", "skipped", "jobs",
"threads", "todo"}``, ``{"event": "trial", "id", "variant", "seed", "step", "steps", "loss",
"eta_s"}`` (every ~2 s per running trial), ``{"event": "overall", "finished", "total", "running",
"eta_s"}``, ``{"event": "done" | "failed", "id", ...}``, ``{"event": "end", "finished", "total",
"failed"}``.

Tasks are the plugin family ``task`` (:mod:`zoo.experiment.tasks`, ``zoo components task``).
"""
from __future__ import annotations

from .results import Results, TrialState
from .run import Trial, default_jobs, plan, run, run_trial
from .spec import Budget, Experiment, ExperimentError, Variant, list_shipped, load, parse
from .stats import mean_ci, paired, t_ppf, verdict
from .tasks import SyntheticTask, get_task, list_tasks

__all__ = ["load", "parse", "list_shipped", "plan", "run", "run_trial", "Results", "TrialState",
           "Experiment", "Variant", "Budget", "Trial", "ExperimentError", "default_jobs",
           "mean_ci", "paired", "t_ppf", "verdict", "get_task", "list_tasks", "SyntheticTask"]
