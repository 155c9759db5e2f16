"""The Verify tab: zoo's conformance kit (``zoo.testing``) as a pass / fail table with the measured
errors.

"Run the reference checks" runs the kit's fast cases over the whole registry (a few seconds): every
attention kernel against the naive per-query loop (no mask, causal, a boolean mask, a score bias,
queries that are a suffix of the keys, grouped-query heads), its fully masked rows (zeros, no NaN
in the gradients) and its weights (rows sum to 1, nothing on masked keys, ``out == weights @ v``);
every mask rule under a query offset (a KV cache); every position scheme in a decoder decoding with
a KV cache against the full forward.  They are the kit's own cases (:data:`FAST`), so the page, ``zoo
verify`` and a plugin's test suite hold every component to one contract.

The full kit (build, forward/backward, bf16, causality, padding, KV cache, save/load per
architecture) runs on demand for the selected components, its table streaming in as each check
finishes (it takes minutes for the whole registry on a CPU).
"""
from __future__ import annotations

import math
from typing import Any, Iterator

import zoo
from zoo.errors import ZooError

from .common import empty_table, handler
from .common import frame as common_frame
from .i18n import lang_code, t

#: family -> the kit checks "Run the reference checks" runs for each of its components (decoders only)
FAST: dict[str, tuple[str, ...]] = {
    "attention": ("reference", "masked_rows", "weights"),
    "mask": ("mask_offset",),
    "position": ("kv_cache",),
}
FAST_ARCHS = ("decoder",)


def fast_cases(kit) -> list:
    """The kit's cases of :data:`FAST` for every registered component of those families."""
    cases = []
    for family, checks in FAST.items():
        names = [c.key for c in kit.registry.list(family)]
        if names:
            cases += kit.cases(names, checks, FAST_ARCHS)
    return cases


def kernel_path(subject: str) -> str:
    """``fused sdpa`` or ``eager`` for an attention kernel whose description says so (the catalogue's
    kernels start theirs with ``[eager]`` / ``[fused sdpa]``; ``sdpa`` is fused by definition), else
    ``""``."""
    family, _, name = subject.partition(":")
    if family != "attention" or not name:
        return ""
    try:
        doc = zoo.get_registry().get("attention", name).doc or ""
    except ZooError:
        return ""
    for path in ("fused sdpa", "eager"):
        if doc.startswith(f"[{path}]"):
            return path
    return {"sdpa": "fused sdpa", "eager": "eager", "naive": "eager", "softcap": "eager"}.get(name, "")


def _kit_row(r: Any) -> dict:
    d = r.to_dict() if hasattr(r, "to_dict") else (r if isinstance(r, dict) else vars(r))
    return {"check": d.get("check", "conformance"), "subject": d.get("subject", ""),
            "case": d.get("case", ""), "reference": d.get("reference") or "zoo.testing",
            "error": d.get("error"), "tol": d.get("tol"), "status": str(d.get("status", "fail")),
            "note": d.get("note", "")}


def kit_available() -> bool:
    try:
        from zoo.testing import Kit  # noqa: F401
    except ImportError:
        return False
    return True


def kit_choices() -> list[str]:
    """``family:name`` of every registered component, for the conformance-kit selection."""
    return [f"{c.family}:{c.name}" for c in zoo.list_components()]


def run_all() -> list[dict]:
    """The fast reference checks (:func:`fast_cases`, a few seconds), as table rows."""
    from zoo.testing import Kit

    kit = Kit()
    return [_kit_row(kit.run(case)) for case in fast_cases(kit)]


def _fmt(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return str(x)
    return f"{x:.2e}" if x else "0"


#: The kit's fixed words for the checks this tab runs (zoo.testing.kit: a reference, a declared skip),
#: in 中文 -- issue 34: Verify's notes stayed English.  They are the kit's constants, looked up whole;
#: a text the kit words otherwise (a new check, a failure's measured message) is shown as written,
#: and tests/ui/test_ui_zh_complete.py runs the fast checks and requires a rendering for each.
KIT_ZH: dict[str, str] = {
    "naive per-query loop and F.scaled_dot_product_attention (GQA 4/2 heads, scale 0.6/sqrt(hd))":
        "朴素的逐查询循环与 F.scaled_dot_product_attention（GQA 4/2 个头，缩放 0.6/sqrt(hd)）",
    "full forward without cache": "不用缓存的完整前向",
    "arbitrary masks not supported (declared)": "已声明不支持任意掩码",
    "exact=False declared: not softmax attention, so not compared with the naive loop":
        "已声明 exact=False：不是 softmax 注意力，所以不与朴素循环对比",
    "returns_weights=False declared": "已声明 returns_weights=False（不返回注意力权重）",
    "supports_kv_cache=False declared": "已声明 supports_kv_cache=False（不支持 KV 缓存）",
    "bfloat16 not declared": "未声明支持 bfloat16",
    # the kernel path a subject's attention takes (kernel_path)
    "fused sdpa": "融合内核 sdpa",
    "eager": "逐算子 eager",
}


def kit_words(text: str, lang: str = "en") -> str:
    """A reference or note of the kit in ``lang`` (:data:`KIT_ZH`; otherwise as the kit wrote it)."""
    if lang_code(lang) == "zh":
        return KIT_ZH.get(text, text)
    return text


def table_rows(rows: list[dict], lang: str = "en") -> tuple[list[list], str]:
    label = {"pass": f"✓ {t('verify.pass', lang)}", "fail": f"✗ {t('verify.fail', lang)}",
             "skip": f"– {t('verify.skip', lang)}"}
    # the verdict first: it must be visible without scrolling a wide table
    shown = lambda s: f"{s} ({kit_words(kernel_path(s), lang)})" if kernel_path(s) else s  # noqa: E731 - fused or eager
    table = [[label.get(r["status"], r["status"]), r["check"], shown(r["subject"]), r["case"],
              kit_words(r["reference"], lang), _fmt(r["error"]), _fmt(r["tol"]),
              kit_words(r["note"], lang) if r["status"] != "pass" else ""] for r in rows]
    counted = [r for r in rows if r["status"] != "skip"]
    passed = sum(r["status"] == "pass" for r in counted)
    summary = t("verify.summary", lang, passed=passed, total=len(counted))
    skipped = len(rows) - len(counted)
    if skipped:
        summary += " " + t("verify.skipped", lang, n=skipped)
    return table, summary


@handler
def verify(lang: str = "en") -> tuple[list[list], str]:
    """Run the reference checks; returns (table rows, summary markdown)."""
    return table_rows(run_all(), lang)


def verify_kit_rows(names: list[str] | None = None) -> Iterator[tuple[list[dict], tuple[int, int] | None]]:
    """Run the conformance kit (``zoo.testing``) on the selected components: yields (rows so far,
    (checks done, checks in all)) every four checks and at the end; ``([], None)`` for no case."""
    from zoo.testing import Kit

    kit = Kit()
    cases = kit.cases(list(names) if names else None)
    rows: list[dict] = []
    for i, case in enumerate(cases):
        rows.append(_kit_row(kit.run(case)))
        if i % 4 == 3 or i == len(cases) - 1:
            yield list(rows), (i + 1, len(cases))
    if not cases:
        yield [], None


@handler
def verify_kit(names: list[str] | None = None, lang: str = "en") -> Iterator[tuple[list[list], str]]:
    """Run the conformance kit (``zoo.testing``) on the selected components, streaming the table as
    each check finishes."""
    for rows, progress in verify_kit_rows(names):
        table, summary = table_rows(rows, lang)
        yield table, (f"{summary} {t('verify.progress', lang, done=progress[0], total=progress[1])}"
                      if progress else summary)


HEADERS = ("col.result", "col.check", "col.subject", "col.case", "col.reference", "col.error",
           "col.tolerance", "col.note")


def build(tr, lang_state) -> dict:
    import gradio as gr
    import pandas as pd

    tr.add(gr.Markdown(tr("verify.intro")), value="verify.intro")
    go = tr.add(gr.Button(tr("verify.go"), variant="primary", elem_id="verify-go"), value="verify.go")
    with gr.Row(visible=kit_available()):
        names = tr.add(gr.Dropdown(kit_choices(), value=["attention:eager", "attention:sdpa"],
                                   multiselect=True, label=tr("verify.kit_names"), elem_id="verify-kit-names",
                                   scale=3), label="verify.kit_names")
        kit_go = tr.add(gr.Button(tr("verify.kit_go"), elem_id="verify-kit-go", scale=1), value="verify.kit_go")
    summary = gr.Markdown(elem_id="verify-summary")
    table = gr.Dataframe(headers=[tr(h) for h in HEADERS], label=tr("verify.table"), interactive=False,
                         wrap=True, elem_id="verify-table")
    # its handlers return frames with translated headers; empty, its headers follow a switch
    tr.add(table, label="verify.table", value=empty_table(HEADERS))
    kept = gr.State(None)  # the last run's rows (and progress): drawn again on a language switch
    tr.keep([table, summary], redraw, [kept])

    @handler
    def run(lang):
        rows = run_all()
        return (*shown(rows, lang), {"rows": rows})

    @handler
    def run_kit(selected: list | None, lang):
        for rows, progress in verify_kit_rows(selected):
            kept_now = {"rows": rows, "progress": progress}
            yield (*redraw(lang, kept_now), kept_now)

    go.click(run, inputs=[lang_state], outputs=[table, summary, kept], concurrency_limit=1,
             concurrency_id="verify", api_name="verify")
    kit_go.click(run_kit, inputs=[names, lang_state], outputs=[table, summary, kept], concurrency_limit=1,
                 concurrency_id="verify", api_name="verify_kit")
    return {"go": go, "table": table, "summary": summary, "kit_go": kit_go}


def frame(rows: list[list], lang: str = "en"):
    """Table rows (:func:`table_rows`) as a frame with headers in ``lang`` (:func:`ui.common.frame`)."""
    return common_frame(rows, HEADERS, lang)


def shown(rows: list[dict], lang: str = "en") -> tuple:
    """(table, summary) of kit rows in ``lang``."""
    table, summary = table_rows(rows, lang)
    return frame(table, lang), summary


def redraw(lang: str, kept: dict | None):
    """The last run (its kit rows and, for the full kit, ``progress`` (done, total)) in ``lang``."""
    if not kept:
        return None
    table, summary = shown(kept["rows"], lang)
    if kept.get("progress"):
        done, total = kept["progress"]
        summary = f"{summary} {t('verify.progress', lang, done=done, total=total)}"
    return table, summary
