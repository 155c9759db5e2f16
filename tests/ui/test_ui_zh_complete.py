"""No English left under 中文 (issue 34, goal 5) where the page words things itself: the Verify
tab's references and notes (the kit's fixed words), a converted checkpoint's parity line.  The
browser walk of every tab, table cells included, is tests/ui/test_ui_browser_third_hour.py."""
from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("gradio")

from zoo.ui import run_tab, verify_tab  # noqa: E402

#: three English words in a row (as the browser walk reads a sentence)
ENGLISH = re.compile(r"[A-Za-z]{2,}(?:[ '’-]+[A-Za-z]{2,}){2,}")
CERT = {"reference": "transformers GPT2LMHeadModel", "max_abs_diff": 1.9e-06, "mean_abs_diff": 2.1e-07,
        "top1_agreement": 1.0, "dtype": "float32", "probe": "2 x 16 random tokens", "zoo": "0.9.0",
        "torch": "2.13.0", "date": "2026-12-01"}


def test_verify_reference_and_notes_read_in_chinese():
    rows = verify_tab.run_all()
    assert {r["status"] for r in rows} >= {"pass", "skip"}  # both kinds of row are on the table
    table, _ = verify_tab.table_rows(rows, "zh")
    left = sorted({cell for row in table for cell in (row[4], row[7]) if ENGLISH.search(cell)})
    assert not left, left
    en, _ = verify_tab.table_rows(rows, "en")  # English is the kit's own words, unchanged
    assert [r[4] for r in en] == [r["reference"] for r in rows]


def test_a_parity_line_reads_in_chinese_and_english_is_the_engines():
    from zoo.convert import certificate_text

    meta = {"zoo.extra.parity": json.dumps(CERT), "zoo.extra.converted_from": "{}"}
    assert run_tab.certificate_line(meta, "en") == certificate_text(meta)
    zh = run_tab.certificate_line(meta, "zh")
    assert zh.startswith("与 transformers GPT2LMHeadModel 对拍") and "100.0%" in zh and "1.90e-06" in zh
    assert not ENGLISH.search(zh), zh


def test_uncertified_and_gguf_conversions_read_in_chinese():
    from zoo.convert import certificate_text

    plain = {"zoo.extra.converted_from": json.dumps({"architectures": ["GPT2LMHeadModel"]})}
    assert run_tab.certificate_line(plain, "en") == certificate_text(plain)
    assert "没有对拍证书" in run_tab.certificate_line(plain, "zh")
    gguf = {"zoo.extra.converted_from": json.dumps({
        "architectures": ["gguf:llama"], "source": "smollm2-135m.Q4_1.gguf", "gguf_name": "SmolLM2 135M",
        "file_type": "Q4_1", "quant_types": {"Q4_1": 210, "F32": 61, "Q8_0": 1}})}
    en, zh = run_tab.certificate_line(gguf, "en"), run_tab.certificate_line(gguf, "zh")
    assert en == certificate_text(gguf) and "Q4_1 x 210" in en
    assert "GGUF 文件 smollm2-135m.Q4_1.gguf" in zh and "架构 llama" in zh and "Q4_1 x 210, F32 x 61, Q8_0 x 1" in zh
    assert not ENGLISH.search(zh), zh
    assert run_tab.certificate_line({}, "zh") is None  # a model zoo made itself has no such line


def test_the_last_english_words_a_tab_showed_under_chinese():
    """The newcomer walk's leftovers (issue 34): Verify's kernel path "(fused sdpa)" / "(eager)", the
    Plugins table's source "builtin", an empty field's "实际是 nothing", the "Logit lens" button."""
    from zoo.ui import common, plugins_tab
    from zoo.ui.i18n import t

    table, _ = verify_tab.table_rows(verify_tab.run_all(), "zh")
    subjects = {row[2] for row in table}
    assert "attention:sdpa (融合内核 sdpa)" in subjects and "attention:eager (逐算子 eager)" in subjects
    sources = {row[2] for row in plugins_tab.plugin_rows("zh")}
    assert "内置" in sources and "builtin" not in sources
    assert {row[2] for row in plugins_tab.plugin_rows("en")} >= {"builtin"}  # English as the registry says
    assert plugins_tab.source_words("distribution zoo-linear-attention", "zh") == "安装包 zoo-linear-attention"
    with pytest.raises(Exception) as info:
        common._check_type("run.max_new_tokens", "max_new_tokens", "int", None)
    from zoo.ui.i18n import format_error

    zh, en = format_error(info.value, "zh"), format_error(info.value, "en")
    assert "没有给出值" in zh and "nothing" not in zh, zh
    assert "got nothing" in en
    assert t("interp.lens", "zh") != t("interp.lens", "en") and "逐层" in t("interp.lens", "zh")


def test_every_table_of_the_page_has_its_headers_in_chinese_after_the_switch_before_any_result():
    """Every gr.Dataframe's headers follow the switch while it is still empty (issue 34: Compare's
    "metric / Model A / Model B" and Verify's eight headers stayed English until a first result;
    the Experiments tables were fixed one by one before -- now ui.common.empty_table serves all)."""
    import gradio as gr

    from zoo.ui.app import build_app

    demo = build_app()
    tr = demo.zoo_translator
    updates = dict(zip(map(id, tr.switch_outputs), tr.switch("zh", [None] * len(tr.switch_inputs))))
    tables = [b for b in demo.blocks.values() if isinstance(b, gr.Dataframe)]
    assert len(tables) >= 6, [getattr(b, "elem_id", None) for b in tables]
    left = {}
    for table in tables:
        if getattr(table, "elem_id", None) == "interp-lens" or not ENGLISH_HEADER(table):
            continue
        value = (updates.get(id(table)) or {}).get("value")
        columns = list(getattr(value, "columns", []) if value is not None else [])
        english = [c for c in columns if re.fullmatch(r"[A-Za-z][A-Za-z |()]{2,}", str(c))]
        if not columns or english:
            left[table.elem_id] = columns or "no value on the switch"
    assert not left, left


def ENGLISH_HEADER(table) -> bool:
    """Whether the table was drawn with headers of words (a calculator's numeric matrix has none)."""
    headers = (table.value or {}).get("headers") if isinstance(table.value, dict) else None
    return bool(headers) and any(re.search(r"[A-Za-z]{3,}", str(h)) for h in headers)
