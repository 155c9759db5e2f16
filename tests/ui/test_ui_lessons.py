"""The Build tab shows the lesson of each chosen component (issue 25), in the page's language."""
import zoo
from zoo.ui import build_tab as b


def _with(text: str, **fields) -> str:
    for field, value in fields.items():
        text = b.set_field(text, field, value)
    return text


def test_chosen_components_show_their_lessons_in_the_page_language():
    reg = zoo.get_registry()
    text = _with(b.preset_yaml("gpt_tiny"), attention="talking_heads", positions="fire")
    for lang in ("en", "zh"):
        shown = b.lessons(text, lang)
        for fam, kind in (("attention", "talking_heads"), ("position", "fire")):
            lesson = " ".join(reg.get(fam, kind).lesson[lang].split())
            assert f"**{fam}: {kind}** — {lesson}" in shown, (lang, kind)
    assert b.lessons(text, "zh") != b.lessons(text, "en")


def test_no_lesson_no_text_and_an_invalid_spec_shows_nothing():
    assert b.lessons(b.preset_yaml("gpt_tiny"), "en") == ""  # sdpa, sinusoidal, layernorm: none
    assert b.lessons("arch: [", "en") == ""


def test_the_build_tab_wires_the_lessons_panel():
    from zoo.ui.app import build_app

    app = build_app()
    ids = {getattr(blk, "elem_id", None) for blk in app.blocks.values()}
    assert "build-lessons" in ids


def test_the_verify_table_says_which_kernels_are_fused_and_which_eager():
    """Issue 25: each attention kernel says fused (SDPA path) or eager, and the Verify tab lists it."""
    from zoo.ui import verify_tab as v

    reg = zoo.get_registry()
    table, _ = v.table_rows(v.run_all(), "en")
    shown = {row[2] for row in table}
    assert "attention:sdpa (fused sdpa)" in shown and "attention:eager (eager)" in shown
    for name in reg.names("attention"):
        doc = reg.get("attention", name).doc or ""
        for path in ("eager", "fused sdpa"):
            if doc.startswith(f"[{path}]"):
                assert f"attention:{name} ({path})" in shown, name
    assert any(s.startswith("mask:") and "(" not in s for s in shown)
