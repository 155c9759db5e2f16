"""Issue 34, goal 5: every engine error a UI tab can show reads in 中文 when the page is in 中文.

The walk (:func:`walk`) drives the built app the way a person and a fuzzer do, with the page's
language set: every registered handler (the Blocks' fns, as tests/ui/test_ui_boundary.py walks them)
fed the hostile values of that test, and the realistic mistakes of each tab -- a wrong checkpoint, a
spec YAML with a duplicate key / an unknown field / a bad value typed into Build, experiment YAML with
bad tune ranges, thresholds, init, budget or success fields in Experiments, bad prompts in Run,
Interpret, Inspect and Compare.  Every ``ZooError`` that reaches the page passes through
:func:`zoo.ui.i18n.error_text` (the error box, the ``gr.Error`` of :func:`zoo.ui.common.handler`,
the inline notes), which the walk records: its message id, ``where`` and the text shown.

In 中文 no shown problem or fix may hold an English sentence (three English words in a row, the
regex of tests/ui/test_ui_zh_complete.py) outside quoted values and code; in English the text is
the engine's English, as raised.  The tests walk the realistic mistakes (seconds) and a bounded slice of
the fuzz (:func:`test_the_handler_fuzz_shows_no_english_in_chinese`, seconds); the whole fuzz, the
conformance kit's handler included, takes minutes, so it runs as a script: ``python3
tests/ui/test_ui_zh_errors.py`` (``--no-fuzz``: the mistakes only; ``--deep``: each hostile value in
one argument too; ``-v``: each handler's time) prints each distinct error shown in 中文 that has no
Chinese entry or still reads English.
"""
from __future__ import annotations

import inspect
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

gr = pytest.importorskip("gradio")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ui_support import make_checkpoints  # noqa: E402

#: three English words in a row (tests/ui/test_ui_zh_complete.py)
ENGLISH = re.compile(r"[A-Za-z]{2,}(?:[ '’-]+[A-Za-z]{2,}){2,}")
#: what is not a sentence to translate: a quoted value ('x', "x", `x`), a YAML/code snippet after
#: "e.g." / "例如", a server path, a Python call, an option list of names
CODE = re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`|‘[^’]*’|「[^」]*」|(?:例如|e\.g\.)[^；。]*|\S*[/\\]\S*|\w+\([^)]*\)|"
                  r"\{[^}]*\}|\[[^\]]*\]")

HOSTILE = [None, "", "x" * 200_000, 12345, -1, 1e308, float("nan"), ["a", 1], {"k": "v"}, b"\x00\xff",
           "nope_checkpoint", "../../../../etc/passwd", "/dev/zero", "ui_gpt/../../x", "a\x00b",
           "中文" * 50, True]
#: the values put in one argument at a time (tests/ui/test_ui_boundary.py)
ONE_AT_A_TIME = [None, "x" * 200_000, 12345, ["a", 1], "../../../../etc/passwd", "nope_checkpoint"]
#: handlers not fuzzed here: gradio's own machinery, and the conformance kit over every component
#: (minutes; Verify's rows are checked by test_ui_zh_complete.py); ONCE: called with one hostile value
#: (a kit run, an experiment start)
SKIP = {"gradio.renderable:Renderable.apply", "zoo.ui.verify_tab:build.<locals>.run"}
ONCE = {"zoo.ui.verify_tab:build.<locals>.run_kit", "zoo.ui.experiments_tab:_wire.<locals>.on_run"}
HANG_S = 60


def _key(fn) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


def _lang_index(fn) -> int | None:
    """The position of a handler's ``lang`` argument (None: it has none)."""
    try:
        names = [p.name for p in inspect.signature(inspect.unwrap(fn)).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return None
    return names.index("lang") if "lang" in names else None


def _defaults(bf) -> list:
    """The initial values of a handler's input components (as the page starts)."""
    values = []
    for comp in bf.inputs:
        v = getattr(comp, "value", None)
        values.append(v() if callable(v) else v)
    return values


def _call(fn, args):
    def alarm(signum, frame):
        raise TimeoutError(f"no answer within {HANG_S} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_S)
    try:
        out = fn(*args)
        if inspect.isgenerator(out):
            for _ in out:
                pass
    except Exception:  # noqa: BLE001 - the walk records what was shown, test_ui_boundary judges the rest
        pass
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ---------------------------------------------------------------------- the realistic mistakes
def wrong_checkpoints(folder: Path) -> list[str]:
    """Broken copies of ``folder/ui_gpt`` (from :func:`make_checkpoints`) beside it, as a person's
    checkpoint folder holds them: cut short, overwritten, with a spec that no longer builds, with a
    manifest that does not match; returns their names."""
    import shutil

    made = {}
    for name in ("ui_cut", "ui_noise", "ui_badspec", "ui_badmanifest", "ui_nospec"):
        shutil.copytree(folder / "ui_gpt", folder / name)
        made[name] = folder / name
    weights = made["ui_cut"] / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    (made["ui_noise"] / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (made["ui_badspec"] / "spec.yaml").write_text("preset: gpt_tiny\nattention: banana\n", encoding="utf-8")
    (made["ui_badmanifest"] / "zoo-manifest.json").write_text('{"files": {"model.safetensors": "0"}}',
                                                             encoding="utf-8")
    (made["ui_nospec"] / "spec.yaml").unlink()
    return sorted(made)


GOOD_SPEC = "preset: gpt_tiny\nnum_layers: 2\n"
SPECS = [
    "preset: gpt_tiny\nattention: eager\nattention: sdpa\n",  # a duplicate key
    "preset: gpt_tiny\nnum_layerz: 2\n",                      # an unknown field
    "preset: gpt_tiny\nattention: banana\n",                  # an unknown component
    "preset: gpt_tiny\nnum_heads: 3\n",                       # a bad value
    "preset: gpt_tiny\nd_model: -4\n",
    "preset: gpt_tiny\nd_model: many\n",
    "preset: gpt_tiny\ndropout: 2\n",
    "preset: gpt_tiny\nvocab_size: 1000000000\n",             # over the budget
    "preset: gpt_tiny\ninit: {scheme: banana}\n",
    "preset: gpt_tiny\nmask: {kind: sliding_window, window: -1}\n",
    "preset: no_such_preset\n",
    "arch: [\n",                                              # not YAML
    "- 1\n- 2\n",                                             # not a mapping
    "preset: gpt_tiny\nnorm: {kind: rmsnorm, bias: true}\n",
    "preset: gpt_tiny\nmax_len: 0\n",
]
EXPERIMENT = "sqrt_dk"
#: (old, new) edits of the shipped experiment's YAML, each one mistake
EXPERIMENT_EDITS = [
    ("seeds: 3\n", "seeds: 3\ntask: {kind: copy}\n"),                   # duplicate key 'task'
    ("seeds: 3\n", "seeds: 3\nsucess: {acc: 0.9}\n"),                   # unknown field
    ("seeds: 3\n", "seeds: 3\ntune: {train.lr: {low: 1.0e-2, high: 1.0e-4}}\n"),
    ("seeds: 3\n", "seeds: 3\ntune: {train.lr: {low: 0, high: 1.0e-2, log: true}}\n"),
    ("seeds: 3\n", "seeds: 3\ntune: {train.lr: {low: 1.0e-4, hi: 1.0e-2}}\n"),
    ("seeds: 3\n", "seeds: 3\ntune: {train.lr: {low: x, high: 1.0e-2}}\n"),
    ("seeds: 3\n", "seeds: 3\ntune: {train.lr: 0.1}\n"),
    ("seeds: 3\n", "seeds: 3\ntune: []\n"),
    ("seeds: 3\n", "seeds: 3\nthreshold: {metric: acc, value: x}\n"),
    ("seeds: 3\n", "seeds: 3\nthreshold: {metric: nope, value: 0.9}\n"),
    ("seeds: 3\n", "seeds: 3\nthreshold: {metric: acc}\n"),
    ("seeds: 3\n", "seeds: 3\nthreshold: 5\n"),
    ("init: {scheme: kaiming}", "init: {scheme: banana}"),
    ("init: {scheme: kaiming}", "init: {scheme: kaiming, gain: x}"),
    ("budget: {steps: 300}", "budget: {steps: -1}"),
    ("budget: {steps: 300}", "budget: {stepz: 300}"),
    ("budget: {steps: 300}", "budget: 5"),
    ("budget: {steps: 300}", "budget: {steps: 300, seconds: x}"),
    ("seeds: 3\n", "seeds: 3\nsuccess: {acc: x}\n"),
    ("seeds: 3\n", "seeds: 3\nsuccess: 0.9\n"),
    ("seeds: 3\n", "seeds: 3\nmin_effect: {acc: -1}\n"),
    ("seeds: 3\n", "seeds: 0\n"),
    ("seeds: 3\n", "seeds: many\n"),
    ("name: sqrt_dk", "name: Bad Name"),
    ("metrics: [entropy_init, acc, gen_exact, eval_loss]", "metrics: [nope]"),
    ("metrics: [entropy_init, acc, gen_exact, eval_loss]", "metrics: acc"),
    ("baseline: {attn_scale: null}", "baseline: nope"),
    ("baseline: {attn_scale: null}", "baseline: {nope: 1}"),
    ("task: {kind: copy, length: 12, vocab: 16}", "task: {kind: nope}"),
    ("task: {kind: copy, length: 12, vocab: 16}", "task: {kind: copy, length: -3}"),
    ("task: {kind: copy, length: 12, vocab: 16}", "task: {kind: copy, lenght: 12}"),
    ("train: {batch_size: 32,", "train: {batch_size: -32,"),
    ("train: {batch_size: 32,", "train: {batch_sise: 32,"),
    ("train: {batch_size: 32,", "train: {lr: x, batch_size: 32,"),
    ("grid:\n  head_dim: [16, 256]", "grid:\n  head_dim: 16"),
    ("grid:\n  head_dim: [16, 256]", "grid:\n  nope_field: [16, 256]"),
    ("quick: {seeds: 3,", "quick: {quick: {}, seeds: 3,"),
    ("quick: {seeds: 3, budget: {steps: 30}", "quick: {seeds: 3, budget: {steps: 100000}"),
    ("quick: {seeds: 3,", "quick: {seeds: 30,"),
    ("seeds: 3\n", "seeds: 3\nplugins: [nope_plugin]\n"),
    ("seeds: 3\n", "seeds: 3\nprobe: 5\n"),
    ("seeds: 3\n", "seeds: [1, 1]\n"),
    ("seeds: 3\n", "seeds: 500\n"),
    ("grid:\n  head_dim: [16, 256]", "variants: []\ngrid:\n  head_dim: [16, 256]"),
    ("base: {preset: gpt_tiny,", "base: {preset: gpt_tiny, attention: banana,"),
    ("base: {preset: gpt_tiny,", "base: {preset: gpt_tiny, num_heads: 3,"),
    ("budget: {steps: 300}", "budget: {steps: 300, params_tolerance: 0.1}"),
    ("train: {batch_size: 32,", "train: {steps: 10, batch_size: 32,"),
    ("seeds: 3\n", "seeds: 3\ntune: {train.lr: [1.0e-3, 3.0e-3], select: nope}\n"),
    ("seeds: 3\n", "seeds: 3\ntune: {train.lr: {low: 1.0e-4, high: 1.0e-2}}\n"),  # a range: no grid to run
    ("budget: {steps: 300}\nmetrics: [entropy_init, acc, gen_exact, eval_loss]\nquick: {seeds: 3, budget: {steps: 30}",
     "budget: {flops: 1000}\nmetrics: [entropy_init, acc, gen_exact, eval_loss]\nquick: {seeds: 3, budget: {flops: 1000}"),
    # ^ a budget too small for one training step
    ("base: {preset: gpt_tiny,", "base: {preset: bert_tiny,"),                     # an encoder for a decoder task
]
#: a one-trial, three-step experiment the walk runs from the Experiments tab (seconds): ``{name}``
#: names its runs folder, ``{length}`` its copy task (12 needs sequences longer than max_len 16:
#: the trial fails inside its worker, mid-run)
TINY_EXPERIMENT = """name: zh_walk_{name}
base: {{preset: gpt_tiny, num_layers: 1, d_model: 16, num_heads: 2, d_ff: 32, max_len: 16}}
variants: [{{name: a, set: {{}}}}]
seeds: 1
task: {{kind: copy, length: {length}, vocab: 8}}
train: {{batch_size: 4, lr: 1.0e-3, warmup: 0, eval_every: 2, save_every: 2, log_every: 1}}
budget: {{steps: 3}}
"""


def _out_is_a_file(exp, out):
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists():
        out.write_text("not a folder", encoding="utf-8")


def _out_is_a_link(exp, out):
    target = out.parent / "zh_walk_target"
    target.mkdir(parents=True, exist_ok=True)
    if not os.path.lexists(out):
        out.symlink_to(target, target_is_directory=True)


def _record(text):
    def write(exp, out):
        out.mkdir(parents=True, exist_ok=True)
        (out / "experiment.json").write_text(text, encoding="utf-8")
    return write


def _foreign_result(exp, out):
    """A finished-looking trial whose result.json is another trial's: the run refuses to count it."""
    import zoo.experiment as ze

    (out / "experiment.json").unlink(missing_ok=True)
    folder = ze.plan(exp)[0].folder(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "result.json").write_text('{"key": "another trial"}', encoding="utf-8")


#: (name, task length, what is done to its runs folder first): each run the Experiments tab starts
#: and the refusal or failure its status line then shows
def _past_the_plan(exp, out):
    """Marks the run whose plan check is passed over (:func:`run_experiment`): the plan refuses a task
    longer than max_len up front, so a trial failing inside its worker is reached by letting one by."""


EXPERIMENT_RUNS = [
    ("toolong", 12, None),                                            # the plan refuses the task
    ("midrun", 12, _past_the_plan),                                   # a trial fails in its worker
    ("file", 4, _out_is_a_file),                                      # the results folder is a file
    ("link", 4, _out_is_a_link),                                      # ... a symlink
    ("damaged", 4, _record("not json")),                              # its record is damaged
    ("other", 4, _record('{"name": "other", "fingerprint": "x"}')),   # another experiment's
    ("mismatch", 4, _foreign_result),                                 # a trial not counted
]


def run_experiment(name: str, length: int, prepare, lang: str) -> None:
    """Start :data:`TINY_EXPERIMENT` as the tab's Run button does (``prepare`` its runs folder
    first), wait for the run to end and draw its status as the tab's timer does."""
    from zoo.ui import experiments_tab as et

    text = TINY_EXPERIMENT.format(name=name, length=length)
    exp = et._load(text)
    if prepare is not None:
        prepare(exp, et.runs_dir() / et.folder_name(exp))
    import contextlib
    from unittest import mock

    past = mock.patch("zoo.experiment.run.check_fits", lambda *a, **k: None) if prepare is _past_the_plan \
        else contextlib.nullcontext()
    from zoo.errors import ZooError
    from zoo.ui import i18n

    with past:
        try:
            started = et.start(text, lang)
        except ZooError as exc:  # refused before it starts: the tab's Run handler words it in its box
            i18n.format_error(exc, lang)
            return
        et._JOBS[started]["thread"].join(HANG_S - 10)  # within the walk's alarm (a run: ~10 s)
    et.poll(started, lang)
#: the Run tab's generation controls, in ``run_tab.ui_options()`` order: max_new_tokens, temperature,
#: top_k, top_p, repetition_penalty, seed, num_beams, length_penalty, no_repeat_ngram_size
GOOD_OPTIONS = (8, 0.8, 40, 0.95, 1.0, 0, 1, 1.0, 0)
BAD_OPTIONS = [(0, 0), (0, 10**6), (1, -1.0), (1, float("nan")), (2, 0), (3, 2.0), (4, 0.0), (5, -1), (6, 0),
               (7, float("inf")), (8, -2)]
BAD_PROMPTS = ["", "x" * 200_000, "\x00\x01", "中文" * 3000, None, "ab " * 300, "<mask>", "5 17 x"]


def realistic(lang: str, ckpts: list[str]):
    """(handler, args) pairs: the mistakes a person makes in each tab, in ``lang``."""
    from zoo.ui import build_tab, compare_tab, experiments_tab, inspect_tab, interp_tab, run_tab

    exp_text = experiments_tab.shipped_yaml(EXPERIMENT)
    calls = []
    for spec in SPECS:
        calls += [(build_tab.analyse, (spec, lang)), (build_tab.on_change, (spec, lang, None))]
    for bad_name in ("", "../x", "a b/c", "x" * 300):
        calls.append(("save_ui", (GOOD_SPEC, bad_name, 0, lang)))
    for old, new in EXPERIMENT_EDITS:
        assert old in exp_text, old
        calls.append((experiments_tab.validate, (exp_text.replace(old, new, 1), lang)))
    calls += [(experiments_tab.validate, (text, lang)) for text in ("", "nope_exp", "a: [\n", "- 1\n")]
    calls += [(experiments_tab.shipped_report, ("nope", lang)), (experiments_tab.open_trial, ("nope", "t0", lang))]
    calls += [(run_experiment, (*run, lang)) for run in EXPERIMENT_RUNS]
    for name in ["nope_checkpoint", "../etc", "", *ckpts]:
        calls.append((run_tab.on_checkpoint, (name, lang)))
        for prompt in BAD_PROMPTS:
            calls.append((run_tab.run_ui, (name, prompt, lang, *GOOD_OPTIONS)))
            calls.append((inspect_tab.on_inspect, (name, prompt, "decoder", 0, 0, lang)))
            calls.append((interp_tab.lens_view, (name, prompt, lang)))
            calls.append((interp_tab.scores_view, (name, prompt, "induction", lang)))
            calls.append((interp_tab.scores_view, (name, "abc", "nope_kind", lang)))
            calls.append((interp_tab.patch_view, (name, "a b c", prompt, lang)))
        calls.append((inspect_tab.on_inspect, (name, "hello", "nope", 99, 99, lang)))
    for i, bad in BAD_OPTIONS:  # generation controls out of range (the HTTP API takes any number)
        values = list(GOOD_OPTIONS)
        values[i] = bad
        calls.append((run_tab.run_ui, ("ui_gpt", "hello", lang, *values)))
    for over in ("attention: eager\nattention: sdpa\n", "nope: 1\n", "attention: banana\n", "a: [\n", "5"):
        calls.append(("compare_ui", ("gpt_tiny", over, "gpt_tiny", "", 8, "hello", lang)))
        calls.append(("compare_ui", ("nope_src", "", "gpt_tiny", over, 8, "hello", lang)))
    for n in (-1, 0, 10**9, None):
        calls.append(("compare_ui", ("gpt_tiny", "", "gpt_tiny", "", n, "hello", lang)))
    return calls


# ---------------------------------------------------------------------- the walk
class Shown:
    """Records every ZooError worded for the page (through ``i18n.error_text``)."""

    def __init__(self):
        self.seen: dict[tuple, dict] = {}

    def __call__(self, real):
        def recording(exc, lang="en"):
            what, fix = real(exc, lang)
            parts = exc if isinstance(exc, dict) else {"where": getattr(exc, "where", None),
                                                         "message_id": getattr(exc, "message_id", None)}
            key = (parts.get("message_id"), parts.get("where"), what, fix)
            self.seen.setdefault(key, {"id": key[0], "where": key[1], "what": what, "fix": fix,
                                       "lang": lang, "count": 0})["count"] += 1
            return what, fix
        return recording


def translated(message_id: str | None) -> bool:
    """Whether an error of ``message_id`` is worded in Chinese: the UI's own (``ui.KEY``) or an
    engine id with an entry in ``ERRORS_ZH``."""
    from zoo.ui import i18n

    return bool(message_id) and (message_id.startswith(i18n.UI_PREFIX) or message_id in i18n.ERRORS_ZH)


#: a quoted value (the first pass of :func:`english_left`: a path rule of CODE starting earlier in a
#: run of Chinese characters would otherwise swallow the opening 「 and leave the value's words)
QUOTED = re.compile(r"「[^」]*」|‘[^’]*’|`[^`]*`")


def english_left(text: str | None) -> list[str]:
    """The English sentences of ``text`` outside quoted values and code (of its first 4,000
    characters: a shown part is at most zoo.messages.MAX_PART long, and CODE's path rule takes
    quadratic time on a long run without spaces -- a hostile 200,000-character value handed to
    error_text as if it were an error record took minutes)."""
    return ENGLISH.findall(CODE.sub(" ", QUOTED.sub(" ", (text or "")[:4000])))


def walk(app, lang: str, ckpts: list[str], *, fuzz: bool = True, one_at_a_time: bool = False,
         monkeypatch=None, verbose: bool = False, mistakes: bool = True, hostile=None, single=None,
         skip=frozenset()) -> list[dict]:
    """Every distinct ZooError the app shows in ``lang``: the realistic mistakes (``mistakes``), then
    (``fuzz``) every handler with each hostile value (``hostile``, default :data:`HOSTILE`) in every
    argument, the language argument kept, and (``one_at_a_time``, minutes: the script's ``--deep``)
    each value of ``single`` (default :data:`ONE_AT_A_TIME`) in one argument with the others as the
    page starts.  ``skip``: handler keys not fuzzed (besides :data:`SKIP`)."""
    hostile = HOSTILE if hostile is None else hostile
    single = ONE_AT_A_TIME if single is None else single
    from zoo.ui import i18n

    shown = Shown()
    real = i18n.error_text
    if monkeypatch is not None:
        monkeypatch.setattr(i18n, "error_text", shown(real))
    else:
        i18n.error_text = shown(real)
    try:
        fns = {}
        for bf in app.fns.values():
            if bf.fn is not None:
                fns.setdefault(_key(bf.fn), (bf.fn, len(bf.inputs), _defaults(bf)))
        by_name = {k.rsplit(".", 1)[-1]: fn for k, (fn, _, _) in fns.items()}
        for fn, args in realistic(lang, ckpts) if mistakes else []:
            _call(by_name[fn] if isinstance(fn, str) else fn, list(args))
        if fuzz:
            for key, (fn, n, base) in fns.items():
                if key in SKIP or key in skip:
                    continue
                at = _lang_index(fn)
                cases = [[h] * n for h in (hostile[:1] if key in ONCE else hostile)]
                if key not in ONCE and one_at_a_time:  # one argument hostile, the others as the page starts
                    cases += [base[:i] + [h] + base[i + 1:] for i in range(n) for h in single if i != at]
                began = time.monotonic()
                for args in cases:
                    if at is not None and at < n:
                        args[at] = lang
                    _call(fn, args)
                if verbose:
                    print(f"fuzzed {key}: {len(cases)} calls, {time.monotonic() - began:.1f} s", file=sys.stderr,
                          flush=True)
    finally:
        if monkeypatch is None:
            i18n.error_text = real
    return list(shown.seen.values())


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("ckpts")
    made = [*make_checkpoints(d), *wrong_checkpoints(d)]
    old = {k: os.environ.get(k) for k in ("ZOO_CHECKPOINTS", "ZOO_RUNS")}
    os.environ["ZOO_CHECKPOINTS"] = str(d)
    os.environ["ZOO_RUNS"] = str(tmp_path_factory.mktemp("runs"))
    from zoo.ui.app import build_app

    yield build_app(), sorted(made)
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _report(found: list[dict]) -> str:
    return "\n".join(f"[{e['id']}] {e['where']}: {e['what'][:160]} | fix: {str(e['fix'])[:120]}" for e in found)


def test_every_error_a_tab_shows_reads_in_chinese(app, monkeypatch):
    demo, ckpts = app
    found = walk(demo, "zh", ckpts, fuzz=False, monkeypatch=monkeypatch)  # the fuzz: the script (minutes)
    assert len(found) >= 60, f"the walk saw too few errors ({len(found)}): did the tabs change?\n" + _report(found)
    left = [e for e in found if english_left(e["what"]) or english_left(e["fix"])]
    assert not left, f"{len(left)} of {len(found)} errors shown in 中文 still read English:\n" + _report(left)
    untranslated = [e for e in found if not translated(e["id"])]
    assert not untranslated, f"{len(untranslated)} errors shown without a Chinese entry:\n" + _report(untranslated)
    ids = {e["id"] for e in found}
    reached = {"yaml.duplicate_key", "yaml.invalid_at", "experiment.range_order", "experiment.unknown_metric",
               "threshold.not_mapping", "checkpoint.corrupt", "manifest.malformed", "input.unknown_characters",
               "option.number_in", "ui.err.arg_str_none", "experiment.trials_failed", "experiment.out_not_folder",
               "experiment.out_symlink", "experiment.record_bad", "experiment.other_experiment",
               "experiment.mismatched", "experiment.tune_range_run", "experiment.no_step", "experiment.task_arch",
               "task.max_len"}
    assert reached <= ids, f"the walk no longer reaches {sorted(reached - ids)}"
    texts = {(e["where"], e["what"], e["fix"]) for e in found}  # known values, in Chinese
    assert ("experiment", "重复的键 'task'（第 25 行）", "两项只保留一项") in texts
    assert ("experiment.tune.train.lr.high", "范围需要 low < high，实际 low 为 0.01，high 为 0.0001",
            "交换两者；或不调这一项，把那一个值写在 train: / base: 中") in texts
    assert any(e["id"] == "checkpoint.corrupt" and e["what"].startswith("检查点损坏或被截断：文件头长度 ")
               for e in found)  # the inner error worded in Chinese too (messages.cause)
    # a trial failing inside its worker process: its own error worded from the id the worker recorded
    assert ("experiment zh_walk_midrun", "1 个试验失败；第一个：a/seed0：任务需要长为 24 个 token 的序列，max_len 却是 16",
            "查看结果文件夹中的 a/seed0/worker.log；再运行一次同样的命令即可重试它们（已完成的试验会保留）") in texts


def test_a_failed_experiment_run_reads_in_chinese_and_an_internal_one_names_only_its_kind(app, monkeypatch):
    """The Experiments tab's status line: a run that fails inside zoo with a bug (not a ZooError) says
    "went wrong inside zoo" in the page's language -- it once put the exception's English there."""
    import zoo.experiment as ze
    from zoo.ui import experiments_tab as et

    def broken(*args, **kwargs):
        raise RuntimeError("an English sentence of a bug")

    monkeypatch.setattr(ze, "run", broken)
    text = TINY_EXPERIMENT.format(name="internal", length=4)
    name = et.start(text, "zh")
    et._JOBS[name]["thread"].join(30)
    zh = et.poll(name, "zh")["status"]
    assert "zoo 内部出错（RuntimeError）" in zh and not english_left(zh), zh
    assert "an English sentence" not in zh and "an English sentence" not in et.poll(name, "en")["status"]
    assert "Something went wrong inside zoo (RuntimeError)" in et.poll(name, "en")["status"]


def test_an_unreadable_input_contract_reads_in_chinese_on_the_card(tmp_path, monkeypatch):
    """Run's card of a checkpoint whose stored input contract is damaged: the note is the page's
    language, the engine's own words quoted (they had no id)."""
    import zoo
    from zoo.ui import run_tab

    model = zoo.build("gpt_tiny", seed=0, vocab_size=64, num_layers=1, d_model=32, num_heads=4, d_ff=64,
                      max_len=32, name="ui_badcontract")
    zoo.save(model, tmp_path / "ui_badcontract", metadata={"input_contract": "not json"})
    monkeypatch.setenv("ZOO_CHECKPOINTS", str(tmp_path))
    zh = run_tab.model_card("ui_badcontract", "zh")
    line = next(ln for ln in zh.splitlines() if ln.startswith("- 输入约定"))
    assert line.startswith("- 输入约定：无法读取（「") and not english_left(line), line
    en = run_tab.model_card("ui_badcontract", "en")
    assert any(ln.startswith("- input: unreadable (the input contract is not JSON") for ln in en.splitlines()), en
    size = next(ln for ln in zh.splitlines() if ln.startswith("- 大小"))  # the budget's origin too
    assert not english_left(size), size


def test_a_foreign_cause_is_quoted_and_an_inner_sentence_worded():
    """``checkpoint.corrupt`` whose cause is a foreign library's English (torch, safetensors, the OS:
    no id) shows it quoted in 「」 under 中文; a sentence inside another (the trainer's "kept"
    checkpoint, :func:`zoo.messages.part`) is worded from its own id."""
    import torch

    import zoo
    from zoo import messages
    from zoo.errors import CheckpointError, TrainError
    from zoo.train.state import check_finite
    from zoo.ui import i18n

    exc = CheckpointError.of("checkpoint.corrupt", **messages.cause(OSError(5, "Input/output error")))
    assert exc.what == "corrupt or truncated checkpoint: [Errno 5] Input/output error"
    what, _ = i18n.error_text(exc, "zh")
    assert what == "检查点损坏或被截断：「[Errno 5] Input/output error」" and not english_left(what)
    model = zoo.build("gpt_tiny", seed=0, vocab_size=32, num_layers=1, d_model=16, num_heads=2, d_ff=32, max_len=16)
    with torch.no_grad():
        model.lm_head.weight[0, 0] = float("nan")
    with pytest.raises(TrainError) as info:
        check_finite(model, 7, kept=messages.part("kept", "train.kept_step", out="runs/x", saved=5))
    err = info.value
    name = err.params["name"]
    assert err.what == (f"step 7: the weight {name} became non-finite (NaN); the run stopped without saving it; "
                        "'runs/x' keeps the checkpoint of step 5")  # the English as before the ids
    what, fix = i18n.error_text(err, "zh")
    assert what == f"第 7 步：权重 {name} 变成了非有限值（NaN）；训练已停止，未保存它；'runs/x' 保留着第 5 步的检查点"
    assert not english_left(what) and not english_left(fix), (what, fix)


def test_a_uis_own_error_in_chinese_is_capped_like_its_english():
    """``ZooError`` caps its English parts (zoo.messages.MAX_PART); the UI's own error worded again in
    中文 from its key and params is capped the same (it once came back whole: 5,000 characters)."""
    from zoo.errors import ZooError
    from zoo.messages import MAX_PART
    from zoo.ui.i18n import error_text, ui_error

    exc = ui_error(ZooError, "build.no_preset", fix="build.no_preset_fix", where="preset", name="x" * 5000)
    assert len(exc.what) <= MAX_PART
    what, fix = error_text(exc, "zh")
    assert what.startswith("没有名为 'xxx") and len(what) <= MAX_PART and fix == "请从列表中选一个"


#: handlers that take no page language, each with why: their inputs are not the page's, or they
#: show no text (gradio's own machinery; the switch, whose input *is* the language)
NO_LANGUAGE = {
    "gradio.renderable:Renderable.apply": "gradio's own @gr.render machinery",
    "zoo.ui.app:_wire_language.<locals>.on_switch": "the language switch: its input is the language",
    "zoo.ui.run_tab:fits_checkpoint": "shows or hides controls: no text, no zoo call",
    "zoo.ui.chat_panel:clear": "empties the chat: no input, no text",
    "zoo.ui.experiments_tab:_wire.<locals>.<lambda>": "shows the report's note: no input",
}


def test_every_handler_gets_the_page_language(app):
    """Each handler that can show a message gets the page's language state, so a refusal of what it
    was sent reads in 中文 (``refill``, ``pick_example``, ``on_mask_kind``, ``refresh_lists`` and the
    two refresh buttons once got none and answered in English)."""
    demo, _ = app
    states, missing = set(), []
    for bf in demo.fns.values():
        if bf.fn is None or _key(bf.fn) in NO_LANGUAGE:
            continue
        at = _lang_index(bf.fn)
        if at is None or at >= len(bf.inputs):
            missing.append(_key(bf.fn))
            continue
        if isinstance(bf.inputs[at], gr.State):
            states.add(id(bf.inputs[at]))
        else:  # an HTTP endpoint (gr.api): the client names its language as an argument
            assert type(bf.inputs[at]).__name__ == "Api", (_key(bf.fn), bf.inputs[at])
    assert not missing, missing
    assert len(states) == 1, f"the handlers' language comes from {len(states)} states, not the page's one"


@pytest.mark.parametrize("key,args", [
    ("zoo.ui.build_tab:refill", (12345, "zh")),
    ("zoo.ui.run_tab:pick_example", ("not a list", "zh")),
])
def test_the_handlers_that_had_no_language_refuse_in_chinese(app, key, args):
    demo, _ = app
    fn = next(bf.fn for bf in demo.fns.values() if bf.fn is not None and _key(bf.fn) == key)
    with pytest.raises(gr.Error) as info:
        fn(*args)
    text = str(info.value.message)
    assert re.search(r"[\u4e00-\u9fff]", text) and not english_left(re.sub(r"<[^>]+>", " ", text)), text


#: the handlers the pytest slice of the fuzz leaves to the script: the conformance kit over every
#: component (minutes, even refused: Verify's rows are checked by test_ui_zh_complete.py)
FUZZ_SLICE_SKIP = {"zoo.ui.verify_tab:build.<locals>.run_kit"}


def test_the_handler_fuzz_shows_no_english_in_chinese(app, monkeypatch):
    """A bounded slice of the script's fuzz (``python3 tests/ui/test_ui_zh_errors.py [--deep]``):
    every handler but the kit, every argument hostile at once, then each argument alone given four of
    the hostile values with the others as the page starts -- whatever they show in 中文 reads in
    中文 and has a Chinese entry, no longer than the English may be (10 s on two busy cores, so not
    marked slow; the script does all of it, the conformance kit included)."""
    demo, ckpts = app
    began = time.monotonic()
    found = walk(demo, "zh", ckpts, mistakes=False, one_at_a_time=True, single=[None, 12345, ["a", 1], "x" * 200_000],
                 skip=FUZZ_SLICE_SKIP, monkeypatch=monkeypatch)
    spent = time.monotonic() - began
    found = [e for e in found if e["lang"] == "zh"]  # (the switch's hostile choice is no language: English)
    assert len(found) >= 10, f"the fuzz saw too few errors ({len(found)}): did the handlers change?\n" + _report(found)
    left = [e for e in found if english_left(e["what"]) or english_left(e["fix"]) or not translated(e["id"])]
    assert not left, f"{len(left)} of {len(found)} errors the fuzz made still read English:\n" + _report(left)
    from zoo.messages import MAX_PART

    long = [e for e in found if len(e["what"] or "") > MAX_PART or len(e["fix"] or "") > MAX_PART]
    assert not long, f"shown in 中文 longer than the English may be ({MAX_PART}):\n" + _report(long)
    assert spent < 120, f"the slice took {spent:.0f} s: keep it bounded (the script holds the rest)"


#: (where, problem, fix) the English page showed before these errors had message ids, word for word
#: (recorded by this walk before the conversion): the ids keep the English as it was
ENGLISH_AS_BEFORE = [
    ("<yaml text>", "duplicate key 'attention' (line 3)", "keep one of the two entries"),
    ("<yaml text>", "a spec must be a mapping of fields, got list", "start the file with e.g. `arch: decoder`"),
    ("experiment", "duplicate key 'task' (line 25)", "keep one of the two entries"),
    ("experiment", "the experiment is empty", "pick a shipped experiment or type its YAML"),
    ("experiment", "an experiment must be a mapping of fields, got list", "start the file with `name: ...`"),
    ("experiment.baseline", "no variant named 'nope'", None),
    ("experiment.baseline.nope", "'nope' is not a key the variants set", None),
    ("experiment.budget", "must be exactly one of {steps: N}, {tokens: N}, {flops: N} (and optionally params: N)",
     "e.g. budget: {flops: 2e12} for an equal-compute comparison, or {steps: 400, params: 2e5} for equal "
     "parameter counts"),
    ("experiment.grid", "must map each key to a non-empty list of values",
     "e.g. grid: {num_layers: [2, 12], norm.placement: [pre, post]}"),
    ("experiment.metrics", "must be a list of metric names", "e.g. metrics: [acc, eval_loss]"),
    ("experiment.metrics[0]", "unknown metric 'nope' for task 'copy'", None),
    ("experiment.name", "invalid name 'Bad Name'", "lower-case letters, digits and '_'"),
    ("experiment.quick.quick", "a quick block cannot nest another", None),
    ("experiment.threshold[0]", "a threshold is a mapping with metric and value, got 5",
     "e.g. {metric: acc, value: 0.9, stop: true}"),
    ("experiment.threshold[0].metric", "the task 'copy' has no metric 'nope'",
     "name one of the task's metrics, or eval_loss"),
    ("experiment.train.batch_sise", "unknown trainer option 'batch_sise'", "did you mean 'batch_size'?"),
    ("experiment.tune", "must map override keys to lists of values to sweep",
     "e.g. tune: {train.lr: [1.0e-3, 3.0e-3, 1.0e-2]}"),
    ("experiment.tune.train.lr", "a tune axis needs at least two distinct values, got 0.1",
     "sweep e.g. train.lr: [1.0e-3, 3.0e-3, 1.0e-2], search a range train.lr: {low: 1.0e-4, high: 1.0e-2, "
     "log: true}, or set one value in train: / base:"),
    ("experiment.tune.train.lr.hi", "unknown range field 'hi'", "e.g. train.lr: {low: 1.0e-4, high: 1.0e-2, log: true}"),
    ("experiment.tune.train.lr.high", "a range needs low < high, got low 0.01, high 0.0001",
     "swap them, or list the one value in train: / base: instead of tuning it"),
    ("experiment.tune.train.lr.low", "a log range needs low > 0, got 0", "raise low above 0, or set log: false"),
    ("generate.no_repeat_ngram_size", "no_repeat_ngram_size must be an integer >= 0, got -2", None),
    ("text", "2 of the 2 characters of '\\x00\\x01' are unknown to ui_bert's tokenizer ('\\x00\\x01'): the model "
     "would read them as <unk>", "give text in the model's alphabet"),
]


def test_the_english_page_shows_the_engines_english_as_before(app, monkeypatch):
    demo, ckpts = app
    found = walk(demo, "en", ckpts, fuzz=False, monkeypatch=monkeypatch)
    shown = {(e["where"], e["what"], e["fix"]): e["id"] for e in found}
    missing = [row for row in ENGLISH_AS_BEFORE if row not in shown]
    assert not missing, f"worded differently now (or not shown): {missing}\nshown:\n" + _report(found)
    assert all(shown[row] for row in ENGLISH_AS_BEFORE), [row for row in ENGLISH_AS_BEFORE if not shown[row]]
    left = [e for e in found if re.search(r"[\u4e00-\u9fff]", (e["what"] or "") + (e["fix"] or ""))
            and "中文" not in (e["what"] or "")]  # the Chinese prompt itself may be quoted
    assert not left, _report(left)


if __name__ == "__main__":  # the collection: what the walk finds, in 中文
    import tempfile

    import torch

    torch.set_num_threads(1)
    d = Path(tempfile.mkdtemp())
    made = [*make_checkpoints(d / "ckpts"), *wrong_checkpoints(d / "ckpts")]
    os.environ["ZOO_CHECKPOINTS"], os.environ["ZOO_RUNS"] = str(d / "ckpts"), str(d / "runs")
    from zoo.ui.app import build_app

    found = walk(build_app(), "zh", sorted(made), fuzz="--no-fuzz" not in sys.argv, one_at_a_time="--deep" in sys.argv,
                 verbose="-v" in sys.argv)
    found = [e for e in found if e["lang"] == "zh"]  # (the switch's hostile choice is no language: English)
    bad = [e for e in found if english_left(e["what"]) or english_left(e["fix"]) or not translated(e["id"])]
    print(f"{len(found)} distinct errors shown, {sum(1 for e in found if not e['id'])} without an id, "
          f"{len(bad)} still English")
    print(_report(sorted(bad, key=lambda e: (str(e["id"]), str(e["where"])))))


def test_the_last_engine_refusals_a_tab_reaches_read_in_chinese(tmp_path):
    """Raised for real through the engine (no hand-made error): a prompt outside a shipped
    checkpoint's input contract (Run, Inspect), an init value out of range (Build, Experiments) and a
    folder another writer holds (every tab that saves).  Each has an id, reads in 中文 with the
    contract's own English quoted in 「」, and keeps its English word for word."""
    import zoo
    from zoo.errors import ZooError
    from zoo.guard import transaction as txn
    from zoo.ui import i18n

    numerals = zoo.load("numerals_t5")
    with pytest.raises(ZooError) as info:
        numerals.generate("one hundred")
    err = info.value
    assert err.message_id == "input.outside_contract"
    assert "numerals_t5's input contract" in err.what and "'10086'" in err.fix  # the English as before
    what, fix = i18n.error_text(err, "zh")
    assert "numerals_t5 的输入约定之内" in what and "「" in what and "'10086'" in fix
    assert not english_left(what) and not english_left(fix), (what, fix)

    with pytest.raises(ZooError) as info:
        zoo.build("gpt_tiny", init={"std": -1.0})
    err = info.value
    assert err.message_id == "spec.init_value" and err.what == "must be a finite number in (0, 100], got -1.0"
    what, fix = i18n.error_text(err, "zh")
    assert what == "必须是 (0, 100] 之间的有限数，实际是 -1.0" and not english_left(fix), (what, fix)

    busy = txn._busy(tmp_path / "ck", "process 4242", "save.path", ZooError)  # what a held lock raises
    assert busy.message_id == "transaction.busy" and "being written by process 4242" in busy.what
    what, fix = i18n.error_text(busy, "zh")
    assert "正在被 process 4242 写入" in what and not english_left(what) and not english_left(fix), (what, fix)
