"""The Run tab: text in, text out, from a shipped or saved checkpoint.

- decoder-only: the continuation streams in as it is generated (``zoo.run.generate.stream_text``) with the
  sampling controls (temperature, top-k, top-p, max new tokens, seed, repetition penalty);
- encoder-decoder: the same, from the source text to the target text;
- encoder with an MLM head: fill-mask, the top candidates for each ``<mask>`` position.
- a checkpoint that carries a chat template: a chat mode below (``ui/chat_panel.py``), the
  conversation rendered with the template, the reply streamed, the rendered prompt on demand.

Checkpoints are chosen by name only (``ui.common.checkpoint_path``); sizes are bounded by
``ui.common.LIMITS``.  Limits come from the model and the budget (``ui/budget.py``): "max new tokens"
is capped by what the model's ``max_len`` -- or, for a long one, this UI's tokens per request --
leaves after the prompt (the slider's range follows the chosen checkpoint, the card says why, and
a run never asks for more than fits), so every shipped checkpoint runs from its example with one
click and a released model (30 layers, max_len 8192) opens as it is.
Errors stay in the tab's error box, with where / problem / fix, until the next run.
"""
from __future__ import annotations

import json
import re
import time
from typing import Any, Iterator

import zoo

from zoo.commands.run import DEFAULT_NEW_TOKENS, prompt_tokens
from zoo.convert import certificate, certificate_text

from . import budget, chat_panel
from .common import (LIMITS, check_text, check_value, checkpoint_names, checkpoint_path,
                     default_checkpoint, error_box, error_outputs, handler, inline_errors, load_checkpoint, raw,
                     safe_markdown, show_result_js, shown_paths)
from .controls import UI_DEFAULTS, sampling_options, ui_options
from .i18n import STRINGS, cause_text, contract_words, lang_code, t, ui_error

from zoo.run.input_contract import META_KEY as CONTRACT_KEY, InputContract, route_notes

#: one example per shipped checkpoint: clicking it picks the checkpoint and runs the prompt
EXAMPLES = {"poet_gpt": "床前明月光，", "poet_bert": "床前明<mask>光，疑是地上霜。", "numerals_t5": "10086"}


def _tokenizer(model, lang: str):
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        raise ui_error(zoo.TokenizerError, "run.no_tokenizer", fix="run.no_tokenizer_fix", where="checkpoint")
    return tok


@handler
def model_card(name: str, lang: str = "en") -> str:
    """A short description of checkpoint ``name``: its spec, size, tokenizer and stored card."""
    if not name:
        return ""
    path = checkpoint_path(name, lang)
    spec = zoo.load_spec(path)
    meta = zoo.read_metadata(path)
    lines = [f"**{name}** — `{spec.arch}`, d_model {spec.d_model}, vocab {spec.vocab_size}, "
             f"max_len {spec.max_len}"]
    for role in spec.roles:
        st = spec.stack(role)
        lines.append(f"- {role}: {st.num_layers} × ({t('run.card_heads', lang, n=st.num_heads)}, {st.attention}, "
                     f"{' & '.join(map(str, st.mask))}, {st.positions}, {st.norm}/{st.placement}, {st.ffn})")
    tok = meta.get("zoo.tokenizer")
    if tok:
        try:
            kind = json.loads(tok).get("kind", "?")
        except ValueError:
            kind = "?"
        lines.append(f"- tokenizer: `{kind}`")
    cert = certificate_line(meta, lang)  # a converted model: how closely it matches its source (or that nobody checked)
    if cert:
        lines.append(f"- {cert}")
    contract = meta.get(CONTRACT_KEY)
    if contract:  # what the model accepts (zoo.run.input_contract): the same words as the card's Input section
        try:
            summary = InputContract.from_json(contract).summary(contract_words(lang))
            lines.append("- " + t("run.contract", lang, text=summary))
        except zoo.ZooError as exc:  # the engine's problem in the page's language (quoted when it has none)
            lines.append("- " + t("run.contract_unreadable", lang, problem=cause_text(exc, lang)))
    for key, value in sorted(meta.items()):
        if key in ("zoo.extra.parity", "zoo.extra.converted_from", CONTRACT_KEY, "zoo.extra.train"):
            continue  # the certificate and contract lines above; the trainer's raw log is not a result
        if key.startswith("zoo.extra.") and len(value) < 300:  # a server's paths stay on the server
            shown = shown_paths(value)
            lines.append(f"- {key[len('zoo.extra.'):]}: {shown}")
    own = own_defaults(name, lang)
    if own:  # the controls start at the checkpoint's own generation settings
        lines.append("- " + t("run.gen_defaults", lang, items=", ".join(f"{k} {v}" for k, v in own.items())))
    lines.append("- " + t("run.room", lang, n=spec.max_len))
    lines.append("- " + budget.room_line(path, lang))  # weights against the budget, tokens per request
    if spec.arch == "encoder":
        lines += ["", t("run.mask_hint", lang, mask="`<mask>`")]
    lines = [safe_markdown(line) for line in lines]  # names and metadata are the checkpoint's text
    folder = path.parent
    for card in ("README.md", "model_card.md", "card.md", "MODEL_CARD.md"):
        f = folder / card
        if f.is_file() and f.stat().st_size < 20_000:  # the card's Markdown renders; its raw HTML does not
            own_card = card_in_language(f.read_text(encoding="utf-8"), lang)
            lines += ["", _inline_images(safe_markdown(own_card), folder)]
            break
    return "\n".join(lines)


#: A card's section in Chinese: ``## 中文`` (the shipped cards' heading), ``## 简体中文``, ``## Chinese``
_ZH_HEADING = re.compile(r"^##\s*(中文|简体中文|汉语|Chinese)\s*$", re.M)


def card_in_language(card: str, lang: str) -> str:
    """A checkpoint's own card with the page's language first: in 中文, its Chinese section (a
    ``## 中文`` heading, up to the next ``## `` heading) moves up to just below the card's title, and
    the English text that stood there goes under an ``## English`` heading -- the card opened on its
    English sections and kept its Chinese at the bottom (issue 34).  In English, or for a card
    without such a section, the card as written."""
    heading = _ZH_HEADING.search(card)
    if lang_code(lang) != "zh" or heading is None:
        return card
    rest = card[heading.end():]
    nxt = re.search(r"^## ", rest, re.M)
    zh_section = card[heading.start():heading.end() + (nxt.start() if nxt else len(rest))].rstrip() + "\n"
    before, after = card[:heading.start()], rest[nxt.start():] if nxt else ""
    title = re.match(r"\A\s*# [^\n]*\n", before)  # the card's "# name" line stays on top
    head, english = (before[:title.end()], before[title.end():]) if title else ("", before)
    if english.strip() and not english.lstrip().startswith("## "):
        english = f"## {t('run.card_english', lang)}\n\n" + english.lstrip("\n")
    return "".join([head, "\n" if head else "", zh_section, "\n", english.rstrip() + "\n\n" if english.strip() else "",
                    after]).rstrip() + "\n"


def certificate_line(meta: dict, lang: str = "en") -> str | None:
    """The card's line on a converted checkpoint's parity certificate (or its lack of one) in
    ``lang``: English is the engine's :func:`zoo.convert.certificate_text`, 中文 words the same
    figures (issue 34: the line stayed English under 中文); None for a model zoo trained itself."""
    if lang_code(lang) != "zh":
        return certificate_text(meta)
    cert = certificate(meta)
    if cert is not None:
        g = cert.get
        return t("run.cert", "zh", reference=g("reference", "?"), max=f"{g('max_abs_diff', float('nan')):.2e}",
                 mean=f"{g('mean_abs_diff', float('nan')):.2e}", top1=f"{100 * g('top1_agreement', 0):.1f}",
                 dtype=g("dtype"), probe=g("probe"), zoo=g("zoo"), torch=g("torch"), date=g("date"))
    if "zoo.extra.converted_from" not in meta:
        return None
    gguf = _gguf_facts(meta)
    if gguf is None:
        return t("run.cert_none", "zh")
    parts = [t("run.gguf_arch", "zh", arch=gguf["arch"])]
    if gguf["kind"]:
        parts.append(t("run.gguf_quant", "zh", kind=gguf["kind"]) +
                     (t("run.gguf_tensors", "zh", tensors=gguf["tensors"]) if gguf["tensors"] else ""))
    elif gguf["tensors"]:
        parts.append(t("run.gguf_stored", "zh", tensors=gguf["tensors"]))
    label = f'"{gguf["name"]}"；' if gguf["name"] else ""
    return t("run.cert_gguf", "zh", source=gguf["source"], details=label + "；".join(parts))


def _gguf_facts(meta: dict) -> dict | None:
    """What :func:`zoo.convert.core.gguf_source` says of a GGUF conversion, as values (source file,
    its general.name, architecture, file type, tensor counts), or None for any other checkpoint."""
    from zoo.convert.core import gguf_source

    if gguf_source(meta) is None:  # the engine decides what a GGUF conversion is
        return None
    info = json.loads(meta["zoo.extra.converted_from"])
    counts = info.get("quant_types")
    counts = {str(q): n for q, n in counts.items() if isinstance(n, int)} if isinstance(counts, dict) else {}
    kind, name = info.get("file_type"), info.get("gguf_name")
    return {"source": str(info.get("source", "?"))[:120], "arch": str(info["architectures"][0])[5:],
            "kind": kind[:40] if isinstance(kind, str) else None,
            "tensors": ", ".join(f"{q} x {n}" for q, n in sorted(counts.items(), key=lambda kv: -kv[1])),
            "name": name[:80] if isinstance(name, str) and name else None}


_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")


def _inline_images(markdown: str, folder) -> str:
    """Embed a card's own images (``![loss](loss.png)`` beside it) as data URIs, so the page shows
    them without serving the folder; any other image (a path elsewhere, a web address) is dropped."""
    import base64

    def repl(m):
        alt, target = m.group(1), m.group(2)
        f = folder / target
        if "/" not in target and "\\" not in target and target.lower().endswith(".png") and f.is_file() \
                and f.stat().st_size < 300_000:
            return f"![{alt}](data:image/png;base64,{base64.b64encode(f.read_bytes()).decode()})"
        return f"({alt})"

    return _IMAGE.sub(repl, markdown)


def fill_mask(model, text: str, top_k: int = 5, lang: str = "en") -> list[list[str]]:
    """Top-``top_k`` candidates for each mask token of ``text``: rows ``[position, "tok (p), ..."]``."""
    tok = _tokenizer(model, lang)
    check_value("input_tokens", len(tok.encode(text)), lang=lang)
    rows = []
    for cands in zoo.fill_mask(model, text, top_k=top_k):
        shown = ", ".join(f"{c.get('text', c['id'])!r} ({c['p']:.3f})" for c in cands)
        rows.append([str(cands[0]["position"]) if cands else "?", shown])
    return rows


def max_new_tokens_for(name: str | None, lang: str = "en") -> dict:
    """The "max new tokens" slider for checkpoint ``name``: its range ends at what ``max_len``
    (capped per request, ``ui/budget.py``) allows and the UI limit, its value is the default capped
    the same way."""
    top = LIMITS["max_new_tokens"]
    if name:
        try:
            top = min(top, budget.room_of(checkpoint_path(name, lang))[0].tokens)
        except zoo.ZooError:
            pass
    return {"maximum": max(top, 2), "value": min(DEFAULT_NEW_TOKENS, top)}


@handler
def run(name: str, text: str, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
        max_new_tokens: int = DEFAULT_NEW_TOKENS, seed: int = 0, repetition_penalty: float = 1.0,
        lang: str = "en", stats: dict | None = None, echo: bool = False,
        **more: Any) -> Iterator[tuple[str, list]]:
    """Stream ``(output text so far, fill-mask rows)``.  ``echo``: a decoder's output starts with
    the prompt, as ``zoo run`` prints it (the page does; the HTTP API returns the continuation
    only; an encoder-decoder's output is its target text either way).  ``max_new_tokens`` is capped by what the
    model's ``max_len`` leaves after the prompt.  ``temperature`` 0 is greedy decoding, ``top_k`` 0
    and ``top_p`` 1 are off; ``repetition_penalty`` (1 = off) applies to greedy decoding too.
    ``more``: any other :class:`~zoo.run.options.GenerationOptions` (as the page's controls give
    them), checked by it.  ``stats``, when given, receives the finished generation's speed against
    the memory roofline (:func:`zoo.inside.speed.decode_speed`)."""
    model = load_checkpoint(name, lang)
    text = check_text(text, lang)
    max_new_tokens = int(max_new_tokens or 0)
    check_value("max_new_tokens", max_new_tokens, lang=lang)
    if model.spec.arch == "encoder":
        yield "", fill_mask(model, text, lang=lang)
        return
    tok = _tokenizer(model, lang)
    check_value("input_tokens", len(tok.encode(text)), lang=lang)
    max_new_tokens = min(max_new_tokens, budget.new_token_room(model, prompt_tokens(model, text)))
    from zoo.run.generate import stream_text

    options = sampling_options(temperature, top_k, top_p, seed, repetition_penalty, more)
    head = text if echo and model.spec.arch == "decoder" else ""
    out = ""
    yield head, []
    start = time.perf_counter()
    for piece in stream_text(model, text, max_new_tokens, **options):
        out += piece
        yield head + out, []
    if stats is not None and out:
        from zoo.inside.speed import decode_speed

        n_new, n_prompt = len(tok.encode(out)), len(tok.encode(text))
        stats.update(decode_speed(model, n_new, time.perf_counter() - start,
                                  n_prompt + n_new // 2))


def speed_line(stats: dict, lang: str = "en") -> str:
    """The Run tab's line under the output: tokens/s, bytes per token, % of the memory roofline,
    and why decoding is memory-bound (English / Chinese)."""
    if not stats:
        return ""
    return (t("run.speed", lang, rate=stats["tokens_per_s"], mb=stats["bytes_per_token"] / 1e6,
              pct=100 * stats["roofline"], bw=stats["bandwidth_gbs"])
            + "  \n" + t("run.speed_why", lang))


def build(tr, lang_state) -> dict:
    """Create the tab (inside an open ``gr.Tab``): its layout, its events and its HTTP API."""
    ui = _layout(tr)
    _wire(ui, lang_state, tr)
    _api()
    parts = {k: ui[k] for k in ("checkpoint", "prompt", "output", "go", "fills", "refresh", "error", "card",
                                "speed")}
    return {**parts, "max_new": ui["max_new_tokens"], "options": {n: ui[n] for n, _ in ui_options()}}


def _layout(tr) -> dict:
    """Checkpoint picker; prompt, examples, generation controls, output | the model card."""
    import gradio as gr

    ui: dict = {}
    names = checkpoint_names()
    first = default_checkpoint(names)
    tr.add(gr.Markdown(tr("run.intro")), value="run.intro")
    with gr.Row():
        ui["checkpoint"] = tr.add(gr.Dropdown(names, value=first, label=tr("run.checkpoint"),
                                              elem_id="run-checkpoint", allow_custom_value=True),
                                  label="run.checkpoint")
        ui["refresh"] = tr.add(gr.Button(tr("run.refresh"), size="sm", elem_id="run-refresh", scale=0,
                                         min_width=120), value="run.refresh")
    with gr.Row():
        with gr.Column(scale=3):
            ui["prompt"] = tr.add(gr.Textbox("", lines=3, label=tr("run.prompt"), elem_id="run-prompt",
                                             max_length=LIMITS["text_chars"]), label="run.prompt")
            ui["examples"] = _examples(tr, ui, names)
            ui.update(_generation_controls(tr, first))
            ui["go"] = tr.add(gr.Button(tr("run.go"), variant="primary", elem_id="run-go"), value="run.go")
            ui["error"] = error_box("run-error", tr)  # its message follows a language switch
            ui["output"] = tr.add(gr.Textbox(label=tr("run.output"), lines=6, interactive=False,
                                             elem_id="run-output"), label="run.output")
            ui["speed"] = gr.Markdown("", elem_id="run-speed")  # tokens/s against the roofline
            ui["kept"] = gr.State(None)  # the last run's data, drawn again on a language switch
            ui["fills"] = gr.Dataframe(headers=[tr("run.fill_header"), tr("run.candidates")], interactive=False,
                                       elem_id="run-fill", wrap=True, visible=_is_encoder(first))
            ui["chat"] = chat_panel.build(tr, first)  # the chat mode, for checkpoints with a template
        with gr.Column(scale=2):  # the model card beside the controls, scrolling on its own
            ui["card"] = gr.Markdown(model_card(first) if first else "", elem_id="run-card", max_height=900)
    return ui


def _is_encoder(name) -> bool:
    try:
        return bool(name) and zoo.load_spec(checkpoint_path(name)).arch == "encoder"
    except zoo.ZooError:
        return False


def _examples(tr, ui: dict, names: list[str]):
    """One example per shipped checkpoint that is present (None when none is): a ``gr.Dataset`` of
    plain values whose headers and label follow the language switch.  (``gr.Examples`` loaded its
    values by re-sending the input components as built, English labels included, so a click after
    switching to 中文 turned the labels back to English.)"""
    import gradio as gr

    shown = [[n, p] for n, p in EXAMPLES.items() if n in names]
    if not shown:
        return None
    dataset = gr.Dataset(components=["textbox", "textbox"], samples=shown, label=tr("run.examples"),
                         headers=[tr("run.checkpoint"), tr("run.prompt")], samples_per_page=len(shown),
                         elem_id="run-examples")
    return tr.add(dataset, label="run.examples", headers=("run.checkpoint", "run.prompt"))


@handler
def pick_example(sample: list, lang: str | None = None) -> tuple[str, str]:
    """An example clicked: its checkpoint and prompt, as plain values (``lang``: the page's
    language, in which a refusal of ``sample`` reads)."""
    name, prompt = (list(sample) + ["", ""])[:2]
    return str(name), str(prompt)


#: how many controls share a row
PER_ROW = 3


def _control(tr, name: str, opt, first: str | None):
    """The control of one option; "max new tokens" ends at what checkpoint ``first`` allows."""
    import gradio as gr

    from zoo.run.options import GenerationOptions

    value = UI_DEFAULTS.get(name, GenerationOptions.__dataclass_fields__[name].default)
    try:  # the first checkpoint's own generation settings, as a change of checkpoint sets them
        value = generation_defaults(first).get(name, value)
    except zoo.ZooError:
        pass
    high = opt.ui_high
    if high is not None and value is not None and name != "max_new_tokens" and value > high:
        high = value
    if name == "max_new_tokens":
        room = max_new_tokens_for(first)
        value, high = room["value"], room["maximum"]
    info = f"run.{name}_info" if f"run.{name}_info" in STRINGS else None
    texts = {"label": f"run.{name}", **({"info": info} if info else {})}
    common = dict(step=opt.step, elem_id=f"run-{name.replace('_', '-')}",
                  **{attr: tr(key) for attr, key in texts.items()})
    common["visible"] = not _is_encoder(first)  # an encoder fills masks: no generation controls
    if opt.ui_low is not None and high is not None:
        widget = gr.Slider(opt.ui_low, high, value=value, **common)
    else:
        widget = gr.Number(value, precision=0 if opt.kind == "int" else None, **common)
    return tr.add(widget, **texts)


def _generation_controls(tr, first: str | None) -> dict:
    """The generation controls, by option name (:func:`ui_options`), ``PER_ROW`` to a row."""
    import gradio as gr

    options = ui_options()
    controls: dict = {}
    for i in range(0, len(options), PER_ROW):
        with gr.Row():
            for name, opt in options[i:i + PER_ROW]:
                controls[name] = _control(tr, name, opt, first)
    return controls


# ---------------------------------------------------------------------- handlers of the page
@inline_errors(4, kept=True)
def run_ui(name, text, lang, *values):
    """The Run button: streams (output, fill-mask table, notes and speed line, kept data) into the
    page.  ``values``: the generation controls, in :func:`ui_options` order.  The kept data (the
    candidates, the notes, the speed figures: no translated text) lets a language switch draw the
    table and the lines again in the new language (:func:`redraw`)."""
    import gradio as gr

    options = dict(zip([n for n, _ in ui_options()], values))
    stats: dict = {}
    out, rows, first = "", [], True

    def table(rows):  # the fill-mask table is cleared once, then only written with candidates
        nonlocal first
        if rows or first:
            first = False
            return fill_table(rows, lang)
        return gr.skip()

    notes: list[str] = []  # the prompt normalised, or characters the tokenizer does not know
    with route_notes(notes.append):
        for out, rows in raw(run)(name, text, lang=lang, stats=stats, echo=True, **options):
            yield out, table(rows), note_lines(notes, lang), kept_run(rows, notes, {})
    yield out, table(rows), note_lines(notes, lang) + speed_line(stats, lang), kept_run(rows, notes, stats)


def kept_run(rows: list, notes: list[str], stats: dict) -> dict:
    """What the Run tab keeps of its last result for a language switch: data, no translated text."""
    return {"rows": [list(r) for r in rows], "notes": list(notes), "stats": dict(stats)}


def fill_table(rows: list, lang: str = "en"):
    """The fill-mask candidates as a table with headers in ``lang``."""
    import pandas as pd

    return pd.DataFrame(rows, columns=[t("run.fill_header", lang), t("run.candidates", lang)])


def redraw(lang: str, kept: dict | None) -> tuple:
    """The fill-mask table and the notes / speed line of the last run (:func:`kept_run`), in
    ``lang``; before any run, the empty table's headers."""
    if not kept:
        import gradio as gr

        return fill_table([], lang), gr.skip()
    return fill_table(kept["rows"], lang), note_lines(kept["notes"], lang) + speed_line(kept["stats"], lang)


def card_again(lang: str, name) -> str | None:
    """The card of the chosen checkpoint in ``lang`` (None: none chosen, or a name that is no
    checkpoint, whose error the box already shows)."""
    try:
        return raw(model_card)(name, lang) if name else None
    except zoo.ZooError:
        return None


def note_lines(notes: list[str], lang: str = "en") -> str:
    """The notes of a run (zoo.run.input_contract's InputWarnings), one line each, above the speed line."""
    return "".join(f"⚠ {t('run.note', lang)}: {safe_markdown(n)}  \n" for n in notes)


@inline_errors(2, kept=True)
def on_checkpoint(name, lang):
    """A checkpoint chosen: its card, and "max new tokens" sized for it."""
    import gradio as gr

    return raw(model_card)(name, lang), gr.update(**max_new_tokens_for(name, lang))


def generation_defaults(name: str | None, lang: str = "en") -> dict:
    """What the generation controls start at for checkpoint ``name`` (every :func:`ui_options`
    option but "max new tokens", which :func:`max_new_tokens_for` sizes): the checkpoint's own
    generation settings where it has them (a converted model's ``generation_config``, read from the
    file's metadata without loading a weight, under the options' names:
    :func:`zoo.run.options.model_defaults`), else the tab's defaults (:data:`UI_DEFAULTS`, then
    :class:`~zoo.run.options.GenerationOptions`').

    The page always sends its controls' values, and a value sent overrides the model's default --
    so a converted BART whose config says ``no_repeat_ngram_size: 3`` and ``length_penalty: 2.0``
    ran with 0 and 1.0 until the controls started at the checkpoint's values.  Only options with a
    control are set here; the rest of a generation config (forced / banned tokens, eos lists)
    applies by itself because the page never sends them.  Sampling strategy fields (temperature,
    top-k, top-p) are not kept by a conversion (``zoo.io.generation_config.NOT_APPLIED``: the
    strategy is the caller's), so they keep the tab's defaults."""
    from types import SimpleNamespace

    from zoo.io.generation_config import read_stored
    from zoo.run.options import GenerationOptions, model_defaults

    fields = GenerationOptions.__dataclass_fields__
    out = {n: UI_DEFAULTS.get(n, fields[n].default) for n, _ in ui_options() if n != "max_new_tokens"}
    if name:
        path = checkpoint_path(name, lang)
        spec, meta = zoo.load_spec(path), zoo.read_metadata(path)
        settings = read_stored(meta, spec.vocab_size, where=str(name))
        own = model_defaults(SimpleNamespace(generation_config=settings, spec=spec))
        out.update({n: v for n, v in own.items() if n in out})
    return out


def own_defaults(name: str | None, lang: str = "en") -> dict:
    """The options checkpoint ``name``'s generation config sets that have a control (for the card)."""
    base = generation_defaults(None)
    return {n: v for n, v in generation_defaults(name, lang).items() if v != base[n]}


@inline_errors(4, kept=True)
def fresh_run(name, lang):
    """A checkpoint chosen: the last run's output, notes and table go (they were the other model's),
    and the generation controls start at the checkpoint's own settings (:func:`generation_defaults`).
    Outputs: output, fill-mask table, speed line, kept run, then one per option control but "max
    new tokens"."""
    import gradio as gr

    if not name:
        return (gr.skip(),) * (4 + len(ui_options()) - 1)
    values = generation_defaults(name, lang)
    opts = dict(ui_options())
    updates = []
    for n, v in values.items():
        opt = opts[n]
        wider = {}  # a slider widens to hold the checkpoint's value (its range is a sensible top)
        if opt.ui_high is not None and v is not None and v > opt.ui_high:
            wider["maximum"] = v
        if opt.ui_low is not None and v is not None and v < opt.ui_low:
            wider["minimum"] = v
        updates.append(gr.update(value=v, **wider))
    return ("", fill_table([], lang), "", None, *updates)


def fits_checkpoint(name) -> list:
    """What a checkpoint shows: an encoder (fill-mask) shows the candidates table and no generation
    controls; a decoder or encoder-decoder shows the controls and no (empty) fill-mask table.
    Updates for ``[fills, *generation controls]``."""
    import gradio as gr

    encoder = _is_encoder(name)
    return [gr.update(visible=encoder)] + [gr.update(visible=not encoder) for _ in ui_options()]


#: Brings the output (or the error box just above it) into view after an example's click: it sits
#: below the controls, under the fold of a 1280x800 window
SHOW_OUTPUT_JS = show_result_js("#run-output", error="#run-error")


@handler
def on_refresh(current, lang=None):
    """The checkpoint list again (``lang``: the page's language, for an error)."""
    import gradio as gr

    names = checkpoint_names()
    return gr.update(choices=names, value=current if current in names else (names[0] if names else None))


def _wire(ui: dict, lang_state, tr) -> None:
    """Checkpoint -> card and limits; Run / Enter / an example -> a streamed run.  A run started
    while another one streams stops the old one (which would overwrite the new output)."""
    ckpt, card, error, examples = ui["checkpoint"], ui["card"], ui["error"], ui["examples"]
    inputs = [ckpt, ui["prompt"], lang_state] + [ui[name] for name, _ in ui_options()]
    outputs = [ui["output"], ui["fills"], ui["speed"], ui["kept"], *error_outputs(error)]
    generate = dict(concurrency_limit=4, concurrency_id="generate", api_visibility="private")
    runs = []  # the example's run
    shown = [ui["fills"]] + [ui[name] for name, _ in ui_options()]
    # another checkpoint: the old output goes, the controls start at its own generation settings
    fresh = dict(inputs=[ckpt, lang_state],
                 outputs=[ui["output"], ui["fills"], ui["speed"], ui["kept"],
                          *[ui[name] for name, _ in ui_options() if name != "max_new_tokens"], *error_outputs(error)],
                 api_visibility="private")
    if examples is not None:  # one click: pick the checkpoint (card, limits), then run with the defaults
        picked = examples.click(pick_example, inputs=[examples, lang_state], outputs=[ckpt, ui["prompt"]],
                                api_visibility="private")
        example_run = picked.then(
            on_checkpoint, inputs=[ckpt, lang_state], outputs=[card, ui["max_new_tokens"], *error_outputs(error)],
            api_visibility="private").then(
            fits_checkpoint, inputs=[ckpt], outputs=shown, api_visibility="private").then(
            fresh_run, **fresh).then(None, js=SHOW_OUTPUT_JS).then(run_ui, inputs=inputs, outputs=outputs, **generate)
        example_run.then(None, js=SHOW_OUTPUT_JS)  # once more: the card and table may have moved it
        runs.append(example_run)  # (a js-only event is not queued, so it cannot be cancelled)
    ui["refresh"].click(on_refresh, inputs=[ckpt, lang_state], outputs=[ckpt], api_visibility="private")
    ckpt.change(on_checkpoint, inputs=[ckpt, lang_state], outputs=[card, ui["max_new_tokens"], *error_outputs(error)],
                api_visibility="private")
    # a language switch: the card's own lines, and the last run's table and lines, in the new language
    tr.keep([card], card_again, [ckpt])
    tr.keep([ui["fills"], ui["speed"]], redraw, [ui["kept"]])
    ckpt.change(fits_checkpoint, inputs=[ckpt], outputs=shown, api_visibility="private").then(fresh_run, **fresh)
    go_run, submit_run = (event(run_ui, inputs=inputs, outputs=outputs, **generate)
                          for event in (ui["go"].click, ui["prompt"].submit))
    # each trigger cancels the runs of the other triggers, and an example its predecessor (the
    # example's own run starts only after its inputs load, so the cancel never hits it)
    ui["go"].click(None, cancels=[submit_run] + runs, api_visibility="private")
    ui["prompt"].submit(None, cancels=[go_run] + runs, api_visibility="private")
    if examples is not None:
        examples.click(None, cancels=[go_run, submit_run] + runs, api_visibility="private")
    chat_panel.wire(ui["chat"], ckpt, lang_state, [ui[name] for name, _ in ui_options()], tr)


def _api() -> None:
    """The HTTP API: plain values in and out, and a ZooError is an error response (not a box)."""
    import gradio as gr

    def run_api(name: str, text: str, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                max_new_tokens: int = DEFAULT_NEW_TOKENS, seed: int = 0, lang: str = "en",
                repetition_penalty: float = 1.0) -> tuple[str, list]:
        out, rows = "", []
        for out, rows in run(name, text, temperature, top_k, top_p, max_new_tokens, seed,
                             repetition_penalty, lang=lang):
            pass
        return out, rows

    def card_api(name: str, lang: str = "en") -> str:
        return model_card(name, lang)

    gr.api(run_api, api_name="run", concurrency_limit=4, concurrency_id="generate")
    gr.api(card_api, api_name="model_card")
