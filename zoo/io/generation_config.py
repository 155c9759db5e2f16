"""A converted model's generation settings as stored data: what its source said about choosing tokens.

A transformers model carries a ``generation_config`` (``generation_config.json`` in its folder, or
the generation fields of ``config.json`` when there is none) whose fields change the tokens its
``generate`` produces: a Marian model bans its pad token (``bad_words_ids``) and forces its last
token to eos (``forced_eos_token_id``), BART forces its first token (``forced_bos_token_id``) and
never repeats a 3-gram (``no_repeat_ngram_size``), an instruct model stops at any of several
end-of-turn ids (an ``eos_token_id`` list), and every one names its special ids.  zoo keeps those
fields on the model as ``model.generation_config`` -- a dict in transformers' own field names,
checked by :func:`read` -- and :func:`zoo.save` writes it under ``zoo.extra.generation_config``
(JSON), so it travels through ``zoo.save`` / ``zoo.load`` and back out through
:func:`zoo.convert.to_transformers`.  How generation applies each field (as the default of one
:class:`zoo.run.options.GenerationOptions` option, overridable per call) is declared on the option
itself (``Option.hf``); this module only reads and writes the value.

:data:`FIELDS` is the list zoo keeps.  The fields of a *decoding strategy* (``num_beams``,
``do_sample``, ``temperature``, ``top_k``, ``top_p``, ...) are the caller's choice and are not kept:
zoo never beam-searches or samples unless asked.  :data:`NOT_APPLIED` names the token-changing
fields zoo has no equivalent of; a conversion lists the ones its source sets
(``convert_info["generation_config_not_applied"]``), so nothing is dropped silently.
"""
from __future__ import annotations

import json
import math
from typing import Any, Mapping

from ..errors import CheckpointError
from ..guard.files import short

#: Metadata entry (``zoo.extra.`` + this) holding a checkpoint's generation settings, as JSON.
META_EXTRA = "generation_config"

#: transformers' field -> its kind: ``token`` (one id), ``tokens`` (one id or a list of ids),
#: ``token_list`` (a list of ids), ``token_lists`` (a list of id sequences), ``count`` (an integer
#: >= 0), ``length`` (an integer >= 1), ``number`` (a finite number), ``flag`` (true / false).
FIELDS: dict[str, str] = {
    "bos_token_id": "token", "eos_token_id": "tokens", "pad_token_id": "token",
    "decoder_start_token_id": "token",
    "forced_bos_token_id": "token", "forced_eos_token_id": "tokens", "bad_words_ids": "token_lists",
    "suppress_tokens": "token_list", "begin_suppress_tokens": "token_list",
    "no_repeat_ngram_size": "count", "max_length": "length",
    "repetition_penalty": "number", "length_penalty": "number", "early_stopping": "flag",
}
#: Fields that change tokens but are not kept: the decoding strategy (the caller's) and rules zoo
#: has no equivalent of.
NOT_APPLIED = ("num_beams", "do_sample", "temperature", "top_k", "top_p", "min_p", "typical_p",
               "epsilon_cutoff", "eta_cutoff", "top_h", "num_beam_groups", "diversity_penalty",
               "penalty_alpha", "min_length", "min_new_tokens", "max_new_tokens",
               "encoder_no_repeat_ngram_size", "encoder_repetition_penalty", "sequence_bias",
               "force_words_ids", "constraints", "forced_decoder_ids", "guidance_scale",
               "exponential_decay_length_penalty", "renormalize_logits", "remove_invalid_values",
               "watermarking_config")
#: Most ids in one list, and most entries of ``bad_words_ids`` (a real config lists a few).
MAX_IDS = 10_000


#: The special ids a model config class fills in by default (``GPT2Config``: 50256) whatever the
#: vocabulary: outside it in a *derived* generation config, they are left out (see :func:`read`).
SPECIAL_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")


def read(raw: Mapping[str, Any], vocab_size: int, *, where: str = "generation_config",
         error: type = CheckpointError, derived: bool = False) -> tuple[dict, list[str]]:
    """``(kept, not_applied)`` of a transformers generation config ``raw`` (a dict in its field
    names): ``kept`` the :data:`FIELDS` it sets (absent or null ones left out), type and range
    checked, every id inside ``[0, vocab_size)``, an ``eos_token_id`` / ``forced_eos_token_id`` of
    one id as given; ``not_applied`` the :data:`NOT_APPLIED` fields it sets to something (an
    ``early_stopping: "never"`` counts there too).  A bad value is an ``error`` (a
    :class:`~zoo.errors.ZooError` class) at ``<where>.<field>``.

    ``derived``: ``raw`` is what transformers derives from a model config when there is no
    generation config (``_from_model_config``, or ``config.json``'s fields).  Its special ids
    (:data:`SPECIAL_IDS`) may then be a config class's placeholders -- every ``GPT2Config`` says
    ``bos_token_id: 50256``, whatever its vocabulary, and transformers only warns -- so one outside
    the vocabulary is left out and listed in ``not_applied`` as ``field=value (outside the
    vocabulary)`` instead of refused.  A value a generation config states is always checked."""
    if not isinstance(raw, Mapping):
        raise error(f"expected an object of generation settings, got {short(raw)}", where=where,
                    fix="repair generation_config.json (it does not look like one transformers wrote)")
    kept, skipped = {}, [k for k in NOT_APPLIED if raw.get(k) not in (None, [], {})]
    for name, kind in FIELDS.items():
        v = raw.get(name)
        if v is None:
            continue
        if name == "early_stopping" and v == "never":  # transformers' canonical beam stop: not zoo's
            skipped.append(name)
            continue
        if derived and name in SPECIAL_IDS and _outside(v, vocab_size):
            skipped.append(f"{name}={short(v)} (outside the vocabulary [0, {vocab_size}))")
            continue
        kept[name] = _value(v, kind, vocab_size, f"{where}.{name}", error)
    return kept, skipped


def _outside(v: Any, vocab: int) -> bool:
    """Ids (one, or a list) of which one is an integer outside ``[0, vocab)``."""
    return any(_is_int(x) and not 0 <= x < vocab for x in (v if isinstance(v, (list, tuple)) else [v]))


def _value(v: Any, kind: str, vocab: int, where: str, error: type) -> Any:
    def bad(expected: str):
        return error(f"expected {expected}, got {short(v)}", where=where,
                     fix="repair generation_config.json, or drop the field")

    def token(x) -> int:
        if not _is_int(x):
            raise bad("a token id (an integer)")
        if not 0 <= x < vocab:
            raise error(f"token id {x} is outside the vocabulary [0, {vocab})", where=where,
                        fix="use an id of the model's vocabulary, or drop the field")
        return x

    def ids(x, what: str) -> list[int]:
        if not isinstance(x, (list, tuple)) or len(x) > MAX_IDS:
            raise bad(f"{what} (at most {MAX_IDS})")
        return [token(i) for i in x]

    if kind == "token":
        return token(v)
    if kind == "tokens":
        if _is_int(v):
            return token(v)
        if not isinstance(v, (list, tuple)) or not v:
            raise bad("a token id or a non-empty list of them")
        return ids(v, "a list of token ids")
    if kind == "token_list":
        return ids(v, "a list of token ids")
    if kind == "token_lists":
        if not isinstance(v, (list, tuple)) or not v or len(v) > MAX_IDS \
                or any(not isinstance(s, (list, tuple)) or not s for s in v):
            raise bad("a non-empty list of non-empty lists of token ids")
        return [ids(s, "a list of token ids") for s in v]
    if kind in ("count", "length"):
        if not _is_int(v) or not (0 if kind == "count" else 1) <= v < 2**31:
            raise bad(f"an integer >= {0 if kind == 'count' else 1}")
        return v
    if kind == "number":
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise bad("a finite number")
        return float(v)
    if not isinstance(v, bool):  # flag
        raise bad("true or false")
    return v


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def read_stored(meta: Mapping[str, str], vocab_size: int, where: str) -> dict | None:
    """The settings a checkpoint's metadata holds (``zoo.extra.generation_config``), checked as
    :func:`read` checks a source's -- what ``zoo.load`` sets as ``model.generation_config`` -- or
    None when it holds none.  Anything else: a :class:`~zoo.errors.CheckpointError`."""
    text = meta.get(f"zoo.extra.{META_EXTRA}")
    if text is None:
        return None
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        raw = text
    kept, _ = read(raw, vocab_size, where=f"{where}: zoo.extra.{META_EXTRA}", error=CheckpointError)
    return kept


def stored(model) -> str | None:
    """The metadata value :func:`zoo.save` writes for ``model.generation_config`` (JSON), or None
    when the model has none."""
    cfg = getattr(model, "generation_config", None)
    return json.dumps(cfg, sort_keys=True) if cfg else None
