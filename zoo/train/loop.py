"""The training loop, top-down: :func:`train` sets a run up, then repeats :func:`optimizer_step`,
logging, evaluating and saving, until ``steps`` are done or a signal asks it to stop.

Determinism: the model is initialised from ``seed``, every step's batch is drawn from a generator
seeded by ``(seed, step)`` and dropout is re-seeded per step, so a run is reproducible and a resumed
run takes exactly the steps an uninterrupted one would.  bf16 autocast on CUDA; float32 on CPU.

Curves: when the data is a task (:mod:`zoo.experiment.tasks`), every evaluation also scores the
task's own metrics (``task_acc``, ``task_exact``, ... in ``metrics.jsonl``; ``task_metrics=False``
turns it off), and the end record carries ``best_<metric>`` / ``best_<metric>_step`` (the best value
over training and where it was) and, per ``thresholds`` entry, ``steps_to_<metric>_<value>``: the
first evaluated step at which the metric reached the value (``None`` when it never did -- never a
made-up count), resolved to ``eval_every``.  A threshold with ``stop: true`` ends the run at that
evaluation (early stopping; saved, not "interrupted", ``stopped_at`` in the end record).  Resuming
an early-stopped run continues it.

Speed: every log line carries ``tokens_per_s`` and ``mfu``, the model FLOPs utilisation of the
optimizer steps against the matmul peak measured at the start (:mod:`zoo.train.mfu`; the start
record names the peak).  ``compile=True`` (``zoo train --compile``) runs the loss through
``torch.compile(model)``: the forward and its backward become generated kernels (elementwise work
fused into few loops, no Python between operators); the saved, evaluated model is the plain one
(the compiled module shares its parameters), so checkpoints are unchanged.  The first compiled step
compiles (its time is logged as ``first_step_s``, not counted in the MFU); PyTorch caches the
generated code on disk (``TORCHINDUCTOR_CACHE_DIR``, by default under the system temp folder), so a
second run of the same shapes compiles faster.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ..model.build import build
from ..io.loading import checkpoint_or_spec, load
from ..components import Tokenizer
from .. import messages
from ..errors import CheckpointError, DataError, TrainError, ZooError
from ..io.checkpoint import SPEC_FILE, WEIGHTS, save
from ..model.spec import ModelSpec, parse_spec
from ..guard import transaction as txn
from ..guard.files import short, user_path, write_target
from ..guard.transaction import write_file
from ..guard.run_budget import check_train_step
from ..io.tokenizers import from_json as tok_from_json
from .config import ARCH_FOR, TrainConfig, TrainResult, threshold_name
from .dist import Dist, setup_dist
from .evaluate import evaluate, exact_match_rate
from .metrics import METRICS, TENSORBOARD_DIR, RunLog, plot_history
from .mfu import machine_peak, step_flops
from .objectives import Objective, Seq2SeqObjective, slice_batch, to_device, trim
from .optim import lr_at, make_optimizer
from .prepare import data_fingerprint, prepare
from .state import (STATE_FILE, STATE_JSON, check_finite, load_optimizer_tensors, model_from_state, read_state,
                    save_state, saved_run_step)


#: Steps timed (after the first, which warms up) for the wall-time estimate printed at the start.
ESTIMATE_STEPS = 2
#: A run of at least this many steps gets a first estimate before its first step (probe_step_seconds)
PROBE_MIN_STEPS = 20


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
    _check_arguments(data, out, resume, overwrite, fit_vocab, config, callback, tokenizer)
    out = Path(out)
    dist = setup_dist(device)
    # one writer per run folder: rank 0 holds its lock for the whole run (a second `zoo train` on
    # the same --out is refused, naming this pid); the saves inside commit under it
    with txn.lock(out, where="train.out", error=TrainError) if dist.main else contextlib.nullcontext():
        return _train(model, data, out, dist, objective=objective, steps=steps, resume=resume,
                      overwrite=overwrite, tokenizer=tokenizer, fit_vocab=fit_vocab, config=config,
                      callback=callback, knobs=knobs)


def _train(model: Any, data: Any, out: Path, dist: Dist, *, objective, steps, resume, overwrite,
           tokenizer, fit_vocab, config, callback, knobs) -> TrainResult:
    """:func:`train` once the run folder is held."""
    if dist.main:
        _check_run_folder(out)
    explicit = {**knobs, **({"objective": objective} if objective is not None else {}),
                **({"steps": steps} if steps is not None else {})}
    state = read_state(out) if resume else None  # (meta, tensors, optimizer json)
    cfg, data = _configure(config, explicit, state, data, out, overwrite)
    run = _set_up(model, data, cfg, state, dist, out, tokenizer, fit_vocab)
    peak = machine_peak(dist.device, torch.bfloat16 if run.autocast is not contextlib.nullcontext
                        else next(run.net.parameters()).dtype)
    log = RunLog(out, enabled=dist.main, resumed_at=run.step if state else None,
                 progress=cfg.progress, total=cfg.steps, desc=f"{cfg.objective} {run.spec.name}",
                 callback=callback, peak_flops=peak["peak_flops"], tensorboard=cfg.tensorboard)
    log.add({"event": "start", "step": run.step, "world_size": dist.world, "device": str(dist.device),
             "params": sum(p.numel() for p in run.net.parameters()), "spec": run.spec.name,
             "compile": cfg.compile, "peak_gflops": peak["peak_flops"] / 1e9,
             "peak_method": peak["peak_method"], **run.info}, notify=False)
    log.note(f"MFU is measured against a matmul peak of {peak['peak_flops'] / 1e9:,.1f} GFLOP/s "
             f"({peak['peak_method']}{', per rank' if dist.world > 1 else ''})")
    del state  # the saved tensors now live in the model and optimizer: free the copies

    t0 = t_est = time.perf_counter()

    def elapsed() -> float:  # wall time, including the earlier parts of a resumed run
        return run.elapsed0 + time.perf_counter() - t0

    interrupted = early = False
    first = run.step  # a resumed run estimates the steps it has left
    if dist.main and not cfg.compile and cfg.steps - first >= PROBE_MIN_STEPS:
        log.estimate(first, probe_step_seconds(run), cfg, before=True)
    with _Stop() as stop:
        while run.step < cfg.steps:
            if dist.main and run.step == first + 1:  # time from the end of the first (warm-up) step
                t_est = time.perf_counter()
            t_step = time.perf_counter()
            loss, gnorm, lr, n_tokens, flops = _first_step(run) if run.step == first and cfg.compile \
                else optimizer_step(run)
            step_s = time.perf_counter() - t_step
            run.step += 1
            if cfg.compile and run.step == first + 1 and dist.main:  # it compiled: not an MFU sample
                log.add({"event": "compiled", "step": run.step, "first_step_s": step_s}, notify=False)
                flops = step_s = 0
            if dist.main and run.step == first + 1 + ESTIMATE_STEPS and run.step < cfg.steps:
                log.estimate(run.step, (time.perf_counter() - t_est) / ESTIMATE_STEPS, cfg)
            run.tokens_seen += n_tokens
            _check_health(run, loss, log)
            last = run.step == cfg.steps
            if dist.main:
                rec = log.train_step(run.step, loss, n_tokens, due=run.step % cfg.log_every == 0 or last,
                                     flops=flops, step_s=step_s, lr=lr, grad_norm=gnorm,
                                     elapsed_s=elapsed())
                if run.step % cfg.eval_every == 0 or last:
                    ev = _evaluate_and_keep_best(run)
                    early = track_curve(run, ev)  # best-so-far, thresholds; True: stop here
                    rec = {**(rec or {"step": run.step}), **ev}
                if rec is not None:
                    log.add(rec)
                    log.show(loss, rec, run.last_eval)
            if dist.world > 1:  # every rank stops at the step rank 0's evaluation reached it
                early = dist.sum(float(early)) > 0
            stop_now = early or (stop.flag if dist.world == 1 else dist.sum(float(stop.flag)) > 0)
            if run.step % cfg.save_every == 0 or last or stop_now:
                if dist.main:
                    save_state(out, run.net, run.opt, run.tok, cfg, run.spec, run.info, run.step,
                               elapsed(), run.tokens_seen, run.last_eval, best=run.best)
                    run.saved_step = run.step
                dist.barrier()
            if stop_now:
                interrupted = run.step < cfg.steps and not early
                break
    wall = elapsed()
    log.close()
    final = dict(run.last_eval)
    if dist.main and not interrupted:
        final.update(_final_metrics(run, wall))
        final.update(log.totals())
        log.add({"event": "end", "step": run.step, **final}, notify=False)
        try:  # through the one writer: never through a symlink, never outside out
            write_file(out / "loss.png", lambda tmp: plot_history(
                log.history, tmp, title=f"{run.spec.name} ({cfg.objective})"), root=out,
                where="train.out", error=CheckpointError)
        except ImportError:  # matplotlib is optional
            pass
    dist.close()
    run.net.eval()
    return TrainResult(model=run.net, tokenizer=run.tok, final=final, history=log.history, out=out,
                       step=run.step, interrupted=interrupted, wall_time=wall, resumed_time=run.elapsed0)


# ====================================================================== setting a run up
def prepare_run(model: Any, data: Any, *, out: str | os.PathLike, config: TrainConfig | None = None,
                tokenizer: Any = None, fit_vocab: bool = False, device: Any = None,
                **knobs: Any) -> "Run":
    """A run set up exactly as :func:`train` sets one up (model, tokenizer, objective, AdamW,
    ``torch.compile`` when asked), without the loop: for benchmarks and tests that time or inspect
    :func:`optimizer_step` itself.  ``out`` is only checked and remembered (nothing is written)."""
    _check_arguments(data, out, False, True, fit_vocab, config, None, tokenizer)
    out = Path(out)
    cfg, data = _configure(config, knobs, None, data, out, overwrite=True)
    return _set_up(model, data, cfg, None, setup_dist(device), out, tokenizer, fit_vocab)


#: what a run writes into its folder (files, and the ``best`` checkpoint folder)
RUN_FILES = (WEIGHTS, SPEC_FILE, STATE_FILE, STATE_JSON, METRICS, "loss.png", txn.MANIFEST)


def _check_run_folder(out: Path) -> None:
    """Before any work: every name the run will write stays inside ``out`` -- none of them is a
    symlink (the one writer never writes through one), a folder or a device."""
    for name in RUN_FILES:
        txn.target(out, name, where="train.out", error=TrainError)
    txn.target(out, "best", where="train.keep_best", error=TrainError, folder=True)
    txn.target(out, TENSORBOARD_DIR, where="train.tensorboard", error=TrainError, folder=True)


def _check_arguments(data, out, resume, overwrite, fit_vocab, config, callback, tokenizer) -> None:
    """Type checks of :func:`train`'s own arguments, before any work (the knobs are checked by
    :meth:`TrainConfig.validate`).  A data path must be a regular file: a FIFO or a device would
    block or never end."""
    def bad(name, msg, fix):
        raise ZooError(msg, where=f"train.{name}", fix=fix)

    def path_like(v):
        return isinstance(v, (str, os.PathLike)) and str(v) and "\x00" not in str(v)

    write_target(out, where="train.out", folder=True)  # a file, a device, a loop: refused now
    for name, v in (("resume", resume), ("overwrite", overwrite), ("fit_vocab", fit_vocab)):
        if not isinstance(v, bool):
            bad(name, f"must be true or false, got {short(v)}", "pass a bool")
    if config is not None and not isinstance(config, TrainConfig):
        bad("config", f"expected a TrainConfig, got {type(config).__name__}",
            "pass zoo.train.TrainConfig(...) or the options as keywords")
    if tokenizer is not None and not isinstance(tokenizer, (str, Tokenizer)):
        bad("tokenizer", f"expected a Tokenizer or a tokenizer name, got {short(tokenizer)}",
            "pass zoo.tokenizer(...), 'char' or 'byte', or None for the model's own")
    if callback is not None and not callable(callback):
        bad("callback", f"expected a function of one record, got {short(callback)}",
            "pass a callable or None")
    if data is not None and not hasattr(data, "prepare_objective"):  # a task generates its data
        if not path_like(data):
            bad("data", f"expected a file path, got {short(data)}",
                "pass data='FILE' (or a task with prepare_objective)")
        user_path(data, where="train.data", error=DataError)
        try:
            st = os.stat(data)
        except OSError:
            st = None  # a missing file is reported where the data is read
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise DataError(f"{short(str(data))} is not a regular file", where="train.data",
                            fix="pass a text file (not a folder, a FIFO or a device)")


@dataclass
class Run:
    """Everything one run works with, and its counters (restored on resume)."""

    cfg: TrainConfig
    dist: Dist
    out: Path
    spec: ModelSpec
    tok: Any
    objective: Objective
    info: dict                 # data facts: path, fingerprint, sizes, tokenizer, baseline loss
    net: nn.Module             # the model itself (saved, evaluated)
    ddp: nn.Module             # what the loss runs through: ``net``, or its DDP wrapper
    opt: torch.optim.Optimizer
    micro: int                 # sequences per micro-batch on one rank
    autocast: Callable = contextlib.nullcontext
    step: int = 0
    tokens_seen: int = 0
    elapsed0: float = 0.0      # wall time of the earlier parts of a resumed run
    last_eval: dict = field(default_factory=dict)
    # the lowest held-out loss (keep_best) and, under "curve", the task metrics' best values and
    # the steps thresholds were reached (:func:`track_curve`); saved with the state, so a resumed
    # run keeps them
    best: dict = field(default_factory=lambda: {"eval_loss": math.inf, "step": None})
    task: Any = None           # the task the data comes from (its own metrics), or None
    saved_step: int | None = None  # the step of the last save in ``out`` (None: nothing saved yet)


#: the ``reason`` of the ``stopped`` event in ``metrics.jsonl`` when the loss or a weight became
#: non-finite (:func:`_check_health`): the run diverged.  The only stop that writes a ``stopped``
#: event; Ctrl-C / SIGTERM save and end without one (``TrainResult.interrupted``).
STOP_NONFINITE = "nonfinite"


def _check_health(run: Run, loss: float, log: RunLog) -> None:
    """Stop the run with a :class:`TrainError` naming the step when the loss or any weight is no
    longer finite -- *before* anything is saved, so the last good checkpoint in ``out`` is kept.
    (A finite loss does not prove finite weights: with ``lr=inf`` the loss of the step is computed
    before the update that turns every weight into NaN.)"""
    kept = (messages.part("kept", "train.kept_step", out=run.out, saved=run.saved_step) if run.saved_step
            else messages.part("kept", "train.kept_nothing"))  # the sentence and its id (for the UI's 中文)
    try:
        if not math.isfinite(loss):
            raise TrainError.of("train.loss_nonfinite", where="train", loss=loss, step=run.step, **kept)
        check_finite(run.net, run.step, kept=kept)
    except TrainError as exc:
        if run.dist.main:
            # the reason as a field, not only as words: a reader (the experiment's diverged()) asks
            # the record why it stopped, never the English text, which a rewording or a language changes
            log.add({"event": "stopped", "step": run.step, "reason": STOP_NONFINITE,
                     "message_id": exc.message_id, "error": str(exc)}, notify=False)
            log.close()
        raise


def _configure(config, explicit: dict, state, data, out: Path, overwrite: bool):
    """The run's config (a resumed run's stored one, with ``explicit`` knobs on top) and data path."""
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    unknown = set(explicit) - set(names)
    if unknown:
        raise ZooError(f"unknown training option(s) {sorted(unknown)}", where="train", options=names)
    cfg = dataclasses.replace(config) if config is not None else TrainConfig()
    if state is not None:
        meta = state[0]
        cfg = TrainConfig.from_dict(meta["config"])
        data = meta["data"]["data"] if data is None else data
        if Path(data).is_file() and data_fingerprint(data) != meta["data"]["data_sha256"]:
            raise DataError("the data file changed since this run started", where=str(data),
                            fix="resume with the original data, or start a new run in a new --out")
    elif (at := saved_run_step(out)) is not None and not overwrite:
        raise ZooError(f"'{out}' already holds a training run (step {at})", where="train.out",
                       fix="pass resume=True (--resume) to continue it, overwrite=True (--overwrite) "
                           "to start over, or another out folder")
    cfg = dataclasses.replace(cfg, **explicit).validate()
    if data is None:
        raise DataError("no training data given", where="train.data", fix="pass --data FILE")
    return cfg, data


def _set_up(source, data, cfg: TrainConfig, state, dist: Dist, out: Path, tokenizer,
            fit_vocab: bool) -> Run:
    """Model, tokenizer and objective; the optimizer; on resume, the saved weights, moments and
    counters; DDP when there are several ranks."""
    if state is not None:
        meta, tensors, ojson = state
        net, spec, tok = None, parse_spec(meta["spec"]), tok_from_json(meta["tokenizer"])
    else:
        net, spec, tok = _resolve_model(source, dist) if source is not None else (None, None, None)
        if spec is None:
            raise ZooError("no model given", where="train.model", fix="pass a spec or a checkpoint")
        tok = tokenizer if tokenizer is not None else tok
    if spec.arch not in ARCH_FOR[cfg.objective]:
        want = ARCH_FOR[cfg.objective][0]
        a_want, a_have = ("an" if w[0] in "aeiou" else "a" for w in (want, spec.arch))
        raise ZooError(f"objective '{cfg.objective}' needs {a_want} {want} model, this spec is "
                       f"'{spec.arch}'", where="train.objective",
                       options=[o for o, a in ARCH_FOR.items() if spec.arch in a],
                       fix=f"pick an objective for {a_have} {spec.arch} model, or {a_want} {want} spec")
    per_rank = cfg.batch_size // dist.world
    if per_rank * dist.world != cfg.batch_size or per_rank % cfg.grad_accum:
        raise ZooError(f"batch_size {cfg.batch_size} does not split into {dist.world} rank(s) x "
                       f"{cfg.grad_accum} accumulation step(s)", where="train.batch_size",
                       fix="make batch_size a multiple of world_size * grad_accum")

    objective, tok, fitted, info = prepare(data, cfg, spec, tok, fit_vocab=fit_vocab and net is None)
    if net is not None and fitted != spec:
        raise DataError("the data needs a different vocabulary than the model has",
                        where="train.data", fix="train a fresh model from a spec on this data")
    spec = fitted
    if state is not None:
        net = model_from_state(spec, tensors, ojson, where=str(out / STATE_FILE))
    elif net is None:
        net = build(spec, seed=cfg.seed)
    net.tokenizer = tok
    net = net.to(dist.device)
    check_train_step(net, per_rank // cfg.grad_accum, cfg.block_size or min(spec.max_len, 128))
    net.train()
    ddp = net
    if dist.world > 1:
        ddp = DDP(net, device_ids=[dist.device.index] if dist.device.type == "cuda" else None)
    if cfg.compile:
        ddp = _compile(ddp)
    autocast = contextlib.nullcontext
    if cfg.bf16 and dist.device.type == "cuda":
        autocast = lambda: torch.autocast("cuda", dtype=torch.bfloat16)  # noqa: E731
    run = Run(cfg=cfg, dist=dist, out=out, spec=spec, tok=tok, objective=objective, info=info,
              net=net, ddp=ddp, opt=make_optimizer(net, cfg), micro=per_rank // cfg.grad_accum,
              autocast=autocast)
    if state is not None:
        load_optimizer_tensors(run.opt, tensors, ojson, where=str(out / STATE_FILE))
        run.step, run.elapsed0 = meta["step"], meta.get("elapsed_s", 0.0)
        run.tokens_seen, run.best = meta.get("tokens_seen", 0), meta.get("best") or run.best
        run.saved_step = run.step
    if callable(getattr(data, "evaluate", None)) and hasattr(data, "prepare_objective"):
        run.task = data
    check_curve_metrics(run)
    return run


def _resolve_model(source, dist: Dist):
    """``source`` -> (model or None, spec, tokenizer or None): a zoo model, a checkpoint (file,
    folder or shipped name, loaded with its tokenizer) or a spec (built later, after the vocab is
    known)."""
    if isinstance(source, nn.Module):
        return source, source.spec, getattr(source, "tokenizer", None)
    what = checkpoint_or_spec(source)  # a checkpoint's weights file, else the parsed spec
    if isinstance(what, ModelSpec):
        return None, what, None
    m = load(what, device=dist.device)
    return m, m.spec, getattr(m, "tokenizer", None)


# ====================================================================== one step, evaluation, the end
def batch_generator(cfg: TrainConfig, step: int) -> torch.Generator:
    """The generator that draws step ``step``'s global batch (the same on every rank)."""
    return torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)


def probe_step_seconds(run: Run) -> float:
    """Seconds one optimizer step will take, timed before training starts: a forward and backward of
    the coming step's first micro-batch, times ``grad_accum``, gradients discarded.

    Nothing of the run changes: the batch of a step is drawn from a generator seeded by the step
    (:func:`batch_generator`) and dropout is reseeded at every step, so the real first step draws
    the same batch and the same dropout as it would without the probe.  It is the cold first pass
    (memory allocated, kernels chosen), so it tends to run high; the estimate after the first steps
    (:data:`ESTIMATE_STEPS`) replaces it."""
    cfg, dist, net = run.cfg, run.dist, run.net
    batch = run.objective.train_batch(batch_generator(cfg, run.step), cfg.batch_size)
    per_rank = run.micro * cfg.grad_accum
    mine = slice_batch(batch, dist.rank * per_rank, (dist.rank + 1) * per_rank)
    mb = to_device(trim(slice_batch(mine, 0, run.micro)), dist.device)
    t = time.perf_counter()
    with torch.random.fork_rng(devices=[dist.device] if dist.device.type == "cuda" else []):
        with run.autocast():
            s, _ = run.objective.loss(net, mb)
        s.backward()
    if dist.device.type == "cuda":
        torch.cuda.synchronize(dist.device)
    seconds = (time.perf_counter() - t) * cfg.grad_accum
    run.opt.zero_grad(set_to_none=True)
    return seconds


def optimizer_step(run: Run) -> tuple[float, float, float, int, int]:
    """One update: draw the global batch, run this rank's share in ``grad_accum`` micro-batches,
    clip, step.  Returns ``(mean loss per predicted token over all ranks, grad norm, lr, tokens in
    the global batch, training FLOPs of this rank's micro-batches)``."""
    cfg, dist, net = run.cfg, run.dist, run.net
    lr = lr_at(run.step, cfg)
    for g in run.opt.param_groups:
        g["lr"] = lr
    batch = run.objective.train_batch(batch_generator(cfg, run.step), cfg.batch_size)
    n_global = run.objective.n_tokens(batch)  # the loss is normalised by the global count
    torch.manual_seed(cfg.seed * 7_919 + run.step * 104_729 + dist.rank)  # dropout, per step
    per_rank = run.micro * cfg.grad_accum
    mine = slice_batch(batch, dist.rank * per_rank, (dist.rank + 1) * per_rank)
    loss_sum = 0.0
    flops = 0
    for a in range(cfg.grad_accum):
        mb = to_device(trim(slice_batch(mine, a * run.micro, (a + 1) * run.micro)), dist.device)
        flops += step_flops(run.spec, mb)
        sync = a == cfg.grad_accum - 1 or dist.world == 1  # DDP all-reduces on the last one only
        with contextlib.nullcontext() if sync else run.ddp.no_sync():
            with run.autocast():
                s, _ = run.objective.loss(run.ddp, mb)
            total = s * (dist.world / max(1, n_global))  # DDP averages: times world = sum
            aux = net.auxiliary_loss()  # e.g. a mixture of experts' load balance, once per step
            if aux is not None:
                total = total + aux / cfg.grad_accum
            total.backward()
        loss_sum += float(s.detach())
    if cfg.grad_clip:
        gnorm = float(torch.nn.utils.clip_grad_norm_(net.parameters(), cfg.grad_clip))
    else:
        gnorm = float(torch.linalg.vector_norm(torch.stack(
            [p.grad.norm() for p in net.parameters() if p.grad is not None])))
    run.opt.step()
    run.opt.zero_grad(set_to_none=True)
    return dist.sum(loss_sum) / max(1, n_global), gnorm, lr, int(batch["labels"].numel()), flops


def _compile(module: nn.Module) -> nn.Module:
    """``torch.compile(module)``, or a :class:`ZooError` saying why this PyTorch cannot."""
    import torch._dynamo

    if not torch._dynamo.is_dynamo_supported():
        raise ZooError(f"torch.compile is not supported by this Python / PyTorch "
                       f"({torch.__version__})", where="train.compile",
                       fix="train without --compile, or use a Python version PyTorch compiles on")
    return torch.compile(module)


def _first_step(run: Run):
    """The first step of a compiled run (it compiles): a compiler failure becomes a
    :class:`TrainError` with the fix, before anything is saved."""
    from torch._dynamo.exc import BackendCompilerFailed

    try:
        return optimizer_step(run)
    except BackendCompilerFailed as exc:
        raise TrainError(f"torch.compile could not compile the model: "
                         f"{short(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)}",
                         where="train.compile",
                         fix="train without --compile (the same run, eager), or install a C++ "
                             "compiler (inductor needs one on the CPU)") from exc

def _evaluate_and_keep_best(run: Run) -> dict:
    """Evaluate on the held-out set (with a task and ``task_metrics``, also the task's own metrics,
    as ``task_<name>``); with ``keep_best``, save a new best model to ``out/best``."""
    cfg = run.cfg
    run.last_eval = evaluate(run.net, run.objective, run.dist.device, autocast=run.autocast,
                             exact_match=cfg.exact_match_samples)
    if run.task is not None and cfg.task_metrics:
        run.last_eval.update({f"task_{k}": float(v) for k, v in run.task.evaluate(run.net).items()
                              if isinstance(v, (int, float)) and not isinstance(v, bool)})
    if cfg.keep_best and run.last_eval.get("eval_loss", math.inf) < run.best["eval_loss"]:
        run.best = {"eval_loss": run.last_eval["eval_loss"], "step": run.step}
        txn.target(run.out, "best", where="train.keep_best", error=CheckpointError, folder=True)
        save(run.net, run.out / "best", tokenizer=run.tok, metadata={"train": {
            "step": run.step, "objective": cfg.objective, "metrics": run.last_eval}})
    return run.last_eval


def curve_directions(run: Run) -> dict:
    """Record key -> "max" / "min" / None of every metric a curve is kept of: the held-out loss
    and perplexity, and (with a task) each ``task_<name>`` by the task's declared direction."""
    out = {"eval_loss": "min", "eval_ppl": "min"}
    if run.task is not None and run.cfg.task_metrics:
        out.update({f"task_{m}": d for m, d in dict(getattr(run.task, "metrics", {}) or {}).items()})
    return out


def _threshold_key(run: Run, metric: str) -> str:
    """A threshold's metric as the record names it (``acc`` -> ``task_acc``; ``eval_loss`` as is)."""
    return metric if metric in ("eval_loss", "eval_ppl") else f"task_{metric}"


def check_curve_metrics(run: Run) -> None:
    """Every threshold names a metric this run evaluates: the task's own or ``eval_loss``; else a
    :class:`ZooError` naming ``train.thresholds[i].metric`` with the valid options."""
    dirs = curve_directions(run)
    options = sorted(["eval_loss", "eval_ppl"] + [k[5:] for k in dirs if k.startswith("task_")])
    for i, t in enumerate(run.cfg.thresholds):
        if _threshold_key(run, t["metric"]) not in dirs:
            why = "" if run.task is not None else " (this data is not a task: only the held-out loss)"
            raise ZooError(f"unknown threshold metric {short(t['metric'])}{why}",
                           where=f"train.thresholds[{i}].metric", options=options,
                           fix="name one of the metrics this run evaluates")


def reached(value: float, target: float, direction: str | None) -> bool:
    """Whether ``value`` has reached ``target``: at or below it for a "min" metric (a loss), at or
    above it otherwise.  A NaN never reaches anything."""
    if value != value:
        return False
    return value <= target if direction == "min" else value >= target


def track_curve(run: Run, ev: dict) -> bool:
    """After an evaluation at ``run.step``: update each metric's best value and its step, and record
    the first step each threshold was reached.  True when a ``stop`` threshold was reached now (the
    run ends here: early stopping)."""
    curve = run.best.setdefault("curve", {"best": {}, "reached": {}})
    dirs = curve_directions(run)
    for key, d in dirs.items():
        v = ev.get(key)
        if not isinstance(v, (int, float)) or v != v or d is None:
            continue
        old = curve["best"].get(key)
        if old is None or (v > old[0] if d == "max" else v < old[0]):
            curve["best"][key] = [float(v), run.step]
    stop = False
    for t in run.cfg.thresholds:
        name = threshold_name(t["metric"], t["value"])
        key = _threshold_key(run, t["metric"])
        if name not in curve["reached"] and key in ev and reached(ev[key], t["value"], dirs.get(key)):
            curve["reached"][name] = run.step
            stop = stop or t["stop"]
    return stop


def _final_metrics(run: Run, wall: float) -> dict:
    """What the end record adds to the last evaluation: the baseline, exact match on every held-out
    example (seq2seq), the best step, wall time and steps."""
    final: dict = {}
    if "unigram_baseline_loss" in run.info:
        final["unigram_baseline_loss"] = run.info["unigram_baseline_loss"]
    obj = run.objective
    if isinstance(obj, Seq2SeqObjective) and obj.eval.sources:
        final["eval_exact_match"] = exact_match_rate(run.net, run.tok, obj.eval.sources,
                                                     obj.eval.targets)
        final["eval_exact_match_n"] = len(obj.eval.sources)
    if run.cfg.keep_best and run.best["step"] is not None:
        final["best_step"], final["best_eval_loss"] = run.best["step"], run.best["eval_loss"]
    curve = run.best.get("curve") or {"best": {}, "reached": {}}
    for key, (v, step) in curve["best"].items():  # best over training: task metrics only
        if key.startswith("task_"):
            final[f"best_{key[5:]}"], final[f"best_{key[5:]}_step"] = v, step
    for t in run.cfg.thresholds:  # never reached: None, never a made-up step count
        name = threshold_name(t["metric"], t["value"])
        final[name] = curve["reached"].get(name)
        if t["stop"] and final[name] is not None and run.step < run.cfg.steps:
            final["stopped_at"] = {"step": run.step, "threshold": name}
    final["wall_time_s"] = wall
    final["steps"] = run.step
    return final


class _Stop:
    """SIGTERM / SIGINT set a flag; the loop saves and returns at the next step boundary."""

    def __init__(self):
        self.flag = False
        self.old = {}

    def __enter__(self):
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
