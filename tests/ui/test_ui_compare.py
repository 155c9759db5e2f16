"""The Compare tab's handler (issue 34, a newcomer's third hour): a hostile sequence length is a
refusal naming the field in the page's language, never an internal error; and the output difference,
a property of the pair, is shown once."""
from __future__ import annotations

import math

import pytest

gr = pytest.importorskip("gradio")

from zoo.errors import ZooError, ZooInternalError  # noqa: E402
from zoo.ui import common, compare_tab  # noqa: E402
from zoo.ui.i18n import format_error  # noqa: E402

GPT = compare_tab.PRESET + "gpt_tiny"
#: what a browser or an HTTP client can send for the length, and what the refusal quotes of it
HOSTILE = [("abc", "'abc'"), ("1e400", "'1e400'"), (float("nan"), "NaN"), (float("inf"), "inf"),
           ([1, 2], "list"), (None, "nothing"), (True, "bool"), (3.5, "float"), ({"n": 8}, "dict")]
#: the headings and the contract's words of the refusal, per language
WORDS = {"en": ("Where: seq_len", "seq_len must be a whole number, got", "Fix: send a whole number for seq_len"),
         "zh": ("位置: seq_len", "seq_len 应为整数，实际是", "修改建议: 请为 seq_len 给出整数")}


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("value,quoted", HOSTILE, ids=[repr(v) for v, _ in HOSTILE])
def test_a_hostile_sequence_length_is_a_refusal_in_the_pages_language(value, quoted, lang):
    with pytest.raises(ZooError) as err:
        compare_tab.measure(GPT, "", GPT, "", value, "", lang)
    assert not isinstance(err.value, ZooInternalError)  # the user's value, not a bug of ours
    assert err.value.where == "seq_len"
    text = format_error(err.value, lang)
    where, what, fix = WORDS[lang]
    said = f"{what} {quoted}"
    if value is None:  # an empty field is said, not quoted as a value ("实际是 nothing", issue 34)
        said = {"en": "seq_len must be a whole number, got nothing", "zh": "seq_len 应为整数，但没有给出值"}[lang]
    assert where in text and said in text and fix in text, text


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_tabs_click_shows_the_refusal_in_its_error_box(lang):
    """The tab's own event (inline_errors): the box holds where / problem / fix, the table stays."""
    @common.inline_errors(3)
    def compare_ui(n, lang):
        data = compare_tab.measure(GPT, "", GPT, "", n, "", lang)
        return (*compare_tab.redraw(lang, data), data)

    out = compare_ui("abc", lang)
    assert all(isinstance(o, type(gr.skip())) for o in out[:3])
    assert WORDS[lang][1] in out[3] and "内部" not in out[3] and "inside zoo" not in out[3], out[3]


def test_the_length_still_takes_what_a_number_box_sends():
    assert common.check_value("seq_len", 8.0, "compare_seq_len", kind="int") == 8
    assert type(common.check_value("seq_len", 8.0, "compare_seq_len", kind="int")) is int
    with pytest.raises(ZooError, match="at least 1"):
        compare_tab.measure(GPT, "", GPT, "", 0, "")
    with pytest.raises(ZooError, match="limit of 1024"):
        compare_tab.measure(GPT, "", GPT, "", 10 ** 6, "")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_output_difference_is_shown_once_under_b(lang):
    rows, _ = compare_tab.compare(GPT, "", GPT, "norm: {kind: layernorm, placement: post}", 8, lang=lang)
    key = {"en": "max |A − B| of outputs", "zh": "输出最大绝对差 |A − B|"}[lang]
    (diff,) = [r for r in rows if r[0] == key]
    assert diff[1] == "—"
    assert math.isfinite(float(diff[2])) and float(diff[2]) > 1e-2  # post-norm differs from pre-norm
