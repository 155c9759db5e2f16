"""Autoregressive generation with a KV cache, for decoder-only and encoder-decoder models.

A language model predicts the next token from all the previous ones.  Generating ``N`` tokens naively
runs the whole growing sequence through the model ``N`` times, recomputing the keys and values of
every earlier token at every step: ``O(N²)`` projections.  The **KV cache** keeps each layer's keys
and values (:class:`zoo.model.layers.KVCache`), so after one *prefill* pass over the prompt every step feeds
just the newest token: its query attends to the cached keys.  Every position scheme stays right
because positions are absolute (embedding tables and RoPE use the token's own position; ALiBi and T5
biases are computed between the query's position and each cached key's, ``cache.key_pos``), and every
mask rule sees the query offset (``MaskContext.q_offset``).  ``use_cache=False`` runs the slow way and
must give the same tokens (the test suite checks it for every position scheme).

The cache is **static**: its buffers are allocated once, for prompt + ``max_new_tokens`` slots, and
each step writes its keys into the next slots in place, so decoding allocates nothing per token and
its speed is set by reading the weights (batch-1 decoding is memory-bound: ``zoo bench`` shows the
fraction of the memory roofline reached).  For fewer bytes per weight see :mod:`zoo.run.precision`.

Choosing the next token from the logits:

- greedy (``do_sample=False``): the most likely token, deterministic;
- sampling: ``softmax(logits / temperature)``; temperature < 1 sharpens, > 1 flattens;
  ``top_k`` keeps the k most likely tokens, ``top_p`` (nucleus sampling, Holtzman et al., 2020) the
  smallest set whose probability reaches p.  ``seed`` makes a sampled run reproducible.

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
(:class:`_LiveRows`), so a finished row stops costing compute.

Entry points: ``model.generate(...)`` (a method on every zoo model), :func:`generate`,
:func:`stream` (an iterator of the new tokens, for the CLI and UI) and, for text,
``model.generate("你好", tokenizer=tok)`` returning a string, :func:`stream_text` yielding pieces.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Any, Callable, Iterator, Sequence

import torch

from . import beam
from .arguments import zoo_model
from ..guard.health import finite_steps
from ..guard.run_budget import check_generate
from ..errors import TokenizerError, ZooError
from .input_contract import admit
from ..guard.compat import require
from ..io.tokenizers import check_fits, get_tokenizer
from ..guard.files import short


# ---------------------------------------------------------------------- choosing the next token
def pick_next(logits: torch.Tensor, *, do_sample: bool = False, temperature: float = 1.0,
              top_k: int | None = None, top_p: float | None = None,
              generator: torch.Generator | None = None) -> torch.Tensor:
    """``logits (B, V)`` -> next ids ``(B,)``: argmax, or a sample after temperature/top-k/top-p."""
    if not do_sample:
        return logits.argmax(dim=-1)
    probs = torch.softmax(warp(logits, temperature, top_k, top_p), dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def warp(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
         top_p: float | None = None) -> torch.Tensor:
    """Sampling's reshaping of ``logits (B, V)``: divide by the temperature, then set to -inf every
    token outside the ``top_k`` most likely and outside the nucleus of mass ``top_p``."""
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # (B, 1) the k-th largest logit
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        before = probs.cumsum(-1) - probs  # probability mass of the tokens ranked above each one
        drop_sorted = before >= top_p  # the most likely token always survives (before = 0)
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def penalize_repeats(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """The repetition penalty of CTRL (Keskar et al., 2019), as Hugging Face applies it: the logit
    of every token already in the sequence (``seen (B, V)`` bool) is divided by ``penalty`` when
    positive and multiplied by it when negative, so with ``penalty > 1`` a repeat always becomes
    less likely, whatever the logit's sign.  Applied before temperature, top-k and top-p."""
    hit = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, hit, logits)


#: Smallest sampling temperature: logits / 1e-45 overflow float32 to inf and softmax gives NaN.
#: Below it the distribution is one-hot anyway: use do_sample=False (greedy).
MIN_TEMPERATURE = 1e-4
#: Smallest top_p: it is compared in float32, where 1e-300 rounds to 0 and drops every token.
MIN_TOP_P = 1e-6
#: Most beams: the cache and the candidates grow with them (translation models use 4 to 6).
MAX_BEAMS = 64
#: Largest repetition penalty: beyond it a repeat is all but forbidden, and a float32 logit
#: multiplied by it could overflow.
MAX_REPETITION_PENALTY = 10.0


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclasses.dataclass(frozen=True)
class Option:
    """What one generation option is, for every front door that shows or checks it.

    ``kind``: ``"int"``, ``"float"``, ``"bool"``, ``"token"`` (a token id, checked against the
    vocabulary) or ``"tokens"`` (one id or a list of them).  ``low`` / ``high``: the valid range
    (``high`` inclusive for floats, exclusive for ints; ``low_open``: ``low`` itself is not valid).
    ``optional``: ``None`` is valid (and means "off" / "the model's default").  ``cli``: the ``zoo
    run`` flag (``"--sample/--greedy"`` for an on/off pair), ``None`` for API-only options;
    ``short``: its one-letter alias.  ``ui_low`` / ``ui_high`` / ``step``: a slider's range, for
    options a person sets by hand (``ui_high`` is a sensible top, not the hard limit).  ``fix``: the
    advice an out-of-range value gets."""
    help: str
    kind: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    optional: bool = False
    cli: str | None = None
    short: str | None = None
    ui_low: float | None = None
    ui_high: float | None = None
    step: float | None = None
    fix: str | None = None


def _opt(default, **meta):
    return dataclasses.field(default=default, metadata={"option": Option(**meta)})


@dataclasses.dataclass(frozen=True)
class GenerationOptions:
    """Every option of :func:`generate` / :func:`stream`, declared once.

    The API checks through it (``GenerationOptions(**options)`` raises a :class:`ZooError` naming
    ``generate.<option>`` for a bad type or range), ``zoo run`` makes its flags from it
    (:func:`cli_options`) and the Run tab its controls (``dataclasses.fields(GenerationOptions)``,
    each field's ``metadata["option"]`` an :class:`Option`).  Adding an option is one field here
    and its use in the decoding loop.

    >>> GenerationOptions(do_sample=True, temperature=0.7, top_k=40).top_k
    40
    """
    max_new_tokens: int = _opt(32, help="At most this many new tokens.", kind="int", low=0,
                               high=2**63, cli="--max-new-tokens", short="-n", ui_low=1, step=1)
    do_sample: bool = _opt(False, help="Sample from the distribution, or take the most likely "
                           "token (greedy).", kind="bool", cli="--sample/--greedy")
    temperature: float = _opt(1.0, help="Sampling: divide the logits by this; < 1 sharpens, > 1 "
                              "flattens.", kind="float", low=0.0, low_open=True, high=math.inf,
                              cli="--temperature", ui_low=0.0, ui_high=2.0, step=0.05,
                              fix="use do_sample=False for greedy decoding instead of temperature 0")
    top_k: int | None = _opt(None, help="Sampling: keep only the k most likely tokens.", kind="int",
                             low=1, high=2**63, optional=True, cli="--top-k", ui_low=0, ui_high=200,
                             step=1)
    top_p: float | None = _opt(None, help="Sampling: keep the smallest set of tokens whose "
                               "probability reaches p (nucleus sampling).", kind="float",
                               low=MIN_TOP_P, high=1.0, optional=True, cli="--top-p", ui_low=0.05,
                               ui_high=1.0, step=0.05, fix="a smaller top_p keeps only the most "
                               "likely token: use do_sample=False")
    repetition_penalty: float = _opt(1.0, help="> 1 makes tokens already in the text less likely "
                                     "(greedy too); 1 is off.", kind="float", low=1.0,
                                     high=MAX_REPETITION_PENALTY, cli="--repetition-penalty",
                                     ui_low=1.0, ui_high=2.0, step=0.05,
                                     fix="1 is off; 1.1 to 1.3 discourage repeats gently")
    seed: int | None = _opt(None, help="Sampling seed (a sampled run with a seed is reproducible).",
                            kind="int", low=-2**63, high=2**64, optional=True, cli="--seed", step=1)
    use_cache: bool = _opt(True, help="Keep each layer's keys and values (off: recompute "
                           "everything each step; slow, for comparison).", kind="bool",
                           cli="--cache/--no-cache")
    compile: bool = _opt(False, help="Compile the prefill and the decoding step with "
                         "torch.compile (static KV cache, one graph for every step; the first "
                         "call compiles, later calls reuse it).", kind="bool",
                         cli="--compile/--no-compile")
    stop_tokens: int | Sequence[int] | None = _opt(None, help="Token id(s) that end a row.",
                                                   kind="tokens", optional=True)
    prefix_length: int | None = _opt(None, help="Prefix LMs: how many leading tokens attend "
                                     "bidirectionally (default: the whole prompt).", kind="int",
                                     low=0, high=2**63, optional=True)
    decoder_start_id: int | None = _opt(None, help="Encoder-decoder: the first decoder token "
                                        "(default: the tokenizer's bos, else pad_id).",
                                        kind="token", optional=True)
    pad_id: int | None = _opt(None, help="The id of padding and of rows that stopped.",
                              kind="token", optional=True)
    vocab_limit: int | None = _opt(None, help="Only ids below it may be chosen.", kind="int", low=1,
                                   high=2**63, optional=True)
    num_beams: int = _opt(1, help="Beam search: keep this many candidate sequences (1: one, as "
                          "greedy decoding or sampling does).", kind="int", low=1, high=MAX_BEAMS + 1,
                          cli="--beams", ui_low=1, ui_high=8, step=1)
    length_penalty: float = _opt(1.0, help="Beam search: a finished sequence scores sum(log p) / "
                                 "length ** this; > 0 favours longer, < 0 shorter outputs.",
                                 kind="float", low=-10.0, high=10.0, cli="--length-penalty",
                                 ui_low=-2.0, ui_high=3.0, step=0.1)
    early_stopping: bool = _opt(False, help="Beam search: stop a prompt as soon as num_beams "
                                "sequences have finished (off: while a running beam could still "
                                "beat them).", kind="bool", cli="--early-stopping/--no-early-stopping")
    no_repeat_ngram_size: int = _opt(0, help="Never repeat an n-gram of this size (0: off).",
                                     kind="int", low=0, high=2**63, cli="--no-repeat-ngram-size",
                                     ui_low=0, ui_high=6, step=1)
    num_return_sequences: int = _opt(1, help="Beam search: return this many of the best sequences "
                                     "per prompt (at most num_beams).", kind="int", low=1,
                                     high=MAX_BEAMS + 1)

    def __post_init__(self):
        for f in dataclasses.fields(self):
            _check_option(f.name, getattr(self, f.name), f.metadata["option"])
        if self.do_sample and self.temperature < MIN_TEMPERATURE:
            _bad("temperature", f"{self.temperature:g} is below {MIN_TEMPERATURE:g} (logits / "
                 "temperature would overflow)", "use do_sample=False: greedy decoding is what a "
                 "tiny temperature means")
        if self.num_return_sequences > self.num_beams:
            _bad("num_return_sequences", f"{self.num_return_sequences} is more than num_beams "
                 f"({self.num_beams})", f"ask for at most {self.num_beams}, or raise num_beams")

    @classmethod
    def from_kwargs(cls, **options: Any) -> "GenerationOptions":
        """Options by keyword, with an unknown name a :class:`ZooError` listing the valid ones."""
        names = [f.name for f in dataclasses.fields(cls)]
        for name in options:
            if name not in names:
                raise ZooError(f"unknown generation option {short(name)}",
                               where=f"generate.{name}", fix=f"valid options: {', '.join(names)}")
        return cls(**options)

    def stop_list(self) -> list:
        """``stop_tokens`` as a list (one id, a list of ids, or none)."""
        s = self.stop_tokens
        return [] if s is None else [s] if _is_int(s) else list(s)

    def check_vocab(self, vocab_size: int) -> None:
        """Every token-id option lies inside a vocabulary of ``vocab_size`` ids."""
        ids = {"decoder_start_id": self.decoder_start_id, "pad_id": self.pad_id}
        ids.update({f"stop_tokens[{i}]": s for i, s in enumerate(self.stop_list())})
        for name, v in ids.items():
            if v is not None and not 0 <= v < vocab_size:
                _bad(name, f"{v} is outside the vocabulary [0, {vocab_size})",
                     "use an id the model's tokenizer produces")


def _bad(name, what, fix=None):
    raise ZooError(f"{name} {what}", where=f"generate.{name}", fix=fix)


def _check_option(name: str, v, opt: Option) -> None:
    """One option's type and range, from its :class:`Option` declaration."""
    if v is None and opt.optional:
        return
    if opt.kind == "bool":
        if not isinstance(v, bool):
            _bad(name, f"must be true or false, got {short(v)}")
    elif opt.kind == "int":
        if not _is_int(v) or not opt.low <= v < opt.high:
            rng = f">= {opt.low}" if opt.high == 2**63 else f"in [{_num(opt.low)}, {_num(opt.high)})"
            _bad(name, f"must be an integer {rng}, got {short(v)}", opt.fix)
    elif opt.kind == "float":
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) \
            and (v > opt.low if opt.low_open else v >= opt.low) and v <= opt.high
        if not ok:
            rng = f"> {opt.low:g}" if opt.high == math.inf else f"in [{opt.low:g}, {opt.high:g}]"
            _bad(name, f"must be a finite number {rng}, got {short(v)}", opt.fix)
    elif opt.kind == "token":
        if not _is_int(v):
            _bad(name, f"must be a token id (an integer), got {short(v)}")
    elif opt.kind == "tokens":
        stops = [v] if _is_int(v) or not isinstance(v, (list, tuple)) else list(v)
        if len(stops) > 1000:
            _bad(name, f"lists {len(stops)} ids; at most 1000")
        for i, s in enumerate(stops):
            if not _is_int(s):
                _bad(f"{name}[{i}]", f"must be a token id (an integer), got {short(s)}")


def _num(x) -> str:
    """Range ends as people write them: ``2**63`` rather than nineteen digits."""
    for p in (63, 64):
        if abs(x) == 2**p:
            return ("-" if x < 0 else "") + f"2**{p}"
    return f"{x:g}" if isinstance(x, float) else str(x)


def cli_options(*, skip: Sequence[str] = (), defaults: dict | None = None,
                helps: dict | None = None) -> Callable:
    """A decorator adding a click option for every :class:`GenerationOptions` field with a ``cli``
    flag (``zoo run`` uses it), its help and type from the declaration; ``defaults`` / ``helps``
    override a field's default / help for that command."""
    import click  # the CLI's dependency; imported only when a command is being defined

    defaults, helps = defaults or {}, helps or {}

    def decorate(fn):
        for f in reversed(dataclasses.fields(GenerationOptions)):
            opt = f.metadata["option"]
            if opt.cli is None or f.name in skip:
                continue
            names = [opt.cli] + ([opt.short] if opt.short else [])
            default = defaults.get(f.name, f.default)
            kw = dict(default=default, help=helps.get(f.name, opt.help), show_default=default is not None)
            if opt.kind != "bool":
                kw["type"] = int if opt.kind == "int" else float
            fn = click.option(*names, f.name, **kw)(fn)
        return fn
    return decorate


def _check_prompts(prompts) -> None:
    """Text prompts: one ``str`` or a non-empty list/tuple of them."""
    if isinstance(prompts, str):
        return
    if not isinstance(prompts, (list, tuple)) or not prompts \
            or not all(isinstance(p, str) for p in prompts):
        raise ZooError(f"prompts must be a string or a non-empty list of strings, got "
                       f"{short(prompts)}", where="generate.prompts",
                       fix="pass text, e.g. generate_text(model, 'Once upon a time')")


# ---------------------------------------------------------------------- inputs
def _pad_id(model, tokenizer=None) -> int:
    if model.spec.pad_id is not None:
        return model.spec.pad_id
    tok = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    if tok is not None and tok.pad_id is not None and tok.pad_id < model.spec.vocab_size:
        return tok.pad_id
    return 0


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, device=None
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged id lists -> ``ids (B, T)`` left-padded with ``pad_id`` and ``attention_mask (B, T)``."""
    T = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros(len(rows), T, dtype=torch.bool, device=device)
    for i, r in enumerate(rows):
        if len(r):
            ids[i, T - len(r):] = torch.as_tensor(list(r), dtype=torch.long, device=device)
            mask[i, T - len(r):] = True
    return ids, mask


def _as_batch(model, ids, attention_mask, pad_id) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``ids`` as a list, list of lists or tensor -> ``(ids (B, T), mask (B, T) bool or None)``."""
    device = next(model.parameters()).device
    if attention_mask is not None and not isinstance(ids, torch.Tensor):
        raise ZooError("attention_mask is only used with a tensor of ids (lists are left-padded here, "
                       "with their own mask)", where="generate.attention_mask",
                       fix="drop attention_mask, or pass ids as a (B, T) tensor")
    if attention_mask is not None and not isinstance(attention_mask, torch.Tensor):
        attention_mask = _as_tensor(attention_mask, "attention_mask")
    if isinstance(ids, (list, tuple)):
        _as_tensor(ids if not ids or not isinstance(ids[0], (list, tuple)) else
                   [x for r in ids if isinstance(r, (list, tuple)) for x in r], "ids")
    if isinstance(ids, torch.Tensor):
        if ids.is_floating_point() or ids.is_complex():
            raise ZooError(f"ids must be integer token ids, got a {ids.dtype} tensor",
                           where="generate.ids", fix="pass a LongTensor of ids")
        ids = ids.to(device=device, dtype=torch.long)
        if ids.dim() == 1:
            ids = ids[None]
        mask = attention_mask.to(device).bool() if attention_mask is not None else None
        if mask is not None and mask.dim() == 1:
            mask = mask[None]
    elif isinstance(ids, (list, tuple)) and ids and all(isinstance(r, (list, tuple)) for r in ids):
        ids, mask = left_pad(ids, pad_id, device)
    elif isinstance(ids, (list, tuple)):
        ids, mask = torch.tensor([list(ids)], dtype=torch.long, device=device), None
    else:
        raise ZooError(f"cannot generate from {type(ids).__name__}", where="generate.ids",
                       fix="pass a (B, T) tensor of ids, a list of ids, a list of lists, or text")
    if ids.dim() != 2 or ids.size(1) == 0:
        raise ZooError(f"need a non-empty (B, T) batch of ids, got shape {tuple(ids.shape)}",
                       where="generate.ids", fix="give at least one prompt token (e.g. a bos id)")
    if int(ids.min()) < 0 or int(ids.max()) >= model.spec.vocab_size:
        raise ZooError(f"ids must lie in [0, {model.spec.vocab_size}), got [{int(ids.min())}, "
                       f"{int(ids.max())}]", where="generate.ids",
                       fix="encode with a tokenizer that fits the model's vocab_size")
    if mask is not None:
        if mask.shape != ids.shape:
            raise ZooError(f"attention_mask shape {tuple(mask.shape)} != ids shape {tuple(ids.shape)}",
                           where="generate.attention_mask")
        if bool(mask.all()):
            mask = None
        elif bool(mask[:, -1].logical_not().any()):
            raise ZooError("prompts must be left-padded (the last column is padding in some row)",
                           where="generate.attention_mask",
                           fix="pad on the left, e.g. with zoo.run.generate.left_pad(rows, pad_id)")
        elif bool((~mask.any(dim=1)).any()):
            raise ZooError("a prompt in the batch is empty", where="generate.ids",
                           fix="give every row at least one token")
    return ids, mask


def _as_tensor(values, name: str) -> torch.Tensor:
    """A list of ids / mask flags as a tensor, with a ZooError (not a TypeError) for anything else."""
    try:
        return torch.as_tensor(values)
    except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
        raise ZooError(f"{name} must be a tensor or (nested) list of integers, got "
                       f"{short(values)}", where=f"generate.{name}",
                       fix="pass token ids as ints (0 <= id < vocab_size)") from exc


# ---------------------------------------------------------------------- the decoding loops
def stream(model, ids, max_new_tokens: int = 32, *, attention_mask: torch.Tensor | None = None,
           tokenizer=None, **options: Any) -> Iterator[torch.Tensor]:
    """Yield the next token of every row, ``(B,)`` per step, as soon as it is chosen.

    ``ids``: the prompt (decoder-only) or the source (encoder-decoder), as a ``(B, T)`` tensor (with
    an optional left-padded ``attention_mask``), a list of ids, or a list of lists (left-padded
    here).  ``options``: the fields of :class:`GenerationOptions` (sampling, stop tokens, cache...),
    checked before any work is done.  Rows that have produced a stop token yield ``pad_id``
    afterwards; the iterator ends when every row has stopped or after ``max_new_tokens`` steps.
    ``prefix_length`` (prefix LMs): how many leading tokens attend bidirectionally; default the
    whole (padded) prompt.  ``decoder_start_id`` (encoder-decoder): the first decoder token;
    default the tokenizer's bos, else ``pad_id`` (as in T5).  ``vocab_limit``: only ids below it
    may be chosen (the text helpers set it to the tokenizer's size when the model's vocabulary is
    larger).  ``repetition_penalty`` (> 1 to use it): make every token already in the sequence (the
    prompt's real tokens, or an encoder-decoder's decoder tokens, and what was generated) less
    likely, see :func:`penalize_repeats`; with greedy decoding too.
    """
    zoo_model(model, "generate.model")
    if model.spec.arch == "encoder":
        raise ZooError("an encoder-only model does not generate text", where="model.arch",
                       fix="use zoo.run.pipelines.fill_mask(model, text) or zoo.run.pipelines.classify(...)")
    o = GenerationOptions.from_kwargs(max_new_tokens=max_new_tokens, **options)
    o.check_vocab(model.spec.vocab_size)
    pad = _pad_id(model, tokenizer) if o.pad_id is None else o.pad_id
    ids, padding = _as_batch(model, ids, attention_mask, pad)  # (B, T), (B, T) True = real or None
    if o.use_cache:
        require(model.spec, "supports_kv_cache", "generation with a KV cache")
    if o.compile:
        _check_compile(model, o)
    start = None if model.spec.arch == "decoder" else _start_id(model, tokenizer, o, pad)
    if o.num_beams > 1:  # the tokens are known only once the search is over: then yielded
        found = _beam_search(model, ids, padding, o, start, pad)
        return iter(found.sequences[:, found.sequences.size(1) - int(found.lengths.max()):].t())
    steps = _logits(model, ids, padding, o, start)  # a coroutine: logits out, chosen ids in
    choose = _Chooser(model, o, ids, padding, start)
    stops = torch.as_tensor(o.stop_list(), dtype=torch.long, device=ids.device)
    # everything above ran now, so bad options raise here, not at the first next()
    return _run(model, steps, choose, stops, ids.size(0), o.max_new_tokens, pad, ids.device)


def _check_compile(model, o: GenerationOptions) -> None:
    """``compile=True``: refuse (a ZooError naming the option) what compiled decoding does not
    cover, before any work (:func:`zoo.run.compiled.check_compilable`)."""
    from . import compiled

    compiled.check_compilable(model, use_cache=o.use_cache, num_beams=o.num_beams)


def _start_id(model, tokenizer, o: GenerationOptions, pad: int) -> int:
    """An encoder-decoder's first decoder token: ``decoder_start_id``, else the tokenizer's bos,
    else ``pad`` (as in T5)."""
    if o.decoder_start_id is not None:
        return o.decoder_start_id
    tok = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    bos = getattr(tok, "bos_id", None)
    return bos if bos is not None and bos < model.spec.vocab_size else pad


def _logits(model, ids, padding, o: GenerationOptions, start: int | None):
    """The logits coroutine of the model's architecture, once the length fits ``max_len``."""
    n, max_len = o.max_new_tokens, model.spec.max_len
    check_generate(model, ids.size(0), ids.size(1), n)  # the cache and the prompt's forward fit?
    if model.spec.arch == "decoder":
        T0 = ids.size(1)
        if T0 + max(n - 1, 0) > max_len:
            raise ZooError(f"prompt ({T0}) + max_new_tokens ({n}) exceeds max_len {max_len}",
                           where="generate.max_new_tokens",
                           fix=f"ask for at most {max(max_len - T0 + 1, 0)} new tokens")
        if o.compile:
            from . import compiled  # torch.compile is imported only when asked for

            return finite_steps(compiled.decoder_logits(model, ids, padding, n), model)
        return finite_steps(_decoder_logits(model, ids, padding, o.use_cache, o.prefix_length,
                                            _make_head(model, n), n), model)
    if n > max_len:
        raise ZooError(f"max_new_tokens {n} exceeds max_len {max_len}", where="generate.max_new_tokens")
    return finite_steps(_seq2seq_logits(model, ids, padding, o.use_cache, start,
                                        _make_head(model, n), n), model)


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
    limit, penalty = o.vocab_limit, float(o.repetition_penalty)

    def process(lp, seq, real):  # (B*K, V) log-probabilities, as Hugging Face's processors do
        if limit is not None and limit < lp.size(-1):
            lp = lp.clone()
            lp[..., limit:] = float("-inf")
        if penalty != 1.0:
            counts = torch.zeros(lp.shape, dtype=torch.int32, device=lp.device)
            counts.scatter_add_(1, seq, real.int() if real is not None else torch.ones_like(seq, dtype=torch.int32))
            lp = penalize_repeats(lp, counts > 0, penalty)
        if o.do_sample:
            lp = warp(lp, float(o.temperature), o.top_k, o.top_p)
        return lp

    sample = None
    if o.do_sample:
        gen = torch.Generator(device=ids.device)
        if o.seed is not None:
            gen.manual_seed(o.seed)
        sample = lambda scores, m: torch.multinomial(torch.softmax(scores, -1), m, generator=gen)  # noqa: E731
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            found = beam.search(_logits(model, ids_k, padding_k, o, start), seq, real, num_beams=K,
                                max_new_tokens=o.max_new_tokens,
                                stops=torch.as_tensor(o.stop_list(), dtype=torch.long, device=ids.device),
                                pad=pad, length_penalty=float(o.length_penalty),
                                early_stopping=o.early_stopping,
                                no_repeat_ngram_size=o.no_repeat_ngram_size,
                                num_return_sequences=o.num_return_sequences, process=process,
                                sample=sample)
    finally:
        if was_training:
            model.train()
    return beam.BeamResult(found.sequences.clone(), found.scores.clone(), found.lengths.clone())


class _Chooser:
    """Logits ``(B, V)`` -> the next ids ``(B,)``: the vocabulary limit, the repetition penalty
    (with its record of the tokens seen so far), then greedy or sampling (:func:`pick_next`)."""

    def __init__(self, model, o: GenerationOptions, ids: torch.Tensor, padding, start: int | None):
        self.o, self.temperature = o, float(o.temperature)  # an int like 2**64 would overflow torch
        self.gen = None
        if o.do_sample and o.seed is not None:
            self.gen = torch.Generator(device=ids.device)
            self.gen.manual_seed(o.seed)
        self.seen = None  # (B, V) bool: the tokens a repetition penalty applies to
        if o.repetition_penalty != 1.0:
            seen = torch.zeros(ids.size(0), model.spec.vocab_size, dtype=torch.int32, device=ids.device)
            if start is None:  # a decoder: the prompt's real tokens
                real = padding.int() if padding is not None else torch.ones_like(ids, dtype=torch.int32)
                seen.scatter_add_(1, ids, real)  # a count, so a pad never erases a real token's mark
            else:  # an encoder-decoder: its start token
                seen[:, start] = 1
            self.seen = seen > 0

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        o, limit = self.o, self.o.vocab_limit
        if limit is not None and limit < logits.size(-1):
            logits = logits.clone()
            logits[..., limit:] = float("-inf")
        if self.seen is not None:
            logits = penalize_repeats(logits, self.seen, float(o.repetition_penalty))
        nxt = pick_next(logits, do_sample=o.do_sample, temperature=self.temperature, top_k=o.top_k,
                        top_p=o.top_p, generator=self.gen)
        if self.seen is not None:
            self.seen.scatter_(1, nxt[:, None], True)  # what was just chosen counts from now on
        return nxt


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
                nxt = choose(logits)  # (B,)
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


#: LM heads with at least this many weights get a transposed copy for CPU decoding (see _make_head)
TRANSPOSED_HEAD_MIN = 1 << 22


def _make_head(model, steps: int):
    """The next-token logits of the last position, soft-capped when the spec says so."""
    head = _linear_head(model, steps)
    if model.spec.logit_softcap is None:
        return head
    return lambda hidden: model.head_output(head(hidden))


def _linear_head(model, steps: int):
    """``hidden (B, T, D) -> logits (B, V)`` of the last position only: the LM head over every
    prompt position would cost ``T x D x V`` for nothing.

    On a CPU the LM head of a large vocabulary dominates a decoding step (GPT-2: 50257 x 768, a
    third of all weights), and a matrix-vector product reads a ``(D, V)`` matrix about 1.6x faster
    than ``nn.Linear``'s ``(V, D)`` layout.  So for long enough runs a transposed copy is made once
    per call (it pays for itself within a few steps) and dropped afterwards; the weights
    themselves are untouched.  GPUs read both layouts alike, so they skip this."""
    head_in = model.head_input
    if not isinstance(model.lm_head, torch.nn.Linear):  # e.g. int8 weights (zoo.run.precision)
        return lambda hidden: model.lm_head(head_in(hidden[:, -1]))
    weight, bias = model.lm_head.weight, model.lm_head.bias
    if weight.device.type == "cpu" and steps >= 16 and weight.numel() >= TRANSPOSED_HEAD_MIN:
        wt = weight.detach().t().contiguous()  # (D, V)

        def head(hidden):
            logits = head_in(hidden[:, -1]) @ wt  # (B, V)
            return logits + bias if bias is not None else logits

        return head
    return lambda hidden: model.lm_head(head_in(hidden[:, -1]))


#: a left-padded batch whose padding is at least this share of its prompt tokens is prefilled
#: row by row (:func:`_ragged_prefill`) instead of as one padded block
RAGGED_MIN_PADDING = 0.25


def _ragged_prefill(model, ids, padding, prefix_length, head, steps):
    """Prefill a left-padded batch of prompts one prompt at a time, without their padding, and
    merge the caches into the batch's (:meth:`zoo.model.layers.KVCache.from_rows`): ``(cache, logits (B, V))``, or
    None where the padded prefill is used (little padding, an explicit ``prefix_length``, positions
    that depend on the call's length such as dynamic or longrope rope scaling, a cache that is not
    plain self-attention keys/values).

    Why: a batch of prompts of 8..256 tokens padded to 256 spends about half of its prefill
    matmuls, and more of its attention (quadratic in the padded length), on padding.  Each prompt
    alone computes exactly what its padded row would (positions count from the row's first real
    token either way, and padding is masked), so the batch continues with the same cache it would
    have had -- and each prompt's first token is the one it gets when generated alone."""
    if padding is None or prefix_length is not None or ids.size(0) < 2:
        return None
    if getattr(model.decoder.positions, "length_dependent", False):
        return None  # dynamic / longrope rotate by the batch's longest length: a row alone differs
    lengths = padding.sum(-1).tolist()  # real tokens per row (left padding: the last ones)
    B, T0 = ids.shape
    if 1 - sum(lengths) / (B * T0) < RAGGED_MIN_PADDING:
        return None
    explicit = model.spec.pad_id is not None
    rows, hidden = [], []
    for i, n in enumerate(lengths):
        row = ids[i:i + 1, T0 - n:]  # (1, n): the prompt without its padding
        c = model.new_cache(capacity=n)
        mask = torch.ones_like(row, dtype=torch.bool) if explicit else None
        hidden.append(model(row, attention_mask=mask, cache=c, return_hidden=True,
                            prefix_lengths=torch.full((1,), n, dtype=torch.long, device=ids.device)
                            )[:, -1:])  # (1, 1, D): the last position is all the head needs
        rows.append(c)
    try:
        cache = type(rows[0]).from_rows(rows, lengths, T0 + steps)
    except (AttributeError, ValueError):
        return None  # not a plain self-attention cache: the padded prefill handles it
    return cache, head(torch.cat(hidden, 0))  # (B, V)


#: drop finished rows from the batch once they are at least this share of the rows still computed
#: (:class:`_LiveRows`); None keeps every row to the end (the benchmark's "no compaction" run)
COMPACT_SHARE: float | None = 1 / 8


class _LiveRows:
    """Which rows of a generated batch the model still computes.

    A row that has produced a stop token only yields ``pad_id`` from then on, so computing its next
    token is waste: with rows ending at different steps, a fixed-shape batch spends the finished
    rows' share of every later step for nothing.  So once the finished rows are at least
    :data:`COMPACT_SHARE` of the rows still computed, a KV-cached coroutine *compacts* the batch:
    the cache keeps only the live rows (:meth:`zoo.model.layers.KVCache.keep`), as do the per-row inputs
    of each step (:meth:`take`), and the model runs on the smaller batch.  The logits handed out
    stay ``(B, V)`` (:meth:`full`; a dropped row's are zeros, and its token is replaced by
    ``pad_id``), so the caller -- choosing, sampling with its random stream, the repetition record,
    streaming -- sees the batch it asked for, and a live row gets the tokens it got before.
    Compiled decoding (:mod:`zoo.run.compiled`) keeps its fixed batch; so does ``use_cache=False``."""

    __slots__ = ("B", "index")

    def __init__(self, B: int):
        self.B = B
        self.index: torch.Tensor | None = None  # (B',) the original rows still computed; None: all

    def drop(self, finished: torch.Tensor | None, cache) -> torch.Tensor | None:
        """Drop the rows ``finished (B,)`` marks, if enough of them; returns the positions kept
        within the previous live rows (to slice the caller's per-row tensors), or None."""
        if finished is None or COMPACT_SHARE is None or self.B == 1:
            return None  # a single row that finishes ends the generation: nothing to drop
        f = finished if self.index is None else finished.index_select(0, self.index)
        dead, n = int(f.sum()), f.numel()
        if not dead or dead == n or dead < COMPACT_SHARE * n:
            return None
        keep = (~f).nonzero().squeeze(1)  # (B',)
        cache.keep(keep)
        self.index = keep if self.index is None else self.index.index_select(0, keep)
        return keep

    def take(self, x: torch.Tensor) -> torch.Tensor:
        """The live rows of a full-batch tensor ``x (B, ...)``."""
        return x if self.index is None else x.index_select(0, self.index)

    def full(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits (B', V)`` of the live rows as ``(B, V)``, zeros for the dropped rows."""
        if self.index is None:
            return logits
        out = logits.new_zeros(self.B, logits.size(-1))
        return out.index_copy_(0, self.index, logits)


def _decoder_logits(model, ids, padding, use_cache, prefix_length, head, steps):
    """A coroutine: yields next-token logits ``(B, V)``; is sent the chosen ids ``(B,)``."""
    B, T0 = ids.shape
    dev = ids.device
    # explicit padding whenever ids alone could be mistaken for padding (a generated pad_id token)
    explicit = padding is not None or model.spec.pad_id is not None
    full = padding if padding is not None else (torch.ones(B, T0, dtype=torch.bool, device=dev)
                                          if explicit else None)
    ones = torch.ones(B, 1, dtype=torch.bool, device=dev) if explicit else None
    plen = torch.full((B,), T0 if prefix_length is None else prefix_length, dtype=torch.long,
                      device=dev)
    if use_cache:
        start = _ragged_prefill(model, ids, padding, prefix_length, head, steps)
        if start is None:
            cache = model.new_cache(capacity=T0 + steps)  # preallocated: written in place each step
            logits = head(model(ids, attention_mask=full, cache=cache, prefix_lengths=plen,
                                return_hidden=True))
        else:
            cache, logits = start
        rows = _LiveRows(B)
        while True:
            nxt, order, finished = _sent((yield rows.full(logits)))
            if order is not None:
                cache.reorder(order)  # beam search: row j continues old row order[j]
            keep = rows.drop(finished, cache)
            if keep is not None:
                ones, plen = ones[keep] if ones is not None else None, plen[keep]
            logits = head(model(rows.take(nxt)[:, None], attention_mask=ones, cache=cache,
                                prefix_lengths=plen, return_hidden=True))  # (B', V)
    seq = ids
    while True:
        nxt, order, _ = _sent((yield head(model(seq, attention_mask=full, prefix_lengths=plen,
                                                return_hidden=True))))
        if order is not None:
            seq = seq.index_select(0, order)
            full = full.index_select(0, order) if full is not None else None
        seq = torch.cat([seq, nxt[:, None]], dim=1)  # (B, T + 1): recompute everything
        if full is not None:
            full = torch.cat([full, ones], dim=1)


def _sent(value) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """What a logits coroutine is sent, as ``(ids, order, finished)``: the chosen ids ``(B,)``;
    from beam search ``(ids, order)``, where ``order (B,)`` says which old row each new row
    continues; from :func:`_run` with stop tokens ``(ids, None, finished)``, ``finished (B,)`` the
    rows that have stopped (see :class:`_LiveRows`)."""
    if not isinstance(value, tuple):
        return value, None, None
    return (*value, None)[:3]


def _seq2seq_logits(model, src, src_padding, use_cache, start_id, head, steps):
    """Encoder-decoder: encode once, then decode step by step (cross-attention k/v cached too)."""
    B = src.size(0)
    dev = src.device
    memory, mem_pad = model.encode(src, src_padding)
    explicit = model.spec.pad_id is not None  # the start token is often the pad id (T5)
    tgt = torch.full((B, 1), start_id, dtype=torch.long, device=dev)
    ones = torch.ones(B, 1, dtype=torch.bool, device=dev) if explicit else None
    if use_cache:
        cache = model.new_cache(capacity=1 + steps)
        logits = head(model.decode(tgt, memory, mem_pad, tgt_padding=ones, cache=cache,
                                   return_hidden=True))
        rows = _LiveRows(B)
        while True:
            nxt, order, finished = _sent((yield rows.full(logits)))
            if order is not None:
                cache.reorder(order)
            keep = rows.drop(finished, cache)
            if keep is not None:
                memory = memory[keep]
                mem_pad = mem_pad[keep] if mem_pad is not None else None
                ones = ones[keep] if ones is not None else None
            logits = head(model.decode(rows.take(nxt)[:, None], memory, mem_pad, tgt_padding=ones,
                                       cache=cache, return_hidden=True))
    full = ones
    while True:
        nxt, order, _ = _sent((yield head(model.decode(tgt, memory, mem_pad, tgt_padding=full,
                                                    return_hidden=True))))
        if order is not None:
            tgt = tgt.index_select(0, order)
        tgt = torch.cat([tgt, nxt[:, None]], dim=1)
        if full is not None:
            full = torch.cat([full, ones], dim=1)


@torch.no_grad()
def generate(model, ids, max_new_tokens: int = 32, *, stream_tokens: bool = False,
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
    pad = options.get("pad_id")
    pad = _pad_id(model, tokenizer) if pad is None else pad
    if options.get("num_beams", 1) != 1:  # the sequences as found: B * num_return_sequences rows
        return _beam_generate(model, ids, max_new_tokens, tokenizer, pad, **options)
    with torch.inference_mode():  # once for the whole loop (see _run); the results are
        new = list(stream(model, ids, max_new_tokens, tokenizer=tokenizer, **options))
    # ... inference tensors, but torch.cat below runs outside inference mode: an ordinary tensor
    dev = next(model.parameters()).device
    if model.spec.arch == "decoder":
        prompt, _ = _as_batch(model, ids, options.get("attention_mask"), pad)
    else:
        B = _as_batch(model, ids, options.get("attention_mask"), pad)[0].size(0)
        start = _start_id(model, tokenizer, GenerationOptions(
            decoder_start_id=options.get("decoder_start_id")), pad)
        prompt = torch.full((B, 1), start, dtype=torch.long, device=dev)
    if not new:
        return prompt
    return torch.cat([prompt, torch.stack(new, dim=1)], dim=1)  # (B, T + N)


def _beam_generate(model, ids, max_new_tokens, tokenizer, pad, attention_mask=None, **options):
    """:func:`generate` with ``num_beams > 1``: ``(B * num_return_sequences, T + N)``, each
    prompt's best sequences first, as Hugging Face's ``generate`` returns them."""
    zoo_model(model, "generate.model")
    if model.spec.arch == "encoder":
        raise ZooError("an encoder-only model does not generate text", where="model.arch",
                       fix="use zoo.run.pipelines.fill_mask(model, text) or zoo.run.pipelines.classify(...)")
    o = GenerationOptions.from_kwargs(max_new_tokens=max_new_tokens, **options)
    o.check_vocab(model.spec.vocab_size)
    ids, padding = _as_batch(model, ids, attention_mask, pad)
    if o.use_cache:
        require(model.spec, "supports_kv_cache", "generation with a KV cache")
    if o.compile:
        _check_compile(model, o)
    start = None if model.spec.arch == "decoder" else _start_id(model, tokenizer, o, pad)
    return _beam_search(model, ids, padding, o, start, pad).sequences


# ---------------------------------------------------------------------- text helpers
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
    if "stop_tokens" not in options and tok.eos_id is not None:
        options = {**options, "stop_tokens": [tok.eos_id]}
    return options


def generate_text(model, prompts: str | Sequence[str], max_new_tokens: int = 32, *, tokenizer=None,
                  skip_special: bool = True, **options: Any) -> str | list[str]:
    """Text in, text out: the continuation of each prompt (stops at the tokenizer's eos by default)."""
    _check_prompts(prompts)
    tok = get_tokenizer(model, tokenizer)
    check_fits(tok, model.spec.vocab_size)
    single = isinstance(prompts, str)
    rows = [_encode_prompt(model, tok, p) for p in ([prompts] if single else prompts)]
    options = _stops(tok, options)
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


def stream_text(model, prompt: str, max_new_tokens: int = 32, *, tokenizer=None,
                skip_special: bool = True, **options: Any) -> Iterator[str]:
    """Yield the continuation of ``prompt`` piece by piece as it is generated.

    Decodes the whole continuation each step and yields what is new, holding back an incomplete
    multi-byte character (U+FFFD at the end) until its remaining bytes arrive, so byte-level
    tokenizers stream Chinese correctly."""
    tok = get_tokenizer(model, tokenizer)
    check_fits(tok, model.spec.vocab_size)
    options = _stops(tok, options)
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
