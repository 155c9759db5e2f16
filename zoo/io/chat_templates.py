"""A checkpoint's chat template as stored data: where it lives on a model and in the metadata.

An instruct model's template (see :mod:`zoo.run.chat` for rendering it and chatting) travels with the
model as ``model.chat_template`` and is written by :func:`zoo.save` under ``zoo.extra.chat_template``
as JSON.  On every path zoo makes a model by -- ``zoo.convert.from_pretrained``, ``from_gguf``,
``zoo.load`` of any checkpoint, converted or saved again -- the attribute is one type: the dict
``{"template": str, "special_tokens": {"bos_token": str, ...}}`` (:func:`normalised`), or absent when
the model has none.  This module only reads and writes that value, so the checkpoint files
(``zoo.io.checkpoint``) can carry it without knowing how a template is rendered.
"""
from __future__ import annotations

import json

from ..errors import CheckpointError, ZooError
from ..guard.files import short

#: Metadata entry (``zoo.extra.`` + this) holding a checkpoint's template, as JSON
#: ``{"template": str, "special_tokens": {"bos_token": ..., ...}}``.
META_EXTRA = "chat_template"
#: Longest template accepted (a real one is 1-10 KB; Llama 3.1's with tools ~5 KB).
MAX_TEMPLATE_CHARS = 256 * 1024
#: The special-token names passed to a template as variables (transformers' special_tokens_map).
SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")
#: End-of-turn tokens generation stops at (besides the tokenizer's eos) when the vocabulary has them.
END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "</s>")


class ChatError(ZooError):
    """A chat template or a conversation that cannot be rendered."""


def normalised(t: dict) -> dict:
    """``{"template": str, "special_tokens": {...}}`` of a template dict: the special-token strings
    of :data:`SPECIAL_NAMES` only (a non-dict ``special_tokens`` counts as none)."""
    specials = t.get("special_tokens")
    specials = specials if isinstance(specials, dict) else {}
    return {"template": t["template"],
            "special_tokens": {k: v for k, v in specials.items() if k in SPECIAL_NAMES and isinstance(v, str)}}


def read_stored(meta: dict, where: str) -> dict | None:
    """The template a checkpoint's metadata holds (``zoo.extra.chat_template``), :func:`normalised`
    -- what ``zoo.load`` sets as ``model.chat_template`` -- or None when it holds none.  Not a JSON
    object with a ``template`` string: a :class:`~zoo.errors.CheckpointError`."""
    raw = meta.get(f"zoo.extra.{META_EXTRA}")
    if raw is None:
        return None
    try:
        t = json.loads(raw)
    except (ValueError, RecursionError):
        t = None
    if not (isinstance(t, dict) and isinstance(t.get("template"), str)):
        raise CheckpointError(f"the stored chat template is not an object with a 'template' string, got "
                              f"{short(raw)}", where=f"{where}: zoo.extra.{META_EXTRA}",
                              fix="re-save the checkpoint with zoo.save")
    return normalised(t)


def template_of(model) -> dict | None:
    """``{"template": str, "special_tokens": {...}}`` of a model: ``model.chat_template`` (a str or
    such a dict; set by conversion), else the one its checkpoint stored; None when it has none."""
    t = getattr(model, "chat_template", None)
    if t is None:
        t = read_stored(getattr(model, "checkpoint_metadata", None) or {}, "checkpoint")
        if t is None:
            return None
    if isinstance(t, str):
        t = {"template": t}
    if not isinstance(t, dict) or not isinstance(t.get("template"), str):
        raise ChatError(f"model.chat_template must be a string or {{'template': str}}, got {short(t)}",
                        where="model.chat_template", fix="set it to the template text")
    return normalised(t)


def stored(model) -> str | None:
    """The metadata value :func:`zoo.save` writes for the model's template (JSON), or None."""
    t = getattr(model, "chat_template", None)
    if t is None:
        return None
    return json.dumps(template_of(model), ensure_ascii=False)
