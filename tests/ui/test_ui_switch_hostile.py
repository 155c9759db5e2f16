"""The language switch re-draws every kept output from the values the page holds (``Translator.keep``).
A component's value comes from the browser: a hostile client sends any text there (a textbox, a
dropdown with custom values) -- after Gradio's own preprocessing it is a string or None.  A
``gr.State`` is the server's (a client cannot write one; only a handler's return value can), so it
holds what a handler kept, or None before the first result.  A render then refuses with a
``ZooError`` (the output stays as it was, one line in the log, no traceback) or draws; it never fails
with an internal error (issue 34: the re-renders crashed on a hostile value and only the log showed
it, with a traceback that read as a bug)."""
from __future__ import annotations

import logging

import pytest

gr = pytest.importorskip("gradio")

from zoo.errors import ZooError  # noqa: E402

from ui_support import app_with_checkpoints  # noqa: E402

#: what a client can put in a text component, after Gradio's preprocessing
HOSTILE = (("None", None), ("empty", ""), ("spaces", "   \n\t "), ("number text", "12"), ("nan text", "nan"),
           ("yaml list", "[1, 2]"), ("yaml mapping", "{a: 1}"), ("bad yaml", "a: [\n"), ("yaml alias bomb",
           "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]"), ("path", "../../etc/passwd"), ("NUL", "a\x00b"),
           ("surrogate", "a\ud800b"), ("1M chars", "x" * 10**6), ("html", "<img src=x onerror=alert(1)>"),
           ("checkpoint-like", "ckpt:../x"), ("unicode", "床前明月光"))


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    with app_with_checkpoints(tmp_path_factory) as demo:
        yield demo


def _renders(app):
    tr = app.zoo_translator
    return [pytest.param(render, len(inputs), id=f"{i}-{getattr(render, '__name__', 'render')}")
            for i, (_, render, inputs) in enumerate(tr.kept)]


def test_every_kept_render_refuses_a_hostile_value_or_draws(app):
    tr, failures = app.zoo_translator, []
    assert len(tr.kept) >= 10  # every tab keeps its outputs
    for _, render, inputs in tr.kept:
        for slot, component in enumerate(inputs):
            values = [None] if isinstance(component, gr.State) else [v for _, v in HOSTILE]
            for value in values:
                args = [None] * len(inputs)
                args[slot] = value
                for lang in ("en", "zh"):
                    try:
                        render(lang, *args)
                    except ZooError:
                        pass  # a refusal: the output stays as it was
                    except Exception as exc:  # noqa: BLE001 - what the test is looking for
                        failures.append(f"{getattr(render, '__qualname__', render)} input {slot} "
                                        f"({type(component).__name__}) = {str(value)[:30]!r} ({lang}): "
                                        f"{type(exc).__name__}: {str(exc)[:120]}")
    assert not failures, "\n".join(dict.fromkeys(failures))


def test_the_switch_logs_a_refusal_in_one_line_and_switches(app, caplog):
    """The whole switch with every kept input hostile: one update per output, each refusal one
    warning line without a traceback (a bug in a render would still log its traceback)."""
    tr = app.zoo_translator
    for label, value in HOSTILE:
        values = [None if isinstance(c, gr.State) else value for c in tr.switch_inputs]
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="zoo.ui"):
            out = tr.switch("zh", values)
        assert len(out) == len(tr.switch_outputs), label
        assert not [r for r in caplog.records if r.exc_info], (label, [r.getMessage() for r in caplog.records])


def test_a_refusal_is_one_log_line_and_a_bug_keeps_its_traceback(caplog):
    from zoo.ui.i18n import Translator

    tr = Translator("en")
    with gr.Blocks():
        refused, broken, fine = gr.Markdown(""), gr.Markdown(""), gr.Markdown("")
        kept = gr.State(None)

        def refuse(lang, k):
            raise ZooError("the kept value is not a run", where="run")

        def bug(lang, k):
            raise TypeError("a bug")

        tr.keep([refused], refuse, [kept])
        tr.keep([broken], bug, [kept])
        tr.keep([fine], lambda lang, k: f"drawn {lang}", [kept])
    with caplog.at_level(logging.INFO, logger="zoo.ui"):
        out = tr.switch("zh", [{"x": 1}])
    assert out[-1]["value"] == "drawn zh" and "value" not in out[0] and "value" not in out[1]
    refusal = [r for r in caplog.records if "not a run" in r.getMessage()]
    assert len(refusal) == 1 and refusal[0].exc_info is None and refusal[0].levelno == logging.WARNING
    bugs = [r for r in caplog.records if r.exc_info]
    assert len(bugs) == 1 and "a bug" in str(bugs[0].exc_info[1])
