"""The Plugins tab: what ``zoo plugins`` shows — every plugin, where it came from, what it registered
and any error it raised while loading (a broken third-party plugin is listed here, never fatal)."""
from __future__ import annotations

import zoo
from zoo.commands.components import first_sentence

from .common import shown_paths
from .i18n import t

PLUGIN_HEADERS = ("col.plugin", "col.version", "col.source", "plugins.components", "col.status")
COMPONENT_HEADERS = ("col.family", "col.name", "col.plugin", "col.description")


def plugin_rows(lang: str = "en") -> list[list[str]]:
    rows = []
    for p in zoo.list_plugins():
        status = t("plugins.ok", lang) if not p.errors else "✗ " + shown_paths("; ".join(p.errors))
        rows.append([p.name, str(p.version), source_words(p.source, lang), ", ".join(p.components), status])
    return rows


def source_words(source: str, lang: str = "en") -> str:
    """Where a plugin came from (the registry's ``"builtin"`` or ``"distribution NAME"``) in ``lang``:
    the package's name stays as it is."""
    if source == "builtin":
        return t("plugins.builtin", lang)
    kind, _, name = source.partition(" ")
    return t("plugins.distribution", lang, name=name) if kind == "distribution" and name else source


def component_rows() -> list[list[str]]:
    rows = []
    for c in zoo.list_components():
        params = ", ".join(f"{k}={v}" for k, v in c.params().items())
        rows.append([c.family, c.name + (f" [{params}]" if params else ""), c.plugin, first_sentence(c.doc)])
    return rows


def _table(rows, headers):
    """A function of the language giving the table with translated headers (for the switch)."""
    def make(lang):
        import pandas as pd

        return pd.DataFrame(rows(lang), columns=[t(h, lang) for h in headers])

    make.i18n_keys = headers
    return make


def build(tr, lang_state) -> dict:
    import gradio as gr

    tr.add(gr.Markdown(tr("plugins.intro")), value="plugins.intro")
    plugins = gr.Dataframe(plugin_rows(tr.lang), headers=[tr(h) for h in PLUGIN_HEADERS],
                           label=tr("plugins.table"), interactive=False, wrap=True, elem_id="plugins-table")
    tr.add(plugins, label="plugins.table", value=_table(lambda lang: plugin_rows(lang), PLUGIN_HEADERS))
    comps = gr.Dataframe(component_rows(), headers=[tr(h) for h in COMPONENT_HEADERS],
                         label=tr("plugins.components"), interactive=False, wrap=True,
                         elem_id="plugins-components")
    tr.add(comps, label="plugins.components", value=_table(lambda lang: component_rows(), COMPONENT_HEADERS))
    return {"plugins": plugins, "components": comps}
