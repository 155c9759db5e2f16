"""The Compare tab: two models side by side on the same input.

Each side is a preset spec (random weights) or a checkpoint, plus optional overrides (a YAML mapping
such as ``norm: {kind: layernorm, placement: post}`` or ``positions: rope``), which is how the
classic comparisons are made: pre vs post norm, sinusoidal vs RoPE, eager vs sdpa.  Model B receives
model A's weights wherever a tensor has the same name and shape, so a difference in outputs comes
from the change in architecture, not from a different random initialisation (eager vs sdpa then
agree to float rounding).  Shown: the spec diff, parameter counts, median forward time and the
largest output difference.

A checkpoint opens here as it is when its weights fit the budget (``ui/budget.py``); overrides are
typed-in values and keep the UI's limits where they grow the checkpoint's shape.  The forward's
length is capped per request (a long ``max_len`` does not make a long forward) and the table says so.
"""
from __future__ import annotations

import difflib
import statistics
import time

import torch

import zoo
from zoo.errors import SpecError, ZooError

from . import budget
from .common import (LIMITS, check_spec_limits, check_text, check_value, checkpoint_names, empty_table,
                     error_box, error_outputs, error_record, handler, inline_errors, load_checkpoint, raw,
                     show_result_js)
from .common import frame as common_frame
from .i18n import t, ui_error

#: the table's columns (i18n keys)
HEADERS = ("compare.metric", "compare.a", "compare.b")

PRESET, CKPT = "preset: ", "checkpoint: "


def sources() -> list[str]:
    """Dropdown choices: every preset and every checkpoint, prefixed by their kind."""
    return [PRESET + n for n in zoo.list_presets()] + [CKPT + n for n in checkpoint_names()]


def _overrides(text: str, where: str, lang: str = "en") -> dict:
    if not text or not text.strip():
        return {}
    from zoo.guard.files import load_yaml

    data = load_yaml(text, where=where)  # bounded: size, depth, aliases, duplicate keys
    if not isinstance(data, dict):
        raise ui_error(SpecError, "compare.not_mapping", fix="compare.mapping_fix", where=where)
    return data


def make_model(source: str, overrides: str, where: str, lang: str = "en", seed: int = 0):
    """A model for one side: ``preset: NAME`` (random init with ``seed``) or ``checkpoint: NAME``
    (its weights, then the overrides rebuilt around them)."""
    over = _overrides(overrides, f"{where}.overrides", lang)
    if isinstance(source, str) and source.startswith(CKPT):
        base = load_checkpoint(source[len(CKPT):], lang)
        if not over:
            return base
        spec = base.spec.replace(**over)
        check_spec_limits(spec, lang, base=base.spec)  # what was typed, not the stored shape
        model = zoo.build(spec, seed=seed)
        model.copied_from_checkpoint = _copy_matching(base, model)  # the checkpoint's own weights
        if getattr(base, "tokenizer", None) is not None:
            model.tokenizer = base.tokenizer
        return model.eval()
    name = source[len(PRESET):] if isinstance(source, str) and source.startswith(PRESET) else source
    if not name or name not in zoo.list_presets():
        raise ui_error(SpecError, "compare.unknown_source", fix="err.bad_name_fix", where=f"{where}.source",
                       options=sources(), source=str(source)[:80])
    spec = zoo.spec(name, **over)
    check_spec_limits(spec, lang)
    return zoo.build(spec, seed=seed).eval()


def _copy_matching(src, dst) -> int:
    """Copy every tensor of ``src`` whose name and shape exist in ``dst``; returns how many."""
    theirs = src.state_dict()
    mine = dst.state_dict()
    take = {k: v for k, v in theirs.items() if k in mine and mine[k].shape == v.shape}
    dst.load_state_dict(take, strict=False)
    if hasattr(dst, "tie_weights"):
        dst.tie_weights()
    return len(take)


def _text_output(model, prompt: str, lang: str) -> dict:
    """Greedy continuation (decoders, encoder-decoders) or the top fill-mask candidates (encoders):
    ``{"text": ...}``, or ``{"error": record}`` (``error_record``: worded in the page's language when shown)."""
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        return {"text": "—"}
    check_text(prompt, lang)
    try:
        if model.spec.arch == "encoder":
            return {"text": "; ".join(", ".join(repr(c.get("text", c["id"])) for c in cands)
                                      for cands in zoo.fill_mask(model, prompt, top_k=3))}
        from zoo.commands.run import prompt_tokens

        # 24 new tokens, or what the model's max_len (capped per request) leaves after the prompt
        room = budget.new_token_room(model, prompt_tokens(model, prompt))
        return {"text": repr(model.generate(prompt, min(24, room)))}
    except ZooError as exc:
        return {"error": error_record(exc)}


def _shown_text(out: dict, lang: str) -> str:
    from .i18n import error_text

    return out["text"] if "text" in out else f"({error_text(out['error'], lang)[0]})"


def _forward(model, ids):
    if model.spec.arch == "encoder_decoder":
        return model(ids, ids)
    return model(ids)


def _timed(model, ids, repeats: int = 5) -> tuple[torch.Tensor, float]:
    times = []
    with torch.no_grad():
        out = _forward(model, ids)
        for _ in range(repeats):
            start = time.perf_counter()
            out = _forward(model, ids)
            times.append((time.perf_counter() - start) * 1000)
    return out, statistics.median(times)


@handler
def compare(source_a: str, over_a: str, source_b: str, over_b: str, seq_len: int = 32,
            prompt: str = "", lang: str = "en") -> tuple[list[list], str]:
    """Rows ``[metric, A, B]`` and a unified diff of the two specs (markdown).  With a ``prompt``,
    models that read text (a stored tokenizer) also show their greedy continuation (or fill-mask)."""
    return shown(measure(source_a, over_a, source_b, over_b, seq_len, prompt, lang), lang)


def measure(source_a: str, over_a: str, source_b: str, over_b: str, seq_len: int = 32,
            prompt: str = "", lang: str = "en") -> dict:
    """The comparison as data (no translated text: :func:`shown` words it in a language).

    Rows are ``[key, A, B]``.  The largest output difference belongs to the pair, not to either
    model, so it is shown once: under B, the side changed against A (B starts from A's weights,
    and the "tensors B received" row reads the same way), with "—" under A.  The same number under
    both columns read as two measurements that happened to agree (issue 34)."""
    # what the browser sent ("abc", NaN, 1e400, a list): a whole number, or a refusal naming the field
    seq_len = check_value("seq_len", seq_len, "compare_seq_len", lang, kind="int")
    if seq_len < 1:
        raise ui_error(ZooError, "compare.seq_len_min", where="seq_len")
    a = make_model(source_a, over_a, "A", lang)
    b = make_model(source_b, over_b, "B", lang)
    if not str(source_b).startswith(CKPT):
        copied = str(_copy_matching(a, b))  # a fresh preset: give it A's weights where they fit
    elif hasattr(b, "copied_from_checkpoint"):
        copied = b.copied_from_checkpoint  # a count of B's own checkpoint tensors
    else:
        copied = "—"
    room_a, room_b = budget.room(a), budget.room(b)
    T = min(seq_len, room_a.tokens, room_b.tokens)  # max_len, capped per request
    V = min(a.spec.vocab_size, b.spec.vocab_size)
    ids = torch.randint(1, max(V, 2), (1, T), generator=torch.Generator().manual_seed(0))
    out_a, ms_a = _timed(a, ids)
    out_b, ms_b = _timed(b, ids)
    diff = (f"{float((out_a.float() - out_b.float()).abs().max()):.3e}"
            if out_a.shape == out_b.shape else "—")

    def comps(m):
        parts = []
        for role in m.spec.roles:
            st = m.spec.stack(role)
            parts.append(f"{role}: {st.num_layers}L, {st.attention}, {' & '.join(map(str, st.mask))}, "
                         f"{st.positions}, {st.norm}/{st.placement}, {st.ffn}")
        return "; ".join(parts)

    rows = [
        ["compare.row.arch", a.spec.arch, b.spec.arch],
        ["compare.row.components", comps(a), comps(b)],
        ["compare.row.params", f"{sum(p.numel() for p in a.parameters()):,}",
         f"{sum(p.numel() for p in b.parameters()):,}"],
        ["compare.row.ms", f"{ms_a:.2f}", f"{ms_b:.2f}"],
        ["compare.row.out", str(tuple(out_a.shape)), str(tuple(out_b.shape))],
        ["compare.row.diff", "—", diff],  # once: see the docstring
        # after the rows the HTTP API's callers index by position
        ["compare.row.tokens", _tokens(T, seq_len, room_a), _tokens(T, seq_len, room_b)],
    ]
    texts = [_text_output(a, prompt, lang), _text_output(b, prompt, lang)] if prompt and prompt.strip() else None
    diff_lines = list(difflib.unified_diff(a.spec.to_yaml().splitlines(), b.spec.to_yaml().splitlines(),
                                           "A", "B", lineterm="", n=1))
    return {"rows": rows, "copied": copied, "texts": texts, "diff": diff_lines}


def _tokens(T: int, asked: int, r: "budget.Room") -> dict:
    """The forward's length for one side, as data (:func:`_tokens_shown` words it)."""
    return {"T": T, "asked": asked, "room": [r.tokens, r.max_len, r.by, r.kv_bytes]}


def _tokens_shown(cell: dict, lang: str) -> str:
    """The forward's length for one side: the tokens, and why fewer than asked when this side's room
    (its max_len, or this UI's cap per request) is what cut it."""
    T, asked, r = cell["T"], cell["asked"], budget.Room(*cell["room"])
    if T >= asked or T < r.tokens:  # as asked, or the other side's room cut it
        return str(T)
    return t("compare.tokens_capped", lang, T=T, asked=asked, max_len=r.max_len) \
        + (" " + budget.cap_text(r, lang) if r.capped else "")


def shown(data: dict, lang: str = "en") -> tuple[list[list], str]:
    """A comparison (:func:`measure`) in ``lang``: rows ``[metric, A, B]`` and the spec diff."""
    rows = [[t(key, lang), *(_tokens_shown(x, lang) if isinstance(x, dict) else x for x in (a, b))]
            for key, a, b in data["rows"]]
    copied = data["copied"]
    rows.append([t("compare.row.shared", lang), "—",
                 t("compare.from_own", lang, n=copied) if isinstance(copied, int) else copied])
    if data["texts"]:
        rows.append([t("compare.row.text", lang), *(_shown_text(x, lang) for x in data["texts"])])
    lines = data["diff"]
    body = "\n".join(lines).replace("```", "~~~") if lines else t("compare.identical", lang)
    return rows, "```diff\n" + body + "\n```"


def frame(rows: list[list], lang: str = "en"):
    """Compare's rows with its headers in ``lang`` (:func:`ui.common.frame`)."""
    return common_frame(rows, HEADERS, lang)


def redraw(lang: str, data: dict | None):
    """The last comparison's table and diff in ``lang`` (None before the first)."""
    if not data:
        return None
    rows, diff = shown(data, lang)
    return frame(rows, lang), diff


def build(tr, lang_state) -> dict:
    import gradio as gr

    choices = sources()
    default = PRESET + "gpt_tiny" if PRESET + "gpt_tiny" in choices else (choices[0] if choices else None)
    tr.add(gr.Markdown(tr("compare.intro")), value="compare.intro")
    tr.add(gr.Markdown(tr("compare.same_weights")), value="compare.same_weights")
    with gr.Row():
        def side(key: str, override: str):
            """One column: a checkpoint / preset picker and its YAML overrides."""
            with gr.Column():
                tr.add(gr.Markdown(f"**{tr('compare.' + key)}**"), value=f"**{{compare.{key}}}**")
                src = tr.add(gr.Dropdown(choices, value=default, label=tr("compare.pick"),
                                         elem_id=f"cmp-{key}", allow_custom_value=True),
                             label="compare.pick")
                over = tr.add(gr.Textbox(override, label=tr("compare.override"),
                                         elem_id=f"cmp-{key}-over"), label="compare.override")
            return src, over

        src_a, over_a = side("a", "")
        src_b, over_b = side("b", "attention: eager")
    with gr.Row():
        seq = tr.add(gr.Number(32, precision=0, minimum=1, maximum=LIMITS["compare_seq_len"],
                               label=tr("compare.seq_len"), elem_id="cmp-seq"), label="compare.seq_len")
        prompt = tr.add(gr.Textbox("", label=tr("compare.prompt"), elem_id="cmp-prompt", scale=3,
                                   max_length=LIMITS["text_chars"]), label="compare.prompt")
        go = tr.add(gr.Button(tr("compare.go"), variant="primary", elem_id="cmp-go"), value="compare.go")
    error = error_box("cmp-error", tr)  # its message follows a language switch
    table = tr.add(gr.Dataframe(headers=[tr(h) for h in HEADERS],
                                label=tr("compare.table"), interactive=False, wrap=True, elem_id="cmp-table",
                                column_widths=["22%", "39%", "39%"]),
                   label="compare.table", value=empty_table(HEADERS))  # empty, its headers follow a switch
    spec_diff = gr.Markdown(elem_id="cmp-diff")
    kept = gr.State(None)  # the last comparison as data: drawn again on a language switch
    tr.keep([table, spec_diff], redraw, [kept])

    @inline_errors(3, kept=True)
    def compare_ui(a, oa, b, ob, n, text, lang):
        data = measure(a, oa, b, ob, n, text, lang)
        return (*redraw(lang, data), data)

    # the table sits below both columns of controls (at 1280x800 only its header row showed): the
    # click brings it, or the error box above it, into view when it lands
    go.click(compare_ui, inputs=[src_a, over_a, src_b, over_b, seq, prompt, lang_state],
             outputs=[table, spec_diff, kept, *error_outputs(error)], concurrency_limit=2,
             api_visibility="private").then(None, js=show_result_js("#cmp-table", error="#cmp-error"))

    def compare_api(source_a: str, over_a: str, source_b: str, over_b: str, seq_len: int = 32,
                    prompt: str = "", lang: str = "en") -> tuple[list, str]:
        """The HTTP API: rows ``[metric, A, B]`` and the spec diff (Markdown)."""
        return compare(source_a, over_a, source_b, over_b, seq_len, prompt, lang=lang)

    gr.api(compare_api, api_name="compare", concurrency_limit=2)
    return {"a": src_a, "b": src_b, "go": go, "table": table, "diff": spec_diff, "error": error}
