"""The Run tab's chat mode: talk to a checkpoint that carries a chat template.

An instruct model was tuned on conversations written in one exact format (ChatML's
``<|im_start|>user\\n...<|im_end|>``, Llama 3's header tokens, Gemma's ``<start_of_turn>``), and the
format ships with it as a Jinja template (``zoo.extra.chat_template`` in the checkpoint, see
:mod:`zoo.run.chat`).  This panel keeps the conversation as a list of ``{"role", "content"}`` dicts in
the browser session (a ``gr.State``: server-side, one per page), renders it with the checkpoint's
template exactly as ``zoo.run.chat`` (and transformers' ``apply_chat_template``) does, streams the reply
token by token through :func:`zoo.run.chat.chat` (which stops at the tokenizer's eos and the
template's end-of-turn tokens), and shows the rendered prompt, so a learner sees what the model
really reads: the special tokens, the role headers, the generation prompt at the end.

The sampling settings are the tab's own controls (max new tokens, temperature, top-k / top-p,
seed, ...).  A conversation longer than the model's ``max_len`` -- or, for a long one, than this
UI's tokens per request (``ui/budget.py``) -- loses its oldest turns (a system message stays) until
the reply has room, and the panel says how many messages the model no longer sees and why; they stay
on screen.  The note names the end-of-turn token the template writes after each turn (ChatML's
``<|im_end|>``, Gemma's ``<end_of_turn>``), where the reply stops.  A checkpoint without a template
shows why there is no chat and how to get one (convert an instruct model's folder or a GGUF file).
Every error is a message in the panel's own box, in the page's language, never a traceback.
"""
from __future__ import annotations

from typing import Any

import zoo
from zoo.run.chat import ChatError

from . import budget
from .common import (LIMITS, check_value, checkpoint_path, error_box, error_outputs, inline_errors,
                     load_checkpoint, safe_markdown)
from .controls import control_values
from .i18n import t, ui_error

#: The most messages one conversation keeps (each at most ``LIMITS["text_chars"]`` characters):
#: rendering cost stays bounded; "Clear" starts again.
MAX_MESSAGES = 200
#: The room a reply should have before old turns are dropped: ``min(max new tokens, max_len / 4)``.
REPLY_SHARE = 4


# ---------------------------------------------------------------------- what the panel shows
def has_template(name: Any) -> bool:
    """Whether checkpoint ``name`` stores a chat template (read from its header, nothing loaded);
    False for a name that is no checkpoint (the tab's error box says why)."""
    try:
        return bool(name) and f"zoo.extra.{zoo.run.chat.META_EXTRA}" in zoo.read_metadata(checkpoint_path(name))
    except zoo.ZooError:
        return False


def stop_token_texts(model) -> list[str]:
    """The tokens a reply stops at (:func:`zoo.run.chat.stop_ids`: eos and end-of-turn), as text."""
    tok = model.tokenizer
    inner = getattr(tok, "tok", None)
    out = []
    for i in zoo.run.chat.stop_ids(tok):
        text = inner.id_to_token(i) if inner is not None and hasattr(inner, "id_to_token") else None
        out.append(text if text is not None else tok.decode([i]))
    return out


def end_of_turn(model, stops: list[str]) -> str | None:
    """The stop token the template writes right after an assistant's turn (ChatML's ``<|im_end|>``,
    Gemma's ``<end_of_turn>``): a two-message conversation rendered, the first of ``stops`` that
    follows the reply's text.  None when the template writes none of them there."""
    reply = "zoo-reply-7"
    try:
        text = zoo.run.chat.prompt(model, [{"role": "user", "content": "hi"},
                                           {"role": "assistant", "content": reply}],
                                   add_generation_prompt=False)
    except zoo.ZooError:
        return None
    after = text[text.rfind(reply) + len(reply):] if reply in text else ""
    found = [(after.find(s), s) for s in stops if s and after.find(s) >= 0]
    return min(found)[1] if found else None


def note(name: Any, lang: str = "en") -> str:
    """The panel's first line: how chat works with this checkpoint -- the end-of-turn token its
    template writes, the tokens the reply stops at --, or why it has no chat mode and how to get one.
    Empty for a name that is no checkpoint; a checkpoint that does not fit the budget says so."""
    if not name:
        return ""
    try:
        checkpoint_path(name)
    except zoo.ZooError:
        return ""
    if not has_template(name):
        return t("chat.none", lang)
    try:
        model = load_checkpoint(name, lang)
    except zoo.ZooError as exc:  # e.g. weights over the budget: the reason, not a silent "—"
        from .i18n import error_text

        return safe_markdown(t("chat.unavailable", lang, why=error_text(exc, lang)[0]))
    texts = stop_token_texts(model)
    turn = end_of_turn(model, texts)
    stops = ", ".join(f"`{s}`" for s in texts) or "—"
    if turn is None:
        return safe_markdown(t("chat.ready", lang, stops=stops))
    others = ", ".join(f"`{s}`" for s in texts if s != turn) or "—"
    return safe_markdown(t("chat.ready_turn", lang, turn=f"`{turn}`", others=others))


def dropped_line(kept: dict | None, lang: str = "en") -> str:
    """The line under the conversation after a reply: how many old messages the model no longer saw
    (and, for a long max_len, that this UI's tokens per request is what they passed)."""
    if not kept or not kept.get("dropped"):
        return ""
    if kept.get("cap"):
        return "⚠ " + t("chat.dropped_capped", lang, n=kept["dropped"], cap=kept["cap"], max_len=kept["max_len"])
    return "⚠ " + t("chat.dropped", lang, n=kept["dropped"], max_len=kept["max_len"])


# ---------------------------------------------------------------------- the conversation
def conversation(history: Any, message: str, system: str = "") -> list[dict]:
    """The messages of the next turn: the system message (when given), the kept history, the new
    user message."""
    msgs = [{"role": "system", "content": system}] if system and system.strip() else []
    return msgs + [dict(m) for m in (history or [])] + [{"role": "user", "content": message}]


def window(model, messages: list[dict], max_new_tokens: int, lang: str = "en") -> tuple[list[dict], int, int]:
    """The part of ``messages`` the model reads, how many messages were left out, and the room
    left for the reply.

    The rendered prompt plus the reply must fit in ``max_len`` -- capped per request by this UI
    (:func:`budget.room`) -- (a decoder: ``max_len - prompt + 1`` new tokens).  While the reply
    would have less room than ``min(max_new_tokens, max_len / 4)``, the oldest turn (a user message
    and the replies after it) is dropped; a system message always stays, and whole turns keep the
    user/assistant alternation templates insist on.  A last user message that does not fit on its
    own is a :class:`~zoo.run.chat.ChatError`."""
    tok = model.tokenizer
    r = budget.room(model)
    max_len = r.tokens  # the model's max_len, or this UI's tokens per request when that is less
    want = max(1, min(int(max_new_tokens), max_len // REPLY_SHARE))
    head = [m for m in messages[:1] if m["role"] == "system"]
    turns = messages[len(head):]
    dropped = 0
    while True:
        n = len(tok.encode(zoo.run.chat.prompt(model, head + turns)))
        room = max_len - n + 1 if model.spec.arch == "decoder" else max_len - n
        later = [i for i, m in enumerate(turns) if i > 0 and m["role"] == "user"]
        if room >= want or not later:
            break
        dropped += later[0]
        turns = turns[later[0]:]
    if room < 1 and r.capped:  # this UI's tokens per request, not the model's max_len
        raise ui_error(ChatError, "chat.too_long_capped", fix="chat.too_long_fix", where="chat.message", n=n,
                       cap=max_len, max_len=model.spec.max_len)
    if room < 1:
        raise ui_error(ChatError, "chat.too_long", fix="chat.too_long_fix", where="chat.message", n=n,
                       max_len=max_len)
    return head + turns, dropped, room


def _message(message: Any, lang: str) -> str:
    if not isinstance(message, str) or not message.strip():
        raise ui_error(ChatError, "chat.empty", fix="chat.empty_fix", where="chat.message")
    if len(message) > LIMITS["text_chars"]:
        raise ui_error(ChatError, "err.limit", fix="err.limit_fix", where="chat.message", field="message",
                       value=len(message), limit=LIMITS["text_chars"])
    return message


@inline_errors(6, kept=True)
def send(name, message, system, history, lang, *values):
    """Send: streams ``(chatbot, history, message box, rendered prompt, dropped line, kept data)``.

    ``values`` are the tab's generation controls (:func:`ui.controls.ui_options` order).  The history
    (the ``gr.State``) changes only when the reply is complete, so an error or a cancelled reply
    leaves the conversation as it was."""
    import gradio as gr

    model = load_checkpoint(name, lang)
    if zoo.run.chat.template_of(model) is None:
        raise ui_error(ChatError, "chat.no_template", fix="chat.no_template_fix", where="checkpoint", name=name)
    message = _message(message, lang)
    history = list(history or [])
    if len(history) + 2 > MAX_MESSAGES:
        raise ui_error(ChatError, "chat.full", fix="chat.full_fix", where="chat.history", n=len(history))
    max_new, options = control_values(values)
    if max_new < 1:
        raise ui_error(ChatError, "chat.no_room", fix="chat.no_room_fix", where="max_new_tokens")
    check_value("max_new_tokens", max_new, lang=lang)
    seen, dropped, room = window(model, conversation(history, message, system), max_new, lang)
    max_new = min(max_new, room)  # the reply stays inside one request's tokens
    shown_prompt = zoo.run.chat.prompt(model, seen)
    r = budget.room(model)
    kept = {"dropped": dropped, "max_len": model.spec.max_len, "cap": r.tokens if r.capped else None}
    user = {"role": "user", "content": message}
    reply = ""
    yield shown(history + [user, {"role": "assistant", "content": ""}]), gr.skip(), "", shown_prompt, \
        dropped_line(kept, lang), kept
    for piece in zoo.run.chat.chat(model, seen, max_new, stream=True, **options):
        reply += piece
        yield shown(history + [user, {"role": "assistant", "content": reply}]), gr.skip(), gr.skip(), \
            gr.skip(), gr.skip(), gr.skip()
    done = history + [user, {"role": "assistant", "content": reply}]
    yield shown(done), done, gr.skip(), gr.skip(), gr.skip(), gr.skip()


def shown(history: list[dict]) -> list[dict]:
    """The conversation as the chatbot displays it: each text exactly as typed or generated
    (``<b>``, ``<|im_end|>`` and ``&`` escaped, so the page shows them instead of rendering HTML)."""
    import html

    return [{"role": m["role"], "content": html.escape(m["content"] or "", quote=False)} for m in history]


def clear():
    """Clear: an empty conversation, prompt and note (and no error)."""
    return [], [], "", "", None, None, ""


def on_checkpoint(name, lang):
    """Another checkpoint: the panel shows (with a template) or hides (without), its note says which
    and why, and the conversation starts again (it belonged to the other model)."""
    import gradio as gr

    return (gr.update(visible=has_template(name)), note(name, lang)) + clear()


def note_again(lang: str, name) -> str:
    """The note in ``lang`` after a language switch."""
    return note(name, lang)


def dropped_again(lang: str, kept) -> str | None:
    return dropped_line(kept, lang) if kept else None


# ---------------------------------------------------------------------- layout and events
def build(tr, first: str | None) -> dict:
    """The panel (inside the Run tab's column), starting on checkpoint ``first``."""
    import gradio as gr

    ui: dict = {}
    tr.add(gr.Markdown(f"### {tr('chat.heading')}", elem_id="run-chat-heading"), value="### {chat.heading}")
    ui["note"] = gr.Markdown(note(first, tr.lang), elem_id="run-chat-note")
    with gr.Column(visible=has_template(first), elem_id="run-chat") as column:
        ui["column"] = column
        ui["chatbot"] = tr.add(gr.Chatbot([], label=tr("chat.chatbot"), elem_id="run-chat-bot", height=360,
                                          render_markdown=False, feedback_options=None, buttons=[],
                                          allow_tags=False),
                               label="chat.chatbot")
        ui["system"] = tr.add(gr.Textbox("", lines=1, label=tr("chat.system"), elem_id="run-chat-system",
                                         max_length=LIMITS["text_chars"]), label="chat.system")
        ui["message"] = tr.add(gr.Textbox("", lines=2, label=tr("chat.message"), elem_id="run-chat-message",
                                          placeholder=tr("chat.placeholder"), max_length=LIMITS["text_chars"]),
                               label="chat.message", placeholder="chat.placeholder")
        with gr.Row():
            ui["send"] = tr.add(gr.Button(tr("chat.send"), variant="primary", elem_id="run-chat-send"),
                                value="chat.send")
            ui["clear"] = tr.add(gr.Button(tr("chat.clear"), elem_id="run-chat-clear"), value="chat.clear")
        ui["error"] = error_box("run-chat-error", tr)
        ui["dropped"] = gr.Markdown("", elem_id="run-chat-dropped")
        with tr.add(gr.Accordion(tr("chat.prompt"), open=False, elem_id="run-chat-prompt-box"),
                    label="chat.prompt"):
            ui["prompt"] = tr.add(gr.Textbox("", lines=8, max_lines=30, interactive=False, show_label=False,
                                             elem_id="run-chat-prompt", label=tr("chat.prompt")),
                                  label="chat.prompt")
    ui["history"] = gr.State([])  # this browser session's conversation: {"role", "content"} dicts
    ui["kept"] = gr.State(None)  # the last reply's data (messages left out), drawn again on a switch
    return ui


def wire(ui: dict, ckpt, lang_state, controls: list, tr) -> None:
    """Send / Enter -> a streamed reply; Clear; a checkpoint change resets the panel.  Send and
    Enter cancel each other's reply, Clear and a checkpoint change cancel both."""
    outputs = [ui["chatbot"], ui["history"], ui["message"], ui["prompt"], ui["dropped"], ui["kept"],
               *error_outputs(ui["error"])]
    inputs = [ckpt, ui["message"], ui["system"], ui["history"], lang_state, *controls]
    generate = dict(concurrency_limit=4, concurrency_id="generate", api_visibility="private")
    by_click = ui["send"].click(send, inputs=inputs, outputs=outputs, **generate)
    by_enter = ui["message"].submit(send, inputs=inputs, outputs=outputs, **generate)
    ui["send"].click(None, cancels=[by_enter], api_visibility="private")
    ui["message"].submit(None, cancels=[by_click], api_visibility="private")
    reset = [ui["chatbot"], ui["history"], ui["prompt"], ui["dropped"], ui["kept"], *error_outputs(ui["error"])]
    for clicked in (ui["clear"].click, ui["chatbot"].clear):  # the button, or the chatbot's own bin
        clicked(clear, outputs=reset, cancels=[by_click, by_enter], api_visibility="private")
    ckpt.change(on_checkpoint, inputs=[ckpt, lang_state], outputs=[ui["column"], ui["note"], *reset],
                cancels=[by_click, by_enter], api_visibility="private")
    tr.keep([ui["note"]], note_again, [ckpt])
    tr.keep([ui["dropped"]], dropped_again, [ui["kept"]])

