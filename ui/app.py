"""The Gradio app: one ``gr.Blocks`` composed of the tabs in this package.

    from zoo.ui.app import build_app, launch
    demo = build_app()            # nothing heavy happens at import; building the app reads the registry
    launch(demo, port=7860)       # 127.0.0.1 only, share=False, analytics off, offline theme

Each tab lives in its own module (:data:`TABS`: ``build_tab``, ``run_tab``, ``inspect_tab``,
``compare_tab``, ``verify_tab``, ``plugins_tab``) with plain handler functions (testable without a
browser) and a ``build(tr, lang_state)`` that lays out its components and wires its events.  The language switch re-labels every
component registered with the :class:`~zoo.ui.i18n.Translator`, and handlers read the language from
``lang_state`` for their messages.

The page must work with no network: the theme uses system fonts only (the default Gradio theme would
fetch Google Fonts), server-side rendering is off, and analytics are disabled before gradio is
imported.
"""
from __future__ import annotations

import os
from typing import Any

from .i18n import LANGS, Translator, lang_code

#: per-event concurrency: generation is the main load; everything else is cheap or rare
DEFAULT_CONCURRENCY = 2
QUEUE_MAX = 64

CSS = """
.zoo-diagram div { line-height: 1.3; }
footer { display: none !important; }
/* a plot's label floats over its top-left corner: keep the figure's own title below it */
.zoo-plot { padding-top: 34px !important; }
/* a tab's error box: invisible while empty, a red panel with where / problem / fix otherwise */
.zoo-error:has(strong) { border: 1px solid #dc2626; border-radius: 6px; padding: 6px 12px;
                         background: rgba(220, 38, 38, 0.08); }
/* Every table (a gr.Dataframe), one rule for all (issue 34).  Gradio 6 draws a Dataframe as a
   header <table> over rows of <div> cells: it lays the headers out once above a hidden copy of the
   rows (.sizing-body td), reads the column widths that gives and pins them, in pixels, on the
   headers and the rows.  So the widths are decided by that measurement, and what may break is
   decided by the min-content widths it sees: a header never wraps (it sets its column's least
   width); a hidden cell wraps between words only and keeps a CJK word whole ("通过" is one word;
   Gradio measures it unwrapped, so a long description made a column as wide as the window and the
   table 2,829 px wide); a shown cell wraps the same way, and breaks a word only when nothing else
   fits; a table whose words cannot all fit scrolls inside its box (Gradio's viewport).  (Rules for
   `td` styled only the hidden copy: they let every hidden cell break between any two letters, so
   the headers above them broke: "toleranc/e", "parameter/s", "通/过".) */
.gradio-container .table-container th.header-cell span.header { white-space: nowrap; word-break: keep-all;
                                                                 overflow-wrap: normal; }
.gradio-container .table-container .sizing-body td { white-space: normal; word-break: keep-all;
                                                     overflow-wrap: break-word; hyphens: none; }
.gradio-container .table-container .body-cell span.text { white-space: normal; word-break: keep-all;
                                                          overflow-wrap: break-word; hyphens: none; }
/* Every Markdown table (a committed experiment report, a model card), one rule for all: a cell wraps
   between words only (Gradio's prose lets it break anywhere: "varian/t", "212,86/4", "wd_1./0" in
   the 1280 px report, issue 34) and keeps a CJK word whole; a table whose words cannot all fit
   scrolls sideways inside its own box instead of breaking them */
.gradio-container .prose table { display: block; max-width: 100%; overflow-x: auto; }
.gradio-container .prose th, .gradio-container .prose td { overflow-wrap: normal; word-break: keep-all;
                                                           hyphens: none; }
.gradio-container .prose th { white-space: nowrap; }
/* the model card's code blocks wrap inside the card instead of being cut at its right edge */
#run-card pre, #run-card pre code { white-space: pre-wrap !important; overflow-wrap: anywhere; }
#run-card pre { overflow-x: auto; max-width: 100%; }
.zoo-stale { padding: 8px; border: 1px dashed #888; border-radius: 6px; opacity: 0.8; }
"""


def _offline_env() -> None:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("GRADIO_SSR_MODE", "False")


def theme():
    """The default Gradio look with system fonts, so the page never requests fonts from the web."""
    import gradio as gr

    return gr.themes.Default(font=["system-ui", "Noto Sans CJK SC", "sans-serif"],
                             font_mono=["ui-monospace", "monospace"])


#: The tabs, in order: (i18n key of the title, module of this package, element id).  A module has a
#: ``build(tr, lang_state) -> dict`` laying out its components; a new tab is one line here.
TABS: tuple[tuple[str, str, str], ...] = (
    ("tab.build", "build_tab", "tab-build"),
    ("tab.run", "run_tab", "tab-run"),
    ("tab.inspect", "inspect_tab", "tab-inspect"),
    ("tab.interp", "interp_tab", "tab-interp"),
    ("tab.compare", "compare_tab", "tab-compare"),
    ("tab.verify", "verify_tab", "tab-verify"),
    ("tab.experiments", "experiments_tab", "tab-experiments"),
    ("tab.plugins", "plugins_tab", "tab-plugins"),
)


def build_app(lang: str = "en") -> Any:
    """Build the whole UI as a ``gr.Blocks`` (queue configured); ``lang`` is the initial language."""
    _offline_env()
    import gradio as gr

    tr = Translator(lang)
    with gr.Blocks(title="zoo", analytics_enabled=False) as demo:
        lang_state = gr.State(tr.lang)
        switch = _header(tr)
        parts = _tabs(tr, lang_state)
        _wire_saved_models(parts, lang_state)
        _wire_language(tr, switch, lang_state)
    demo.queue(default_concurrency_limit=DEFAULT_CONCURRENCY, max_size=QUEUE_MAX)
    demo.zoo_translator = tr
    return demo


def _header(tr):
    """Title, language switch and introduction; returns the switch."""
    import gradio as gr

    with gr.Row():
        tr.add(gr.Markdown(f"## {tr('app.title')}", elem_id="app-title"), value="## {app.title}")
        switch = gr.Radio(list(LANGS), value=[k for k, v in LANGS.items() if v == tr.lang][0],
                          label=tr("app.language"), elem_id="lang-switch", scale=0, min_width=200)
        tr.add(switch, label="app.language")
    tr.add(gr.Markdown(tr("app.intro")), value="app.intro")
    return switch


def _tabs(tr, lang_state) -> dict[str, dict]:
    """Every tab of :data:`TABS`; returns each tab's components by its element id."""
    import importlib

    import gradio as gr

    parts = {}
    with gr.Tabs():
        for key, module, eid in TABS:
            with tr.add(gr.Tab(tr(key), id=eid, elem_id=eid), label=key):
                parts[eid] = importlib.import_module(f"{__package__}.{module}").build(tr, lang_state)
    return parts


def _wire_saved_models(parts: dict[str, dict], lang_state) -> None:
    """A model saved in Build appears at once in the checkpoint lists of the other tabs (the page's
    language goes along, so that a refusal of the lists' values reads in it)."""
    import gradio as gr

    from .common import checkpoint_names, handler
    from .compare_tab import sources

    @handler
    def refresh_lists(run_now, inspect_now, a_now, b_now, lang=None):
        names, srcs = checkpoint_names(), sources()
        keep = lambda cur, opts: cur if cur in opts else (opts[0] if opts else None)  # noqa: E731
        return (gr.update(choices=names, value=keep(run_now, names)),
                gr.update(choices=names, value=keep(inspect_now, names)),
                gr.update(choices=srcs, value=keep(a_now, srcs)),
                gr.update(choices=srcs, value=keep(b_now, srcs)))

    lists = [parts["tab-run"]["checkpoint"], parts["tab-inspect"]["checkpoint"], parts["tab-compare"]["a"],
             parts["tab-compare"]["b"]]
    for tab in ("tab-build", "tab-experiments"):
        parts[tab]["saved_event"].success(refresh_lists, inputs=lists + [lang_state], outputs=lists,
                                          api_visibility="private")


def _wire_language(tr, switch, lang_state) -> None:
    """The switch sets the language state, re-labels every component the translator knows and
    draws every output a handler already wrote again in the new language, from the data that handler
    kept (:meth:`Translator.keep`): a result made before the switch does not stay in the old one."""
    from .common import handler

    @handler
    def on_switch(choice: str | None, *kept):
        code = lang_code(LANGS.get(choice, choice))
        return [code] + tr.switch(code, kept)

    switch.change(on_switch, inputs=[switch] + tr.switch_inputs, outputs=[lang_state] + tr.switch_outputs,
                  show_progress="hidden", api_visibility="private")


def launch(demo=None, *, host: str = "127.0.0.1", port: int = 7860, block: bool = True,
           lang: str = "en", **kwargs: Any):
    """Start the server (``share=False`` always; analytics off; offline theme).  With
    ``block=False`` returns at once (tests), the server running in a thread."""
    _offline_env()
    demo = demo if demo is not None else build_app(lang)
    return demo.launch(server_name=host, server_port=port, share=False, inbrowser=False,
                       prevent_thread_lock=not block, show_error=True, ssr_mode=False,
                       # quiet: Gradio's banner ends with its "set share=True" hint, while zoo
                       # never shares; `zoo ui` prints the address itself
                       mcp_server=False, theme=theme(), css=CSS, quiet=True,
                       footer_links=["api"], **kwargs)
