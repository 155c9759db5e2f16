"""Results of an experiment, read from its folder -- also while it runs (the UI polls this).

``Results.from_dir(out)`` reads ``experiment.json`` (the plan), each trial's ``metrics.jsonl``
(partial curves, live) and ``result.json`` (its completion record).  ``table()`` gives one row per
variant and metric: parameters, training FLOPs, steps, the mean over seeds with its 95% Student-t
interval, the paired difference against the reference variant over matched seeds with its
interval, and the verdict.  ``figures(folder)`` draws the loss curves (seeds shaded), the final
metrics with intervals, and the inside view (each variant's attention on the probe input, side by
side); ``write_report()`` writes ``results.md``, ``results.csv``, the figures and ``report.html``
(one self-contained page, figures embedded) into the folder.  No path of the machine appears in
any of them: trials are named by ``variant/seedN``.
"""
from __future__ import annotations

import base64
import csv
import dataclasses
import html
import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import ZooError
from ..guard.transaction import target, write_file
from ..inside import plots
from ..inside.trace import trace
from ..io.loading import load as load_model
from ..train.loop import STOP_NONFINITE
from ..train.metrics import read_metrics
from .selection import VAL_PREFIX, base_of, select
from .spec import GENERAL_METRICS, derived_directions, min_effects, parse, task_metrics, tune_select
from .stats import (finite, holm, mean_ci, paired, significant_verdict_id, two_proportions, verdict_id,
                    verdict_words, wilson)
from .tasks import get_task, is_past_only, is_teacher_forced, primary_metric

#: What a ``--quick`` run's report says first: its numbers test the machinery, not the claim.
SMOKE_NOTE = ("**Smoke test** (`--quick`): a small version of the experiment that checks the machinery "
              "runs end to end. Its numbers are not evidence for or against the claim; run without "
              "`--quick` for that.")
from .trial import EXPERIMENT, RESULT, Trial, check_record, read_record

REPORT_FILES = ("results.md", "results.csv", "report.html")


@dataclass
class TrialState:
    """One trial as seen in the folder: ``status`` is pending, running, done or failed."""

    id: str
    variant: str
    seed: int
    folder: Path
    steps: int
    status: str = "pending"
    step: int = 0
    history: list = field(default_factory=list)
    result: dict | None = None
    reason: str = ""  # why a "mismatched" trial's result.json is not counted

    @property
    def curve(self) -> list[tuple[int, float]]:
        """``[(step, train loss)]`` logged so far."""
        return [(r["step"], r["loss"]) for r in self.history if "loss" in r]

    @property
    def eval_curve(self) -> list[tuple[int, float]]:
        return [(r["step"], r["eval_loss"]) for r in self.history
                if "eval_loss" in r and r.get("event") != "end"]


#: the verdict ids of a comparison with a variant that sees the future (no verdict: not tested)
NOT_COMPARABLE = ("sees_future", "sees_future_tf")
#: row fields of :meth:`Results.table` that stay in memory: the CSV (and the committed reports') keep
#: their columns, and the verdict's English text, unchanged
IN_MEMORY = ("verdict_id", "verdict_params")


def _judge(row: dict, vid: str, params: dict | None = None, *, smoke: bool = False) -> None:
    """Give ``row`` the verdict ``vid``: its id and params (``verdict_id``, ``verdict_params``: what a
    front end words in its language) and its English (``verdict``: the reports' text,
    :func:`~zoo.experiment.stats.verdict_words`).  ``smoke``: a quick run's verdict."""
    row["verdict_id"], row["verdict_params"] = vid, {**(params or {}), **({"smoke": True} if smoke else {})}
    row["verdict"] = verdict_words(vid, row["verdict_params"])


class Results:
    """An experiment's results folder (see the module docstring)."""

    def __init__(self, out: Path, plan: dict):

        self.out = Path(out)
        self.plan = plan
        self.name = plan["name"]
        self.experiment = plan["experiment"]
        self.trial_plans = [Trial.from_dict(t) for t in plan["trials"]]
        # with tune: every planned trial (variant@setting); trial_plans / trials then hold each
        # variant's selected setting only, under its plain name (see :meth:`_apply_selection`)
        self.all_plans = list(self.trial_plans)
        self.all_trials: list[TrialState] = []
        self.selection: dict = {}
        self.trials: list[TrialState] = []
        self.refresh()

    @classmethod
    def from_dir(cls, out: str | os.PathLike) -> "Results":
        f = Path(out) / EXPERIMENT
        if not os.path.lexists(f):
            raise ZooError.of("results.none", where=str(Path(out).name))
        plan, why = read_record(f)
        if plan is None or not isinstance(plan.get("trials"), list) or not isinstance(plan.get("name"), str) \
                or not isinstance(plan.get("experiment"), dict):
            raise ZooError.of("results.record_bad", where=str(Path(out).name), record=EXPERIMENT,
                              reason=why or "damaged (not an experiment record)")
        try:
            return cls(Path(out), plan)
        except (TypeError, KeyError, ValueError, AttributeError) as exc:
            raise ZooError.of("results.trials_bad", where=str(Path(out).name), record=EXPERIMENT,
                              kind=type(exc).__name__) from exc

    def refresh(self) -> "Results":
        """Re-read every trial's files (cheap: call it to poll a running experiment)."""
        self.trials = []
        for t in self.all_plans:
            d = t.folder(self.out)
            st = TrialState(t.id, t.variant, t.seed, d, t.steps)
            st.history = read_metrics(d)
            rec, why = read_record(d / RESULT)
            if why != "missing":
                reason = check_record(t, d, rec, why)
                if reason:  # never counted: marked, with the reason, in every report
                    st.status, st.reason = "mismatched", reason
                else:
                    st.result, st.status = rec, "done"
            if st.status == "mismatched":
                pass
            elif st.status != "done":
                logs = [r for r in st.history if "step" in r]
                st.step = logs[-1]["step"] if logs else 0
                if "error:" in _tail(d / "worker.log"):
                    st.status = "failed"
                elif st.history:
                    st.status = "running"
            else:
                st.step = st.result.get("steps", t.steps)
            self.trials.append(st)
        self.all_trials = list(self.trials)
        if (self.experiment or {}).get("tune"):
            self._apply_selection()
        return self

    def _apply_selection(self) -> None:
        """A tuned experiment (:mod:`zoo.experiment.selection`): per variant, the setting with the
        best mean validation score over its finished seeds; the table, statistics and figures then
        see only those trials, named by the plain variant (the others stay in :attr:`all_trials`)."""
        exp = self._exp()
        metric, direction = tune_select(exp, get_task(self.all_plans[0].task, self.all_plans[0].task_params))
        vkey = VAL_PREFIX + metric
        scores: dict[str, dict[int, float]] = {}
        for t in self.all_trials:
            v = (t.result or {}).get("metrics", {}).get(vkey) if t.status == "done" else None
            scores.setdefault(t.variant, {})
            if v is not None:
                scores[t.variant][t.seed] = v
        self.selection = {**select(scores, direction), "_metric": {"metric": metric, "direction": direction}}
        chosen = {b: e["name"] for b, e in self.selection.items() if not b.startswith("_") and e["name"]}
        first: dict[str, str] = {}  # a variant nothing finished for yet: its first setting (a row)
        for t in self.all_plans:
            first.setdefault(base_of(t.variant), t.variant)
        keep = {chosen.get(b, first[b]) for b in first}
        self.trial_plans = [dataclasses.replace(t, variant=base_of(t.variant),
                                                metrics=tuple(m for m in t.metrics if not m.startswith(VAL_PREFIX)))
                            for t in self.all_plans if t.variant in keep]
        self.trials = [dataclasses.replace(t, variant=base_of(t.variant), id=f"{base_of(t.variant)}/seed{t.seed}")
                       for t in self.all_trials if t.variant in keep]

    def selection_lines(self) -> list[str]:
        """The report's sentences for a tuned experiment: per variant "at its best lr=0.003,
        selected on validation (validation acc: lr=0.001 0.52 (n=3), ...)"."""
        if not self.selection:
            return []
        m = self.selection["_metric"]["metric"]
        out = [f"Each variant is compared at its own best setting of the sweep, **selected on the validation "
               f"half** of the held-out examples by mean `{m}` over seeds; every number of the table is "
               f"measured on the **test** half, which the selection never saw.", ""]
        for b, e in self.selection.items():
            if b.startswith("_"):
                continue
            swept = ", ".join(f"{s} {_fmt(mu)} (n={n})" for s, mu, n in e["candidates"])
            best = e["setting"] if e["setting"] else "(none finished yet)"
            out.append(f"- `{b}` at its best {best}, selected on validation (validation {m}: {swept})")
        return out + [""]

    # ------------------------------------------------------------------ numbers
    @property
    def variants(self) -> list[str]:
        seen: list[str] = []
        for t in self.trial_plans:
            if t.variant not in seen:
                seen.append(t.variant)
        return seen

    @property
    def metrics(self) -> list[str]:
        return list(self.trial_plans[0].metrics) if self.trial_plans else []

    @property
    def done(self) -> bool:
        return all(t.status == "done" for t in self.trials)

    def values(self, variant: str, metric: str) -> dict[int, float]:
        """``{seed: value}`` of the finished trials of ``variant``."""
        return {t.seed: t.result["metrics"].get(metric) for t in self.trials
                if t.variant == variant and t.result and t.result["metrics"].get(metric) is not None}

    def _exp(self):
        return parse(self.experiment, quick=self.plan.get("quick", False))

    def _task(self):
        t0 = self.trial_plans[0]
        return get_task(t0.task, t0.task_params)

    def _directions(self) -> dict:
        task = self._task()
        return {**GENERAL_METRICS, **task_metrics(task), **derived_directions(self._exp(), task)}

    def sees_future(self, variant: str) -> bool:
        """Whether a finished trial of ``variant`` was measured to see the future
        (:func:`zoo.experiment.tasks.future_leak`, ``result.json``'s ``causality``)."""
        return any(bool((t.result.get("causality") or {}).get("sees_future")) for t in self.trials
                   if t.variant == variant and t.result)

    def _cheater(self, a: str, b: str, task, metric: str) -> str | None:
        """The variant of the pair ``(a, b)`` that sees the future, when its comparison draws no
        verdict on ``metric`` (issue 33.1): on a decoder task, a variant measured to see the future
        is compared on *no* metric -- past-only ones included, since predicting from a prefix alone
        it is still a prefix-LM attending both ways within that prefix, which a causal model cannot
        be; elsewhere (an encoder-decoder task), on its teacher-forced metrics.  None: comparable."""
        cheat = [x for x in (a, b) if self.sees_future(x)]
        if not cheat:
            return None
        if getattr(task, "arch", "decoder") == "decoder" or is_teacher_forced(task, metric):
            return cheat[0]
        return None

    @staticmethod
    def _not_comparable(cheat: str, task, primary: str | None) -> tuple[str, dict]:
        """The verdict id and params of a comparison with ``cheat``, a variant that sees the future."""
        if getattr(task, "arch", "decoder") == "decoder":
            return "sees_future", {"variant": cheat}
        return "sees_future_tf", {"variant": cheat, "primary": primary or None}

    def _min_effects(self) -> dict:
        t0 = self.trial_plans[0]
        return min_effects(get_task(t0.task, t0.task_params), self._exp().min_effect)

    @property
    def smoke_test(self) -> bool:
        """A ``--quick`` run: a smoke test of the machinery, not evidence (every table says so)."""
        return bool(self.plan.get("quick"))

    def table(self) -> list[dict]:
        """One row per (variant, metric): ``variant, reference, params, train_flops, steps, metric,
        n, mean, lo, hi, half, diff, diff_lo, diff_hi, verdict``."""
        exp = self._exp()
        dirs = self._directions()
        floors = self._min_effects()
        smoke = self.smoke_test
        plans = {t.variant: t for t in self.trial_plans}
        task = self._task()
        primary = primary_metric(task)
        rows = []
        for vname in self.variants:
            v = exp.variant(vname)
            ref = exp.reference(v)
            p = plans[vname]
            for m in self.metrics:
                vals = self.values(vname, m)
                ci = mean_ci(list(vals.values()))
                row = {"variant": vname, "reference": ref.name if ref else "", "params": p.params,
                       "train_flops": p.train_flops, "steps": p.steps, "metric": m, "n": ci["n"],
                       "mean": ci["mean"], "lo": ci["lo"], "hi": ci["hi"], "half": ci["half"],
                       "diff": math.nan, "diff_lo": math.nan, "diff_hi": math.nan}
                _judge(row, "reference" if ref is None else "pending")
                if ref is not None:
                    d = paired(vals, self.values(ref.name, m))
                    row.update(diff=d["mean"], diff_lo=d["lo"], diff_hi=d["hi"])
                    if d["n"]:
                        _judge(row, verdict_id(d, dirs.get(m), floors.get(m, 0.0)), smoke=smoke)
                    cheat = self._cheater(vname, ref.name, task, m)
                    if d["n"] and cheat:
                        _judge(row, *self._not_comparable(cheat, task, primary), smoke=smoke)
                row["min_effect"] = floors.get(m, 0.0)
                row["scored"] = ("teacher-forced" if is_teacher_forced(task, m) else
                                 "past-only" if is_past_only(task, m) else "no answer")
                rows.append(row)
        return self._statistics(rows)

    # ------------------------------------------------------------------ jumps, divergence, many verdicts
    def diverged(self, t: TrialState) -> bool:
        """Whether trial ``t`` diverged: its trainer stopped on a non-finite loss or weight (the
        ``stopped`` event of its log with ``reason: nonfinite``, :data:`zoo.train.loop.STOP_NONFINITE`
        -- the record's field, never its English text, which a rewording or a language changes), or it
        finished with a non-finite metric.  No fallback for logs without the field: no committed
        experiment folder holds a trainer log (the shipped reports keep tables and figures only)."""
        if t.result is not None:
            return any(isinstance(v, float) and not math.isfinite(v) for v in t.result["metrics"].values())
        return any(r.get("event") == "stopped" and r.get("reason") == STOP_NONFINITE for r in t.history)

    def success_thresholds(self) -> dict[str, float]:
        """Metric -> threshold for metrics that jump: the task's ``success`` declaration, overridden
        by the experiment file's ``success:`` (a seed whose value reaches it -- ``>=`` for a metric
        to maximise, ``<=`` for one to minimise -- is a success)."""
        out = {k: float(v) for k, v in (getattr(self._task_for_stats(), "success", {}) or {}).items()}
        out.update(dict(self._exp().success))
        return {m: v for m, v in out.items() if m in self.metrics}

    def _task_for_stats(self):
        t0 = self.trial_plans[0]
        return get_task(t0.task, t0.task_params)

    def _outcomes(self, variant: str, metric: str) -> dict[int, float]:
        """``{seed: value}`` of ``variant``, diverged seeds included as NaN (never dropped)."""
        out = dict(self.values(variant, metric))
        for t in self.trials:
            if t.variant == variant and t.seed not in out and self.diverged(t):
                out[t.seed] = math.nan
        return out

    def _statistics(self, rows: list[dict]) -> list[dict]:
        """Issue 33, goal 4, over the rows :meth:`table` built: every row gets ``nonfinite`` (its
        diverged seeds, counted), ``p`` (the paired t test's two-sided p) and ``p_adj`` (Holm-adjusted
        over every verdict of the experiment); success-rate rows (Wilson interval, Newcombe
        difference, Fisher's exact p) are added for metrics that jump, and a ``diverged`` rate row per
        variant when any seed diverged.  A verdict "better"/"worse" whose Holm-adjusted p does not
        pass becomes "within noise (after Holm)"."""
        dirs = self._directions()
        for r in rows:
            vals = self._outcomes(r["variant"], r["metric"])
            r.update(kind="mean", k="", nonfinite=sum(not finite(x) for x in vals.values()),
                     p=math.nan, p_adj=math.nan)
            if r["reference"]:
                d = paired(vals, self._outcomes(r["reference"], r["metric"]))
                r["p"] = d["p"] if d["n"] else math.nan
        extra = []
        any_div = any(self.diverged(t) for t in self.trials)
        thresholds = self.success_thresholds()
        for vname in self.variants:
            base = next(r for r in rows if r["variant"] == vname)
            keep = {k: base[k] for k in ("variant", "reference", "params", "train_flops", "steps")}
            for m, thr in thresholds.items():
                up = dirs.get(m) != "min"
                metric = f"{m} {'≥' if up else '≤'} {thr:g} (success rate)"
                extra.append(self._rate_row(keep, metric, m, lambda x, thr=thr, up=up:
                                            finite(x) and (x >= thr if up else x <= thr), "max"))
            if any_div:
                extra.append(self._rate_row(keep, "diverged (rate)", self.metrics[0],
                                            lambda x: not finite(x), "min"))
        rows = rows + extra
        tested = [i for i, r in enumerate(rows) if r["reference"] and finite(r["p"])
                  and r["verdict_id"] not in NOT_COMPARABLE]
        adj = holm([rows[i]["p"] for i in tested])
        for i, pa in zip(tested, adj):
            r = rows[i]
            r["p_adj"] = pa
            if r["verdict_id"] in ("better", "worse", "higher", "lower") and not pa < 0.05:
                _judge(r, "noise_holm" if r["p"] < 0.05 else "noise", smoke=self.smoke_test)
        return rows

    def _rate_row(self, keep: dict, metric: str, source: str, hit, direction: str) -> dict:
        """One success-rate row: ``hit(value)`` says whether a seed's ``source`` value counts."""
        smoke = self.smoke_test
        vals = self._outcomes(keep["variant"], source)
        k, n = sum(bool(hit(x)) for x in vals.values()), len(vals)
        w = wilson(k, n)
        row = {**keep, "metric": metric, "n": n, "mean": w["rate"], "lo": w["lo"], "hi": w["hi"],
               "half": math.nan, "diff": math.nan, "diff_lo": math.nan, "diff_hi": math.nan}
        _judge(row, "reference" if not keep["reference"] else "pending")
        row.update(min_effect=0.0, kind="rate", k=k, nonfinite=sum(not finite(x) for x in vals.values()),
                   p=math.nan, p_adj=math.nan)
        if keep["reference"]:
            rv = self._outcomes(keep["reference"], source)
            if n and rv:
                d = two_proportions(k, n, sum(bool(hit(x)) for x in rv.values()), len(rv))
                row.update(diff=d["mean"], diff_lo=d["lo"], diff_hi=d["hi"], p=d["p"])
                _judge(row, significant_verdict_id(d, direction), smoke=smoke)
                task = self._task()
                cheat = self._cheater(keep["variant"], keep["reference"], task, source)
                if cheat:  # a rate of a variant that sees the future: no verdict either
                    _judge(row, *self._not_comparable(cheat, task, primary_metric(task)), smoke=smoke)
        return row

    # ------------------------------------------------------------------ text
    def markdown(self) -> str:
        exp = self.experiment
        lines = [f"# Experiment `{self.name}`" + (" (quick)" if self.plan.get("quick") else ""), ""]
        if self.smoke_test:
            lines += [SMOKE_NOTE, ""]
        if exp.get("title"):
            lines += [f"**{exp['title']}**", ""]
        if exp.get("claim"):
            lines += [f"Claim tested: {exp['claim']}", ""]
        lines += self.selection_lines()
        seeds = sorted({t.seed for t in self.trial_plans})
        done = sum(t.status == "done" for t in self.trials)
        bad = [t for t in self.trials if t.status == "mismatched"]
        if bad:  # refused records: named, never counted
            lines += [f"**{len(bad)} trial(s) not counted** (their result.json cannot stand for them; "
                      "`zoo experiment run ... --rerun-mismatched` trains them again):", ""]
            lines += [f"- `{t.id}`: {t.reason}" for t in bad] + [""]
        lines += [f"Task `{self.trial_plans[0].task}` {self.trial_plans[0].task_params}; "
                  f"{len(self.variants)} variants x {len(seeds)} seeds; {done}/{len(self.trials)} "
                  "trials finished.", "",
                  "Mean over seeds with its 95% Student-t interval (mean ± t₀.₉₇₅,ₙ₋₁·s/√n); "
                  "difference = paired difference against the reference variant over matched seeds, "
                  "with its 95% Student-t interval; the verdict is *better*/*worse* only when that "
                  "interval excludes 0 and the difference is at least the metric's minimum effect ("
                  + ", ".join(f"{k} {v:g}" for k, v in sorted(self._min_effects().items()) if k in self.metrics)
                  + "), *no meaningful difference* when it is smaller.", "",
                  "Every verdict of this table is also held to its p-value adjusted by Holm's method over "
                  "all the table's verdicts (family-wise error 5%); *within noise (after Holm)* marks a "
                  "difference that passes alone but not among them.  Diverged seeds (non-finite loss, "
                  "weights or metric) are counted in each cell, never dropped silently.  A *success rate* row "
                  "(metrics that jump) gives k/n seeds reaching the threshold with its Wilson 95% interval, "
                  "compared by the difference of rates (Newcombe's interval) and Fisher's exact test.", "",
                  "| variant | params | train FLOPs | steps | metric | mean ± 95% CI | vs | difference [95% CI] | verdict |",
                  "|---|---:|---:|---:|---|---|---|---|---|"]
        for r in self.table():
            lines.append(f"| {r['variant']} | {r['params']:,} | {r['train_flops']:.3g} | {r['steps']} | "
                         f"{_mname(r)} | {_pm(r['mean'], r['half'])} {_ncell(r)} | {r['reference'] or '-'} | "
                         f"{_iv(r['diff'], r['diff_lo'], r['diff_hi'])} | {r['verdict']} |")
        if exp.get("description"):
            lines += ["", exp["description"].strip()]
        return "\n".join(lines) + "\n"

    def write_csv(self, path: Path) -> Path:
        rows = self.table()
        buf = io.StringIO()
        fields = [k for k in rows[0] if k not in IN_MEMORY] if rows else ["variant"]
        w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items() if k in fields})
        text = buf.getvalue()
        write_file(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"),
                   root=Path(path).parent, where=Path(path).name)
        return Path(path)

    # ------------------------------------------------------------------ figures
    def figures(self, folder: str | os.PathLike | None = None, *, inside: bool = True) -> dict[str, Path]:
        """Draw the figures into ``folder`` (default ``OUT/figures``); returns name -> PNG path:
        ``curves`` (train loss per variant, mean line, seeds' range shaded), ``metrics`` (each
        metric's mean and 95% interval per variant), and ``attention_<variant>`` (the inside view,
        finished trials only)."""
        folder = Path(folder) if folder is not None else self.out / "figures"
        root = self.out if folder == self.out / "figures" else folder
        if root == self.out:
            target(self.out, "figures", where="figures", folder=True)  # a symlinked figures/ is refused

        def save_figure(fig, path):  # the one writer: no symlink, nothing outside the folder
            return write_file(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"), root=root,
                              where=f"figures/{Path(path).name}")
        out = {"curves": save_figure(self.curves_figure(), folder / "curves.png")}
        if any(t.result for t in self.trials):
            out["metrics"] = save_figure(self.metrics_figure(), folder / "metrics.png")
        if self.task_curve_metrics():
            out["task_curves"] = save_figure(self.task_curves_figure(), folder / "task_curves.png")
        if inside:
            for v, fig in self.attention_figures().items():
                out[f"attention_{v}"] = save_figure(fig, folder / f"attention_{_safe(v)}.png")
        return out

    def curves_figure(self):
        """Training loss against steps: per variant the mean over seeds, the seeds' min-max shaded
        (partial curves of running trials included)."""
        from matplotlib.figure import Figure  # matplotlib only when a figure is drawn (zoo stays light)

        _font(plots.cjk_font())
        fig = Figure(figsize=(7.5, 4.2), layout="constrained")
        ax = fig.add_subplot()
        for i, v in enumerate(self.variants):
            curves = [dict(t.curve) for t in self.trials if t.variant == v and t.curve]
            if not curves:
                continue
            steps = sorted(set().union(*curves))
            mean, lo, hi, xs = [], [], [], []
            for s in steps:
                ys = [c[s] for c in curves if s in c]
                xs.append(s)
                mean.append(sum(ys) / len(ys))
                lo.append(min(ys))
                hi.append(max(ys))
            color = f"C{i % 10}"
            ax.plot(xs, mean, color=color, lw=1.4, label=f"{v} ({len(curves)} seeds)")
            ax.fill_between(xs, lo, hi, color=color, alpha=0.2, lw=0)
        ax.set_xlabel("step 步")
        ax.set_ylabel("train loss 训练损失 (nats / answer token)")
        ax.set_yscale("log")
        ax.set_title(f"{self.name}: loss curves 损失曲线 (seeds' range shaded)")
        ax.grid(alpha=0.3)
        if self.variants:
            ax.legend(fontsize=8)
        return fig

    def task_curve_metrics(self) -> list[str]:
        """The task metrics the trials logged during training (``task_<m>`` in their evaluations,
        :mod:`zoo.train.loop`), those the experiment reports first, at most four."""
        logged = {k[5:] for t in self.trials for r in t.history if r.get("event") != "end"
                  for k in r if k.startswith("task_") and isinstance(r[k], (int, float))}
        ms = [m for m in self.metrics if m in logged] + sorted(logged - set(self.metrics))
        return ms[:4]

    def task_curves_figure(self):
        """Each task metric against steps, as the trainer evaluated it: per variant the mean over
        seeds, the seeds' range shaded, the experiment's thresholds dashed -- when a model learns,
        not only where it ends."""
        from matplotlib.figure import Figure  # matplotlib only when a figure is drawn

        _font(plots.cjk_font())
        ms = self.task_curve_metrics()
        fig = Figure(figsize=(4.0 * max(1, len(ms)), 3.6), layout="constrained")
        axes = fig.subplots(1, max(1, len(ms)), squeeze=False)[0]
        thresholds = json.loads(self._exp().thresholds)
        for ax, m in zip(axes, ms):
            for i, v in enumerate(self.variants):
                curves = [{r["step"]: r[f"task_{m}"] for r in t.history
                           if f"task_{m}" in r and r.get("event") != "end"} for t in self.trials if t.variant == v]
                curves = [c for c in curves if c]
                if not curves:
                    continue
                xs = sorted(set().union(*curves))
                ys = [[c[s] for c in curves if s in c] for s in xs]
                color = f"C{i % 10}"
                ax.plot(xs, [sum(y) / len(y) for y in ys], "o-", color=color, lw=1.4, ms=3,
                        label=f"{v} ({len(curves)} seeds)")
                ax.fill_between(xs, [min(y) for y in ys], [max(y) for y in ys], color=color, alpha=0.2, lw=0)
            for t in thresholds:
                if t["metric"] == m:
                    ax.axhline(t["value"], ls="--", color="gray", lw=1)
            ax.set_xlabel("step 步")
            ax.set_title(f"{m} (held-out, during training)", fontsize=10)
            ax.grid(alpha=0.3)
        if self.variants:
            axes[0].legend(fontsize=8)
        fig.suptitle(f"{self.name}: task metrics during training 训练中的任务指标 (seeds' range shaded)",
                     fontsize=10)
        return fig

    def metrics_figure(self):
        from matplotlib.figure import Figure  # matplotlib only when a figure is drawn

        _font(plots.cjk_font())
        ms = self.metrics
        fig = Figure(figsize=(3.2 * max(1, len(ms)), 3.6), layout="constrained")
        axes = fig.subplots(1, max(1, len(ms)), squeeze=False)[0]
        rows = self.table()
        for ax, m in zip(axes, ms):
            rs = [r for r in rows if r["metric"] == m]
            ys = list(range(len(rs)))
            means = [r["mean"] for r in rs]
            err = [0 if math.isnan(r["half"]) else r["half"] for r in rs]
            ax.errorbar(means, ys, xerr=err, fmt="o", capsize=3)
            for t in self.trials:  # each seed as a dot
                if t.result and t.result["metrics"].get(m) is not None:  # None: never reached
                    ax.plot(t.result["metrics"][m], self.variants.index(t.variant), ".", color="gray",
                            alpha=0.6, ms=4)
            ax.set_yticks(ys, [r["variant"] for r in rs], fontsize=8)
            ax.invert_yaxis()
            ax.set_title(m, fontsize=10)
            ax.grid(alpha=0.3)
        fig.suptitle(f"{self.name}: final metrics, mean ± 95% t-interval (dots: seeds)", fontsize=10)
        return fig

    def attention_figures(self) -> dict[str, Any]:
        """Per variant, its first finished seed's attention (last layer, mean over heads) on the
        probe input, drawn by :func:`zoo.inside.plots.attention_heatmap`."""
        figs = {}
        exp = self.experiment
        for v in self.variants:
            t = next((t for t in self.trials if t.variant == v and t.status == "done"), None)
            if t is None:
                continue
            try:
                model = load_model(t.folder)
                tok = model.tokenizer
                texts = exp.get("probe") or []
                if isinstance(texts, str):
                    texts = [texts]
                ids = tok.encode(texts[0]) if texts else self._task_probe()
                ids = ids[: model.spec.max_len]
                tr = trace(model, torch.tensor([ids]))  # encoder-decoder: the decoder reads the source
                w = tr.attention_stack()[-1, 0].mean(0)  # (Tq, Tk): last layer, mean over heads
                labels = [tok.decode([i]) for i in ids]
                figs[v] = plots.attention_heatmap(w, labels, title=f"{v}: last layer, mean of heads")
            except Exception as exc:  # noqa: BLE001 - one variant's figure must not sink the report
                figs[v] = _message_figure(f"{v}: no attention view ({type(exc).__name__}; run `zoo experiment report` where the trials are)")
        return figs

    def _task_probe(self) -> list[int]:
        t0 = self.trial_plans[0]
        return get_task(t0.task, t0.task_params).probe()

    # ------------------------------------------------------------------ the report
    def write_report(self, inside: bool = True) -> dict[str, Path]:
        """``results.md``, ``results.csv``, ``figures/*.png`` and ``report.html`` into the folder."""
        md = self.markdown()
        write_file(self.out / "results.md", lambda tmp: Path(tmp).write_text(md, encoding="utf-8"),
                   root=self.out, where="results.md")
        self.write_csv(self.out / "results.csv")
        figs = self.figures(inside=inside)
        page = self.html(figs)
        write_file(self.out / "report.html", lambda tmp: Path(tmp).write_text(page, encoding="utf-8"),
                   root=self.out, where="report.html")
        return {"results.md": self.out / "results.md", "results.csv": self.out / "results.csv",
                "report.html": self.out / "report.html", **figs}

    def html(self, figs: dict[str, Path]) -> str:
        def img(p: Path, width: str = "100%") -> str:
            data = base64.b64encode(Path(p).read_bytes()).decode()
            return f'<img style="max-width:{width}" src="data:image/png;base64,{data}">'

        exp = self.experiment
        rows = "".join(
            f"<tr><td>{html.escape(r['variant'])}</td><td>{r['params']:,}</td><td>{r['train_flops']:.3g}</td>"
            f"<td>{r['steps']}</td><td>{html.escape(_mname(r))}</td><td>{_pm(r['mean'], r['half'])} "
            f"{html.escape(_ncell(r))}</td><td>{html.escape(r['reference'] or '-')}</td>"
            f"<td>{_iv(r['diff'], r['diff_lo'], r['diff_hi'])}</td><td><b>{html.escape(r['verdict'])}</b></td></tr>"
            for r in self.table())
        attn = "".join(f'<figure style="margin:4px">{img(p, "420px")}<figcaption>{html.escape(k[10:])}'
                       f"</figcaption></figure>" for k, p in figs.items() if k.startswith("attention_"))
        parts = [
            "<!doctype html><html><head><meta charset='utf-8'>",
            f"<title>{html.escape(self.name)}</title><style>body{{font-family:sans-serif;max-width:1200px;"
            "margin:auto;padding:1em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;"
            "padding:3px 6px;font-size:13px}}</style></head><body>",
            f"<h1>{html.escape(self.name)}{' (quick)' if self.plan.get('quick') else ''}</h1>",
            "<p><b>Smoke test</b> (--quick): a small version of the experiment that checks the machinery "
            "runs end to end; its numbers are not evidence for or against the claim.</p>" if self.smoke_test else "",
            f"<p><b>{html.escape(exp.get('title', ''))}</b></p>",
            f"<p>Claim tested: {html.escape(exp.get('claim', ''))}</p>" if exp.get("claim") else "",
            "<p>Mean over seeds ± its 95% Student-t interval; difference: paired against the reference "
            "over matched seeds, 95% Student-t interval; verdict better/worse only when that interval "
            "excludes 0 and the difference is at least the metric's minimum effect, <i>no meaningful "
            "difference</i> when it is smaller.</p>",
            "<table><tr><th>variant</th><th>params</th><th>train FLOPs</th><th>steps</th><th>metric</th>"
            "<th>mean ± 95% CI</th><th>vs</th><th>difference [95% CI]</th><th>verdict</th></tr>",
            rows, "</table>",
            f"<h2>Loss curves</h2>{img(figs['curves'])}" if "curves" in figs else "",
            f"<h2>Final metrics</h2>{img(figs['metrics'])}" if "metrics" in figs else "",
            f"<h2>Task metrics during training</h2>{img(figs['task_curves'])}" if "task_curves" in figs else "",
            f"<h2>Inside view: attention on the probe input</h2><div style='display:flex;flex-wrap:wrap'>{attn}</div>"
            if attn else "",
            f"<h2>Notes</h2><p>{html.escape(exp.get('description', '')).replace(chr(10) * 2, '</p><p>')}</p>"
            if exp.get("description") else "",
            "</body></html>"]
        return "\n".join(parts)


def _font(name):
    import matplotlib  # matplotlib only when a figure is drawn

    matplotlib.rcParams["font.family"] = ([name] if name else []) + ["DejaVu Sans"]
    matplotlib.rcParams["axes.unicode_minus"] = False


def _message_figure(text: str):
    from matplotlib.figure import Figure  # matplotlib only when a figure is drawn

    fig = Figure(figsize=(4, 1.2))
    fig.text(0.02, 0.5, text, fontsize=7, wrap=True)
    return fig


def _tail(path: Path, n: int = 65536) -> str:
    """The last ``n`` bytes of a log as text ('' when there is none; never read whole)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - n))
            return fh.read(n).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _mname(row: dict) -> str:
    """A table's metric cell: teacher-forced scores are named as such (a model that sees the future
    can cheat them; past-only ones it cannot)."""
    return row["metric"] + (" (teacher-forced)" if row.get("scored") == "teacher-forced" else "")


def _ncell(row: dict) -> str:
    """``(n=3)``, ``(n=3, 1 diverged)``, or for a success-rate row ``(2/3 seeds; Wilson [lo, hi])``."""
    if row.get("kind") == "rate":
        return f"({row['k']}/{row['n']} seeds; Wilson 95% [{_fmt(row['lo'])}, {_fmt(row['hi'])}])"
    bad = row.get("nonfinite") or 0
    return f"(n={row['n']}, {bad} diverged)" if bad else f"(n={row['n']})"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in name)


def _fmt(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.4g}"


def _pm(m: float, h: float) -> str:
    if isinstance(m, float) and math.isnan(m):
        return "-"
    return f"{_fmt(m)} ± {_fmt(h)}" if not math.isnan(h) else _fmt(m)


def _iv(d: float, lo: float, hi: float) -> str:
    if math.isnan(d):
        return "-"
    return f"{d:+.4g} [{_fmt(lo)}, {_fmt(hi)}]" if not math.isnan(lo) else f"{d:+.4g}"
