"""Metrics: ``out/metrics.jsonl`` (one JSON object per line), the progress bar, the user's callback
and the loss plot.

A record is a start event (run facts, the matmul peak MFU is measured against), a log line (mean
train loss over the last ``log_every`` steps, learning rate, gradient norm, tokens/s, ``step_s``
(seconds per optimizer step) and ``mfu`` (the model FLOPs of those steps over their own time and
the peak, see :mod:`zoo.train.mfu`), an
evaluation (``eval_loss``, ...) or the end event (final metrics, with the run's ``mfu``).  On resume, records after the saved step are dropped: those steps are redone.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

from ..errors import CheckpointError
from ..guard.transaction import append
from ..io.checkpoint import atomic_write

METRICS = "metrics.jsonl"


class RunLog:
    """Collects a run's records: the history list, ``metrics.jsonl``, the tqdm bar and the
    callback.  A log that is not ``enabled`` (ranks other than 0) keeps and writes nothing."""

    def __init__(self, out: Path, *, enabled: bool, resumed_at: int | None, progress: bool,
                 total: int, desc: str, callback=None, peak_flops: float | None = None,
                 tensorboard: bool = False):
        self.out, self.enabled, self.callback = out, enabled, callback
        self.tb = open_tensorboard(out, resumed_at) if tensorboard and enabled else None
        self.peak_flops = peak_flops
        self.history: list[dict] = []
        self.bar = None
        self._loss, self._tokens, self._steps = 0.0, 0, 0  # sums over the current log window
        self._flops, self._step_s, self._timed = 0, 0.0, 0  # model FLOPs, step seconds, timed steps
        self._run_flops, self._run_step_s, self._run_tokens = 0, 0.0, 0  # ... and this whole run
        self._t = time.perf_counter()
        if not enabled:
            return
        out.mkdir(parents=True, exist_ok=True)
        if resumed_at is not None:
            recs = read_metrics(out)
            if recs.truncated:  # rewriting the log from what was read would drop the rest of it
                raise CheckpointError(f"{METRICS} is larger than the {MAX_METRICS_BYTES // 2**20} MiB "
                                      f"(or {MAX_METRICS_RECORDS:,} records) a resume reads",
                                      where="train.out", fix=f"move {METRICS} aside (the resumed run "
                                      "starts a new one), then resume")
            self.history = [r for r in recs if r.get("step", 0) <= resumed_at and r.get("event") != "end"]
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in self.history)
        atomic_write(out / METRICS, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
        if progress:
            try:
                from tqdm.auto import tqdm  # the `train` extra; without it, metrics.jsonl records all
            except ImportError:
                return
            self.bar = tqdm(total=total, initial=resumed_at or 0, desc=desc, unit="step",
                            dynamic_ncols=True)

    def add(self, rec: dict, notify: bool = True) -> None:
        """Append ``rec`` to the history and the file; ``notify``: also pass it to the callback."""
        if not self.enabled:
            return
        self.history.append(rec)
        append(self.out, METRICS, json.dumps(rec, ensure_ascii=False) + "\n", where="train.out",
               error=CheckpointError)  # under the run's lock, never through a symlink
        if self.tb is not None:
            write_scalars(self.tb, rec)
        if notify and self.callback is not None:
            self.callback(rec)

    def train_step(self, step: int, loss: float, tokens: int, *, due: bool, flops: int = 0,
                   step_s: float = 0.0, **fields) -> dict | None:
        """Count one optimizer step (``flops`` model FLOPs done in ``step_s`` seconds; both 0 for a
        step that is not a speed sample, such as the one that compiles); when ``due``, return the
        log record of the window (mean loss, tokens/s, ``mfu`` and ``fields``) and start a new
        window."""
        self._loss += loss
        self._tokens += tokens
        self._steps += 1
        self._flops += flops
        self._step_s += step_s
        if step_s:
            self._timed += 1
            self._run_flops, self._run_step_s = self._run_flops + flops, self._run_step_s + step_s
            self._run_tokens += tokens
        if self.bar is not None:
            self.bar.update(1)
        if not due:
            return None
        dt = time.perf_counter() - self._t
        rec = {"step": step, "loss": self._loss / self._steps, **fields,
               "tokens_per_s": self._tokens / max(dt, 1e-9)}
        if self._timed:
            rec["step_s"] = self._step_s / self._timed  # seconds per optimizer step
            if self.peak_flops:
                rec["mfu"] = self._flops / self._step_s / self.peak_flops
        self._loss = self._tokens = self._steps = 0
        self._flops, self._step_s, self._timed = 0, 0.0, 0
        self._t = time.perf_counter()
        return rec

    def totals(self) -> dict:
        """The run's speed over its timed optimizer steps (this process): ``train_tokens_per_s``
        and ``mfu`` (empty when no step was timed)."""
        if not self._run_step_s:
            return {}
        out = {"train_tokens_per_s": self._run_tokens / self._run_step_s}
        if self.peak_flops:
            out["mfu"] = self._run_flops / self._run_step_s / self.peak_flops
        return out

    def note(self, text: str) -> None:
        """A line for the person watching (stderr, above the bar); only when the bar is shown."""
        if self.enabled and self.bar is not None:
            self.bar.write(text, file=sys.stderr)

    def estimate(self, step: int, per_step: float, cfg, *, before: bool = False) -> dict | None:
        """Record and print (stderr, above the bar) how long the run will take, from ``per_step``
        seconds measured on the steps just done, with the held-out evaluations counted as
        ``eval_batches`` forward passes every ``eval_every`` steps (about a third of a step each).
        ``before``: the first estimate, printed before the first step from one timed forward and
        backward (:func:`zoo.train.loop.probe_step_seconds`); the measured one follows."""
        if not self.enabled:
            return None
        left = cfg.steps - step
        evals = left // max(cfg.eval_every, 1) + 1
        seconds = per_step * (left + evals * cfg.eval_batches / (3 * max(cfg.grad_accum, 1)))
        rec = {"event": "estimate", "step": step, "s_per_step": per_step, "steps_left": left,
               "estimated_s": seconds, "basis": "probe" if before else "steps"}
        self.add(rec)
        if before:
            text = (f"estimate before the first step: about {per_step:.2f} s a step (one forward and "
                    f"backward timed), so {left:,} steps take about {_duration(seconds)}; measured "
                    "again after the first steps")
        else:
            text = (f"estimate: {per_step:.2f} s a step here, so the {left:,} steps left take about "
                    f"{_duration(seconds)} (Ctrl-C stops with a checkpoint; resume with --resume)")
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)
        return rec

    def show(self, loss: float, rec: dict, last_eval: dict) -> None:
        """Loss, tokens/s and the last held-out loss on the bar."""
        if self.bar is None:
            return
        post = {"loss": f"{rec.get('loss', loss):.3f}"}
        if "tokens_per_s" in rec:
            post["tok/s"] = f"{rec['tokens_per_s']:.0f}"
        if "mfu" in rec:
            post["MFU"] = f"{100 * rec['mfu']:.1f}%"
        if last_eval:
            post["eval"] = f"{last_eval.get('eval_loss', math.nan):.3f}"
        self.bar.set_postfix(post, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.tb is not None:
            self.tb.close()
            self.tb = None


#: the TensorBoard folder of a run (``tensorboard --logdir OUT`` shows every run below it)
TENSORBOARD_DIR = "tensorboard"
#: record fields that are facts, not curves
_NOT_SCALARS = ("step", "event", "elapsed_s", "world_size", "params", "peak_gflops")


def open_tensorboard(out: Path, resumed_at: int | None):
    """A ``SummaryWriter`` on ``out/tensorboard`` (``torch.utils.tensorboard``; it needs the
    ``tensorboard`` package: the ``track`` extra).  A resumed run purges the events after its saved
    step, so TensorBoard shows the redone steps once."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # optional: only when asked for
    except ImportError as exc:
        raise CheckpointError.of("train.tensorboard_missing", where="train.tensorboard") from exc
    d = out / TENSORBOARD_DIR
    if d.is_symlink():
        raise CheckpointError.of("train.tensorboard_symlink", where="train.out", folder=TENSORBOARD_DIR)
    if d.is_dir() and not resumed_at:  # a new run in the folder (overwrite): the old run's events go,
        for f in d.iterdir():          # or TensorBoard would draw both runs as one
            if f.name.startswith("events.out.tfevents.") and f.is_file() and not f.is_symlink():
                f.unlink()
    return SummaryWriter(log_dir=str(d), purge_step=resumed_at + 1 if resumed_at else None)


def write_scalars(tb, rec: dict) -> None:
    """Every number of a step record as a scalar: ``train/loss``, ``train/lr``, ``eval/eval_loss``,
    ``task/acc`` (the task metrics), ``end/...`` for the end record's totals."""
    step = rec.get("step")
    if step is None or rec.get("event") in ("start", "estimate", "compiled"):
        return
    for k, v in rec.items():
        if k in _NOT_SCALARS or isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
            continue
        group = ("end" if rec.get("event") == "end" else "task" if k.startswith("task_")
                 else "eval" if k.startswith("eval_") else "train")
        tb.add_scalar(f"{group}/{k[5:] if group == 'task' else k}", v, step)
    tb.flush()


#: the most of ``metrics.jsonl`` read (a long real run logs a few MB): past it, reading stops and
#: the rest is counted as not read (``MetricsRead.truncated``)
MAX_METRICS_BYTES = 256 * 2**20
#: the most records kept (each becomes a dict in memory: about 1 KB)
MAX_METRICS_RECORDS = 500_000
#: a line longer than this is damage (a real record is a few hundred bytes); it is skipped unread
MAX_LINE_BYTES = 64 * 1024
#: fields a reader uses as numbers: a record where one is not a number is damaged
_NUMERIC = ("loss", "eval_loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s", "step_s", "mfu")


class MetricsRead(list):
    """The records of a ``metrics.jsonl`` (a list of dicts), with what reading it found:
    ``damaged`` (lines skipped: not JSON, not UTF-8, not a record, a field of the wrong type, too
    long), ``truncated`` (True when the size or record cap stopped the reading: the file holds
    more than was read)."""

    damaged: int = 0
    truncated: bool = False


def _record(line: bytes) -> dict | None:
    """One line as a record, or None when it is damaged."""
    try:
        rec = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(rec, dict):
        return None
    step = rec.get("step", 0)
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return None
    if "event" in rec and not isinstance(rec["event"], str):
        return None
    for k in _NUMERIC:
        if k in rec and (isinstance(rec[k], bool) or not isinstance(rec[k], (int, float))):
            return None
    return rec


def read_metrics(out: str | os.PathLike, *, max_bytes: int | None = None,
                 max_records: int | None = None) -> MetricsRead:
    """The records of ``out/metrics.jsonl``, streamed and bounded: at most ``max_bytes`` read
    (:data:`MAX_METRICS_BYTES`) and ``max_records`` kept (:data:`MAX_METRICS_RECORDS`); damaged
    lines (a truncated last line from a kill, non-UTF-8, ``[]``, a ``step`` of null, lines over
    :data:`MAX_LINE_BYTES`) are skipped and counted.  Never raises on the file's content; a file
    that is not a regular file (a FIFO, a device) is not read."""
    max_bytes = MAX_METRICS_BYTES if max_bytes is None else max_bytes
    max_records = MAX_METRICS_RECORDS if max_records is None else max_records
    path = Path(out) / METRICS
    recs = MetricsRead()
    try:
        if path.is_symlink() or not path.is_file():
            return recs
        fh = open(path, "rb")
    except OSError:
        return recs
    with fh:
        used = 0
        while True:
            line = fh.readline(MAX_LINE_BYTES + 1)
            if not line:
                break
            used += len(line)
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):  # an over-long line: skip it
                recs.damaged += 1
                while line and not line.endswith(b"\n"):
                    line = fh.readline(MAX_LINE_BYTES + 1)
                    used += len(line)
                    if used > max_bytes:
                        break
            elif line.strip():
                rec = _record(line)
                if rec is None:
                    recs.damaged += 1
                else:
                    recs.append(rec)
            if used > max_bytes or len(recs) >= max_records:
                recs.truncated = bool(fh.read(1))
                break
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
    # a temporary file of the one writer ends in .tmp: the format is the image's, not the suffix's
    fig.savefig(path, format=path.suffix[1:] if path.suffix not in ("", ".tmp") else "png")
    plt.close(fig)
    return path


def _duration(seconds: float) -> str:
    """``42 s``, ``12 min``, ``1 h 05 min``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"
