"""The Interpret tab: the logit lens, head scores and activation patching of a checkpoint (issue 26).

Thin handlers over :mod:`zoo.inside.lens` and :mod:`zoo.inside.patching`; each returns one HTML heatmap whose
cells carry their numbers (hover a cell: its ``title`` reads layer, head or position, token and
value; ``data-*`` attributes hold the same for tests).  Text is encoded with the checkpoint's
tokenizer -- mostly unknown characters are refused, as the Run tab refuses them, some are a note
above the heatmap --; a checkpoint without one (``induction_2l``) takes token ids separated by spaces.
Choosing another checkpoint puts prompts that checkpoint can read in the boxes (:func:`examples_for`).

Sizes follow the model and the budget (``ui/budget.py``), never its shape: a text holds at most
``min(max_len capped per request, LIMITS["interp_tokens"])`` tokens, the logit lens's
``(L + 1) x T x V`` logits must fit the memory budget, and patching (``L x T`` forwards of ``T``
tokens) the work per request; the line under the picker says what that allows for the checkpoint.
"""
from __future__ import annotations

import html
from typing import Any

import torch

from . import budget
from .common import (LIMITS, check_text, checkpoint_names, default_checkpoint, error_box, error_outputs, handler,
                     inline_errors, load_checkpoint, raw, safe_markdown, show_result_js)
from .i18n import t, ui_error

KINDS = ("induction", "previous_token", "duplicate_token")

#: prompt pairs (clean, corrupted: one word changed), the first one a checkpoint's tokenizer reads
#: without unknown characters and in as many tokens for both is what the boxes show for it
PAIRS = (("The capital of France is", "The capital of Greece is"),
         ("床前明月光，疑是地上霜。", "床前明月光，疑是天上霜。"))
#: a checkpoint without a tokenizer reads ids (a repeat, for induction heads)
IDS = ([5, 17, 42, 8, 33, 5, 17, 42, 8], [5, 17, 42, 8, 34, 5, 17, 42, 8])


# ---------------------------------------------------------------------- inputs
def token_cap(model) -> int:
    """The most tokens a text may have here: the model's max_len capped per request
    (:func:`budget.room`) and at ``LIMITS["interp_tokens"]`` (a wider heatmap is unreadable)."""
    return min(budget.room(model).tokens, int(LIMITS["interp_tokens"]))


def patch_cap(model) -> int:
    """The most tokens patching may take: ``L x T + 3`` forwards of ``T`` tokens within the work
    per request (:func:`budget.check_work`), and :func:`token_cap`."""
    P, L = budget.parameters(model), model.spec.num_layers
    T = 1
    while T < token_cap(model) and budget.work(P, L * (T + 1) + 3, T + 1) <= LIMITS["request_flops"]:
        T += 1
    return T


def encode(model, text: Any, lang: str = "en", notes: list | None = None) -> tuple[torch.Tensor, list[str]]:
    """``(ids (1, T), token labels)`` of ``text``: the tokenizer's, or space-separated ids.  Mostly
    unknown characters are refused (:func:`zoo.run.input_contract.admit`, as the Run tab does); the
    note on some of them goes to ``notes``."""
    from zoo.errors import ZooError
    from zoo.run.input_contract import admit, route_notes

    text = check_text(text, lang)
    tok = getattr(model, "tokenizer", None)
    if tok is not None:
        with route_notes((notes if notes is not None else []).append):
            text = admit(model, tok, text, where="text", contract=False)
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
    cap = token_cap(model)
    if len(ids) < 2 or len(ids) > cap:
        if cap == model.spec.max_len:
            raise ui_error(ZooError, "interp.length", where="text", n=len(ids), max=cap)
        raise ui_error(ZooError, "interp.length_capped", where="text", n=len(ids), max=cap,
                       max_len=model.spec.max_len)
    if model.spec.arch == "encoder_decoder":
        raise ui_error(ZooError, "interp.one_stack", where="checkpoint")
    return torch.tensor([ids]), labels


# ---------------------------------------------------------------------- the heatmap
#: characters a cell would show as nothing, and what it shows instead
INVISIBLE = {"\n": "⏎", "\r": "␍", "\t": "⇥"}


def visible(token: str) -> str:
    """A token as a cell shows it: a newline as ⏎ (a lens whose top token is a newline left its
    column blank, issue 34), a carriage return as ␍, a tab as ⇥, a token of spaces as ␣ per space,
    an empty decoding as ∅; any other token as it is."""
    if token == "":
        return "∅"
    shown = "".join(INVISIBLE.get(ch, ch) for ch in token)
    return shown.replace(" ", "␣") if not shown.strip() else shown


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
    notes: list[str] = []
    ids, labels = encode(model, text, lang, notes)
    L, T, V = model.spec.num_layers, ids.size(1), model.spec.vocab_size
    elem = next(model.parameters()).element_size()
    budget.refuse_if_over((L + 1) * T * V * (elem + 4 + 1), "interp.lens_over", "text", "budget.too_many_fix",
                          L=L + 1, T=T, V=V)  # logits, probabilities and ranks of every layer
    lens = logit_lens(model, ids, top_k=1)
    tok = getattr(model, "tokenizer", None)
    dec = (lambda i: tok.decode([i])) if tok is not None else str
    top = lens.top_ids[:, 0, :, 0].tolist()  # (L + 1, T)
    cell = [[visible(dec(i)) for i in row] for row in top]
    rows = [t("interp.embed", lang)] + [t("interp.layer", lang, i=i) for i in range(model.spec.num_layers)]
    cols = [f"{j} {lab!r}" for j, lab in enumerate(labels)]
    return noted(notes, lang) + heatmap(lens.top_probs[:, 0, :, 0], rows, cols, cell, elem="interp-lens",
                                        title=t("interp.lens_title", lang))


@handler
def scores_view(name: str, text: str, kind: str, lang: str = "en") -> str:
    """Head scores (layer x head) on the text; ``induction`` on random tokens repeated twice when
    the text has no repeats."""
    from zoo.inside.lens import HEAD_KINDS, head_scores, induction_score

    model = load_checkpoint(name, lang)
    notes: list[str] = []
    ids, _ = encode(model, text, lang, notes)
    if kind not in HEAD_KINDS:
        from zoo.errors import ZooError
        raise ui_error(ZooError, "interp.unknown_kind", where="kind", options=list(HEAD_KINDS), kind=str(kind)[:80])
    repeats = ids[0].unique().numel() < ids.size(1)
    if kind == "induction" and not repeats:
        scores = induction_score(model, length=min(20, model.spec.max_len // 2))
        title = t("interp.scores_random", lang, kind=kind)
    else:
        scores = head_scores(model, ids, kind)
        title = t("interp.scores_title", lang, kind=kind)
    L, H = scores.shape
    return noted(notes, lang) + heatmap(scores, [t("interp.layer", lang, i=i) for i in range(L)],
                                        [t("interp.head", lang, i=h) for h in range(H)], elem="interp-scores",
                                        title=title)


@handler
def patch_view(name: str, clean: str, corrupted: str, lang: str = "en") -> str:
    """Patch the clean residual stream (``resid_pre`` of each layer, each position) into the
    corrupted run; the metric is the log-probability of the clean run's next token at the last
    position, scaled so 0 = corrupted, 1 = clean."""
    from zoo.errors import ZooError
    from zoo.inside.patching import patch_layers_positions

    model = load_checkpoint(name, lang)
    notes: list[str] = []
    a, labels = encode(model, clean, lang, notes)
    b, labels_b = encode(model, corrupted, lang, notes)
    if a.shape != b.shape:
        raise ui_error(ZooError, "interp.same_length", fix="interp.same_length_fix", where="corrupted",
                       a=a.size(1), b=b.size(1))
    L, T = model.spec.num_layers, a.size(1)  # L x T patched runs, a clean, a corrupted and a target run
    flops = budget.work(budget.parameters(model), L * T + 3, T)
    if flops > LIMITS["request_flops"]:
        raise ui_error(ZooError, "interp.patch_work", fix="interp.patch_fix", where="text", L=L, T=T,
                       forwards=L * T + 3, flops=f"{flops:.1e}", limit=f"{LIMITS['request_flops']:.0e}",
                       n=patch_cap(model))
    with torch.no_grad():
        target = model(a)[0, -1].argmax()

    def metric(logits):
        return logits[:, -1].log_softmax(-1)[:, target].mean()

    with torch.no_grad():
        hi, lo = float(metric(model(a))), float(metric(model(b)))
    res = patch_layers_positions(model, a, b, metric)
    frac = (res - lo) / (hi - lo) if abs(hi - lo) > 1e-6 else res * 0
    cols = [f"{j} {x!r}" + ("" if x == y else f"/{y!r}") for j, (x, y) in enumerate(zip(labels, labels_b))]
    return noted(notes, lang) + heatmap(frac, [t("interp.layer", lang, i=i) for i in range(model.spec.num_layers)],
                                        cols, elem="interp-patch", signed=True,
                                        title=t("interp.patch_title", lang, lo=lo, hi=hi))


def noted(notes: list[str], lang: str = "en") -> str:
    """The notes on a text (characters read as <unk>) as lines above a heatmap."""
    return "".join(f"<div class='zoo-interp-note'>⚠ {html.escape(t('run.note', lang))}: {html.escape(n)}</div>"
                   for n in dict.fromkeys(notes))


# ---------------------------------------------------------------------- another checkpoint
def examples_for(model) -> tuple[str, str]:
    """Clean and corrupted prompts ``model`` reads: ids for a checkpoint without a tokenizer, else
    the first of :data:`PAIRS` its tokenizer reads without unknown characters, in as many tokens
    for both and at least two; else empty boxes (the user types)."""
    from zoo.run.input_contract import unknown_characters

    tok = getattr(model, "tokenizer", None)
    if tok is None:
        V = model.spec.vocab_size
        return tuple(" ".join(str(i % V) for i in ids) for ids in IDS)
    cap = token_cap(model)
    for clean, corrupted in PAIRS:
        if any(unknown_characters(tok, x)[0] for x in (clean, corrupted)):
            continue
        n = len(tok.encode(clean))
        if n == len(tok.encode(corrupted)) and 2 <= n <= cap:
            return clean, corrupted
    return "", ""


def room_note(model, name: str, lang: str = "en") -> str:
    """The line under the picker: what this checkpoint may be asked here (tokens, patching)."""
    r = budget.room(model)
    line = t("interp.room", lang, name=name, L=model.spec.num_layers, max_len=model.spec.max_len,
             cap=token_cap(model), patch=patch_cap(model))
    return safe_markdown(line + (" " + budget.cap_text(r, lang) if r.capped else ""))


@inline_errors(5, kept=True)
def on_checkpoint(name, lang):
    """Another checkpoint: prompts it can read in both boxes, its line, and the old heatmap gone
    (it belonged to the other model).  Outputs: clean, corrupted, line, heatmap, kept view."""
    import gradio as gr

    if not name:
        return gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
    model = load_checkpoint(name, lang)
    clean, corrupted = examples_for(model)
    return clean, corrupted, room_note(model, name, lang), "", None


def room_again(lang: str, name) -> str | None:
    """The line under the picker in ``lang`` (None when the checkpoint cannot be opened: the error
    box says why)."""
    from zoo.errors import ZooError

    try:
        return room_note(load_checkpoint(name, lang), name, lang) if name else None
    except ZooError:
        return None


def _first(name, lang: str = "en") -> tuple[tuple[str, str], str]:
    """The boxes and the line for the checkpoint the tab starts on."""
    from zoo.errors import ZooError

    try:
        model = load_checkpoint(name, lang)
        return examples_for(model), room_note(model, name, lang)
    except ZooError:
        return tuple(" ".join(map(str, ids)) for ids in IDS), ""


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
.zoo-interp-note { margin: 2px 0; }
"""


#: Scrolls the tab's error box (when it holds a message) or its result to the top of the window.
SHOW_RESULT_JS = show_result_js("#interp-out", error="#interp-error")


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
    (example, corrupted), line = _first(default, tr.lang) if default else (("", ""), "")
    ui["room"] = gr.Markdown(line, elem_id="interp-room")  # what this checkpoint may be asked here
    ui["text"] = tr.add(gr.Textbox(example, label=tr("interp.text"), elem_id="interp-text",
                                   max_length=LIMITS["text_chars"]), label="interp.text")
    with gr.Row():
        ui["lens"] = tr.add(gr.Button(tr("interp.lens"), elem_id="interp-lens-go"), value="interp.lens")
        ui["kind"] = tr.add(gr.Dropdown(list(KINDS), value="induction", label=tr("interp.kind"),
                                        elem_id="interp-kind"), label="interp.kind")
        ui["scores"] = tr.add(gr.Button(tr("interp.scores"), elem_id="interp-scores-go"), value="interp.scores")
    with gr.Row():
        ui["corrupted"] = tr.add(gr.Textbox(corrupted, label=tr("interp.corrupted"), elem_id="interp-corrupted",
                                            max_length=LIMITS["text_chars"]), label="interp.corrupted")
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
    views = []
    for view, inputs in asked.items():
        @inline_errors(2, kept=True)
        def shown(lang, *values, _view=view):
            return raw(VIEWS[_view])(*values, lang=lang), {"view": _view, "args": list(values)}
        # the result sits below the buttons, under the fold of a 1280x800 window: bring it (or the
        # error box) into view as the click starts -- its progress shows there -- and when it lands
        ui[view].click(None, js=SHOW_RESULT_JS)
        views.append(ui[view].click(shown, inputs=[lang_state] + inputs,
                                    outputs=[ui["out"], ui["kept"], *error_outputs(ui["error"])],
                                    api_visibility="private"))
        views[-1].then(None, js=SHOW_RESULT_JS)
    tr.keep([ui["out"]], redraw, [ui["kept"]])
    # another checkpoint: prompts it reads, its line, no stale heatmap (a view still running stops)
    ui["checkpoint"].change(on_checkpoint, inputs=[ui["checkpoint"], lang_state],
                            outputs=[ui["text"], ui["corrupted"], ui["room"], ui["out"], ui["kept"],
                                     *error_outputs(ui["error"])],
                            cancels=views, api_visibility="private")
    tr.keep([ui["room"]], room_again, [ui["checkpoint"]])
    return ui
