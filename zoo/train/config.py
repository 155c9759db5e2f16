"""Configuration of a training run: every knob in one frozen-by-convention dataclass, and what a
run returns.

The config is stored in the trainer state, so a resumed run reuses it exactly (``steps`` may be
raised to extend a run).  :meth:`TrainConfig.validate` turns bad values into a :class:`ZooError`
that names the field (``train.lr``), the problem and the fix.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from ..errors import ZooError
from ..guard.files import short

#: upper bounds of the training options (each larger value is refused by :meth:`TrainConfig.validate`)
MAX_INT = 2 ** 31 - 1        # steps, sizes, intervals
MAX_SEED = 2 ** 32 - 1       # seeds are mixed with the step into torch seeds below 2**63
MAX_LR = 10.0                # AdamW's useful range ends far below
MAX_WEIGHT_DECAY = 10.0

OBJECTIVES = ("clm", "mlm", "prefix_lm", "seq2seq")
#: which parameters AdamW's weight decay applies to: the weight ``matrices`` of the linear layers only
#: (biases, norm gains and embeddings undecayed: GPT-2 / nanoGPT practice, the default), or ``all``
#: of them (``torch.optim.AdamW(model.parameters())``: Power et al. 2022 and Nanda et al. 2023 decay
#: every parameter, embeddings included, in their grokking runs)
WEIGHT_DECAY_SCOPES = ("matrices", "all")
#: where a training window cut from the document stream may begin: at ``any`` token, or only at a
#: ``line`` start (the first token, or right after a newline or a document separator), or only at
#: a ``document`` start.  A model trained on windows that may begin mid-line never learns that the
#: first token of its context starts a line, and a prompt always does: a poem's first line typed
#: into the UI is continued by a line of the right length 71% of the time after ``any`` training,
#: and (the same model given a newline first) 97% of the time when it knows where the line began.
WINDOW_STARTS = ("any", "line", "document")
#: the model architectures each objective can train
ARCH_FOR = {"clm": ("decoder",), "prefix_lm": ("decoder",), "mlm": ("encoder",),
            "seq2seq": ("encoder_decoder",)}
#: what ``zoo train`` learns when no objective is named: the first objective that fits the arch
DEFAULT_OBJECTIVE = {arch: next(o for o, archs in ARCH_FOR.items() if arch in archs)
                     for arch in ("decoder", "encoder", "encoder_decoder")}


@dataclass
class TrainConfig:
    """Every knob of a run (stored in the trainer state; a resumed run reuses it)."""

    objective: str = "clm"
    steps: int = 1000             # optimizer steps in total
    batch_size: int = 32          # sequences per optimizer step, summed over accumulation and ranks
    grad_accum: int = 1           # micro-batches per step (each rank): batch_size / (world * accum)
    block_size: int | None = None  # window length for documents; None = min(max_len, 128)
    window_starts: str = "any"    # documents: where training windows may begin (WINDOW_STARTS)
    lr: float = 1e-3
    min_lr_ratio: float = 0.1     # cosine decays to lr * min_lr_ratio
    warmup: int = 100             # linear warm-up steps
    weight_decay: float = 0.1
    weight_decay_scope: str = "matrices"  # what is decayed: "matrices" or "all" (WEIGHT_DECAY_SCOPES)
    beta1: float = 0.9
    beta2: float = 0.98
    grad_clip: float = 1.0        # max global grad norm (0 = off)
    holdout: float = 0.05         # fraction of documents / examples held out for evaluation
    eval_every: int = 200
    eval_batches: int = 20        # at most this many batches of batch_size per evaluation
    exact_match_samples: int = 256  # seq2seq: examples greedily decoded per periodic evaluation
    save_every: int = 500
    log_every: int = 10
    mask_prob: float = 0.15       # mlm: fraction of the tokens picked for prediction
    mask_token_frac: float = 0.8  # mlm: of the picked, this share becomes <mask>; the rest is half
                                  # random tokens, half left as they are (BERT: 0.8 = 80/10/10)
    seed: int = 0
    bf16: bool = True             # autocast to bfloat16 on CUDA (ignored on CPU)
    compile: bool = False         # train through torch.compile(model) (forward and backward)
    tokenizer: str = "char"       # for a fresh model: "char" (vocabulary from the data) or "byte"
    keep_best: bool = False       # also save the model with the lowest held-out loss to out/best/
    progress: bool = True
    # a task's own metrics (acc, exact, gen_exact, ...) scored at every evaluation and logged as
    # task_<name> (the learning curve of what the task measures, not only its loss)
    task_metrics: bool = True
    # [{"metric": "acc", "value": 0.9, "stop": false}]: the first evaluated step at which a metric
    # reaches a value (steps_to_acc_0.9 in the end record; None when never reached); "stop": true
    # ends the run there (early stopping).  Metrics: the task's, or eval_loss (reached: <= value).
    thresholds: list = field(default_factory=list)
    # also write TensorBoard event files (out/tensorboard/) of every logged number
    tensorboard: bool = False

    def validate(self) -> "TrainConfig":
        """Check every knob by type and range (before any work); a bad one is a :class:`ZooError`
        naming ``train.<field>`` with the valid range and the fix.  Numbers must be finite: an
        ``lr`` of ``inf`` once ran to the end and saved non-finite weights."""
        def bad(field_, msg, fix=None, options=None):
            raise ZooError(msg, where=f"train.{field_}", fix=fix, options=options)

        def bad_of(field_, message_id, fix, **params):  # worded from zoo.messages: translatable
            raise ZooError.of(message_id, where=f"train.{field_}", fix=fix, **params)

        def integer(name, lo, hi=MAX_INT, fix=None):
            v = getattr(self, name)
            if fix not in (None, "positive"):  # a fix of the field's own, in English
                if isinstance(v, bool) or not isinstance(v, int):
                    bad(name, f"must be an integer, got {short(v)} ({type(v).__name__})", fix=fix)
                if not lo <= v <= hi:
                    bad(name, f"must be an integer in [{lo}, {hi}], got {short(v)}", fix=fix)
                return
            # worded from zoo.messages (translatable); fix "positive": a positive integer, at most hi
            fixes = dict(fix="hint.pass_positive_int" if fix == "positive" else "hint.pass_integer_in", lo=lo, hi=hi)
            if isinstance(v, bool) or not isinstance(v, int):
                bad_of(name, "value.must_be_int", value=short(v), type=type(v).__name__, **fixes)
            if not lo <= v <= hi:
                bad_of(name, "value.must_be_positive_int" if lo == 1 and v < 1 else "value.must_be_int_in",
                       value=short(v), **fixes)

        def number(name, lo, hi, *, lo_open=False, hi_open=False, fix=None):
            v = getattr(self, name)
            span = f"{'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                if fix:
                    bad(name, f"must be a number, got {short(v)} ({type(v).__name__})", fix=fix)
                bad_of(name, "value.must_be_number", "hint.pass_number_in", value=short(v), type=type(v).__name__,
                       span=span)
            if not math.isfinite(v):
                if fix:
                    bad(name, f"must be a finite number, got {v}", fix=fix)
                bad_of(name, "value.must_be_finite", "hint.pass_number_in", value=v, span=span)
            if v < lo or v > hi or (lo_open and v == lo) or (hi_open and v == hi):
                if fix:
                    bad(name, f"must be in {span}, got {short(v)}", fix=fix)
                bad_of(name, "value.must_be_in", "hint.pass_number_in", value=short(v), span=span)

        def choice(name, label, options):
            v = getattr(self, name)
            if not isinstance(v, str) or v not in options:
                bad(name, f"unknown {label} {short(v)}", options=options,
                    fix="pick one of the options listed")

        choice("objective", "objective", OBJECTIVES)
        for name in ("steps", "batch_size", "grad_accum", "eval_every", "save_every", "log_every",
                     "eval_batches"):
            integer(name, 1, fix="positive")
        choice("window_starts", "window start", WINDOW_STARTS)
        if self.block_size is not None:
            integer("block_size", 2, fix="pass at least 2 (a window and its next token), or None "
                                         "for min(max_len, 128)")
        number("lr", 0, MAX_LR, lo_open=True,
               fix=f"pass a learning rate in (0, {MAX_LR}]; 1e-3 to 3e-4 is usual for AdamW")
        number("min_lr_ratio", 0, 1)
        integer("warmup", 0)
        number("weight_decay", 0, MAX_WEIGHT_DECAY)
        choice("weight_decay_scope", "weight-decay scope", WEIGHT_DECAY_SCOPES)
        number("beta1", 0, 1, hi_open=True, fix="AdamW's betas lie in [0, 1); 0.9 is usual")
        number("beta2", 0, 1, hi_open=True, fix="AdamW's betas lie in [0, 1); 0.98 or 0.999 is usual")
        number("grad_clip", 0, math.inf, fix="pass a finite max grad norm (0 turns clipping off)")
        number("holdout", 0, 1, hi_open=True)
        integer("exact_match_samples", 0)
        number("mask_prob", 0, 1, lo_open=True, hi_open=True)
        number("mask_token_frac", 0, 1,
               fix="0.8 is BERT's 80/10/10; 1.0 replaces every picked token by <mask>")
        integer("seed", 0, MAX_SEED, fix=f"pass a seed in [0, {MAX_SEED}] (2**32 - 1)")
        self.thresholds = check_thresholds(self.thresholds)  # normalised: stop filled in
        for name in ("bf16", "compile", "keep_best", "progress", "task_metrics", "tensorboard"):
            if not isinstance(getattr(self, name), bool):
                bad(name, f"must be true or false, got {short(getattr(self, name))}",
                    fix="pass a bool")
        if not isinstance(self.tokenizer, str) or not self.tokenizer:
            bad("tokenizer", f"must be a tokenizer name, got {short(self.tokenizer)}",
                fix="pass 'char' or 'byte' (or another registered tokenizer)")
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str = "train.config") -> "TrainConfig":
        """The config stored in a trainer state (unknown keys, e.g. of a newer zoo, are ignored;
        the values are checked by :meth:`validate` before use)."""
        if not isinstance(d, dict):
            raise ZooError(f"expected a mapping of training options, got {short(d)}", where=where,
                           fix="resume from a trainer state zoo wrote, or start a new run")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


#: the fields of one ``thresholds`` entry
THRESHOLD_FIELDS = ("metric", "value", "stop")


def threshold_name(metric: str, value: float) -> str:
    """``steps_to_acc_0.9``: the metric a threshold adds (the value in ``%g`` form)."""
    return f"steps_to_{metric}_{float(value):g}"


def check_thresholds(items: Any, where: str = "train.thresholds") -> list[dict]:
    """Each entry ``{metric: NAME, value: NUMBER, stop: BOOL}`` (``stop`` optional, default false),
    checked by type; whether the metric exists is checked where the task is known."""
    def bad(i, key, message_id, fix=None, **params):  # worded from zoo.messages: translatable
        raise ZooError.of(message_id, where=f"{where}[{i}]{'.' + key if key else ''}", fix=fix,
                          options=THRESHOLD_FIELDS if key in ("", None) else None, **params)

    if not isinstance(items, (list, tuple)):
        raise ZooError.of("threshold.list", where=where, fix="hint.example", value=short(items),
                          example="thresholds: [{metric: acc, value: 0.9}]")
    out = []
    for i, t in enumerate(items):
        if not isinstance(t, dict) or "metric" not in t or "value" not in t:
            bad(i, "", "threshold.not_mapping", "hint.example", value=short(t),
                example="{metric: acc, value: 0.9, stop: true}")
        extra = [k for k in t if k not in THRESHOLD_FIELDS]
        if extra:
            bad(i, "", "threshold.unknown_field", field=short(extra[0]))
        if not isinstance(t["metric"], str) or not t["metric"]:
            bad(i, "metric", "threshold.metric_name", "hint.example", value=short(t["metric"]),
                example="acc or eval_loss")
        v = t["value"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            bad(i, "value", "value.must_be_finite", "hint.example", value=short(v), example="value: 0.9")
        if not isinstance(t.get("stop", False), bool):
            bad(i, "stop", "value.must_be_bool", "threshold.stop", value=short(t["stop"]))
        out.append({"metric": t["metric"], "value": float(v), "stop": bool(t.get("stop", False))})
    names = [threshold_name(t["metric"], t["value"]) for t in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise ZooError.of("threshold.same_metric", where=where, metric=dup)
    return out


@dataclass
class TrainResult:
    """What :func:`zoo.train.train` returns: the trained model (with ``.tokenizer``), the metric
    history, the final evaluation, where things were written, and whether the run was interrupted."""

    model: nn.Module
    tokenizer: Any
    final: dict
    history: list[dict] = field(default_factory=list)
    out: Path | None = None
    step: int = 0
    interrupted: bool = False
    wall_time: float = 0.0       # seconds of the whole run, the earlier parts of a resumed one included
    resumed_time: float = 0.0    # of those, the seconds the earlier parts took (0 for a fresh run)
