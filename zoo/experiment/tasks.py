"""Tasks: what a trial learns, drawn deterministically from a seed, with exact held-out metrics.

A task is a plugin like an attention kernel (family ``task``, hook ``register_tasks``, listed by
``zoo components task``).  Most tasks are *synthetic*: a generator of token sequences with a known
answer.  :class:`SyntheticTask` turns one method, :meth:`SyntheticTask.draw`, into everything the
trainer and the experiment need:

- **training batches**, drawn from the trainer's per-step generator (so the seed fixes them);
- **held-out data that never overlaps training**: every example is hashed (a fixed polynomial hash
  of its tokens, independent of any seed) and a fixed fraction of the hash space is reserved for
  evaluation; training draws reject those examples, evaluation keeps only them.  Membership is a
  function of the example alone, so no seed, batch size or step can leak one into training;
- **exact metrics**, in two kinds:

  - *past-only* scores, which a model that sees the future cannot cheat: ``past_acc`` (each answer
    token predicted from its prefix alone -- a forward of ``ids[:, :t + 1]`` per answer position
    ``t``, rows grouped by position, so nothing after ``t`` ever enters the model), ``past_exact``
    (every answer token of an example right that way), and for tasks whose answer ends the sequence
    ``gen_exact`` (the model *generates* the answer greedily from the prompt).  ``past_acc`` is the
    task's :attr:`~SyntheticTask.primary` metric: an experiment that names no metrics is judged on
    it, and its verdicts hold whatever the variants' masks are;
  - *teacher-forced* scores, from one forward of the whole sequence as in training: ``acc`` (per
    answer token) and ``exact``.  They are cheap and equal the past-only ones for a causal model,
    but a decoder without its look-ahead mask reads the answer from the next input position and
    scores ~1.0 on them.  They stay available under these names (every metric not in
    :attr:`~SyntheticTask.past_only` counts as teacher-forced) and the results table refuses a verdict on them between variants
    of which one sees the future (:func:`future_leak` measures that on every finished trial).

Shapes: ``n`` examples, ``T`` tokens.  ``draw`` returns symbol indices (not token ids): ``ids (n, T)``
and ``labels (n, T)`` with ``-1`` where nothing is predicted, and ``start (n,)`` where the answer
begins (or None when the answer is not one final span), and optionally ``length (n,)`` for
variable-length examples (right padding).

Tokens are characters of a small alphabet (``a b c ... 0 1 ...``) written with the ``char``
tokenizer, so a trial's checkpoint decodes its own inputs and the Inspect tab labels heatmaps.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
from typing import Any, ClassVar

import torch

from ..components import Task
from ..errors import ZooError
from ..io.tokenizers import tokenizer
from ..model.spec import make_config
from ..registry import get_registry
from ..train.objectives import Objective, ce_sum

IGNORE = -100
#: the past-only scores of every synthetic task (see the module docstring), "max" = higher is better
PAST_METRICS = {"past_acc": "max", "past_exact": "max"}
#: symbols tasks write with (distinct characters; Greek and Cyrillic extend the Latin set)
SYMBOLS = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
           "αβγδεζηθικλμνξοπρστυφχψωΓΔΘΛΞΠΣΦΨΩбвгдежзийклмнптфцчшщыэюя")
#: fixed weights of the example hash (seed-independent: held-out membership never depends on a run)
_HASH_W = torch.randint(1, 2 ** 20, (4096,), generator=torch.Generator().manual_seed(20231201))
_HASH_MOD = 1_000_003


def example_hash(ids: torch.Tensor, length: torch.Tensor | None = None) -> torch.Tensor:
    """``(n, T)`` symbol rows -> ``(n,)`` hashes in ``[0, 1_000_003)``; padding beyond ``length``
    does not count.  A polynomial hash with fixed weights: equal examples hash equally."""
    n, T = ids.shape
    x = (ids.long() + 1) * _HASH_W[:T]  # (n, T)
    if length is not None:
        x = x * (torch.arange(T)[None, :] < length[:, None])
    return (x.sum(-1) + 7919 * (length if length is not None else T)) % _HASH_MOD


def symbols(n: int, offset: int = 0, where: str = "task") -> str:
    """``n`` distinct symbol characters starting at ``offset`` of :data:`SYMBOLS`."""
    if offset + n > len(SYMBOLS):
        raise ZooError.of("task.symbols", where=where, n=offset + n, limit=len(SYMBOLS), room=len(SYMBOLS) - offset)
    return SYMBOLS[offset:offset + n]


class SyntheticTask(Task):
    """Base of generated tasks: subclasses set ``alphabet`` (in ``__init__``) and write :meth:`draw`.

    Config fields every synthetic task understands (declared by each config dataclass):
    ``heldout`` (fraction of the example space reserved for evaluation), ``eval_examples``.
    """

    arch: ClassVar[str] = "decoder"
    metrics: ClassVar[dict] = {"past_acc": "max", "past_exact": "max", "acc": "max", "exact": "max"}
    #: the past-only metric verdicts use by default (an experiment without ``metrics:``)
    primary: ClassVar[str] = "past_acc"
    #: metrics scored from the past alone (a name ``m`` also covers ``m_2x`` ...); every other
    #: metric is teacher-forced -- one forward of the whole sequence, which a model that sees the
    #: future cheats (:func:`is_teacher_forced`)
    past_only: ClassVar[tuple] = ("past_acc", "past_exact", "gen_exact")
    #: the answer ends the sequence, so greedy generation can be scored (adds ``gen_exact``)
    answer_at_end: ClassVar[bool] = False
    alphabet: str = ""

    def __init_subclass__(cls, **kw):
        # every synthetic task has the past-only scores, listed first (the first metric is the
        # primary one, :class:`zoo.components.Task`), whatever metrics its class declares
        super().__init_subclass__(**kw)
        if "metrics" in cls.__dict__:
            cls.metrics = {**PAST_METRICS, **{k: v for k, v in cls.metrics.items() if k not in PAST_METRICS}}

    def __init__(self, config):
        super().__init__(config)
        if "metrics" in self.__dict__:  # an instance that set its own (per config) keeps them
            self.metrics = {**PAST_METRICS, **self.metrics}
        # ``specials: false`` in a task's config: the vocabulary is exactly the task's symbols.  By
        # default the char tokenizer also reserves <pad> <unk> <bos> <eos> <mask>: output classes
        # that are never a target, and one such class is enough to keep a 2-layer attention-only
        # model from forming an induction head in 1,500 steps (REPRODUCTION.md of induction_heads)
        keep = getattr(config, "specials", True)
        self.tok = tokenizer("char", text=self.alphabet, **({} if keep else {"specials": ()}))
        self.sym2id = torch.tensor([self.tok.stoi[c] for c in self.alphabet])  # symbol -> token id

    # ------------------------------------------------------------------ to implement
    def draw(self, gen: torch.Generator, n: int, length: int | None = None) -> dict:
        """``n`` examples (``length``: a sequence length other than the training one, for
        extrapolation).  Returns ``{"ids", "labels", "start", "length"?}`` in symbol indices."""
        raise NotImplementedError

    def seq_len(self) -> int:
        """The training sequence length (what ``max_len`` must hold)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ provided
    def tokenizer(self):
        return self.tok

    def heldout_frac(self) -> float:
        return float(getattr(self.config, "heldout", 0.2))

    def is_heldout(self, ex: dict) -> torch.Tensor:
        """``(n,)`` bool: which examples belong to the evaluation side of the hash split."""
        h = example_hash(ex["ids"], ex.get("length"))
        return h < int(self.heldout_frac() * _HASH_MOD)

    def sample(self, gen: torch.Generator, n: int, *, heldout: bool, length: int | None = None) -> dict:
        """``n`` examples from one side of the split (rejection: draw, keep that side, repeat)."""
        keep_frac = self.heldout_frac() if heldout else 1 - self.heldout_frac()
        parts, have = [], 0
        for _ in range(1000):
            ex = self.draw(gen, max(8, math.ceil((n - have) / max(keep_frac, 1e-3) * 1.25)), length)
            sel = self.is_heldout(ex) == heldout
            ex = {k: (v[sel] if torch.is_tensor(v) else v) for k, v in ex.items()}
            parts.append(ex)
            have += int(sel.sum())
            if have >= n:
                break
        else:
            raise ZooError.of("task.heldout_draw", where="task.heldout")
        out = {}
        for k in parts[0]:
            v0 = parts[0][k]
            out[k] = torch.cat([p[k] for p in parts])[:n] if torch.is_tensor(v0) else v0
        return out

    def to_batch(self, ex: dict) -> dict:
        """Symbol examples -> the trainer's batch: token ids, labels (IGNORE where none), and an
        attention ``mask`` (True at real tokens) when lengths vary."""
        ids = self.sym2id[ex["ids"]]  # (n, T)
        labels = torch.where(ex["labels"] >= 0, self.sym2id[ex["labels"].clamp(min=0)],
                             torch.full_like(ex["labels"], IGNORE))
        b = {"ids": ids, "labels": labels}
        if ex.get("length") is not None:
            real = torch.arange(ids.size(1))[None, :] < ex["length"][:, None]  # (n, T)
            b["ids"] = torch.where(real, ids, torch.full_like(ids, self.tok.pad_id))
            b["labels"] = torch.where(real, b["labels"], torch.full_like(ids, IGNORE))
            b["mask"] = real
        return b

    def eval_examples(self, length: int | None = None) -> dict:
        """The fixed held-out set (the same for every trial and seed: paired comparisons see the
        same questions), distinct examples only."""
        gen = torch.Generator().manual_seed(1234 + (length or 0))
        n = int(getattr(self.config, "eval_examples", 256))
        ex = self.sample(gen, 2 * n, heldout=True, length=length)
        h = example_hash(ex["ids"], ex.get("length")).tolist()
        first = sorted({v: i for i, v in reversed(list(enumerate(h)))}.values())[:n]
        idx = torch.tensor(first)
        return {k: (v[idx] if torch.is_tensor(v) else v) for k, v in ex.items()}

    def prepare_objective(self, cfg, spec, tok=None, *, fit_vocab: bool = False):
        """The trainer's data source hook (:func:`zoo.train.prepare.prepare`)."""
        task = self
        if fit_vocab and spec.vocab_size != self.tok.vocab_size:
            spec = spec.replace(vocab_size=self.tok.vocab_size)
        if self.tok.vocab_size > spec.vocab_size:
            raise ZooError.of("task.vocab", where="vocab_size", n=self.tok.vocab_size, vocab_size=spec.vocab_size)
        need = self.needed_len()
        if need > spec.max_len:
            raise ZooError.of("task.max_len", where="max_len", need=need, max_len=spec.max_len)
        if spec.pad_id is not None and spec.pad_id != self.tok.pad_id:
            spec = spec.replace(pad_id=self.tok.pad_id)

        class TaskObjective(Objective):
            """Batches drawn from the task; loss on the answer tokens only."""

            def train_batch(self, gen, size):
                return task.to_batch(task.sample(gen, size, heldout=False))

            def eval_set(self):
                b = task.to_batch(task.eval_examples())
                bs = self.cfg.batch_size
                n = min(b["ids"].size(0), self.cfg.eval_batches * bs)
                return [{k: v[i:i + bs] for k, v in b.items()} for i in range(0, n, bs)]

            def loss(self, model, b):
                logits = model(b["ids"], attention_mask=b.get("mask"))  # (B, T, V)
                sel = b["labels"] != IGNORE
                correct = (logits.argmax(-1)[sel] == b["labels"][sel]).sum()
                return ce_sum(logits, b["labels"]), {"correct": correct}

        info = {"data": f"task:{self.name()}", "data_sha256": self.fingerprint(), "task": self.name(),
                "task_config": dataclasses.asdict(self.config) if self.config is not None else {},
                "tokenizer": "char", "vocab_size": self.tok.vocab_size}
        return TaskObjective(self.tok, cfg, spec), self.tok, spec, info

    def fingerprint(self) -> str:
        """16 hex digits naming the generated data (task and parameters), stored with the run as
        its data file's digest would be."""
        cfg = dataclasses.asdict(self.config) if self.config is not None else {}
        return fingerprint(self.name(), cfg)

    def max_eval_len(self) -> int:
        return self.seq_len()

    def needed_len(self) -> int:
        """The longest sequence the task feeds a model (training or scoring): the spec's ``max_len``
        must reach it.  An experiment's plan checks it for every variant before any trial starts
        (:func:`zoo.experiment.run.plan`), with the same message the trainer's check raises."""
        return max(self.seq_len(), self.max_eval_len())

    def name(self) -> str:
        return getattr(self, "kind", type(self).__name__.lower())

    def __fspath__(self) -> str:
        # The trainer's resume check asks whether its data *file* changed; a generated source names
        # itself like a path that is no file, so that check passes (the task is in the run's info).
        return f"task:{self.name()}"

    # ------------------------------------------------------------------ metrics
    @torch.no_grad()
    def evaluate(self, model) -> dict:
        """Exact metrics on the held-out set: ``acc``, ``exact`` and, where the answer ends the
        sequence, ``gen_exact``."""
        was = model.training
        model.eval()
        try:
            out = self.score(model, self.eval_examples(), "")
        finally:
            model.train(was)
        return out

    #: which half of the held-out examples :meth:`score` uses: None (all of them: every experiment
    #: without ``tune:``, numbers unchanged), ``"validation"`` (even example hash) or ``"test"``
    #: (odd).  The halves are disjoint by a property of the example alone, so an lr selected on
    #: validation is reported on examples the selection never saw (:mod:`zoo.experiment.selection`).
    split: str | None = None
    SPLITS: ClassVar[tuple] = ("validation", "test")

    @contextlib.contextmanager
    def using_split(self, split: str | None):
        """``with task.using_split("validation"): task.evaluate(model)`` scores one half only."""
        if split is not None and split not in self.SPLITS:
            raise ZooError(f"unknown evaluation split {split!r}", where="task.split", options=self.SPLITS)
        old, self.split = self.split, split
        try:
            yield self
        finally:
            self.split = old

    def in_split(self, ex: dict) -> dict:
        """The rows of ``ex`` in :attr:`split` (all of them when it is None)."""
        if self.split is None:
            return ex
        keep = (example_hash(ex["ids"], ex.get("length")) % 2) == (0 if self.split == "validation" else 1)
        return {k: (v[keep] if torch.is_tensor(v) else v) for k, v in ex.items()}

    def score(self, model, ex: dict, suffix: str) -> dict:
        ex = self.in_split(ex)
        b = self.to_batch(ex)
        pred = predict(model, b["ids"], b.get("mask"))  # (n, T) argmax token ids
        sel = b["labels"] != IGNORE
        right = (pred == b["labels"]) | ~sel
        past = predict_past(model, b["ids"], sel, b.get("mask"))  # (n, T), -1 where no label
        past_right = (past == b["labels"]) | ~sel
        out = {f"past_acc{suffix}": float((past == b["labels"])[sel].float().mean()),
               f"past_exact{suffix}": float(past_right.all(-1).float().mean()),
               f"acc{suffix}": float((pred == b["labels"])[sel].float().mean()),
               f"exact{suffix}": float(right.all(-1).float().mean())}
        if self.answer_at_end and ex.get("start") is not None:
            out[f"gen_exact{suffix}"] = generation_exact(model, b, ex["start"], ex.get("length"))
        return out

    def probe(self) -> list[int]:
        """Token ids of the first held-out example (its real tokens), for the inside view."""
        ex = self.eval_examples()
        b = self.to_batch({k: (v[:1] if torch.is_tensor(v) else v) for k, v in ex.items()})
        ids = b["ids"][0]
        if "mask" in b:
            ids = ids[b["mask"][0]]
        return ids.tolist()


def fingerprint(name: str, config: dict) -> str:
    return hashlib.sha256(json.dumps([name, config], sort_keys=True).encode()).hexdigest()[:16]


def predict(model, ids: torch.Tensor, mask: torch.Tensor | None = None, batch: int = 256) -> torch.Tensor:
    """Teacher-forced argmax ``(n, T)`` in chunks of ``batch`` rows."""
    outs = []
    for i in range(0, ids.size(0), batch):
        m = mask[i:i + batch] if mask is not None else None
        outs.append(model(ids[i:i + batch], attention_mask=m).argmax(-1))
    return torch.cat(outs)


def predict_past(model, ids: torch.Tensor, sel: torch.Tensor, mask: torch.Tensor | None = None,
                 batch: int = 256) -> torch.Tensor:
    """Past-only argmax ``(n, T)``: at every position ``t`` where ``sel[:, t]`` (an answer is
    scored), the prediction of a forward of ``ids[rows, :t + 1]`` alone -- the model never receives
    a token after ``t``, so no mask (or its absence) can let it read the answer.  Rows are grouped
    by position (one forward per scored position and chunk of ``batch`` rows: ``O(P T)`` tokens for
    ``P`` scored positions); ``-1`` where nothing is scored."""
    n, T = ids.shape
    out = torch.full((n, T), -1, dtype=torch.long)
    for t in sel.any(0).nonzero().flatten().tolist():
        rows = sel[:, t].nonzero().flatten()
        for i in range(0, rows.numel(), batch):
            r = rows[i:i + batch]
            m = mask[r, :t + 1] if mask is not None else None
            out[r, t] = model(ids[r, :t + 1], attention_mask=m)[:, -1].argmax(-1)
    return out


def future_leak(model, ids: list[int], vocab_size: int) -> float:
    """How much the logits at positions ``<= c`` move when every token after ``c`` is changed
    (``c`` = the middle of ``ids``; each later token becomes the next id, mod ``vocab_size``): the
    largest absolute change, relative to the largest logit there (an untrained model's logits are
    small).  Exactly 0 for a model that sees only the past (a masked score weighs exp(-inf) = 0); a
    decoder without its look-ahead mask moves them.  Measured on every trial (``result.json``'s ``causality``):
    teacher-forced metrics are not compared across a variant that sees the future."""
    if len(ids) < 2:
        return 0.0
    c = (len(ids) - 1) // 2
    a = torch.tensor([ids])
    b = a.clone()
    b[0, c + 1:] = (b[0, c + 1:] + 1) % vocab_size
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            la, lb = model(a)[0, :c + 1], model(b)[0, :c + 1]
    finally:
        model.train(was)
    scale = max(float(la.float().abs().max()), 1e-12)
    return float((la.float() - lb.float()).abs().max()) / scale


#: measurements that score no answer, so a look at the future cannot inflate them
NOT_ANSWER_SCORES = ("entropy_init",)


def is_past_only(task, metric: str) -> bool:
    """Whether ``metric`` of ``task`` is scored from the past alone: the task's
    :attr:`SyntheticTask.past_only` names (``past_acc``, ``past_exact``, ``gen_exact``, and their
    per-length variants ``past_acc_2x``; Poems: ``causal_loss``)."""
    return any(metric == m or metric.startswith(m + "_") for m in getattr(task, "past_only", ()))


def is_teacher_forced(task, metric: str) -> bool:
    """Whether ``metric`` of ``task`` may be cheated by a model that sees the future.  Safe by
    default: every metric a task does not declare past-only (:func:`is_past_only`) counts as
    teacher-forced -- ``acc``, ``exact``, the trainer's ``train_loss`` / ``eval_loss``, and any
    metric of a task that declares nothing -- except measurements that score no answer
    (:data:`NOT_ANSWER_SCORES`)."""
    return not is_past_only(task, metric) and metric not in NOT_ANSWER_SCORES


def primary_metric(task) -> str | None:
    """The task's past-only metric that verdicts use by default (None: the task declares none)."""
    return getattr(task, "primary", None)


def generation_exact(model, b: dict, start: torch.Tensor, length: torch.Tensor | None) -> float:
    """Fraction of examples whose answer, *generated* greedily from the prompt (input tokens
    ``[:start]``; the label at ``start - 1`` is the first answer token), matches exactly.  Nothing
    after the prompt is ever shown to the model, so a decoder that learned to read the next input
    token (the look-ahead mask removed) fails here even when its teacher-forced accuracy is perfect."""
    ids, labels = b["ids"], b["labels"]
    n, T = ids.shape
    ends = length if length is not None else torch.full((n,), T)
    hits = 0
    groups: dict[tuple[int, int], list[int]] = {}
    for i in range(n):
        groups.setdefault((int(start[i]), int(ends[i])), []).append(i)
    for (s, e), rows in groups.items():
        idx = torch.tensor(rows)
        seq = ids[idx, :s]  # (g, s) the prompt
        want = labels[idx, s - 1:e]  # (g, e - s + 1) the answer tokens, in order
        for _ in range(want.size(1)):
            nxt = model(seq)[:, -1].argmax(-1, keepdim=True)  # (g, 1)
            seq = torch.cat([seq, nxt], dim=1)
        hits += int((seq[:, s:] == want).all(-1).sum())
    return hits / max(1, n)


def get_task(kind: str, params: dict | None = None, *, where: str = "task") -> Task:
    """Build the registered task ``kind`` with ``params`` (validated by its config dataclass; an
    unknown name lists the registered ones)."""
    if not isinstance(kind, str):
        raise ZooError(f"a task kind must be a name, got {type(kind).__name__}", where=f"{where}.kind",
                       options=get_registry().names("task"))
    comp = get_registry().get("task", kind, where=f"{where}.kind")
    config = make_config(comp.config, dict(params or {}), where, kind)
    task = comp.cls(config)
    task.kind = kind
    return task


def list_tasks() -> list[dict[str, Any]]:
    """``[{"name", "doc", "params", "metrics", "arch"}]`` for every registered task."""
    return [{"name": c.name, "doc": c.doc, "params": c.params(), "metrics": dict(c.cls.metrics),
             "arch": c.cls.arch} for c in get_registry().list("task")]
