"""The Experiments tab: pick or edit an experiment, run its quick version live, read the verdicts.

An experiment (:mod:`zoo.experiment`) is a YAML file: a base spec, variants, seeds, a task and a
budget.  This tab

- shows a shipped experiment's YAML (or the text you type), validated on every change by
  :func:`zoo.experiment.load`: an invalid field appears in the error box with where / problem / fix;
- runs the **quick** version (``quick:`` block merged in) in a background thread into a folder of
  the app's runs directory (``exp-<name>-<hash of the YAML>``: the same text resumes the same
  folder, finished trials are not re-run), while a ``gr.Timer`` re-reads the folder with
  :meth:`zoo.experiment.Results.refresh` and redraws the loss curves and the per-trial progress;
- shows the results table (mean ± 95% interval over seeds, paired difference against the reference
  variant, verdict) and, for a shipped experiment, the committed full report's table and figures;
- makes a trial's checkpoint openable in Inspect: its files are copied into a top-level folder of
  the runs directory, whose name the Inspect / Run checkpoint lists accept.

Messages name folders relative to the runs directory only, never a path of the server.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import math
import re
import shutil
import threading
from pathlib import Path
from typing import Any

from zoo.errors import ZooError, internal_error

from .common import (empty_table, error_again, error_box, error_markdown, error_record, frame, handler,
                     inline_errors, runs_dir)
from .i18n import lang_code, t, ui_error

log = logging.getLogger(__name__)

#: runs started by this process: folder name -> {"thread", "error", "events"}
_JOBS: dict[str, dict] = {}
_JOBS_LOCK = threading.Lock()

PROGRESS_HEADERS = ("exp.col.trial", "exp.col.status", "exp.col.step", "exp.col.loss")
TABLE_HEADERS = ("exp.col.variant", "exp.col.params", "exp.col.flops", "exp.col.metric", "exp.col.n",
                 "exp.col.mean", "exp.col.diff", "exp.col.verdict")


# ---------------------------------------------------------------------- validation
def _load(text: str, quick: bool = True):
    """The experiment in ``text``: a shipped name, or YAML text (never a server path)."""
    import zoo.experiment as ze

    text = text or ""
    if text.strip() in ze.list_shipped():
        return ze.load(text.strip(), quick=quick)
    if not text.strip():
        raise ui_error(ze.ExperimentError, "exp.empty", fix="exp.empty_fix", where="experiment",
                       options=ze.list_shipped())
    # YAML text only: a single line gets a newline so that load() never reads it as a file path
    return ze.load(text if "\n" in text else text + "\n", quick=quick)


def shipped_yaml(name: str) -> str:
    """The YAML text of shipped experiment ``name``, as its file holds it.

    The text is read, not loaded: picking an experiment whose plugin is not installed (``mqar_linear``
    without ``zoo-linear-attention``) shows its YAML, and the validation line under the editor
    (:func:`validate`) says which plugin is missing and how to install it, in the page's language and
    kept on the page.  Loading it here refused the pick itself: the editor emptied, the outputs wore
    bare "Error" badges over the previous experiment's "Valid" line and the message lived only in a
    toast (the newcomer walk of issue 34)."""
    import zoo.experiment as ze
    from zoo.experiment.spec import shipped_dir
    from zoo.guard.files import read_text

    if name not in ze.list_shipped():
        raise ui_error(ze.ExperimentError, "exp.no_shipped", fix="exp.no_shipped_fix", where="experiment",
                       options=ze.list_shipped(), name=str(name)[:80])
    path = shipped_dir() / name / "experiment.yaml"
    return read_text(path, where=path.name, error=ze.ExperimentError)


def summary(exp, lang: str = "en") -> str:
    """One line: what running ``exp`` (already quick) trains."""
    return t("exp.valid", lang, **summary_values(exp))


def summary_values(exp) -> dict:
    """What :func:`summary` says about ``exp``, as values (no language)."""
    import zoo.experiment as ze

    trials = ze.plan(exp)
    return dict(name=exp.name, variants=len(exp.variants), seeds=len(trials) // max(len(exp.variants), 1),
                trials=len(trials), task=exp.task, steps=max((tr.steps for tr in trials), default=0))


@functools.lru_cache(maxsize=32)
def checked(text: str) -> tuple[dict | None, ZooError | None]:
    """``(summary values, None)`` or ``(None, the error)`` for the YAML ``text``, remembered by text.

    Validating builds the experiment's task, and a task may read and decompress its corpus (seconds
    on a busy machine): a language switch words the editor's line again (:func:`validate`) and
    measured 5-13 s while this ran again each time (issue 34); the check depends on the text alone
    (and the installed plugins, fixed while the server runs), so the switch now only re-words it."""
    try:
        return summary_values(_load(text)), None
    except ZooError as exc:
        return None, exc


def validate(text: str, lang: str = "en") -> tuple[str, str]:
    """``(summary, error box)`` for the YAML in the editor, in ``lang``: one of the two is empty."""
    # one key per YAML: the editor hands back its text without the file's last newline (gr.Code),
    # which missed the cache the build filled and re-validated on the first switch (5-9 s, issue 34)
    values, exc = checked((text or "").rstrip("\n") + "\n" if (text or "").strip() else "")
    if exc is not None:
        return "", error_markdown(exc, lang)
    return t("exp.valid", lang, **values), ""


def pick(name: str, lang: str = "en") -> tuple[str, str, str]:
    """``(YAML text, summary, error box)`` for the shipped experiment picked in the dropdown: the
    text always fills the editor, and what refuses it (a plugin that is not installed) is the error
    box's where / problem / fix, in ``lang``, until the next edit -- never a toast."""
    text = shipped_yaml(name)
    return (text, *validate(text, lang))


# ---------------------------------------------------------------------- running
def folder_name(exp) -> str:
    """The runs-folder name of ``exp``'s quick run: its name and a hash of its validated content."""
    digest = hashlib.sha256(exp.raw.encode("utf-8")).hexdigest()[:8]
    return f"exp-{re.sub(r'[^A-Za-z0-9_.-]', '_', exp.name)[:40]}-{digest}"


#: what one browser may run (the quick versions of the shipped experiments: <= 12 trials, <= 80 steps)
MAX_TRIALS, MAX_STEPS = 24, 500


def check_budget(exp, lang: str = "en") -> None:
    """Refuse what would tie up the machine: too many trials, too many steps, a model above the UI's
    :data:`~zoo.ui.common.LIMITS` (a ``ZooError`` naming the field)."""
    import zoo.experiment as ze
    from zoo.model.spec import parse_spec

    from .common import check_spec_limits

    trials = ze.plan(exp)
    if len(trials) > MAX_TRIALS:
        raise ui_error(ze.ExperimentError, "exp.too_many", fix="exp.too_many_fix", where="experiment.seeds",
                       n=len(trials), limit=MAX_TRIALS)
    steps = max((tr.steps for tr in trials), default=0)
    if steps > MAX_STEPS:
        raise ui_error(ze.ExperimentError, "exp.too_long", fix="exp.too_long_fix",
                       where="experiment.quick.budget", n=steps, limit=MAX_STEPS)
    for tr in trials:
        check_spec_limits(parse_spec(tr.spec), lang)


def start(text: str, lang: str = "en", jobs: int | None = None, fresh: bool = False) -> str:
    """Start the quick version of the experiment in ``text`` in a background thread; returns the
    name of its folder in the runs directory (an already running one is not started twice).  The
    same text resumes its folder: finished trials are taken, not trained again, and the status says
    so (:func:`status_text`).  ``fresh``: the earlier folder is moved aside first (kept beside it as
    ``<folder>.earlier-<k>``, :func:`zoo.experiment.run.set_aside`), so every trial trains anew."""
    import zoo.experiment as ze

    exp = _load(text)
    check_budget(exp, lang)
    name = folder_name(exp)
    out = runs_dir() / name
    with _JOBS_LOCK:
        job = _JOBS.get(name)
        if job and job["thread"].is_alive():
            return name
        busy = [n for n, j in _JOBS.items() if j["thread"].is_alive()]
        if busy:  # one experiment at a time: its trials already use every core
            raise ui_error(ze.ExperimentError, "exp.busy", fix="exp.busy_fix", where="run", folder=busy[0])
        job = {"error": None, "events": []}

        def work():
            try:
                ze.run(exp, out=out, jobs=jobs, quick=True, fresh=bool(fresh), progress=job["events"].append)
            except ZooError as exc:
                job["error"] = exc
            except Exception as exc:  # noqa: BLE001 - a bug: reported in the tab as an internal error
                log.exception("experiment %s failed", name)  # in the page's language, its kind only
                job["error"] = internal_error(exc, where=name)

        job["thread"] = threading.Thread(target=work, name=f"zoo-ui-{name}", daemon=True)
        _JOBS[name] = job
        job["thread"].start()
    return name


def running(name: str) -> bool:
    job = _JOBS.get(name or "")
    return bool(job and job["thread"].is_alive())


def results(name: str):
    """The :class:`~zoo.experiment.Results` of runs folder ``name`` (re-read now), or None before
    the run has written its plan."""
    import zoo.experiment as ze

    if not name or not re.fullmatch(r"exp-[A-Za-z0-9_.-]+", name):
        return None
    out = runs_dir() / name
    try:
        return ze.Results.from_dir(out).refresh()
    except ZooError:
        return None


def progress_rows(res, lang: str = "en") -> list[list]:
    """``[trial, status, "step / steps", last loss]`` per trial."""
    rows = []
    for tr in res.trials if res is not None else []:
        curve = tr.curve
        loss = f"{curve[-1][1]:.4f}" if curve else "—"
        rows.append([tr.id, t(f"exp.status.{tr.status}", lang), f"{tr.step} / {tr.steps}", loss])
    return rows


def _num(x: Any, fmt: str = "{:.4g}") -> str:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return "—"
    return "—" if math.isnan(x) else fmt.format(x)


#: the engine's verdict ids (:data:`zoo.experiment.stats.VERDICT_WORDS`, the ``verdict_id`` of a
#: results row) -> i18n keys
VERDICTS = {"reference": "exp.v.reference", "better": "exp.v.better", "worse": "exp.v.worse",
            "noise": "exp.v.noise", "higher": "exp.v.higher", "lower": "exp.v.lower",
            "no_effect": "exp.v.no_effect", "noise_holm": "exp.v.noise_holm", "pending": "exp.v.pending",
            "na": "exp.v.na", "na_one_seed": "exp.v.na_one_seed", "sees_future": "exp.v.sees_future",
            "sees_future_tf": "exp.v.sees_future_tf"}


def verdict_text(vid: str | None, params: dict | None = None, lang: str = "en") -> str:
    """A verdict in ``lang`` from its id and params (a results row's ``verdict_id`` and
    ``verdict_params``: ``variant``, ``primary``, ``smoke`` -- a quick run's " (smoke test)"), never
    from its English text.  English: the engine's own words (the reports' text)."""
    from zoo.experiment.stats import VERDICT_WORDS, verdict_words

    if not vid:
        return "—"
    params = dict(params or {})
    if lang_code(lang) != "zh" or vid not in VERDICTS:
        return verdict_words(vid, params) if vid in VERDICT_WORDS else str(vid)
    if params.get("primary", "") is None:
        params["primary"] = t("exp.v.past_only_metric", lang)
    text = t(VERDICTS[vid], lang, **{k: v for k, v in params.items() if k != "smoke"})
    return t("exp.v.smoke", lang, verdict=text) if params.get("smoke") else text


def table_rows(res, lang: str = "en") -> list[list]:
    """The results table of ``res`` (:meth:`Results.table`), one row per variant and metric:
    variant, parameters, training FLOPs, metric, seeds, mean ± half-interval, paired difference
    [interval] against the reference, verdict."""
    rows = []
    for r in res.table() if res is not None else []:
        ref = r.get("reference")
        diff = ("—" if not ref or _num(r.get("diff")) == "—" else
                f"{_num(r['diff'])} [{_num(r.get('diff_lo'))}, {_num(r.get('diff_hi'))}]")
        mean = _num(r.get("mean")) + ("" if r.get("half") is None else f" ± {_num(r['half'])}")
        rows.append([r["variant"], f"{int(r['params']):,}" if r.get("params") is not None else "—",
                     _num(r.get("train_flops"), "{:.3g}"), r["metric"], r.get("n", 0), mean, diff,
                     verdict_text(r.get("verdict_id"), r.get("verdict_params"), lang)])
    return rows


def status_text(name: str, res, lang: str = "en") -> str:
    """Where the run stands, naming its folder relative to the runs directory."""
    job = _JOBS.get(name or "")
    if job and job["error"] is not None:  # the user's mistake worded from its id; a bug as "went wrong"
        return error_again(lang, error_record(job["error"]))
    if res is None:
        return t("exp.starting", lang, folder=name) if name else ""
    done = sum(tr.status == "done" for tr in res.trials)
    key = "exp.running" if running(name) else "exp.finished"
    line = t(key, lang, folder=f"{runs_dir().name}/{name}", done=done, total=len(res.trials))
    return "\n\n".join([line, *reuse_lines(name, lang)])


def reuse_lines(name: str, lang: str = "en") -> list[str]:
    """What this process's run of folder ``name`` took from an earlier one, in ``lang``: the
    trials it did not train again (and how to start fresh), or where a fresh run moved the earlier
    results -- announced, never silent (issue 34).  Folders are named relative to the runs directory."""
    job = _JOBS.get(name or "")
    first = next((e for e in (job or {}).get("events", ()) if e.get("event") == "start"), None)
    if first is None:
        return []
    lines = []
    if first.get("set_aside"):
        params = {"folder": f"{runs_dir().name}/{Path(first['set_aside']).name}"}
        lines.append(_said("experiment.set_aside", params, lang))
    if first.get("skipped"):
        params = {"n": first["skipped"], "total": first["total"], "folder": f"{runs_dir().name}/{name}"}
        what = _said("experiment.reused", params, lang)
        lines.append(what + " " + t("exp.fresh_hint", lang, fresh=t("exp.fresh", lang), run=t("exp.run", lang)))
    return lines


def _said(message_id: str, params: dict, lang: str) -> str:
    """The engine's sentence ``message_id`` (:mod:`zoo.messages`) in ``lang`` (its Chinese from
    ``ui.i18n.ERRORS_ZH``, as an error of that id is worded)."""
    from zoo import messages

    from .i18n import error_text

    english = messages.render(message_id, params)[0]
    return error_text({"what": english, "message_id": message_id, "params": params}, lang)[0]


def trial_names(res) -> list[str]:
    return [tr.id for tr in res.trials if tr.status == "done"] if res is not None else []


def poll(name: str, lang: str = "en") -> dict:
    """Everything the tab shows about runs folder ``name`` right now."""
    res = results(name)
    return {"progress": progress_rows(res, lang), "table": table_rows(res, lang),
            "curves": res.curves_figure() if res is not None and any(tr.curve for tr in res.trials) else None,
            "status": status_text(name, res, lang), "trials": trial_names(res), "active": running(name)}


# ---------------------------------------------------------------------- the committed report
def shipped_report(name: str, lang: str = "en") -> tuple[str, list]:
    """The committed full report of shipped experiment ``name``: its Markdown table and its
    figures as ``[(PIL image, caption)]``."""
    import zoo.experiment as ze
    from PIL import Image

    from zoo.experiment.spec import shipped_dir

    if name not in ze.list_shipped():
        raise ui_error(ze.ExperimentError, "exp.no_shipped", fix="exp.no_shipped_fix", where="experiment",
                       options=ze.list_shipped(), name=str(name)[:80])
    report = shipped_dir() / name / "report"
    md = report / "results.md"
    if not md.is_file():
        return t("exp.no_report", lang, name=name), []
    figs = []
    for png in sorted((report / "figures").glob("*.png"), key=_figure_order):
        with Image.open(png) as im:
            figs.append((im.convert("RGB"), png.stem))
    return md.read_text(encoding="utf-8"), figs


#: the report's figures as a reader takes them: the curves and the metrics first, then the attention
#: maps of the variants (the newcomer walk of issue 34 met two attention maps first)
FIGURE_ORDER = ("curves", "task_curves", "metrics")


def _figure_order(png: Path) -> tuple:
    stem = png.stem
    return (FIGURE_ORDER.index(stem) if stem in FIGURE_ORDER else len(FIGURE_ORDER), stem)


# ---------------------------------------------------------------------- open in Inspect
def open_trial(name: str, trial_id: str, lang: str = "en") -> str:
    """Copy trial ``trial_id`` of runs folder ``name`` (weights, spec, tokenizer, metrics) into a
    top-level folder of the runs directory, so that Inspect and Run list it; returns that folder's
    name (the checkpoint name)."""
    res = results(name)
    match = [tr for tr in (res.trials if res is not None else []) if tr.id == trial_id and tr.status == "done"]
    if not match:
        raise ui_error(ZooError, "exp.no_trial", fix="exp.no_trial_fix", where="trial", options=trial_names(res),
                       trial=str(trial_id)[:80])
    src = match[0].folder
    dest_name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{name}--{trial_id}").replace("..", "_")[:79]
    dest = runs_dir() / dest_name
    tmp = runs_dir() / f".{dest_name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file() and not f.name.startswith("trainer_state"):
            shutil.copy2(f, tmp / f.name)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)  # whole or nothing: the lists never see a half-copied checkpoint
    return dest_name


# ---------------------------------------------------------------------- layout and wiring
def build(tr, lang_state) -> dict:
    import gradio as gr
    import zoo.experiment as ze

    names = ze.list_shipped()
    first = names[0] if names else None
    text0 = shipped_yaml(first) if first else ""
    ui: dict[str, Any] = {}
    tr.add(gr.Markdown(tr("exp.intro")), value="exp.intro")
    with gr.Row():
        with gr.Column(scale=3):
            ui["pick"] = tr.add(gr.Dropdown(names, value=first, label=tr("exp.pick"), elem_id="exp-pick"),
                                label="exp.pick")
            ui["yaml"] = tr.add(gr.Code(text0, language="yaml", label=tr("exp.yaml"), interactive=True,
                                        lines=18, elem_id="exp-yaml"), label="exp.yaml")
        with gr.Column(scale=2):
            ui["valid"] = gr.Markdown(validate(text0, tr.lang)[0], elem_id="exp-valid")
            ui["error"] = error_box("exp-error")
            with gr.Row():
                ui["run"] = tr.add(gr.Button(tr("exp.run"), variant="primary", elem_id="exp-run"), value="exp.run")
                # a second run of the same YAML takes its finished trials (announced in the status);
                # ticked, the earlier folder is moved aside first (kept) and every trial trains anew
                ui["fresh"] = tr.add(gr.Checkbox(False, label=tr("exp.fresh"), elem_id="exp-fresh"), label="exp.fresh")
                ui["report"] = tr.add(gr.Button(tr("exp.report"), elem_id="exp-report"), value="exp.report")
            ui["status"] = gr.Markdown("", elem_id="exp-status")
            ui["progress"] = tr.add(gr.Dataframe(headers=[tr(h) for h in PROGRESS_HEADERS], label=tr("exp.progress"),
                                                 interactive=False, elem_id="exp-progress"),
                                    label="exp.progress",  # an empty table's headers follow the switch as a value
                                    value=empty_table(PROGRESS_HEADERS))
    ui["curves"] = tr.add(gr.Plot(label=tr("exp.curves"), elem_id="exp-curves", elem_classes=["zoo-plot"]),
                          label="exp.curves")
    ui["table"] = tr.add(gr.Dataframe(headers=[tr(h) for h in TABLE_HEADERS], label=tr("exp.table"),
                                      interactive=False, wrap=True, elem_id="exp-table"),
                         label="exp.table", value=empty_table(TABLE_HEADERS))
    with gr.Row():
        ui["trial"] = tr.add(gr.Dropdown([], label=tr("exp.trial"), elem_id="exp-trial"), label="exp.trial")
        ui["open"] = tr.add(gr.Button(tr("exp.open"), elem_id="exp-open"), value="exp.open")
    ui["opened"] = gr.Markdown("", elem_id="exp-opened")
    # a committed report is the experiment's record, in the language it was written (English): the
    # tab says so in the page's language above it rather than translating data (docs/UI.md)
    ui["report_note"] = tr.add(gr.Markdown(tr("exp.report_lang"), visible=False, elem_id="exp-report-lang"),
                               value="exp.report_lang")
    ui["report_md"] = gr.Markdown("", elem_id="exp-report-md")
    # hidden until a report fills it: an empty box labelled "figures of the committed full report"
    # read as a broken gallery after a quick run (the newcomer walk of issue 34)
    ui["gallery"] = tr.add(gr.Gallery(label=tr("exp.figures"), preview=True, height=640, object_fit="contain",
                                      elem_id="exp-gallery", visible=False),
                           label="exp.figures")
    ui["timer"] = gr.Timer(1.0, active=False)
    ui["run_name"] = gr.State("")
    ui["opened_name"] = gr.State(None)  # the checkpoint a trial was opened as (its message follows a switch)
    _wire(ui, lang_state)
    # a language switch: the summary, the run's tables and status, the "opened" line, in the new language
    tr.keep([ui["valid"], ui["error"]], lambda lang, text: validate(text, lang), [ui["yaml"]])
    tr.keep([ui["progress"], ui["table"], ui["status"]], redraw, [ui["run_name"]])
    tr.keep([ui["opened"]], lambda lang, name: t("exp.opened", lang, name=name) if name else None,
            [ui["opened_name"]])
    return ui


def redraw(lang: str, name: str | None):
    """The progress table, results table and status line of runs folder ``name`` in ``lang``."""
    if not name:
        return None
    p = poll(name, lang)
    return frame(p["progress"], PROGRESS_HEADERS, lang), frame(p["table"], TABLE_HEADERS, lang), p["status"]


#: The committed report and its figures sit at the bottom of the tab: "Show full report" brings
#: the figures (or the error box) into view -- the gallery read as blank until scrolled to (issue 34).
#: The gallery is hidden until a report fills it, so the script waits (up to 3 s) for its first
#: image to be laid out before scrolling.
SHOW_REPORT_JS = """() => { const go = (n) => { const err = document.querySelector('#exp-error');
  const failed = err && err.querySelector('strong');
  const el = failed ? err : document.querySelector('#exp-gallery');
  const ready = el && (failed || (el.offsetParent !== null && el.querySelector('img')));
  if (ready) el.scrollIntoView({block: 'start', behavior: 'instant'});
  else if (n > 0) setTimeout(() => go(n - 1), 100); };
  go(30); }"""


def _wire(ui: dict, lang_state) -> None:
    import gradio as gr

    def on_pick(name, lang):
        if not name:
            return gr.skip(), gr.skip(), ""
        return pick(name, lang)

    ui["pick"].change(handler(on_pick), [ui["pick"], lang_state], [ui["yaml"], ui["valid"], ui["error"]],
                      api_visibility="private")
    ui["yaml"].change(handler(validate), [ui["yaml"], lang_state], [ui["valid"], ui["error"]], show_progress="hidden",
                      api_visibility="private")

    def show(name: str | None, lang):
        p = poll(name, lang)
        trials = p["trials"]
        return (frame(p["progress"], PROGRESS_HEADERS, lang), p["curves"] if p["curves"] is not None else gr.skip(),
                frame(p["table"], TABLE_HEADERS, lang), p["status"],
                gr.update(choices=trials, value=trials[0] if trials else None), gr.Timer(active=p["active"]))

    shown = [ui["progress"], ui["curves"], ui["table"], ui["status"], ui["trial"], ui["timer"]]

    @inline_errors(1 + len(shown))
    def on_run(text, fresh, lang):
        name = start(text, lang, fresh=bool(fresh))
        return (name, *show(name, lang))

    ui["run"].click(on_run, [ui["yaml"], ui["fresh"], lang_state], [ui["run_name"], *shown, ui["error"]],
                    concurrency_limit=1, api_visibility="private")
    ui["timer"].tick(handler(show), [ui["run_name"], lang_state], shown, show_progress="hidden", api_visibility="private")

    @inline_errors(2)
    def on_report(name, lang):
        md, figs = shipped_report(name, lang)
        return md, gr.update(value=figs, visible=bool(figs))

    ui["report"].click(lambda: gr.update(visible=True), None, [ui["report_note"]], api_visibility="private")
    ui["report"].click(on_report, [ui["pick"], lang_state], [ui["report_md"], ui["gallery"], ui["error"]],
                       api_visibility="private").then(None, js=SHOW_REPORT_JS)

    @inline_errors(2)
    def on_open(name, trial, lang):
        opened = open_trial(name, trial, lang)
        return t("exp.opened", lang, name=opened), opened

    ui["saved_event"] = ui["open"].click(on_open, [ui["run_name"], ui["trial"], lang_state],
                                         [ui["opened"], ui["opened_name"], ui["error"]], api_visibility="private")
