"""``zoo experiment list | run | report``: experiments from the shell (see :mod:`zoo.experiment`).

``run`` prints one line per event: a trial finished or failed, and every few seconds the running
trials (step / steps, loss, ETA) and the overall progress.  Ctrl-C stops the workers after they
save; the same command resumes (finished trials are not re-run).
"""
from __future__ import annotations

import sys
import time

import click


def _eta(s) -> str:
    if s is None:
        return "?"
    s = int(s)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Printer:
    """Progress events -> terminal lines (a status block at most every ``every`` seconds)."""

    def __init__(self, every: float = 5.0):
        self.every, self.last, self.block = every, 0.0, {}

    def __call__(self, e: dict) -> None:
        ev = e["event"]
        if ev == "start":
            from zoo import messages

            if e.get("set_aside"):
                click.echo(messages.render("experiment.set_aside", {"folder": e["set_aside"]})[0])
            click.echo(f"{e['total']} trials ({e['skipped']} already finished), {e['jobs']} process(es) "
                       f"x {e['threads']} thread(s)")
            if e.get("skipped"):  # announced, not silent: the resume design at work (issue 34)
                what, fix = messages.render("experiment.reused", {"n": e["skipped"], "total": e["total"],
                                                                  "folder": e.get("out", "")},
                                            ("experiment.reused_fix",))
                click.echo(f"{what}; {fix}")
        elif ev == "done":
            m = e.get("metrics") or {}
            shown = ", ".join(f"{k} {v:.4g}" for k, v in list(m.items())[:4] if isinstance(v, (int, float)))
            click.echo(f"  done   {e['id']}  ({e.get('wall_time_s', 0):.0f}s) {shown}")
        elif ev == "failed":
            click.secho(f"  FAILED {e['id']}: {e['error']}", fg="red")
        elif ev == "trial":
            self.block[e["id"]] = e
        elif ev == "overall":
            now = time.monotonic()
            if now - self.last < self.every:
                return
            self.last = now
            for tid in e["running"]:
                t = self.block.get(tid)
                if t:
                    loss = f"{t['loss']:.4f}" if t.get("loss") is not None else "-"
                    click.echo(f"  run    {tid}  step {t['step']}/{t['steps']}  loss {loss}  "
                               f"ETA {_eta(t['eta_s'])}")
            click.echo(f"[{e['finished']}/{e['total']} finished, ETA {_eta(e['eta_s'])}]")
        elif ev == "end":
            click.echo(f"{e['finished']}/{e['total']} trials finished")


@click.group("experiment")
def command():
    """Run experiments: variants x seeds of a model on a task, compared with intervals."""


@command.command("list")
def list_cmd():
    """The shipped experiments, one per line: name, then its title; one that needs a plugin that is
    not installed is marked, with the line that installs it (listing never fails halfway)."""
    from zoo.experiment.spec import install_hint, shipped_listing

    for name, title, missing in shipped_listing():
        click.echo(f"{name}  {title}")
        for plugin in missing:
            click.echo(f"    needs the plugin {plugin!r}, not installed: {install_hint(plugin)}")


@command.command("run")
@click.argument("experiment")
@click.option("--out", default=None, help="Results folder (default runs/experiments/NAME[-quick]).")
@click.option("--jobs", type=int, default=None, help="Worker processes (default: one per core).")
@click.option("--threads", type=int, default=None, help="Intra-op threads per worker.")
@click.option("--quick", is_flag=True, help="Apply the experiment's quick: block (a small version).")
@click.option("--executor", type=click.Choice(["local", "inline", "submitit", "slurm"]), default="local",
              help="Where trials run (submitit / slurm: pip install submitit).")
@click.option("--rerun-mismatched", is_flag=True,
              help="Train again the trials whose result.json does not match (other code, edited, "
                   "checkpoint swapped) instead of refusing.")
@click.option("--fresh", is_flag=True,
              help="Start from nothing: move the earlier results folder aside to OUT.earlier-N (kept, not "
                   "deleted) instead of taking its finished trials.")
def run_cmd(experiment, out, jobs, threads, quick, executor, rerun_mismatched, fresh):
    """Run (or resume) EXPERIMENT: a shipped name or a YAML file."""
    import zoo.experiment as ze

    res = ze.run(experiment, out=out, jobs=jobs, threads=threads, quick=quick, executor=executor,
                 rerun_mismatched=rerun_mismatched, fresh=fresh,
                 progress=Printer(5.0 if sys.stdout.isatty() else 15.0))
    click.echo(res.markdown())
    click.echo(f"report: {res.out / 'report.html'}")


@command.command("tune")
@click.argument("experiment")
@click.option("--trials", type=int, required=True, help="Optuna trials per variant (in total: a rerun resumes).")
@click.option("--out", default=None, help="Results folder (default runs/experiments/NAME-tune[-quick]).")
@click.option("--threads", type=int, default=1, help="Intra-op threads of the trials.")
@click.option("--quick", is_flag=True, help="Apply the experiment's quick: block (a small version).")
@click.option("--seed", "sampler_seed", type=int, default=0, help="Seed of Optuna's TPE sampler.")
def tune_cmd(experiment, trials, out, threads, quick, sampler_seed):
    """Search EXPERIMENT's tune: space with Optuna, one study per variant (pip install optuna);
    the study is a journal file in the results folder, so the same command resumes."""
    from zoo.experiment.tune import search

    def show(e):
        val = "failed (no finite score)" if e["value"] is None else f"{e['value']:.4g}"
        click.echo(f"  {e['variant']} at {e['setting']}: validation {val} over {e['n']} seed(s)")

    summary = search(experiment, trials=trials, out=out, quick=quick, threads=threads,
                     sampler_seed=sampler_seed, progress=show)
    for v, s in summary["variants"].items():
        click.echo(f"{v}: best {s['best_setting']} (validation {summary['metric']} {s['best_value']}), "
                   f"{len(s['trials'])} trial(s)")
    click.echo(f"results: {summary['out']} (zoo experiment report FOLDER for the test-half table)")


@command.command("report")
@click.argument("folder")
@click.option("--no-inside", is_flag=True, help="Skip the attention figures (no checkpoint loading).")
def report_cmd(folder, no_inside):
    """(Re)write the report of a results FOLDER (also of a run still in progress)."""
    import zoo.experiment as ze

    res = ze.Results.from_dir(folder)
    res.write_report(inside=not no_inside)
    click.echo(res.markdown())
