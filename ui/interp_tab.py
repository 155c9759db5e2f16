"""The Interpret tab: the logit lens, head scores and activation patching of a checkpoint (issue 26).

Thin handlers over :mod:`zoo.inside.lens` and :mod:`zoo.inside.patching`; each returns one HTML heatmap whose
cells carry their numbers (hover a cell: its ``title`` reads layer, head or position, token and
value; ``data-*`` attributes hold the same for tests).  Text is encoded with the checkpoint's
tokenizer; a checkpoint without one (``induction_2l``) takes token ids separated by spaces.
"""
from __future__ import annotations

import html
from typing import Any

import torch

from .common import (check_text, checkpoint_names, default_checkpoint, error_box, error_outputs, handler,
                     inline_errors, load_checkpoint, raw)
from .i18n import t, ui_error

KINDS = ("induction", "previous_token", "duplicate_token")


# ---------------------------------------------------------------------- inputs
def encode(model, text: Any, lang: str = "en") -> tuple[torch.Tensor, list[str]]:
    """``(ids (1, T), token labels)`` of ``text``: the tokenizer's, or space-separated ids."""
    from zoo.errors import ZooError

    text = check_text(text, lang)
    tok = getattr(model, "tokenizer", None)
    if tok is not None:
        ids = tok.encode(text)
        labels = [tok.decode([i]) for i in ids]
    else:
        try:
            ids = [int(x) for x in text.replace(",", " ").split()]
        except ValueError:
            raise ui_error(ZooError, "interp.ids_only", fix="interp.ids_fix", where="text") from None
        if any(not 0 <= i < model.spec.vocab_size for i in ids):
            raise ui_error(ZooError, "interp.ids_range", where="text", v=model.spec.vocab_size)
        labels = [str(i) for i in ids]
    if len(ids) < 2 or len(ids) > model.spec.max_len:
        raise ZooError(t("interp.length", lang, n=len(ids), max=model.spec.max_len), where="text")
    if model.spec.arch == "encoder_decoder":
        raise ui_error(ZooError, "interp.one_stack", where="checkpoint")
    return torch.tensor([ids]), labels


# ---------------------------------------------------------------------- the heatmap
def heatmap(values: torch.Tensor, rows: list[str], cols: list[str], cell_text=None, *, elem: str,
            title: str, signed: bool = False, fmt: str = "{:.3f}") -> str:
    """An HTML table, one coloured cell per value (blue positive, red negative when ``signed``)."""
    v = values.detach().float().cpu()
    lim = float(v.abs().max()) or 1.0
    out = [f"<div class='zoo-interp' id='{elem}-table'><div class='zoo-interp-title'>{html.escape(title)}</div>",
           "<table><tr><th></th>" + "".join(f"<th class='col'>{html.escape(c)}</th>" for c in cols) + "</tr>"]
    for r, name in enumerate(rows):
        cells = []
        for c, col in enumerate(cols):
            x = float(v[r, c])
            a = min(1.0, abs(x) / lim)
            rgb = "37, 99, 235" if x >= 0 or not signed else "220, 38, 38"
            label = cell_text[r][c] if cell_text is not None else fmt.format(x)
            tip = f"{name} · {col} · {fmt.format(x)}"
            cells.append(f"<td class='cell' data-r='{r}' data-c='{c}' data-v='{x:.6f}' title='{html.escape(tip, quote=True)}'"
                         f" style='background: rgba({rgb}, {a:.3f})'>{html.escape(label)}</td>")
        out.append(f"<tr><th class='row'>{html.escape(name)}</th>{''.join(cells)}</tr>")
    return "\n".join(out) + "</table></div>"


# ---------------------------------------------------------------------- handlers
@handler
def lens_view(name: str, text: str, lang: str = "en") -> str:
    """The logit lens: top token (and its probability) after the embeddings and each layer, at each
    position."""
    from zoo.inside.lens import logit_lens

    model = load_checkpoint(name, lang)
    ids, labels = encode(model, text, lang)
    lens = logit_lens(model, ids, top_k=1)
    tok = getattr(model, "tokenizer", None)
    dec = (lambda i: tok.decode([i])) if tok is not None else str
    top = lens.top_ids[:, 0, :, 0].tolist()  # (L + 1, T)
    cell = [[dec(i) for i in row] for row in top]
    rows = [t("interp.embed", lang)] + [t("interp.layer", lang, i=i) for i in range(model.spec.num_layers)]
    cols = [f"{j} {lab!r}" for j, lab in enumerate(labels)]
    return heatmap(lens.top_probs[:, 0, :, 0], rows, cols, cell, elem="interp-lens",
                   title=t("interp.lens_title", lang))


@handler
def scores_view(name: str, text: str, kind: str, lang: str = "en") -> str:
    """Head scores (layer x head) on the text; ``induction`` on random tokens repeated twice when
    the text has no repeats."""
    from zoo.inside.lens import HEAD_KINDS, head_scores, induction_score

    model = load_checkpoint(name, lang)
    ids, _ = encode(model, text, lang)
    if kind not in HEAD_KINDS:
        from zoo.errors import ZooError
        raise ZooError(f"unknown kind '{kind}'", where="kind", options=list(HEAD_KINDS))
    repeats = ids[0].unique().numel() < ids.size(1)
    if kind == "induction" and not repeats:
        scores = induction_score(model, length=min(20, model.spec.max_len // 2))
        title = t("interp.scores_random", lang, kind=kind)
    else:
        scores = head_scores(model, ids, kind)
        title = t("interp.scores_title", lang, kind=kind)
    L, H = scores.shape
    return heatmap(scores, [t("interp.layer", lang, i=i) for i in range(L)],
                   [t("interp.head", lang, i=h) for h in range(H)], elem="interp-scores", title=title)


@handler
def patch_view(name: str, clean: str, corrupted: str, lang: str = "en") -> str:
    """Patch the clean residual stream (``resid_pre`` of each layer, each position) into the
    corrupted run; the metric is the log-probability of the clean run's next token at the last
    position, scaled so 0 = corrupted, 1 = clean."""
    from zoo.errors import ZooError
    from zoo.inside.patching import patch_layers_positions

    model = load_checkpoint(name, lang)
    a, labels = encode(model, clean, lang)
    b, labels_b = encode(model, corrupted, lang)
    if a.shape != b.shape:
        raise ui_error(ZooError, "interp.same_length", fix="interp.same_length_fix", where="corrupted",
                       a=a.size(1), b=b.size(1))
    with torch.no_grad():
        target = model(a)[0, -1].argmax()

    def metric(logits):
        return logits[:, -1].log_softmax(-1)[:, target].mean()

    with torch.no_grad():
        hi, lo = float(metric(model(a))), float(metric(model(b)))
    res = patch_layers_positions(model, a, b, metric)
    frac = (res - lo) / (hi - lo) if abs(hi - lo) > 1e-6 else res * 0
    cols = [f"{j} {x!r}" + ("" if x == y else f"/{y!r}") for j, (x, y) in enumerate(zip(labels, labels_b))]
    return heatmap(frac, [t("interp.layer", lang, i=i) for i in range(model.spec.num_layers)], cols,
                   elem="interp-patch", signed=True,
                   title=t("interp.patch_title", lang, lo=lo, hi=hi))


#: the views of the tab, by the name kept for a language switch
VIEWS = {"lens": lens_view, "scores": scores_view, "patch": patch_view}


def redraw(lang: str, kept: dict | None) -> str | None:
    """The last view asked for, again, in ``lang`` (None before the first)."""
    if not kept:
        return None
    return raw(VIEWS[kept["view"]])(*kept["args"], lang=lang)


# ---------------------------------------------------------------------- layout
CSS = """
.zoo-interp table { border-collapse: collapse; font-size: 12px; }
.zoo-interp td.cell { border: 1px solid #ddd; padding: 2px 6px; text-align: center; min-width: 34px; }
.zoo-interp td.cell:hover { border-color: #f43f5e; }
.zoo-interp th { font-weight: normal; padding: 2px 6px; white-space: nowrap; }
.zoo-interp-title { font-weight: 600; margin: 4px 0; }
"""


def build(tr, lang_state) -> dict:
    """Create the tab (inside an open ``gr.Tab``)."""
    import gradio as gr

    ui: dict = {}
    names = checkpoint_names()
    default = "induction_2l" if "induction_2l" in names else default_checkpoint(names)
    tr.add(gr.Markdown(tr("interp.intro")), value="interp.intro")
    ui["checkpoint"] = tr.add(gr.Dropdown(names, value=default, label=tr("run.checkpoint"),
                                          elem_id="interp-checkpoint", allow_custom_value=True),
                              label="run.checkpoint")
    example = " ".join(str(i) for i in [5, 17, 42, 8, 33, 5, 17, 42, 8])
    ui["text"] = tr.add(gr.Textbox(example, label=tr("interp.text"), elem_id="interp-text"), label="interp.text")
    with gr.Row():
        ui["lens"] = tr.add(gr.Button(tr("interp.lens"), elem_id="interp-lens-go"), value="interp.lens")
        ui["kind"] = tr.add(gr.Dropdown(list(KINDS), value="induction", label=tr("interp.kind"),
                                        elem_id="interp-kind"), label="interp.kind")
        ui["scores"] = tr.add(gr.Button(tr("interp.scores"), elem_id="interp-scores-go"), value="interp.scores")
    with gr.Row():
        ui["corrupted"] = tr.add(gr.Textbox(" ".join(str(i) for i in [5, 17, 42, 8, 34, 5, 17, 42, 8]),
                                            label=tr("interp.corrupted"), elem_id="interp-corrupted"),
                                 label="interp.corrupted")
        ui["patch"] = tr.add(gr.Button(tr("interp.patch"), variant="primary", elem_id="interp-patch-go"),
                             value="interp.patch")
    ui["error"] = error_box("interp-error", tr)  # a view's error, in the page's language (it follows a switch)
    ui["out"] = gr.HTML(elem_id="interp-out")
    ui["css"] = gr.HTML(f"<style>{CSS}</style>", visible=True, elem_id="interp-css")
    # what was asked last (the view and its inputs): a language switch draws it again in the new
    # language (the tiny models here answer in well under a second)
    ui["kept"] = gr.State(None)
    asked = {"lens": [ui["checkpoint"], ui["text"]], "scores": [ui["checkpoint"], ui["text"], ui["kind"]],
             "patch": [ui["checkpoint"], ui["text"], ui["corrupted"]]}
    for view, inputs in asked.items():
        @inline_errors(2, kept=True)
        def shown(lang, *values, _view=view):
            return raw(VIEWS[_view])(*values, lang=lang), {"view": _view, "args": list(values)}
        ui[view].click(shown, inputs=[lang_state] + inputs, outputs=[ui["out"], ui["kept"],
                                                                   *error_outputs(ui["error"])],
                       api_visibility="private")
    tr.keep([ui["out"]], redraw, [ui["kept"]])
    return ui
