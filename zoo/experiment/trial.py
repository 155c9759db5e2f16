"""A trial, as data: one (variant, seed) of an experiment, and the names of the files a results
folder holds.  The lowest module of :mod:`zoo.experiment`: the runner (:mod:`.run`), the worker
process (:mod:`.worker`) and the reader of results (:mod:`.results`) all stand on it."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

RESULT = "result.json"      # a trial's completion record (atomic)
TRIAL = "trial.json"        # what the worker runs
EXPERIMENT = "experiment.json"  # the resolved experiment of a results folder


@dataclass(frozen=True)
class Trial:
    """One (variant, seed): everything a worker needs, JSON-serialisable."""

    variant: str
    seed: int
    spec: dict
    train: dict
    task: str
    task_params: dict
    steps: int
    seq_len: int
    params: int
    flops_per_step: float
    metrics: tuple
    probe: tuple
    plugins: tuple
    #: the code that produces it (:func:`zoo.experiment.run.code_identity`): ``zoo`` (version),
    #: ``sources`` (module -> sha256 of every plugin module the model and task use), ``git``
    #: (commit and dirty flag of the checkout, or None outside one) and ``git_note``
    code: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.variant}/seed{self.seed}"

    def folder(self, out: Path) -> Path:
        return Path(out) / "trials" / self.variant / f"seed{self.seed}"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Trial":
        d = dict(d)
        d.setdefault("code", {})
        d["metrics"], d["probe"], d["plugins"] = tuple(d["metrics"]), tuple(d["probe"]), tuple(d["plugins"])
        return cls(**d)

    def key(self) -> str:
        """What makes two trials the same run (16 hex digits): spec, options, task, seed, steps and
        the code -- the zoo version, the git commit and dirty flag, and the source digest of every
        plugin module the trial uses -- so a trial of other code is another trial."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    def spec_sha256(self) -> str:
        """sha256 of the trial's spec and options (everything but the code), for ``result.json``."""
        d = {k: v for k, v in self.to_dict().items() if k != "code"}
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()

    @property
    def train_flops(self) -> float:
        return self.flops_per_step * self.steps


#: the largest ``result.json`` / ``trial.json`` / ``experiment.json`` read (a real one is a few KB;
#: a 3 GB sparse file is refused by its size, never read whole)
MAX_RECORD_BYTES = 16 * 1024 * 1024


def read_record(path: Path, max_bytes: int = MAX_RECORD_BYTES) -> tuple[dict | None, str]:
    """A JSON record file as ``(mapping, "")``, or ``(None, why)`` when it is missing, a symlink,
    not a regular file, larger than ``max_bytes``, not UTF-8, not JSON or not a mapping -- never an
    exception and never more than ``max_bytes`` read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None, "missing"
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file"
        if st.st_size > max_bytes:
            return None, f"too large ({st.st_size:,} bytes; at most {max_bytes:,} are read)"
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        return None, f"too large (more than {max_bytes:,} bytes)"
    try:
        rec = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "damaged (not UTF-8 text)"
    except (json.JSONDecodeError, RecursionError, ValueError):
        return None, "damaged (not JSON: truncated or binary)"
    if not isinstance(rec, dict):
        return None, f"damaged (a JSON {type(rec).__name__}, not a record)"
    return rec, ""


def record_sha256(rec: dict) -> str:
    """The digest a ``result.json`` carries of itself (every field but ``record_sha256``): an
    edited record no longer matches.  Integrity against accidents and careless edits, not a
    signature: whoever recomputes it can forge it."""
    body = {k: v for k, v in rec.items() if k != "record_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def file_sha256(path: Path) -> str | None:
    """sha256 of a regular file (not followed through a symlink), None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def code_changes(old: dict, new: dict) -> list[str]:
    """What differs between two ``code`` records, in words: each changed, added or removed plugin
    source (by module), the zoo version, the commit, the dirty flag."""
    out = []
    a, b = (old or {}).get("sources") or {}, (new or {}).get("sources") or {}
    for m in sorted(set(a) | set(b)):
        if a.get(m) != b.get(m):
            out.append(f"{m} {'changed' if m in a and m in b else 'added' if m in b else 'removed'}")
    if (old or {}).get("zoo") != (new or {}).get("zoo"):
        out.append(f"zoo version {(old or {}).get('zoo')} -> {(new or {}).get('zoo')}")
    ga, gb = (old or {}).get("git") or {}, (new or {}).get("git") or {}
    if ga.get("commit") != gb.get("commit"):
        out.append(f"commit {str(ga.get('commit'))[:10]} -> {str(gb.get('commit'))[:10]}")
    if ga.get("dirty") != gb.get("dirty"):
        out.append(f"dirty {ga.get('dirty')} -> {gb.get('dirty')}")
    return out


def check_record(trial: Trial, folder: Path, rec: dict | None, why: str = "") -> str:
    """Why ``rec`` (a trial folder's ``result.json``) cannot stand for ``trial``, or "" when it
    can: it is this very trial (key), of the same code (else the changed files are named), not
    edited (its own digest), and the checkpoint beside it is the one it scored (weights digest)."""
    if rec is None:
        return why
    if rec.get("key") != trial.key():
        changes = code_changes(rec.get("code") or {}, trial.code)
        if changes:
            return "recorded with other code: " + ", ".join(changes)
        return "the record of another trial (spec, options or seed differ)"
    if rec.get("record_sha256") != record_sha256(rec):
        return "result.json was edited after it was written (its own digest disagrees)"
    have = file_sha256(folder / "model.safetensors")
    if have is None or have != rec.get("weights_sha256"):
        return ("the checkpoint beside result.json is not the one it scored (weights digest "
                f"{(have or 'missing')[:12]} != recorded {str(rec.get('weights_sha256'))[:12]}: "
                "swapped or replaced)")
    if rec.get("spec_sha256") != trial.spec_sha256():
        return "result.json's spec digest disagrees with the trial"
    return ""
