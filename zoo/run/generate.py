"""Generation: the decoding loop, for decoder-only and encoder-decoder models, on ids or on text.

``generate`` runs a model forward one token at a time: a *logits coroutine* runs the model (a
prefill over the prompt, then one step per token from the KV cache: :mod:`zoo.run.steps`, or
:mod:`zoo.run.seq2seq` for an encoder-decoder, or :mod:`zoo.run.compiled` with ``compile=True``),
and the loop here chooses each next token (:mod:`zoo.run.sampling`: greedy, sampling, the
repetition penalty), stops the rows that produced a stop token, and hands the tokens out.  Every
option is declared once, in :class:`zoo.run.options.GenerationOptions`, and checked before any work;
the prompts are read by :func:`zoo.run.arguments.prompt_batch`.

Beam search (``num_beams > 1``, :mod:`zoo.run.beam`) keeps the ``num_beams`` most likely sequences per
prompt instead of one, scored by their summed log-probabilities over ``length ** length_penalty``;
the static cache is reordered in place between steps.  ``generate`` then returns each prompt's
``num_return_sequences`` best sequences (``B * num_return_sequences`` rows) and ``stream`` yields the
best sequence's tokens once the search is over.

Batches of different lengths are **left-padded** (pads before the prompt, ``attention_mask`` 0 there)
so that every row's next token lands in the same column; positions are counted from each row's first
real token, so a padded row generates exactly what it would alone.  A row stops at one of its
``stop_tokens`` and is padded afterwards; generation ends when every row has stopped.  Rows that
have stopped are dropped from the batch the model computes once they are 1/8 of it
(:class:`zoo.run.steps.LiveRows`), so a finished row stops costing compute.

Entry points: ``model.generate(...)`` (a method on every zoo model), :func:`generate`,
:func:`stream` (an iterator of the new tokens, for the CLI and UI) and, for text,
``model.generate("你好", tokenizer=tok)`` returning a string, :func:`stream_text` yielding pieces.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterator, Sequence

import torch

from . import beam
from .arguments import prompt_batch, zoo_model
from .input_contract import admit
from .options import GenerationOptions, model_defaults
from .sampling import Chooser, beam_processor, beam_sampler, check_choosable
from .seq2seq import seq2seq_logits, start_id
from .steps import decoder_logits, make_head
from ..deprecation import moved
from ..errors import TokenizerError, ZooError
from ..guard.compat import require
from ..guard.files import short
from ..guard.health import finite_steps
from ..guard.run_budget import check_generate
from ..io.tokenizers import check_fits, checked_tokenizer, get_tokenizer

#: New tokens when neither max_new_tokens nor max_length says how many.
DEFAULT_NEW_TOKENS = 32


# ---------------------------------------------------------------------- the decoding loop
def stream(model, ids, max_new_tokens: int | None = None, *,
           attention_mask: torch.Tensor | None = None, tokenizer=None,
           **options: Any) -> Iterator[torch.Tensor]:
    """Yield the next token of every row, ``(B,)`` per step, as soon as it is chosen.

    ``ids``: the prompt (decoder-only) or the source (encoder-decoder), as a ``(B, T)`` tensor (with
    an optional left-padded ``attention_mask``), a list of ids, or a list of lists (left-padded
    here).  ``options``: the fields of :class:`GenerationOptions` (sampling, stop tokens, cache...),
    checked before any work is done.  Rows that have produced a stop token yield ``pad_id``
    afterwards; the iterator ends when every row has stopped or after ``max_new_tokens`` steps
    (None: what ``max_length`` leaves, else 32).  A converted model's generation config
    (``model.generation_config``) gives the defaults of the options it sets -- its eos ids, pad and
    decoder start ids, forced and banned tokens, ``max_length`` -- and a call's own options override
    them, an explicit ``None`` or ``[]`` switching one off (:func:`zoo.run.options.model_defaults`).
    ``prefix_length`` (prefix LMs): how many leading tokens attend bidirectionally; default the
    whole (padded) prompt.  ``decoder_start_id`` (encoder-decoder): the first decoder token;
    default the model's ``decoder_start_token_id``, else the tokenizer's bos, else ``pad_id`` (as in
    T5).  ``vocab_limit``: only ids below it
    may be chosen (the text helpers set it to the tokenizer's size when the model's vocabulary is
    larger).  ``repetition_penalty`` (> 1 to use it): make every token already in the sequence (the
    prompt's real tokens, or an encoder-decoder's decoder tokens, and what was generated) less
    likely, see :func:`zoo.run.sampling.penalize_repeats`; with greedy decoding too.
    """
    o, ids, padding, start, pad = _prepare(model, ids, max_new_tokens, attention_mask, tokenizer,
                                           options)
    if o.num_beams > 1:  # the tokens are known only once the search is over: then yielded
        found = _beam_search(model, ids, padding, o, start, pad)
        return iter(found.sequences[:, found.sequences.size(1) - int(found.lengths.max()):].t())
    steps = _logits(model, ids, padding, o, start)  # a coroutine: logits out, chosen ids in
    choose = Chooser(model, o, ids, padding, start)
    stops = torch.as_tensor(o.stop_list(), dtype=torch.long, device=ids.device)
    # everything above ran now, so bad options raise here, not at the first next()
    return _run(model, steps, choose, stops, ids.size(0), o.max_new_tokens, pad, ids.device)


def _prepare(model, ids, max_new_tokens, attention_mask, tokenizer, options: dict):
    """What every generation checks before any work -- the model, the options (their token ids
    against the vocabulary), the prompts, the KV cache and ``compile`` -- and the values it runs
    with: ``(options, ids (B, T), padding (B, T) True = real or None, start id or None, pad id)``."""
    zoo_model(model, "generate.model")
    if model.spec.arch == "encoder":
        raise ZooError.of("generate.encoder_only", where="model.arch")
    options = {**model_defaults(model), **options}  # the model's generation config, then the call's
    o = GenerationOptions.from_kwargs(max_new_tokens=DEFAULT_NEW_TOKENS if max_new_tokens is None
                                      else max_new_tokens, **options)
    o.check_vocab(model.spec.vocab_size)
    pad = _pad_id(model, tokenizer) if o.pad_id is None else o.pad_id
    ids, padding = prompt_batch(model, ids, attention_mask, pad)
    if max_new_tokens is None and o.max_length is not None:  # what max_length leaves, as in HF
        used = ids.size(1) if model.spec.arch == "decoder" else 1
        o = dataclasses.replace(o, max_new_tokens=max(o.max_length - used, 0))
    if o.use_cache:
        require(model.spec, "supports_kv_cache", "generation with a KV cache")
    if o.compile:
        _check_compile(model, o)
    start = None if model.spec.arch == "decoder" else start_id(model, tokenizer, o, pad)
    return o, ids, padding, start, pad


def _check_compile(model, o: GenerationOptions) -> None:
    """``compile=True``: refuse (a ZooError naming the option) what compiled decoding does not
    cover, before any work (:func:`zoo.run.compiled.check_compilable`)."""
    from . import compiled

    compiled.check_compilable(model, use_cache=o.use_cache, num_beams=o.num_beams)


def _logits(model, ids, padding, o: GenerationOptions, start: int | None):
    """The logits coroutine of the model's architecture, once the length fits ``max_len``."""
    n, max_len = o.max_new_tokens, model.spec.max_len
    check_generate(model, ids.size(0), ids.size(1), n)  # the cache and the prompt's forward fit?
    if model.spec.arch == "decoder":
        T0 = ids.size(1)
        if T0 + max(n - 1, 0) > max_len:
            raise ZooError.of("generate.too_long", where="generate.max_new_tokens", prompt=T0, new=n,
                              max_len=max_len, room=max(max_len - T0 + 1, 0))
        if o.compile:
            from . import compiled  # torch.compile is imported only when asked for

            return finite_steps(compiled.decoder_logits(model, ids, padding, n), model)
        return finite_steps(decoder_logits(model, ids, padding, o.use_cache, o.prefix_length,
                                           make_head(model, n), n), model)
    if n > max_len:
        raise ZooError.of("generate.too_many", where="generate.max_new_tokens", new=n, max_len=max_len)
    return finite_steps(seq2seq_logits(model, ids, padding, o.use_cache, start,
                                       make_head(model, n), n), model)


def _beam_search(model, ids, padding, o: GenerationOptions, start: int | None, pad: int):
    """Beam search (:mod:`zoo.run.beam`) over ``K = num_beams`` copies of every row: the logits
    coroutine runs on ``B*K`` rows and reorders its cache in place between steps."""
    K = o.num_beams
    ids_k = ids.repeat_interleave(K, dim=0)  # (B*K, T): row b*K + k is beam k of prompt b
    padding_k = padding.repeat_interleave(K, dim=0) if padding is not None else None
    if model.spec.arch == "decoder":
        seq, real = ids_k, padding_k
    else:
        seq, real = torch.full((ids_k.size(0), 1), start, dtype=torch.long, device=ids.device), None
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            found = beam.search(_logits(model, ids_k, padding_k, o, start), seq, real, num_beams=K,
                                max_new_tokens=o.max_new_tokens,
                                stops=torch.as_tensor(o.stop_list(), dtype=torch.long, device=ids.device),
                                pad=pad, length_penalty=float(o.length_penalty),
                                early_stopping=o.early_stopping,
                                num_return_sequences=o.num_return_sequences,
                                process=beam_processor(o, model.spec.vocab_size, ids.device, seq.size(1)),
                                sample=beam_sampler(o, ids.device),
                                stuck=lambda ok, t: check_choosable(ok, t, o, unit="prompt"))
    finally:
        if was_training:
            model.train()
    return beam.BeamResult(found.sequences.clone(), found.scores.clone(), found.lengths.clone())


def _run(model, steps, choose, stops, B, max_new_tokens, pad, device) -> Iterator[torch.Tensor]:
    """Drive a logits coroutine: choose, stop rows, yield ``(B,)`` ids per step."""
    was_training = model.training
    if was_training:  # eval() walks every module: skip it when there is nothing to switch
        model.eval()
    # Streaming: inference_mode (cheaper per op than no_grad) only around the model's work, never
    # across a yield, and what is yielded is cloned into an ordinary tensor the caller may use
    # anywhere.  generate() runs the whole loop inside one inference_mode instead (entering it
    # costs a few microseconds, a visible share of a small model's decoding step).
    inside = torch.is_inference_mode_enabled()
    mode = contextlib.nullcontext if inside else torch.inference_mode
    try:
        with mode():
            finished = torch.zeros(B, dtype=torch.bool, device=device)
            logits = next(steps) if max_new_tokens else None
        for step in range(max_new_tokens):
            with mode():
                if step:  # with stop tokens the coroutine is told which rows are done
                    logits = steps.send((nxt, None, finished) if stops.numel() else nxt)
                nxt = choose(logits, finished if stops.numel() else None)  # (B,)
                if stops.numel():
                    nxt = torch.where(finished, torch.full_like(nxt, pad), nxt)
                    finished |= torch.isin(nxt, stops)
                done = step == max_new_tokens - 1 or (stops.numel() and bool(finished.all()))
            yield nxt if inside else nxt.clone()
            if done:
                break
    finally:
        steps.close()
        if was_training:
            model.train()


@torch.no_grad()
def generate(model, ids, max_new_tokens: int | None = None, *, stream_tokens: bool = False,
             tokenizer=None, skip_special: bool = True, **options: Any):
    """Generate from ``ids`` (see :func:`stream` for the options); also accepts text.

    Returns, like Hugging Face's ``generate``: for a decoder-only model the prompt followed by the new
    tokens, ``(B, T + N)`` (left padding kept); for an encoder-decoder the decoder sequence
    ``(B, 1 + N)`` starting with the start token.  Rows that stopped early are padded with ``pad_id``.

    Text in, text out: when ``ids`` is a string (or a list of strings), it is encoded with
    ``tokenizer`` (default ``model.tokenizer``) and the *new* text is returned (a string, or a list).
    ``stream_tokens=True`` returns an iterator instead: of ``(B,)`` id tensors, or of text pieces.
    """
    zoo_model(model, "generate.model")
    options = {**model_defaults(model), **options}  # the model's generation config, then the call's
    if isinstance(ids, str) or (isinstance(ids, (list, tuple)) and ids and isinstance(ids[0], str)):
        texts = [ids] if isinstance(ids, str) else list(ids)
        if stream_tokens:
            if len(texts) != 1:
                raise ZooError("text streaming takes one prompt", where="generate.ids",
                               fix="stream one prompt at a time, or pass ids for a batch")
            return stream_text(model, texts[0], max_new_tokens, tokenizer=tokenizer,
                               skip_special=skip_special, **options)
        out = generate_text(model, texts, max_new_tokens, tokenizer=tokenizer,
                            skip_special=skip_special, **options)
        return out[0] if isinstance(ids, str) else out
    if stream_tokens:
        return stream(model, ids, max_new_tokens, tokenizer=tokenizer, **options)
    if options.get("num_beams", 1) != 1:  # the sequences as found: B * num_return_sequences rows
        return _beam_generate(model, ids, max_new_tokens, tokenizer, **options)
    pad = options.get("pad_id")
    pad = _pad_id(model, tokenizer) if pad is None else pad
    with torch.inference_mode():  # once for the whole loop (see _run); the results are
        new = list(stream(model, ids, max_new_tokens, tokenizer=tokenizer, **options))
    # ... inference tensors, but torch.cat below runs outside inference mode: an ordinary tensor
    dev = next(model.parameters()).device
    if model.spec.arch == "decoder":
        prompt, _ = prompt_batch(model, ids, options.get("attention_mask"), pad)
    else:
        B = prompt_batch(model, ids, options.get("attention_mask"), pad)[0].size(0)
        start = start_id(model, tokenizer, GenerationOptions(
            decoder_start_id=options.get("decoder_start_id")), pad)
        prompt = torch.full((B, 1), start, dtype=torch.long, device=dev)
    if not new:
        return prompt
    return torch.cat([prompt, torch.stack(new, dim=1)], dim=1)  # (B, T + N)


def _beam_generate(model, ids, max_new_tokens, tokenizer, attention_mask=None, **options):
    """:func:`generate` with ``num_beams > 1``: ``(B * num_return_sequences, T + N)``, each
    prompt's best sequences first, as Hugging Face's ``generate`` returns them."""
    o, ids, padding, start, pad = _prepare(model, ids, max_new_tokens, attention_mask, tokenizer,
                                           options)
    return _beam_search(model, ids, padding, o, start, pad).sequences


def _pad_id(model, tokenizer=None) -> int:
    """The id of padding and of rows that stopped: the spec's ``pad_id``, else the tokenizer's
    (when inside the vocabulary), else 0."""
    if model.spec.pad_id is not None:
        return model.spec.pad_id
    tok = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    if tok is not None:
        checked_tokenizer(tok, "generate.tokenizer")
    if tok is not None and getattr(tok, "pad_id", None) is not None and tok.pad_id < model.spec.vocab_size:
        return tok.pad_id
    return 0


# ---------------------------------------------------------------------- text helpers
def _check_prompts(prompts) -> None:
    """Text prompts: one ``str`` or a non-empty list/tuple of them."""
    if isinstance(prompts, str):
        return
    if not isinstance(prompts, (list, tuple)) or not prompts \
            or not all(isinstance(p, str) for p in prompts):
        raise ZooError(f"prompts must be a string or a non-empty list of strings, got "
                       f"{short(prompts)}", where="generate.prompts",
                       fix="pass text, e.g. generate_text(model, 'Once upon a time')")


def _encode_prompt(model, tok, text: str) -> list[int]:
    ids = tok.encode(admit(model, tok, text))  # the checkpoint's input contract (zoo.run.input_contract)
    if model.spec.arch == "encoder_decoder" and tok.eos_id is not None:
        ids = ids + [tok.eos_id]  # a source sentence ends with eos (as in T5 / Marian)
    if not ids:
        if tok.bos_id is None:
            raise TokenizerError("the prompt is empty and the tokenizer has no bos token",
                                 where="generate.prompt", fix="give a non-empty prompt")
        ids = [tok.bos_id]
    return ids


def _stops(tok, options: dict) -> dict:
    """Text stops at the tokenizer's eos, unless the call (or the model's generation config) says
    where."""
    if "stop_tokens" not in options and tok.eos_id is not None:
        options = {**options, "stop_tokens": [tok.eos_id]}
    return options


def generate_text(model, prompts: str | Sequence[str], max_new_tokens: int | None = None, *,
                  tokenizer=None, skip_special: bool = True, **options: Any) -> str | list[str]:
    """Text in, text out: the continuation of each prompt (stops at the tokenizer's eos by default)."""
    _check_prompts(prompts)
    tok = get_tokenizer(model, tokenizer)
    check_fits(tok, model.spec.vocab_size)
    single = isinstance(prompts, str)
    rows = [_encode_prompt(model, tok, p) for p in ([prompts] if single else prompts)]
    options = _stops(tok, {**model_defaults(model), **options})
    options.setdefault("vocab_limit", tok.vocab_size)
    new = list(stream(model, rows, max_new_tokens, tokenizer=tok, **options))
    o = GenerationOptions.from_kwargs(**options)
    stops, R = set(o.stop_list()), o.num_return_sequences
    texts = []
    for b in range(len(rows) * R):  # beam search: each prompt's R best in turn
        out = []
        for step in new:
            t = int(step[b])
            if t in stops:
                break
            out.append(t)
        texts.append(_decode(tok, out, skip_special))
    if R > 1:  # a list of R texts per prompt
        texts = [texts[i * R:(i + 1) * R] for i in range(len(rows))]
    return texts[0] if single else texts


def stream_text(model, prompt: str, max_new_tokens: int | None = None, *, tokenizer=None,
                skip_special: bool = True, **options: Any) -> Iterator[str]:
    """Yield the continuation of ``prompt`` piece by piece as it is generated.

    Decodes the whole continuation each step and yields what is new, holding back an incomplete
    multi-byte character (U+FFFD at the end) until its remaining bytes arrive, so byte-level
    tokenizers stream Chinese correctly."""
    tok = get_tokenizer(model, tokenizer)
    check_fits(tok, model.spec.vocab_size)
    options = _stops(tok, {**model_defaults(model), **options})
    options.setdefault("vocab_limit", tok.vocab_size)
    stops = set(GenerationOptions.from_kwargs(**options).stop_list())
    out: list[int] = []
    shown = ""
    for step in stream(model, [_encode_prompt(model, tok, prompt)], max_new_tokens, tokenizer=tok,
                       **options):
        t = int(step[0])
        if t in stops:
            break
        out.append(t)
        text = _decode(tok, out, skip_special)
        if text.endswith("\ufffd"):
            continue
        if text.startswith(shown) and len(text) > len(shown):
            yield text[len(shown):]
            shown = text
    text = _decode(tok, out, skip_special)
    if text.startswith(shown) and len(text) > len(shown):
        yield text[len(shown):]


def _decode(tok, ids: list[int], skip_special: bool) -> str:
    try:
        return tok.decode(ids, skip_special=skip_special)
    except TypeError:  # a third-party tokenizer without the keyword
        return tok.decode(ids)


__getattr__ = moved(__name__)  # names that moved to the modules they belong to (zoo.deprecation)
