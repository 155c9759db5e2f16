"""Chat: an instruct model's own conversation format, from its chat template.

An instruct model (SmolLM2-Instruct, Qwen2.5-Instruct, Llama-3-Instruct, Gemma-it) was fine-tuned on
conversations written in one exact format -- ``<|im_start|>user\\n...<|im_end|>`` for ChatML,
``<|start_header_id|>user<|end_header_id|>\\n\\n...<|eot_id|>`` for Llama 3 -- and answers well only
when prompted in it.  The format ships with the model as a Jinja template: ``chat_template`` in its
``tokenizer_config.json`` (or a ``chat_template.jinja`` beside it), or ``tokenizer.chat_template`` in
a GGUF file.  zoo renders it the way transformers' ``apply_chat_template`` does::

    model = zoo.load("runs/smollm2")                          # converted with its template
    model.chat([{"role": "user", "content": "Hi!"}])          # -> the reply, a str
    for piece in model.chat(messages, stream=True): ...       # -> the reply, piece by piece
    zoo.run.chat.render(template, messages, add_generation_prompt=True, bos_token="<s>")   # the prompt

The rendering matches transformers character for character (tests/run/test_chat.py, on the templates of
five real families): the same Jinja settings (``trim_blocks``, ``lstrip_blocks``, loop controls, a
``{% generation %}`` tag), the same helpers (``raise_exception``, ``strftime_now``, a ``tojson`` that
keeps non-ASCII and does not escape HTML), the special-token strings (``bos_token``, ``eos_token``,
...) as variables.  A template is code written by someone else, so it runs in Jinja's
*immutable sandbox* (no attribute access to Python internals, no mutation of the values passed in,
ranges bounded) inside a worker process bounded in memory, time, recursion and output
(:mod:`zoo.guard.sandbox`), and any failure -- a syntax error, ``raise_exception("Conversation roles
must alternate")`` in the template, a sandbox violation, a division by zero, a loop that never ends,
a billion-character prompt, a function printed as text -- is a :class:`ChatError` naming the
template.

A checkpoint keeps its template: ``zoo.save`` stores ``model.chat_template`` in the metadata
(``zoo.extra.chat_template``) and :func:`template_of` finds it again after ``zoo.load``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ..errors import ZooError
from ..guard import sandbox
from ..guard.files import clip, read_text, short

from ..io.chat_templates import (END_OF_TURN, MAX_TEMPLATE_CHARS, META_EXTRA, SPECIAL_NAMES,  # noqa: F401
                             ChatError, stored, template_of)



# ---------------------------------------------------------------------- rendering
# A template runs in zoo.guard.sandbox's worker process: Jinja's immutable sandbox with transformers'
# settings and helpers, bounded in memory, time, recursion and output.


def compile_template(template: str) -> str:
    """``template``, checked to compile in the box (:mod:`zoo.guard.sandbox`, which caches it), or
    a :class:`ChatError` with the line of a syntax error."""
    if not isinstance(template, str) or not template:
        raise ChatError(f"a chat template is a non-empty string, got {short(template)}", where="chat_template",
                        fix="pass the chat_template text of tokenizer_config.json")
    if len(template) > MAX_TEMPLATE_CHARS:
        raise ChatError(f"the template has {len(template):,} characters, more than {MAX_TEMPLATE_CHARS:,}",
                        where="chat_template", fix="pass the model's own chat template")
    import jinja2

    try:
        sandbox.render(template, compile_only=True)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise ChatError(f"the template does not parse: {clip(exc.message or exc, 160)} (line {exc.lineno})",
                        where="chat_template", fix="fix the template's Jinja syntax") from exc
    except sandbox.Stopped as exc:  # nested too deeply for Python's compiler, or worse
        raise ChatError(exc.what, where="chat_template", fix=exc.fix) from exc
    return template


def check_messages(messages: Any) -> list[dict]:
    """A conversation: a non-empty list of ``{"role": str, "content": str | list, ...}`` dicts
    (copied as plain data, so the template sees exactly what transformers' does)."""
    fix = 'pass e.g. [{"role": "user", "content": "Hello"}]'
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ChatError(f"messages must be a non-empty list of dicts, got {short(messages)}", where="chat.messages",
                        fix=fix)
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) \
                or not isinstance(m.get("content", ""), (str, list, type(None))):
            raise ChatError(f"message {i} must be a dict with a string 'role' and a 'content', got {short(m)}",
                            where=f"chat.messages[{i}]", fix=fix)
        out.append(json.loads(json.dumps(dict(m))))  # plain JSON data: no objects with methods
    return out


def render(template: str, messages: Sequence[Mapping], *, add_generation_prompt: bool = True,
           tools: list | None = None, documents: list | None = None, **variables: Any) -> str:
    """The prompt text of ``messages`` in ``template``'s format (as transformers'
    ``apply_chat_template(..., tokenize=False)``); ``variables`` are the special-token strings
    (``bos_token="<s>"``) and any extra the template reads (``enable_thinking=False``)."""
    import jinja2

    compile_template(template)
    msgs = check_messages(messages)
    try:  # in the box: what the template raised comes back as Jinja's or Python's exception
        return sandbox.render(template, dict(messages=msgs, tools=tools, documents=documents,
                                             add_generation_prompt=add_generation_prompt, **variables))
    except sandbox.Stopped as exc:  # time, memory, output size, recursion, what it printed, ...
        raise ChatError(exc.what, where="chat_template", fix=exc.fix) from exc
    except jinja2.exceptions.SecurityError as exc:
        raise ChatError.of("chat.sandbox", where="chat_template", detail=clip(exc, 160)) from exc
    except jinja2.exceptions.TemplateError as exc:  # raise_exception(...) in the template, undefined calls
        raise ChatError.of("chat.refused", where="chat_template", detail=clip(exc, 200)) from exc
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError, RecursionError) as exc:
        raise ChatError.of("chat.failed", where="chat_template", error=type(exc).__name__,
                           detail=clip(exc, 160)) from exc


# ---------------------------------------------------------------------- where a template lives
def _token_text(v: Any) -> str | None:
    """A special token in tokenizer_config.json: ``"<s>"`` or ``{"content": "<s>", ...}``."""
    if isinstance(v, str):
        return v
    if isinstance(v, Mapping) and isinstance(v.get("content"), str):
        return v["content"]
    return None


def folder_template(path: str | os.PathLike) -> dict | None:
    """The chat template of a Hugging Face folder: ``chat_template.jinja`` (transformers >= 4.43
    writes it there), else ``chat_template`` in ``tokenizer_config.json`` (a string, or a list of
    named templates: the one named ``default``), with the special-token strings the config names.
    None when the folder has no template."""
    d = Path(path)
    cfg: dict = {}
    if (d / "tokenizer_config.json").exists():
        text = read_text(d / "tokenizer_config.json", where="tokenizer_config.json", root=d,
                         max_bytes=64 * 1024 * 1024, error=ChatError)
        try:
            cfg = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ChatError(f"tokenizer_config.json is not JSON: {clip(exc, 80)}", where="tokenizer_config.json",
                            fix="pass the file save_pretrained wrote") from exc
        if not isinstance(cfg, dict):
            raise ChatError("tokenizer_config.json must be a JSON object", where="tokenizer_config.json",
                            fix="pass the file save_pretrained wrote")
    template = None
    if (d / "chat_template.jinja").exists():
        template = read_text(d / "chat_template.jinja", where="chat_template.jinja", root=d,
                             max_bytes=MAX_TEMPLATE_CHARS * 4, error=ChatError)
    else:
        template = cfg.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
            template = named.get("default")
    if template is None:
        return None
    if not isinstance(template, str):
        raise ChatError(f"chat_template must be a string, got {short(template)}",
                        where="tokenizer_config.json: chat_template", fix="pass the file save_pretrained wrote")
    compile_template(template)  # a broken template is reported at conversion, not at the first chat
    specials = {k: _token_text(cfg.get(k)) for k in SPECIAL_NAMES}
    return {"template": template, "special_tokens": {k: v for k, v in specials.items() if v is not None}}


# ---------------------------------------------------------------------- chatting
def _specials(tok, stored_specials: dict) -> dict:
    """The special-token strings passed to the template: what the checkpoint stored, else the
    tokenizer's own bos / eos / unk / pad tokens."""
    out = dict(stored_specials)
    inner = getattr(tok, "tok", None)  # the hf tokenizer's library object
    for name in ("bos", "eos", "unk", "pad", "mask"):
        i = getattr(tok, f"{name}_id", None)
        if f"{name}_token" in out or i is None:
            continue
        text = inner.id_to_token(i) if inner is not None and hasattr(inner, "id_to_token") else None
        if text is None:
            try:
                text = tok.decode([i], skip_special=False)
            except TypeError:
                text = tok.decode([i])
        out[f"{name}_token"] = text
    return out


def prompt(model, messages: Sequence[Mapping], *, tokenizer=None, add_generation_prompt: bool = True,
           **variables: Any) -> str:
    """The prompt text ``model.chat`` generates from (its template rendered on ``messages``)."""
    from ..io.tokenizers import get_tokenizer

    t = template_of(model)
    if t is None:
        raise ChatError("the model has no chat template", where="model.chat_template",
                        fix="convert an instruct model whose tokenizer_config.json (or GGUF file) has one, "
                            "or set model.chat_template = TEMPLATE_TEXT")
    tok = get_tokenizer(model, tokenizer, where="chat.tokenizer")
    return render(t["template"], messages, add_generation_prompt=add_generation_prompt,
                  **{**_specials(tok, t["special_tokens"]), **variables})


def stop_ids(tok) -> list[int]:
    """The tokenizer's eos and the end-of-turn tokens of the common formats in its vocabulary."""
    out = [tok.eos_id] if tok.eos_id is not None else []
    inner = getattr(tok, "tok", None)
    if inner is not None and hasattr(inner, "token_to_id"):
        for t in END_OF_TURN:
            i = inner.token_to_id(t)
            if i is not None and i not in out:
                out.append(i)
    return out


def chat(model, messages: Sequence[Mapping], max_new_tokens: int = 256, *, stream: bool = False,
         tokenizer=None, template_variables: dict | None = None, **options: Any) -> str | Iterator[str]:
    """The assistant's reply to ``messages`` (greedy unless sampling options are given; see
    :func:`zoo.run.generate.generate`); ``stream=True`` yields it piece by piece.  Generation stops at
    the tokenizer's eos or an end-of-turn token (``stop_tokens=`` overrides), and at the model's
    ``max_len``: a long conversation gets the room its context leaves (``max_new_tokens`` is
    capped), and one that fills the context is a :class:`ChatError`."""
    from .generate import generate_text, stream_text
    from ..io.tokenizers import get_tokenizer

    text = prompt(model, messages, tokenizer=tokenizer, **(template_variables or {}))
    tok = get_tokenizer(model, tokenizer, where="chat.tokenizer")
    if model.spec.arch == "decoder":  # the last new token is never fed back: max_len - n + 1 fit
        n = len(tok.encode(text))
        room = model.spec.max_len - n + 1
        if room < 1:
            raise ChatError(f"the conversation is {n} tokens, the model reads at most {model.spec.max_len}",
                            where="chat.messages", fix="start a new conversation (zoo chat: /reset) or "
                                                       "drop its oldest turns")
        if isinstance(max_new_tokens, int) and not isinstance(max_new_tokens, bool):
            max_new_tokens = min(max_new_tokens, room)
    options.setdefault("stop_tokens", stop_ids(tok))
    if stream:
        return stream_text(model, text, max_new_tokens, tokenizer=tok, **options)
    return generate_text(model, text, max_new_tokens, tokenizer=tok, **options)
