"""Every generation option, declared once: its type, range, help and where it shows.

:class:`GenerationOptions` is the one list of what :func:`zoo.run.generate.generate` and
:func:`~zoo.run.generate.stream` accept.  Each field carries an :class:`Option` (its kind, range,
help, the ``zoo run`` flag and the Run tab's slider), so the three front doors read one table:

- the API checks through it: ``GenerationOptions(**options)`` raises a :class:`~zoo.errors.ZooError`
  naming ``generate.<option>`` for a bad type or range, before any work is done;
- ``zoo run`` / ``zoo chat`` make their flags from it (:func:`zoo.commands.generation_options`);
- the Run tab makes its controls from it (``ui/controls.py``).

Adding an option is one field here and its use in the decoding loop (:mod:`zoo.run.sampling` for
what changes the choice of a token).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

from ..errors import ZooError
from ..guard.files import short


#: Smallest sampling temperature: logits / 1e-45 overflow float32 to inf and softmax gives NaN.
#: Below it the distribution is one-hot anyway: use do_sample=False (greedy).
MIN_TEMPERATURE = 1e-4
#: Smallest top_p: it is compared in float32, where 1e-300 rounds to 0 and drops every token.
MIN_TOP_P = 1e-6
#: Most beams: the cache and the candidates grow with them (translation models use 4 to 6).
MAX_BEAMS = 64
#: Most ids in one token-list option (stop tokens, suppressed tokens, one banned sequence).
MAX_IDS = 1000
#: Largest repetition penalty: beyond it a repeat is all but forbidden, and a float32 logit
#: multiplied by it could overflow.
MAX_REPETITION_PENALTY = 10.0


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclasses.dataclass(frozen=True)
class Option:
    """What one generation option is, for every front door that shows or checks it.

    ``kind``: ``"int"``, ``"float"``, ``"bool"``, ``"token"`` (a token id, checked against the
    vocabulary), ``"tokens"`` (one id or a list of them) or ``"token_lists"`` (a list of id
    sequences).  ``low`` / ``high``: the valid range
    (``high`` inclusive for floats, exclusive for ints; ``low_open``: ``low`` itself is not valid).
    ``optional``: ``None`` is valid (and means "off" / "the model's default").  ``cli``: the ``zoo
    run`` flag (``"--sample/--greedy"`` for an on/off pair), ``None`` for API-only options;
    ``short``: its one-letter alias.  ``ui_low`` / ``ui_high`` / ``step``: a slider's range, for
    options a person sets by hand (``ui_high`` is a sensible top, not the hard limit).  ``fix``: the
    advice an out-of-range value gets.  ``hf``: the field of a transformers ``generation_config``
    that gives the option its default for a converted model (:func:`model_defaults`)."""
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
    hf: str | None = None


def _opt(default, **meta):
    return dataclasses.field(default=default, metadata={"option": Option(**meta)})


@dataclasses.dataclass(frozen=True)
class GenerationOptions:
    """Every option of :func:`zoo.run.generate.generate` / :func:`~zoo.run.generate.stream`,
    declared once.

    The API checks through it (``GenerationOptions(**options)`` raises a :class:`ZooError` naming
    ``generate.<option>`` for a bad type or range), ``zoo run`` makes its flags from it
    (:func:`zoo.commands.generation_options`) and the Run tab its controls
    (``dataclasses.fields(GenerationOptions)``, each field's ``metadata["option"]`` an
    :class:`Option`).  Adding an option is one field here and its use in the decoding loop.

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
                                     fix="1 is off; 1.1 to 1.3 discourage repeats gently",
                                     hf="repetition_penalty")
    seed: int | None = _opt(None, help="Sampling seed (a sampled run with a seed is reproducible).",
                            kind="int", low=-2**63, high=2**64, optional=True, cli="--seed", step=1)
    use_cache: bool = _opt(True, help="Keep each layer's keys and values (off: recompute "
                           "everything each step; slow, for comparison).", kind="bool",
                           cli="--cache/--no-cache")
    compile: bool = _opt(False, help="Compile the prefill and the decoding step with "
                         "torch.compile (static KV cache, one graph for every step; the first "
                         "call compiles, later calls reuse it).", kind="bool",
                         cli="--compile/--no-compile")
    stop_tokens: int | Sequence[int] | None = _opt(None, help="Token id(s) that end a row (a "
                                                   "converted model's default: its eos ids; [] for "
                                                   "none).", kind="tokens", optional=True,
                                                   hf="eos_token_id")
    prefix_length: int | None = _opt(None, help="Prefix LMs: how many leading tokens attend "
                                     "bidirectionally (default: the whole prompt).", kind="int",
                                     low=0, high=2**63, optional=True)
    decoder_start_id: int | None = _opt(None, help="Encoder-decoder: the first decoder token "
                                        "(default: the model's decoder_start_token_id, else the "
                                        "tokenizer's bos, else pad_id).", kind="token",
                                        optional=True, hf="decoder_start_token_id")
    pad_id: int | None = _opt(None, help="The id of padding and of rows that stopped.",
                              kind="token", optional=True, hf="pad_token_id")
    vocab_limit: int | None = _opt(None, help="Only ids below it may be chosen.", kind="int", low=1,
                                   high=2**63, optional=True)
    num_beams: int = _opt(1, help="Beam search: keep this many candidate sequences (1: one, as "
                          "greedy decoding or sampling does).", kind="int", low=1, high=MAX_BEAMS + 1,
                          cli="--beams", ui_low=1, ui_high=8, step=1)
    length_penalty: float = _opt(1.0, help="Beam search: a finished sequence scores sum(log p) / "
                                 "length ** this; > 0 favours longer, < 0 shorter outputs.",
                                 kind="float", low=-10.0, high=10.0, cli="--length-penalty",
                                 ui_low=-2.0, ui_high=3.0, step=0.1, hf="length_penalty")
    early_stopping: bool = _opt(False, help="Beam search: stop a prompt as soon as num_beams "
                                "sequences have finished (off: while a running beam could still "
                                "beat them).", kind="bool", cli="--early-stopping/--no-early-stopping",
                                hf="early_stopping")
    no_repeat_ngram_size: int = _opt(0, help="Never repeat an n-gram of this size (0: off).",
                                     kind="int", low=0, high=2**63, cli="--no-repeat-ngram-size",
                                     ui_low=0, ui_high=6, step=1, hf="no_repeat_ngram_size")
    num_return_sequences: int = _opt(1, help="Beam search: return this many of the best sequences "
                                     "per prompt (at most num_beams).", kind="int", low=1,
                                     high=MAX_BEAMS + 1)
    # the rules a converted model's generation config sets (zoo.io.generation_config), per call too
    max_length: int | None = _opt(None, help="When max_new_tokens is not given: at most this many "
                                  "tokens in all (a decoder's prompt and new tokens; an encoder-"
                                  "decoder's start token and new tokens).", kind="int", low=1,
                                  high=2**63, optional=True, hf="max_length")
    forced_bos_id: int | None = _opt(None, help="The first new token when the sequence so far is one "
                                     "token (an encoder-decoder's start token): forced to this id "
                                     "(BART).", kind="token", optional=True, hf="forced_bos_token_id")
    forced_eos_id: int | Sequence[int] | None = _opt(None, help="The last new token (at "
                                                     "max_new_tokens): forced to this id, or one of "
                                                     "these (BART, Marian).", kind="tokens",
                                                     optional=True, hf="forced_eos_token_id")
    bad_words: Sequence[Sequence[int]] | None = _opt(None, help="Id sequences never generated: a "
                                                     "one-id entry is never chosen (a stop token "
                                                     "excepted), a longer one never completed "
                                                     "(Marian bans its pad id).", kind="token_lists",
                                                     optional=True, hf="bad_words_ids")
    suppress_tokens: int | Sequence[int] | None = _opt(None, help="Ids never chosen.",
                                                       kind="tokens", optional=True,
                                                       hf="suppress_tokens")
    begin_suppress_tokens: int | Sequence[int] | None = _opt(None, help="Ids never chosen as the "
                                                             "first new token.", kind="tokens",
                                                             optional=True,
                                                             hf="begin_suppress_tokens")

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
        return id_list(self.stop_tokens)

    def check_vocab(self, vocab_size: int) -> None:
        """Every token-id option lies inside a vocabulary of ``vocab_size`` ids."""
        ids = {"decoder_start_id": self.decoder_start_id, "pad_id": self.pad_id,
               "forced_bos_id": self.forced_bos_id}
        for name in ("stop_tokens", "forced_eos_id", "suppress_tokens", "begin_suppress_tokens"):
            ids.update({f"{name}[{i}]": s for i, s in enumerate(id_list(getattr(self, name)))})
        for i, seq in enumerate(self.bad_words or ()):
            ids.update({f"bad_words[{i}][{j}]": s for j, s in enumerate(seq)})
        for name, v in ids.items():
            if v is not None and not 0 <= v < vocab_size:
                _bad(name, f"{v} is outside the vocabulary [0, {vocab_size})",
                     "use an id the model's tokenizer produces")


def id_list(v) -> list:
    """A ``tokens`` option as a list (one id, a list of ids, or none)."""
    return [] if v is None else [v] if _is_int(v) else list(v)


def model_defaults(model) -> dict:
    """The options a converted model's generation config sets (``model.generation_config``, a dict
    in transformers' field names, :mod:`zoo.io.generation_config`), under their option names (each
    option's ``Option.hf``): the defaults of a call, which the call's own options override (an
    explicit ``None`` or ``[]`` included).  As transformers does, a model without a pad id pads with
    its first eos id; ``top_k``-like strategy fields are never among them (the strategy is the
    caller's)."""
    cfg = getattr(model, "generation_config", None)
    if not isinstance(cfg, dict) or not cfg:
        return {}
    out = {f.name: cfg[f.metadata["option"].hf] for f in dataclasses.fields(GenerationOptions)
           if f.metadata["option"].hf is not None and cfg.get(f.metadata["option"].hf) is not None}
    if "pad_id" not in out and model.spec.pad_id is None and id_list(out.get("stop_tokens")):
        out["pad_id"] = id_list(out["stop_tokens"])[0]
    if model.spec.arch != "encoder_decoder":
        out.pop("decoder_start_id", None)
    return out


def _bad(name, what, fix=None):
    raise ZooError(f"{name} {what}", where=f"generate.{name}", fix=fix)


#: the catalogue ids (zoo.messages) of the options' own fix sentences, so a front end translates them
_FIX_IDS = {"temperature": "option.fix_temperature", "top_p": "option.fix_top_p",
            "repetition_penalty": "option.fix_repetition_penalty"}


def _range_error(message_id: str, name: str, opt: Option, **params) -> None:
    """An option out of its range, worded from zoo.messages (its own fix too, when the catalogue
    has it word for word; otherwise the whole message in English as declared)."""
    from .. import messages

    fix_id = _FIX_IDS.get(name)
    if opt.fix is not None and (fix_id is None or messages.MESSAGES[fix_id].fix != opt.fix):
        what, _ = messages.render(message_id, {"name": name, **params})
        _bad(name, what[len(name) + 1:], opt.fix)
    raise ZooError.of(message_id, where=f"generate.{name}", name=name, fix=fix_id if opt.fix else (), **params)


def _check_option(name: str, v, opt: Option) -> None:
    """One option's type and range, from its :class:`Option` declaration."""
    if v is None and opt.optional:
        return
    if opt.kind == "bool":
        if not isinstance(v, bool):
            _bad(name, f"must be true or false, got {short(v)}")
    elif opt.kind == "int":
        if not _is_int(v) or not opt.low <= v < opt.high:
            _range_error("option.integer_at_least" if opt.high == 2**63 else "option.integer_in", name, opt,
                         low=opt.low, value=short(v), span=f"[{_num(opt.low)}, {_num(opt.high)})")
    elif opt.kind == "float":
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) \
            and (v > opt.low if opt.low_open else v >= opt.low) and v <= opt.high
        if not ok:
            _range_error("option.number_above" if opt.high == math.inf else "option.number_in", name, opt,
                         low=f"{opt.low:g}", value=short(v), span=f"[{opt.low:g}, {opt.high:g}]")
    elif opt.kind == "token":
        if not _is_int(v):
            _bad(name, f"must be a token id (an integer), got {short(v)}")
    elif opt.kind == "tokens":
        stops = [v] if _is_int(v) or not isinstance(v, (list, tuple)) else list(v)
        if len(stops) > MAX_IDS:
            _bad(name, f"lists {len(stops)} ids; at most {MAX_IDS}")
        for i, s in enumerate(stops):
            if not _is_int(s):
                _bad(f"{name}[{i}]", f"must be a token id (an integer), got {short(s)}")
    elif opt.kind == "token_lists":
        if not isinstance(v, (list, tuple)) or len(v) > MAX_IDS:
            _bad(name, f"must be a list of id sequences (at most {MAX_IDS}), got {short(v)}")
        for i, seq in enumerate(v):
            if not isinstance(seq, (list, tuple)) or not seq or len(seq) > MAX_IDS:
                _bad(f"{name}[{i}]", f"must be a non-empty list of token ids, got {short(seq)}")
            for j, s in enumerate(seq):
                if not _is_int(s):
                    _bad(f"{name}[{i}][{j}]", f"must be a token id (an integer), got {short(s)}")


def _num(x) -> str:
    """Range ends as people write them: ``2**63`` rather than nineteen digits."""
    for p in (63, 64):
        if abs(x) == 2**p:
            return ("-" if x < 0 else "") + f"2**{p}"
    return f"{x:g}" if isinstance(x, float) else str(x)
