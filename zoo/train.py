"""Training: one loop for the four objectives, on one CPU or many GPUs.

    import zoo
    from zoo.train import train
    result = train("gpt_tiny", "data/poems.txt", objective="clm", steps=2000, out="runs/poet",
                   fit_vocab=True)
    result.final["eval_loss"], result.model                 # the trained model, with .tokenizer

The same from the shell: ``zoo train gpt_tiny --data data/poems.txt --objective clm --steps 2000
--out runs/poet --fit-vocab``; under ``torchrun --nproc_per_node=N`` it trains data-parallel.

Objectives (what the model learns to predict):

``clm``        causal LM (GPT): every next token of windows cut from the document stream.
``mlm``        masked LM (BERT): 15% of tokens are picked; of those 80% become ``<mask>``, 10% a
               random token, 10% stay; the model predicts the originals.
``prefix_lm``  a decoder whose prefix is seen bidirectionally (UniLM, T5's prefix LM): on a pairs
               file the source is the prefix; on documents a random split of each window.  Loss only
               on the part after the prefix.
``seq2seq``    encoder-decoder (T5): the encoder reads the source, the decoder predicts the target
               after ``<bos>`` and ends with ``<eos>``.

What the loop does, nanoGPT-style, in the open:

- AdamW (no weight decay on biases, norms and embeddings), linear warm-up then cosine decay to
  ``min_lr_ratio * lr``, gradient clipping, gradient accumulation;
- a held-out split of whole documents / examples, evaluated every ``eval_every`` steps (loss, and
  masked-token accuracy or exact match where the objective has one);
- determinism: the model is initialised from ``seed``, every step's batch is drawn from a generator
  seeded by ``(seed, step)`` and dropout is re-seeded per step, so a run is reproducible and a resumed
  run takes exactly the steps an uninterrupted one would;
- bf16 autocast on CUDA; float32 on CPU;
- ``keep_best``: the model with the lowest held-out loss so far is also saved to ``out/best/``
  (small data overfits; the best checkpoint is the one to ship);
- checkpoints every ``save_every`` steps: ``model.safetensors`` + ``spec.yaml`` (a normal zoo
  checkpoint, with the tokenizer) and ``trainer_state.safetensors`` (weights, AdamW moments) with
  ``trainer_state.json`` (step, config, schedule; also inside the safetensors header).  No pickle.  A
  killed run resumes with ``resume=True`` losing at most the steps since the last save; SIGTERM /
  Ctrl-C save first;
- a tqdm bar (loss, tokens/s, ETA), ``metrics.jsonl`` (one JSON object per log/eval line) and
  ``loss.png`` at the end;
- distributed data parallel when launched by ``torchrun``: each rank takes its slice of the same
  global batch (gloo on CPU, nccl on GPU); the loss is normalised by the global token count, so N
  processes compute the same update as one; only rank 0 writes files.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from .errors import CheckpointError, DataError, ZooError

OBJECTIVES = ("clm", "mlm", "prefix_lm", "seq2seq")
ARCH_FOR = {"clm": ("decoder",), "prefix_lm": ("decoder",), "mlm": ("encoder",),
            "seq2seq": ("encoder_decoder",)}
STATE_FILE = "trainer_state.safetensors"
STATE_JSON = "trainer_state.json"
METRICS = "metrics.jsonl"
IGNORE = -100


@dataclass
class TrainConfig:
    """Every knob of a run (stored in the trainer state; a resumed run reuses it)."""

    objective: str = "clm"
    steps: int = 1000             # optimizer steps in total
    batch_size: int = 32          # sequences per optimizer step, summed over accumulation and ranks
    grad_accum: int = 1           # micro-batches per step (each rank): batch_size / (world * accum)
    block_size: int | None = None  # window length for documents; None = min(max_len, 128)
    lr: float = 1e-3
    min_lr_ratio: float = 0.1     # cosine decays to lr * min_lr_ratio
    warmup: int = 100             # linear warm-up steps
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.98
    grad_clip: float = 1.0        # max global grad norm (0 = off)
    holdout: float = 0.05         # fraction of documents / examples held out for evaluation
    eval_every: int = 200
    eval_batches: int = 20        # at most this many batches of batch_size per evaluation
    exact_match_samples: int = 256  # seq2seq: examples greedily decoded per periodic evaluation
    save_every: int = 500
    log_every: int = 10
    mask_prob: float = 0.15       # mlm
    seed: int = 0
    bf16: bool = True             # autocast to bfloat16 on CUDA (ignored on CPU)
    tokenizer: str = "char"       # for a fresh model: "char" (vocabulary from the data) or "byte"
    keep_best: bool = False       # also save the model with the lowest held-out loss to out/best/
    progress: bool = True

    def validate(self) -> "TrainConfig":
        def bad(field_, msg, fix=None, options=None):
            raise ZooError(msg, where=f"train.{field_}", fix=fix, options=options)

        if self.objective not in OBJECTIVES:
            bad("objective", f"unknown objective {self.objective!r}", options=OBJECTIVES,
                fix="pick one of the objectives listed")
        for name in ("steps", "batch_size", "grad_accum", "eval_every", "save_every", "log_every",
                     "eval_batches"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                bad(name, f"must be a positive integer, got {getattr(self, name)!r}")
        if self.block_size is not None and self.block_size < 2:
            bad("block_size", f"must be at least 2, got {self.block_size}")
        if not self.lr > 0:
            bad("lr", f"must be positive, got {self.lr}")
        if not 0 <= self.min_lr_ratio <= 1:
            bad("min_lr_ratio", f"must be in [0, 1], got {self.min_lr_ratio}")
        if not 0 < self.mask_prob < 1:
            bad("mask_prob", f"must be in (0, 1), got {self.mask_prob}")
        if self.warmup < 0 or self.grad_clip < 0:
            bad("warmup", "warmup and grad_clip must not be negative")
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class TrainResult:
    """What :func:`train` returns: the trained model (with ``.tokenizer``), the metric history,
    the final evaluation, where things were written, and whether the run was interrupted."""

    model: nn.Module
    tokenizer: Any
    final: dict
    history: list[dict] = field(default_factory=list)
    out: Path | None = None
    step: int = 0
    interrupted: bool = False
    wall_time: float = 0.0


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine from ``lr`` to ``lr * min_lr_ratio``.
    ``step`` counts from 0 (the LR used for the ``step+1``-th update); a pure function of the step,
    so resuming needs no scheduler object."""
    if cfg.warmup and step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    span = max(1, cfg.steps - cfg.warmup)
    t = min(1.0, (step - cfg.warmup) / span)
    lo = cfg.lr * cfg.min_lr_ratio
    return lo + 0.5 * (cfg.lr - lo) * (1 + math.cos(math.pi * t))


# ====================================================================== tasks (one per objective)
class Task:
    """Turns a dataset into global batches (dicts of tensors, batch dimension first) and a batch
    into ``(sum of token losses, extra sums)``.  Every rank builds the same global batch from the
    same ``(seed, step)`` generator and keeps its slice."""

    count_key = "n_tokens"

    def __init__(self, tok, cfg: TrainConfig, spec):
        self.tok, self.cfg, self.spec = tok, cfg, spec

    def train_batch(self, gen: torch.Generator, size: int) -> dict:
        raise NotImplementedError

    def eval_set(self) -> list[dict]:
        raise NotImplementedError

    def loss(self, model, batch: dict) -> tuple[torch.Tensor, dict]:
        raise NotImplementedError

    def n_tokens(self, batch: dict) -> int:
        return int((batch["labels"] != IGNORE).sum())


def _ce_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), labels.reshape(-1),
                           ignore_index=IGNORE, reduction="sum")


class _StreamTask(Task):
    """Windows of ``block_size`` (+1) tokens cut at random offsets of the training stream; the
    held-out stream is cut into consecutive windows, the same every evaluation."""

    extra = 1

    def __init__(self, tok, cfg, spec, train_ids: torch.Tensor, eval_ids: torch.Tensor, where):
        super().__init__(tok, cfg, spec)
        self.block = cfg.block_size or min(spec.max_len, 128)
        if self.block > spec.max_len:
            raise DataError(f"block_size {self.block} is above the spec's max_len {spec.max_len}",
                            where="train.block_size",
                            fix=f"use block_size <= {spec.max_len} or raise max_len (--set max_len=N)")
        need = self.block + self.extra
        if train_ids.numel() < need:
            raise DataError(f"the training text has only {train_ids.numel()} tokens, fewer than one "
                            f"window of {need}", where=where,
                            fix="give more text or a smaller --block-size")
        self.train_ids, self.eval_ids = train_ids, eval_ids

    def windows(self, gen, size):
        need = self.block + self.extra
        starts = torch.randint(0, self.train_ids.numel() - need + 1, (size,), generator=gen)
        return torch.stack([self.train_ids[s:s + need] for s in starts.tolist()])  # (B, need)

    def eval_windows(self) -> list[torch.Tensor]:
        need = min(self.block + self.extra, self.eval_ids.numel())
        if need < 2:
            return []
        n = self.eval_ids.numel() // need
        rows = self.eval_ids[: n * need].view(n, need)
        cap = self.cfg.eval_batches * self.cfg.batch_size
        rows = rows[:cap]
        return [rows[i:i + self.cfg.batch_size] for i in range(0, rows.size(0), self.cfg.batch_size)]


class CLMTask(_StreamTask):
    def train_batch(self, gen, size):
        w = self.windows(gen, size)
        return {"ids": w[:, :-1], "labels": w[:, 1:]}

    def eval_set(self):
        return [{"ids": w[:, :-1], "labels": w[:, 1:]} for w in self.eval_windows()]

    def loss(self, model, b):
        return _ce_sum(model(b["ids"]), b["labels"]), {}


class MLMTask(_StreamTask):
    extra = 0

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        if self.tok.mask_id is None:
            raise DataError("the tokenizer has no <mask> token", where="train.objective",
                            fix="use the char or byte tokenizer, which reserve <mask>")
        specials = [getattr(self.tok, f"{n}_id") for n in ("pad", "unk", "bos", "eos", "mask")]
        self.specials = torch.tensor([s for s in specials if s is not None], dtype=torch.long)
        self.n_special = int(self.specials.max()) + 1 if len(self.specials) else 0

    def mask(self, ids: torch.Tensor, gen) -> dict:
        """BERT's 80/10/10 rule on ``mask_prob`` of the (non-special) tokens."""
        pick = torch.rand(ids.shape, generator=gen) < self.cfg.mask_prob
        pick &= ~torch.isin(ids, self.specials)
        labels = torch.where(pick, ids, torch.full_like(ids, IGNORE))
        r = torch.rand(ids.shape, generator=gen)
        rand_ids = torch.randint(0, self.tok.vocab_size, ids.shape, generator=gen)
        rand_ids = torch.where(rand_ids < self.n_special, ids, rand_ids)  # never inject a special
        x = torch.where(pick & (r < 0.8), torch.full_like(ids, self.tok.mask_id), ids)
        x = torch.where(pick & (r >= 0.8) & (r < 0.9), rand_ids, x)
        return {"ids": x, "labels": labels}

    def train_batch(self, gen, size):
        return self.mask(self.windows(gen, size), gen)

    def eval_set(self):
        gen = torch.Generator().manual_seed(1234)
        return [self.mask(w, gen) for w in self.eval_windows()]

    def loss(self, model, b):
        logits = model(b["ids"])
        sel = b["labels"] != IGNORE
        correct = (logits.argmax(-1)[sel] == b["labels"][sel]).sum()
        return _ce_sum(logits, b["labels"]), {"correct": correct}


class PrefixDocTask(_StreamTask):
    """prefix_lm on documents: each window gets a random prefix length; loss after it."""

    def split(self, w, gen):
        T = w.size(1) - 1
        plen = torch.randint(1, max(2, T), (w.size(0),), generator=gen)  # (B,)
        ids, labels = w[:, :-1], w[:, 1:].clone()
        labels[torch.arange(T)[None, :] < (plen[:, None] - 1)] = IGNORE
        return {"ids": ids, "labels": labels, "prefix": plen}

    def train_batch(self, gen, size):
        return self.split(self.windows(gen, size), gen)

    def eval_set(self):
        gen = torch.Generator().manual_seed(1234)
        return [self.split(w, gen) for w in self.eval_windows()]

    def loss(self, model, b):
        return _ce_sum(model(b["ids"], prefix_lengths=b["prefix"]), b["labels"]), {}


class _PairsTask(Task):
    def __init__(self, tok, cfg, spec, train_pairs, eval_pairs):
        super().__init__(tok, cfg, spec)
        for name in ("bos_id", "eos_id", "pad_id"):
            if getattr(tok, name, None) is None:
                raise DataError(f"the tokenizer has no {name[:-3]} token", where="train.tokenizer",
                                fix="use the char or byte tokenizer")
        self.train, self.eval = train_pairs, eval_pairs

    def train_batch(self, gen, size):
        idx = torch.randint(0, len(self.train.sources), (size,), generator=gen).tolist()
        return self.collate([self.train.sources[i] for i in idx], [self.train.targets[i] for i in idx])

    def eval_set(self):
        n = min(len(self.eval.sources), self.cfg.eval_batches * self.cfg.batch_size)
        bs = self.cfg.batch_size
        return [self.collate(self.eval.sources[i:i + bs], self.eval.targets[i:i + bs])
                for i in range(0, n, bs)]


class Seq2SeqTask(_PairsTask):
    """The source ends with ``<eos>`` (as in T5 and Marian, and as ``model.generate(text)`` encodes
    a prompt); the decoder reads ``<bos> target`` and predicts ``target <eos>``."""

    def __init__(self, tok, cfg, spec, train_pairs, eval_pairs):
        super().__init__(tok, cfg, spec, train_pairs, eval_pairs)
        for enc in (self.train, self.eval):
            enc.sources = [s + [tok.eos_id] for s in enc.sources]

    def collate(self, srcs, tgts):
        from .data import pad_batch

        t = self.tok
        src = pad_batch(srcs, t.pad_id)
        tin = pad_batch([[t.bos_id] + s for s in tgts], t.pad_id)
        tout = pad_batch([s + [t.eos_id] for s in tgts], IGNORE)
        tlen = torch.tensor([len(s) + 1 for s in tgts])  # (B,) <bos> + target
        return {"src": src, "src_mask": src != t.pad_id, "tgt": tin,
                "tgt_mask": torch.arange(tin.size(1))[None, :] < tlen[:, None], "labels": tout}

    def loss(self, model, b):
        logits = model(b["src"], b["tgt"], src_mask=b["src_mask"], tgt_mask=b["tgt_mask"])
        sel = b["labels"] != IGNORE
        correct = (logits.argmax(-1)[sel] == b["labels"][sel]).sum()
        return _ce_sum(logits, b["labels"]), {"correct": correct}


class PrefixPairsTask(_PairsTask):
    """prefix_lm on pairs: ``source <bos> target <eos>``, the source and <bos> are the prefix."""

    def collate(self, srcs, tgts):
        from .data import pad_batch

        t = self.tok
        seqs = [s + [t.bos_id] + g + [t.eos_id] for s, g in zip(srcs, tgts)]
        ids = pad_batch([q[:-1] for q in seqs], t.pad_id)
        labels = pad_batch([q[1:] for q in seqs], IGNORE)
        plen = torch.tensor([len(s) + 1 for s in srcs])
        labels[torch.arange(labels.size(1))[None, :] < (plen[:, None] - 1)] = IGNORE
        mask = torch.arange(ids.size(1))[None, :] < torch.tensor([len(q) - 1 for q in seqs])[:, None]
        return {"ids": ids, "mask": mask, "labels": labels, "prefix": plen}

    def loss(self, model, b):
        logits = model(b["ids"], attention_mask=b["mask"], prefix_lengths=b["prefix"])
        return _ce_sum(logits, b["labels"]), {}


# ====================================================================== data -> task
def data_fingerprint(path: str | os.PathLike) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def prepare(data: str | os.PathLike, cfg: TrainConfig, spec, tok=None, *, fit_vocab: bool = False):
    """Read ``data`` for ``cfg.objective``, pick / build the tokenizer, split off the held-out part
    and check everything against the spec.  Returns ``(task, tokenizer, spec, info)``; ``spec`` may
    come back with ``vocab_size`` fitted to the tokenizer when ``fit_vocab``."""
    from . import data as D
    from .tokenizers import tokenizer as make_tokenizer

    where = str(data)
    pairs_mode = cfg.objective == "seq2seq" or (cfg.objective == "prefix_lm" and D.is_pairs_file(data))
    if pairs_mode:
        items = D.read_pairs(data)
        corpus = "".join(s + t for s, t in items)
    else:
        items = D.read_documents(data)
        corpus = "\n".join(items)
    if not items:
        raise DataError("no examples in the data file", where=where, fix="check the file format")
    own_tok = tok is None
    if tok is None:
        tok = (make_tokenizer("char", text=corpus) if cfg.tokenizer == "char"
               else make_tokenizer(cfg.tokenizer))
    elif isinstance(tok, str):
        tok = make_tokenizer("char", text=corpus) if tok == "char" else make_tokenizer(tok)
        own_tok = True
    if not own_tok:  # a checkpoint's tokenizer meets new data: every character must be known
        D.check_known(tok, items if not pairs_mode else [s + t for s, t in items], where)
    if tok.vocab_size != spec.vocab_size and fit_vocab:
        spec = spec.replace(vocab_size=tok.vocab_size)
    if tok.vocab_size > spec.vocab_size:
        raise DataError(f"vocabulary mismatch: the tokenizer has {tok.vocab_size} tokens but the "
                        f"spec's vocab_size is {spec.vocab_size}", where=f"{where} / vocab_size",
                        fix=f"set vocab_size to {tok.vocab_size} (--set vocab_size={tok.vocab_size}, "
                            "or --fit-vocab / fit_vocab=True to do it automatically)")
    if spec.pad_id is not None and tok.pad_id is not None and spec.pad_id != tok.pad_id:
        spec = spec.replace(pad_id=tok.pad_id)
    train_items, eval_items = D.split_holdout(items, cfg.holdout, cfg.seed)
    info = {"data": where, "data_sha256": data_fingerprint(data), "examples": len(items),
            "train_examples": len(train_items), "eval_examples": len(eval_items),
            "tokenizer": getattr(tok, "kind", type(tok).__name__), "vocab_size": tok.vocab_size}
    if pairs_mode:
        if cfg.objective == "seq2seq":
            ms, mt = spec.max_len - 1, spec.max_len - 1
        else:
            ms, mt = spec.max_len - 2, spec.max_len - 2
        tr = D.encode_pairs(tok, train_items, ms, mt, where)
        ev = (D.encode_pairs(tok, eval_items, ms, mt, where) if eval_items
              else D.Encoded(sources=[], targets=[]))
        if cfg.objective == "prefix_lm":
            over = [i for i, (s, t) in enumerate(zip(tr.sources, tr.targets))
                    if len(s) + len(t) + 1 > spec.max_len]
            if over:
                raise DataError(f"example {over[0] + 1} is longer than max_len {spec.max_len} once "
                                "source and target are joined", where=where,
                                fix="raise max_len (--set max_len=N) or shorten the examples")
        cls = Seq2SeqTask if cfg.objective == "seq2seq" else PrefixPairsTask
        task = cls(tok, cfg, spec, tr, ev)
        info["train_tokens"] = sum(len(s) + len(t) for s, t in zip(tr.sources, tr.targets))
    else:
        tr, ev = D.encode_documents(tok, train_items), D.encode_documents(tok, eval_items)
        cls = {"clm": CLMTask, "mlm": MLMTask, "prefix_lm": PrefixDocTask}[cfg.objective]
        task = cls(tok, cfg, spec, tr, ev, where)
        info["train_tokens"], info["eval_tokens"] = int(tr.numel()), int(ev.numel())
        if cfg.objective == "clm" and ev.numel():
            info["unigram_baseline_loss"] = unigram_loss(tr, ev, tok.vocab_size)
    return task, tok, spec, info


def unigram_loss(train_ids: torch.Tensor, eval_ids: torch.Tensor, vocab: int) -> float:
    """Held-out cross-entropy (nats/token) of the best context-free model: training-set token
    frequencies with add-one smoothing.  A language model must beat this to have learned context."""
    counts = torch.bincount(train_ids, minlength=vocab).double() + 1.0
    logp = (counts / counts.sum()).log()
    return float(-logp[eval_ids].mean())


# ====================================================================== distributed helpers
@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    started_here: bool = False

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self):
        if self.world > 1:
            torch.distributed.barrier()

    def sum(self, x: float) -> float:
        if self.world == 1:
            return x
        t = torch.tensor([x], dtype=torch.float64)
        if self.device.type == "cuda":
            t = t.to(self.device)
        torch.distributed.all_reduce(t)
        return float(t.item())


def setup_dist(device: Any = None) -> Dist:
    """Join the process group when launched by torchrun (``WORLD_SIZE > 1``); pick the device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device is None:
        dev = torch.device(f"cuda:{local}" if torch.cuda.is_available() else "cpu")
    else:
        from .build import resolve_device

        dev = resolve_device(device)
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device(f"cuda:{local}")
    if world == 1:
        return Dist(device=dev)
    import torch.distributed as dist

    started = False
    if not dist.is_initialized():
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
        started = True
    return Dist(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=local, device=dev,
                started_here=started)


# ====================================================================== optimizer state <-> safetensors
def _no_decay(name: str, p: nn.Parameter) -> bool:
    return p.ndim < 2 or "emb" in name or "norm" in name


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (biases, norms and embeddings are not decayed)."""
    seen, decay, plain = set(), [], []
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (plain if _no_decay(name, p) else decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": plain, "weight_decay": 0.0}]
    kw = {"fused": True} if next(model.parameters()).is_cuda else {}
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), **kw)


def optimizer_tensors(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """Split ``opt.state_dict()`` into flat tensors (``optim.{param}.{key}``) and a JSON part."""
    sd = opt.state_dict()
    tensors = {}
    for pid, st in sd["state"].items():
        for k, v in st.items():
            t = v if isinstance(v, torch.Tensor) else torch.tensor(v)
            tensors[f"optim.{pid}.{k}"] = t.detach().cpu().contiguous()
    return tensors, {"param_groups": sd["param_groups"]}


def load_optimizer_tensors(opt: torch.optim.Optimizer, tensors: dict, meta: dict) -> None:
    state: dict[int, dict] = {}
    for name, t in tensors.items():
        if not name.startswith("optim."):
            continue
        _, pid, key = name.split(".", 2)
        state.setdefault(int(pid), {})[key] = t
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


# ====================================================================== the loop
def _rng_for(cfg: TrainConfig, step: int) -> torch.Generator:
    return torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)


def _slice(batch: dict, lo: int, hi: int) -> dict:
    return {k: v[lo:hi] for k, v in batch.items()}


def _to(batch: dict, device) -> dict:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def _trim(batch: dict) -> dict:
    """Drop right padding columns that are padding in every row of this (micro-)batch."""
    for key, mk in (("src", "src_mask"), ("tgt", "tgt_mask"), ("ids", "mask")):
        if mk in batch:
            keep = int(batch[mk].any(0).nonzero().max()) + 1 if bool(batch[mk].any()) else 1
            batch[key], batch[mk] = batch[key][:, :keep], batch[mk][:, :keep]
            if key in ("tgt", "ids"):
                batch["labels"] = batch["labels"][:, :keep]
    return batch


@torch.no_grad()
def evaluate(model: nn.Module, task: Task, device, *, autocast=contextlib.nullcontext,
             exact_match: int = 0) -> dict:
    """Held-out loss (nats/token), perplexity, and accuracy / exact match where defined."""
    was = model.training
    model.eval()
    tot = n = correct = 0.0
    for b in task.eval_set():
        b = _to(_trim(dict(b)), device)
        with autocast():
            s, extra = task.loss(model, b)
        tot += float(s)
        n += task.n_tokens(b)
        correct += float(extra.get("correct", 0))
    out: dict = {}
    if n:
        out["eval_loss"] = tot / n
        out["eval_ppl"] = math.exp(min(out["eval_loss"], 50))
        if isinstance(task, MLMTask):
            out["eval_masked_acc"] = correct / n
        if isinstance(task, Seq2SeqTask):
            out["eval_token_acc"] = correct / n
    if exact_match and isinstance(task, Seq2SeqTask) and task.eval.sources:
        k = min(exact_match, len(task.eval.sources))
        out["eval_exact_match"] = exact_match_rate(model, task.tok, task.eval.sources[:k],
                                                   task.eval.targets[:k], device)
        out["eval_exact_match_n"] = k
    model.train(was)
    return out


@torch.no_grad()
def greedy_seq2seq(model, tok, sources: list[list[int]], device, max_new: int | None = None,
                   batch_size: int = 512) -> list[list[int]]:
    """Greedy decoding of an encoder-decoder with its KV cache; returns the target ids (no
    ``<bos>``/``<eos>``).  Used for exact-match evaluation."""
    from .data import pad_batch

    max_new = max_new or model.spec.max_len - 1
    outs: list[list[int]] = []
    for i in range(0, len(sources), batch_size):
        chunk = sources[i:i + batch_size]
        src = pad_batch(chunk, tok.pad_id).to(device)
        memory, mem_pad = model.encode(src, src != tok.pad_id)
        cache = model.new_cache()
        cur = torch.full((len(chunk), 1), tok.bos_id, dtype=torch.long, device=device)
        done = torch.zeros(len(chunk), dtype=torch.bool, device=device)
        gen = []
        for _ in range(max_new):
            logits = model.decode(cur, memory, mem_pad, cache=cache)[:, -1]  # (B, V)
            nxt = logits.argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, tok.eos_id), nxt)
            gen.append(nxt)
            done |= nxt == tok.eos_id
            if bool(done.all()):
                break
            cur = nxt[:, None]
        ids = torch.stack(gen, 1).tolist() if gen else [[] for _ in chunk]
        for row in ids:
            outs.append(row[: row.index(tok.eos_id)] if tok.eos_id in row else row)
    return outs


def exact_match_rate(model, tok, sources, targets, device) -> float:
    pred = greedy_seq2seq(model, tok, sources, device)
    return sum(p == t for p, t in zip(pred, targets)) / max(1, len(targets))


def _state_meta(step, cfg, spec, tok, info, elapsed, tokens_seen, history_tail) -> dict:
    from . import __version__
    from .tokenizers import to_json as tok_json

    return {"step": step, "config": cfg.to_dict(), "spec": spec.to_yaml(), "tokenizer": tok_json(tok),
            "data": info, "elapsed_s": elapsed, "tokens_seen": tokens_seen,
            "lr": lr_at(max(0, step - 1), cfg),
            "zoo_version": __version__, "last_metrics": history_tail}


def save_state(out: Path, model, opt, tok, cfg, spec, info, step, elapsed, tokens_seen, last,
               best=None) -> None:
    """Write the zoo checkpoint and the resumable trainer state (each file atomically; the state
    file alone is enough to resume, so a kill between the two writes loses nothing)."""
    from safetensors.torch import save_file

    from .io import _atomic_write, _dedupe, save

    meta = _state_meta(step, cfg, spec, tok, info, elapsed, tokens_seen, last)
    meta["best"] = best
    save(model, out, tokenizer=tok, metadata={"train": {"step": step, "objective": cfg.objective,
                                                        "data": info.get("data"), "metrics": last}})
    weights, tied = _dedupe(model.state_dict())
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in weights.items()}
    otensors, ojson = optimizer_tensors(opt)
    tensors.update(otensors)
    header = {"zoo.trainer": json.dumps(meta, ensure_ascii=False), "zoo.tied": json.dumps(tied),
              "zoo.optimizer": json.dumps(ojson)}
    _atomic_write(out / STATE_FILE, lambda tmp: save_file(tensors, tmp, metadata=header))
    text = json.dumps({k: v for k, v in meta.items() if k != "tokenizer"}, ensure_ascii=False, indent=1)
    _atomic_write(out / STATE_JSON, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def read_state(out: str | os.PathLike) -> tuple[dict, dict, dict]:
    """``(trainer metadata, tensors, optimizer json)`` from ``out/trainer_state.safetensors``."""
    from safetensors import SafetensorError, safe_open

    file = Path(out) / STATE_FILE
    if not file.is_file():
        raise CheckpointError("no trainer state to resume from", where=str(file),
                              fix="start the run without resume, or point out= at a run's folder")
    try:
        with safe_open(str(file), framework="pt") as f:
            meta = dict(f.metadata() or {})
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"corrupt trainer state: {exc}", where=str(file),
                              fix="resume from an earlier copy or start over") from exc
    return json.loads(meta["zoo.trainer"]), tensors, {**json.loads(meta["zoo.optimizer"]),
                                                      "tied": json.loads(meta.get("zoo.tied", "{}"))}


class _Stop:
    """SIGTERM / SIGINT set a flag; the loop saves and returns at the next step boundary."""

    def __init__(self):
        self.flag = False
        self.old = {}

    def __enter__(self):
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self.old[sig] = signal.signal(sig, self._set)
        return self

    def _set(self, signum, frame):
        if self.flag:  # second Ctrl-C: give up at once
            raise KeyboardInterrupt
        self.flag = True

    def __exit__(self, *exc):
        for sig, h in self.old.items():
            signal.signal(sig, h)
        return False


def _resolve_model(source, dist: Dist):
    """``source`` -> (model or None, spec, tokenizer or None): a zoo model, a checkpoint (file,
    folder or shipped name, loaded with its tokenizer) or a spec (built later, after the vocab is
    known)."""
    from .io import load, resolve_checkpoint
    from .spec import ModelSpec, parse_spec

    if isinstance(source, nn.Module):
        return source, source.spec, getattr(source, "tokenizer", None)
    if isinstance(source, (str, os.PathLike)) and not isinstance(source, ModelSpec):
        try:
            resolve_checkpoint(source)
        except ZooError:
            pass
        else:
            m = load(source, device=dist.device)
            return m, m.spec, getattr(m, "tokenizer", None)
    return None, parse_spec(source), None


def train(model: Any = None, data: str | os.PathLike | None = None, *, out: str | os.PathLike,
          objective: str | None = None, steps: int | None = None, resume: bool = False,
          overwrite: bool = False, tokenizer: Any = None, fit_vocab: bool = False,
          device: Any = None, config: TrainConfig | None = None,
          callback: Callable[[dict], None] | None = None, **knobs: Any) -> TrainResult:
    """Train ``model`` (a spec source, a checkpoint, or a built zoo model) on ``data``.

    ``objective``/``steps``/``**knobs`` set :class:`TrainConfig` fields.  ``out`` receives the
    checkpoint, trainer state, ``metrics.jsonl`` and ``loss.png``.  ``resume=True`` continues the run
    in ``out`` (``model`` and ``data`` may then be omitted: the stored spec and data path are used;
    ``steps`` may extend it).  ``tokenizer``: a Tokenizer or a name (``"char"``, ``"byte"``); by
    default a checkpoint's own, else a char tokenizer read off the data.  ``fit_vocab`` sets a fresh
    spec's ``vocab_size`` to the tokenizer's.  ``callback(record)`` sees every metrics record.
    """
    from .build import build
    from .spec import parse_spec
    from .tokenizers import from_json as tok_from_json

    out = Path(out)
    dist = setup_dist(device)
    cfg = dataclasses.replace(config) if config is not None else TrainConfig()
    explicit = dict(knobs)
    if objective is not None:
        explicit["objective"] = objective
    if steps is not None:
        explicit["steps"] = steps
    unknown = set(explicit) - {f.name for f in dataclasses.fields(TrainConfig)}
    if unknown:
        raise ZooError(f"unknown training option(s) {sorted(unknown)}", where="train",
                       options=[f.name for f in dataclasses.fields(TrainConfig)])

    state = None
    if resume:
        meta, tensors, ojson = read_state(out)
        cfg = TrainConfig.from_dict(meta["config"])
        state = (meta, tensors, ojson)
        if data is None:
            data = meta["data"]["data"]
        if Path(data).is_file() and data_fingerprint(data) != meta["data"]["data_sha256"]:
            raise DataError("the data file changed since this run started", where=str(data),
                            fix="resume with the original data, or start a new run in a new --out")
    elif (out / STATE_FILE).is_file() and not overwrite:
        meta = json.loads((out / STATE_JSON).read_text()) if (out / STATE_JSON).is_file() else {}
        raise ZooError(f"'{out}' already holds a training run (step {meta.get('step', '?')})",
                       where="train.out", fix="pass resume=True (--resume) to continue it, "
                                              "overwrite=True (--overwrite) to start over, or "
                                              "another out folder")
    cfg = dataclasses.replace(cfg, **explicit).validate()
    if data is None:
        raise DataError("no training data given", where="train.data", fix="pass --data FILE")

    if state is not None:
        meta, tensors, ojson = state
        spec = parse_spec(meta["spec"])
        tok = tok_from_json(meta["tokenizer"])
        net = None
    else:
        net, spec, tok = _resolve_model(model, dist) if model is not None else (None, None, None)
        if spec is None:
            raise ZooError("no model given", where="train.model", fix="pass a spec or a checkpoint")
        if tokenizer is not None:
            tok = tokenizer
    if spec.arch not in ARCH_FOR[cfg.objective]:
        want = ARCH_FOR[cfg.objective][0]
        raise ZooError(f"objective '{cfg.objective}' needs an {want} model, this spec is "
                       f"'{spec.arch}'", where="train.objective",
                       options=[o for o, a in ARCH_FOR.items() if spec.arch in a],
                       fix=f"pick an objective for a {spec.arch} model, or a {want} spec")
    task, tok, new_spec, info = prepare(data, cfg, spec, tok, fit_vocab=fit_vocab and net is None)
    if net is not None and new_spec != spec:
        raise DataError("the data needs a different vocabulary than the model has",
                        where="train.data", fix="train a fresh model from a spec on this data")
    spec = new_spec
    if net is None:
        net = build(spec, seed=cfg.seed, device="meta" if state is not None else None)
        if state is not None:
            net = net.to_empty(device="cpu")
            sd = {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
            net.load_state_dict(sd, strict=False)
            missing = set(net.state_dict()) - set(sd) - set(ojson["tied"])
            if missing:
                raise CheckpointError(f"trainer state lacks tensors {sorted(missing)[:5]}",
                                      where=str(out / STATE_FILE))
            net.tie_weights()
            net.reset_buffers()
    net.tokenizer = tok
    net = net.to(dist.device)
    net.train()
    opt = make_optimizer(net, cfg)
    start = 0
    elapsed0 = 0.0
    tokens_seen = 0
    best = {"eval_loss": float("inf"), "step": None}
    if state is not None:
        meta, tensors, ojson = state
        load_optimizer_tensors(opt, tensors, ojson)
        start, elapsed0, tokens_seen = meta["step"], meta.get("elapsed_s", 0.0), meta.get("tokens_seen", 0)
        best = meta.get("best") or best
        del tensors
    ddp = net
    if dist.world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        ddp = DDP(net, device_ids=[dist.device.index] if dist.device.type == "cuda" else None)

    per_rank = cfg.batch_size // dist.world
    if per_rank * dist.world != cfg.batch_size or per_rank % cfg.grad_accum:
        raise ZooError(f"batch_size {cfg.batch_size} does not split into {dist.world} rank(s) x "
                       f"{cfg.grad_accum} accumulation step(s)", where="train.batch_size",
                       fix="make batch_size a multiple of world_size * grad_accum")
    micro = per_rank // cfg.grad_accum
    use_bf16 = cfg.bf16 and dist.device.type == "cuda"
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if use_bf16 else contextlib.nullcontext

    history: list[dict] = []
    if dist.main:
        out.mkdir(parents=True, exist_ok=True)
        history = _load_history(out, start) if state is not None else []
        _write_history(out, history)
        run_info = {"event": "start", "step": start, "world_size": dist.world,
                    "device": str(dist.device), "params": sum(p.numel() for p in net.parameters()),
                    "spec": spec.name, **info}
        history.append(run_info)
        _append(out, run_info)

    bar = None
    try:
        from tqdm.auto import tqdm  # the `train` extra; without it, metrics.jsonl still records all
    except ImportError:
        tqdm = None
    if dist.main and cfg.progress and tqdm is not None:
        bar = tqdm(total=cfg.steps, initial=start, desc=f"{cfg.objective} {spec.name}",
                   unit="step", dynamic_ncols=True)
    t0 = time.perf_counter()
    last_eval: dict = {}
    interrupted = False
    win_loss = win_tok = 0.0
    win_t = time.perf_counter()
    step = start
    with _Stop() as stop:
        while step < cfg.steps:
            lr = lr_at(step, cfg)
            for g in opt.param_groups:
                g["lr"] = lr
            gen = _rng_for(cfg, step)
            batch = task.train_batch(gen, cfg.batch_size)
            n_global = task.n_tokens(batch)
            torch.manual_seed(cfg.seed * 7_919 + step * 104_729 + dist.rank)  # dropout, per step
            mine = _slice(batch, dist.rank * per_rank, (dist.rank + 1) * per_rank)
            loss_sum = 0.0
            for a in range(cfg.grad_accum):
                mb = _to(_trim(_slice(mine, a * micro, (a + 1) * micro)), dist.device)
                sync = a == cfg.grad_accum - 1 or dist.world == 1
                ctx = contextlib.nullcontext() if sync or not hasattr(ddp, "no_sync") else ddp.no_sync()
                with ctx:
                    with autocast():
                        s, _ = task.loss(ddp, mb)
                    (s * (dist.world / max(1, n_global))).backward()
                loss_sum += float(s.detach())
            if cfg.grad_clip:
                gnorm = float(torch.nn.utils.clip_grad_norm_(net.parameters(), cfg.grad_clip))
            else:
                gnorm = float(torch.linalg.vector_norm(torch.stack(
                    [p.grad.norm() for p in net.parameters() if p.grad is not None])))
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            loss = dist.sum(loss_sum) / max(1, n_global)
            tokens_seen += int(batch["labels"].numel())
            win_loss += loss
            win_tok += int(batch["labels"].numel())
            if not math.isfinite(loss):
                raise ZooError(f"the loss became {loss} at step {step}", where="train",
                               fix="lower the learning rate (--lr) or keep gradient clipping on")
            if dist.main:
                if bar is not None:
                    bar.update(1)
                rec = None
                if step % cfg.log_every == 0 or step == cfg.steps:
                    dt = time.perf_counter() - win_t
                    n_steps = (step % cfg.log_every) or cfg.log_every
                    rec = {"step": step, "loss": win_loss / n_steps, "lr": lr, "grad_norm": gnorm,
                           "tokens_per_s": win_tok / max(dt, 1e-9),
                           "elapsed_s": elapsed0 + time.perf_counter() - t0}
                    win_loss = win_tok = 0.0
                    win_t = time.perf_counter()
                if step % cfg.eval_every == 0 or step == cfg.steps:
                    last_eval = evaluate(net, task, dist.device, autocast=autocast,
                                         exact_match=cfg.exact_match_samples)
                    if cfg.keep_best and last_eval.get("eval_loss", math.inf) < best["eval_loss"]:
                        best = {"eval_loss": last_eval["eval_loss"], "step": step}
                        from .io import save as zoo_save

                        zoo_save(net, out / "best", tokenizer=tok, metadata={"train": {
                            "step": step, "objective": cfg.objective, "metrics": last_eval}})
                    rec = {**(rec or {"step": step}), **last_eval}
                if rec is not None:
                    history.append(rec)
                    _append(out, rec)
                    if callback is not None:
                        callback(rec)
                    if bar is not None:
                        post = {"loss": f"{rec.get('loss', loss):.3f}"}
                        if "tokens_per_s" in rec:
                            post["tok/s"] = f"{rec['tokens_per_s']:.0f}"
                        if last_eval:
                            post["eval"] = f"{last_eval.get('eval_loss', float('nan')):.3f}"
                        bar.set_postfix(post, refresh=False)
            stop_now = stop.flag
            if dist.world > 1:
                stop_now = dist.sum(float(stop.flag)) > 0
            if step % cfg.save_every == 0 or step == cfg.steps or stop_now:
                if dist.main:
                    save_state(out, net, opt, tok, cfg, spec, info, step,
                               elapsed0 + time.perf_counter() - t0, tokens_seen, last_eval,
                               best=best)
                dist.barrier()
            if stop_now:
                interrupted = step < cfg.steps
                break
    wall = elapsed0 + time.perf_counter() - t0
    if bar is not None:
        bar.close()
    final = dict(last_eval)
    if dist.main and not interrupted:
        if "unigram_baseline_loss" in info:
            final["unigram_baseline_loss"] = info["unigram_baseline_loss"]
        if isinstance(task, Seq2SeqTask) and task.eval.sources:
            final["eval_exact_match"] = exact_match_rate(net, tok, task.eval.sources,
                                                         task.eval.targets, dist.device)
            final["eval_exact_match_n"] = len(task.eval.sources)
        if cfg.keep_best and best["step"] is not None:
            final["best_step"], final["best_eval_loss"] = best["step"], best["eval_loss"]
        final["wall_time_s"] = wall
        final["steps"] = step
        rec = {"event": "end", "step": step, **final}
        history.append(rec)
        _append(out, rec)
        try:
            plot_history(history, out / "loss.png", title=f"{spec.name} ({cfg.objective})")
        except ImportError:  # matplotlib is optional
            pass
    if dist.world > 1:
        dist.barrier()
        if dist.started_here:
            torch.distributed.destroy_process_group()
    net.eval()
    return TrainResult(model=net, tokenizer=tok, final=final, history=history, out=out, step=step,
                       interrupted=interrupted, wall_time=wall)


# ====================================================================== metrics file and plot
def _append(out: Path, rec: dict) -> None:
    with open(out / METRICS, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(rec, ensure_ascii=False) + "\n")


def _load_history(out: Path, upto: int) -> list[dict]:
    """The metrics records up to step ``upto`` (later ones came after the last save: dropped)."""
    return [r for r in read_metrics(out) if r.get("step", 0) <= upto and r.get("event") != "end"]


def _write_history(out: Path, history: list[dict]) -> None:
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in history)
    from .io import _atomic_write

    _atomic_write(out / METRICS, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def read_metrics(out: str | os.PathLike) -> list[dict]:
    """The records of ``out/metrics.jsonl`` (a truncated last line, from a kill, is skipped)."""
    path = Path(out) / METRICS
    if not path.is_file():
        return []
    recs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            recs.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return recs


def plot_history(history: list[dict], path: str | os.PathLike, title: str = "") -> Path:
    """Training loss (per log window) and held-out loss against steps, with the unigram baseline
    when known.  Imports matplotlib only here (``import zoo`` stays light)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    tr = [(r["step"], r["loss"]) for r in history if "loss" in r]
    ev = [(r["step"], r["eval_loss"]) for r in history if "eval_loss" in r and r.get("event") != "end"]
    base = next((r["unigram_baseline_loss"] for r in history if "unigram_baseline_loss" in r), None)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    if tr:
        ax.plot(*zip(*tr), label="train loss", lw=1.2)
    if ev:
        ax.plot(*zip(*ev), "o-", label="held-out loss", lw=1.5, ms=3)
    if base is not None:
        ax.axhline(base, ls="--", color="gray", label=f"unigram baseline ({base:.2f})")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
