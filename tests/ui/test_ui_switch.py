"""A language switch draws what is already on the page again in the new language (issue 23), through
one mechanism: a tab registers its outputs with the data its handler kept (``Translator.keep``), and
the switch (``Translator.switch``) merges each redraw with the component's label update.  Handler
level here; tests/ui/test_ui_browser.py sees it in Chromium."""
from __future__ import annotations

import re

import pytest

gr = pytest.importorskip("gradio")

from zoo.ui import common, i18n, run_tab  # noqa: E402
from zoo.errors import ZooError  # noqa: E402
from zoo.ui.i18n import STRINGS, Translator, error_text, t, ui_error  # noqa: E402

from ui_support import app_with_checkpoints  # noqa: E402


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    with app_with_checkpoints(tmp_path_factory) as demo:
        yield demo


def test_one_update_per_component_labels_and_redraws_merged():
    tr = Translator("en")
    with gr.Blocks():
        box = tr.add(gr.Dataframe(headers=["a"], label=tr("run.output")), label="run.output",
                     headers=("run.fill_header",))
        line = gr.Markdown("")
        kept = gr.State(None)
        tr.keep([box, line], lambda lang, k: None if k is None else (f"table {lang}", t("run.note", lang)), [kept])
    assert tr.switch_outputs == [box, line] and tr.switch_inputs == [kept]
    labels_only = tr.switch("zh", [None])  # nothing kept yet: the label (and headers) only
    assert labels_only[0]["label"] == t("run.output", "zh") and labels_only[0]["headers"] == ["位置"]
    assert "value" not in labels_only[0] and "value" not in labels_only[1]
    both = tr.switch("zh", [{"any": 1}])
    assert both[0]["label"] == t("run.output", "zh") and both[0]["value"] == "table zh"
    assert "headers" not in both[0]  # a drawn table carries its own headers
    assert both[1]["value"] == t("run.note", "zh")


def test_the_apps_switch_writes_each_component_once_and_reads_every_kept_state(app):
    tr = app.zoo_translator
    ids = [id(c) for c in tr.switch_outputs]
    assert len(ids) == len(set(ids))
    kept = {id(c) for c in tr.switch_inputs}
    for elem in ("run-speed", "run-fill", "cmp-diff", "verify-summary", "inspect-next", "build-saved",
                 "run-error", "inspect-error", "cmp-error", "build-error", "exp-status"):
        assert any(getattr(c, "elem_id", None) == elem for c in tr.switch_outputs), elem
    assert len(kept) == len(tr.switch_inputs)


def test_a_run_made_in_english_is_drawn_in_chinese(app):
    tr = app.zoo_translator
    first, *_, last = run_tab.run_ui("ui_gpt", "abc", "en", *[w.value for w in _run_controls(app)])
    out, _, speed, kept, _, _ = last
    assert "tokens/s" in speed and first[-1] == ""
    state = next(inputs[0] for outputs, _, inputs in tr.kept
                 if _by_elem(tr.switch_outputs, "run-speed") in outputs)
    values = [kept if c is state else None for c in tr.switch_inputs]
    updates = dict(zip(map(id, tr.switch_outputs), tr.switch("zh", values)))
    drawn = updates[id(_by_elem(tr.switch_outputs, "run-speed"))]["value"]
    assert "tokens/s" not in drawn and re.search(r"每秒 [\d.]+ 个 token", drawn), drawn


def test_an_error_box_is_worded_again_in_the_new_language():
    *_, last = run_tab.run_ui("../../etc/passwd", "abc", "en")
    record, box = last[-2:]
    assert "not a checkpoint name" in box and record["where"] == "checkpoint"
    zh = common.error_again("zh", record)
    assert "不是检查点名称" in zh and "位置: checkpoint" in zh and "请从列表中选择名称" in zh
    assert common.error_again("en", record) == box  # and back, the same text as raised
    assert common.error_again("zh", None) is None


def _message_keys() -> list[str]:
    """The keys with values a UI error can word: fields that are not ``ui_error``'s own keywords
    (the Build hints' ``{where}`` is a prefix, not an error), and real fields, not a literal
    ``{kind: layernorm}`` in a fix."""
    out = []
    for key, (en, _) in STRINGS.items():
        fields = re.findall(r"\{(\w+)([^}]*)\}", en)
        if fields and all(" " not in spec for _, spec in fields) \
                and not {f for f, _ in fields} & {"where", "options", "fix"}:
            out.append(key)
    return out


@pytest.mark.parametrize("key", _message_keys())
def test_every_message_with_values_is_made_again_in_the_other_language(key):
    """Any of the UI's messages raised as an error (``ui_error``: its key is its message id) is
    worded in either language from its values, never from its text."""
    values = {f: 7 for f in re.findall(r"\{(\w+)", STRINGS[key][0])}  # 7: fits {n}, {x:.1f}, {n:,}
    en, zh = (x.format(**values) for x in STRINGS[key])
    exc = ui_error(ZooError, key, fix="err.limit_fix", **values)
    assert (exc.what, exc.fix) == (en, STRINGS["err.limit_fix"][0]) and exc.message_id == f"ui.{key}"
    assert error_text(exc, "zh") == (zh, STRINGS["err.limit_fix"][1])
    assert error_text(exc, "en") == (en, STRINGS["err.limit_fix"][0])


def _by_elem(components, elem_id):
    for c in components:
        if getattr(c, "elem_id", None) == elem_id:
            return c
    raise KeyError(elem_id)


def _run_controls(app):
    return [b for b in app.blocks.values() if getattr(b, "elem_id", None) in
            {f"run-{n.replace('_', '-')}" for n, _ in run_tab.ui_options()}]


def test_a_run_still_streaming_never_wipes_a_newer_message(app):  # app: its checkpoint folder
    """The Run button does not cancel its own earlier run: that run's later yields leave the error
    box alone (only its first yield clears it), so an error shown meanwhile stays."""
    steps = list(run_tab.run_ui("ui_gpt", "abc", "en", 8, 0.0, 0, 1.0))
    assert len(steps) > 2 and steps[0][-2:] == (None, "")
    assert all(s[-2:] == ({"__type__": "update"},) * 2 for s in steps[1:])


def test_the_interpret_tabs_errors_land_in_its_box_in_the_pages_language(app):
    """The Interpret views' errors are the tab's box (not a pop-up), kept for a switch like the others."""
    views = [f.fn for f in app.fns.values() if getattr(f.fn, "__name__", "") == "shown"]
    assert len(views) == 3  # lens, scores, patch
    *_, record, box = views[0]("zh", "ui_gpt", "")
    assert "请先输入文本" in box and "错误" in box
    assert "type some text first" in common.error_again("en", record)
    out, kept, record, box = views[0]("en", "ui_gpt", "abc")
    assert box == "" and record is None and kept == {"view": "lens", "args": ["ui_gpt", "abc"]} and out
