"""State and resume: everything a killed run needs to continue exactly, in safetensors (no pickle).

``out/`` holds a normal zoo checkpoint (``model.safetensors`` + ``spec.yaml``, with the tokenizer)
and the trainer state: ``trainer_state.safetensors`` (weights as ``model.*``, AdamW moments as
``optim.{param}.{key}``; step, config, schedule, tokenizer and data fingerprint in its header) with a
readable copy of the header in ``trainer_state.json``.  The four files of a save are one commit
(:mod:`zoo.guard.transaction`: staged, then committed together by ``zoo-manifest.json``), so a kill
at any moment leaves the previous save or the new one -- never a checkpoint of one step beside the
state of another -- and loses at most the steps since the last save.  Readers (:func:`read_state`,
:func:`saved_run_step`) read the last commit.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..version import __version__
from ..model.build import build
from .. import messages
from ..errors import CheckpointError, TrainError
from ..guard import transaction as txn
from ..io.checkpoint import dedupe, read_header, read_tensor, save
from ..io.tokenizers import to_json as tok_json
from ..guard.files import clip, short
from .optim import lr_at

STATE_FILE = "trainer_state.safetensors"
STATE_JSON = "trainer_state.json"


def optimizer_tensors(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """Split ``opt.state_dict()`` into flat tensors (``optim.{param}.{key}``) and a JSON part."""
    sd = opt.state_dict()
    tensors = {}
    for pid, st in sd["state"].items():
        for k, v in st.items():
            t = v if isinstance(v, torch.Tensor) else torch.tensor(v)
            tensors[f"optim.{pid}.{k}"] = t.detach().cpu().contiguous()
    return tensors, {"param_groups": sd["param_groups"]}


def load_optimizer_tensors(opt: torch.optim.Optimizer, tensors: dict, meta: dict,
                           where: str = "trainer state") -> None:
    """The inverse of :func:`optimizer_tensors`, checked: the parameter groups must match the
    optimizer's (count and sizes) and every moment must have its parameter's shape, or the resume
    is a :class:`CheckpointError` (not a ``ValueError`` from torch, or a shape error at the first
    step)."""
    groups = meta.get("param_groups")
    live = opt.param_groups
    if (not isinstance(groups, list) or len(groups) != len(live)
            or not all(isinstance(g, dict) and isinstance(g.get("params"), list)
                       and len(g["params"]) == len(lg["params"]) for g, lg in zip(groups, live))):
        raise CheckpointError(f"the optimizer's parameter groups {short(groups)} do not match this "
                              f"model's {len(live)} group(s) of "
                              f"{[len(g['params']) for g in live]} parameters",
                              where=f"{where}: zoo.optimizer.param_groups", fix=_FIX)
    params = {}
    for g, lg in zip(groups, live):
        for pid, p in zip(g["params"], lg["params"]):
            if isinstance(pid, bool) or not isinstance(pid, int):
                raise CheckpointError(f"parameter id {short(pid)} is not an integer",
                                      where=f"{where}: zoo.optimizer.param_groups", fix=_FIX)
            params[pid] = p
    state: dict[int, dict] = {}
    for name, t in tensors.items():
        if not name.startswith("optim."):
            continue
        parts = name.split(".", 2)
        pid = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
        if pid not in params or parts[2] not in ("step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
            raise CheckpointError(f"unexpected optimizer tensor {short(name)}", where=where, fix=_FIX)
        want = () if parts[2] == "step" else tuple(params[pid].shape)
        if tuple(t.shape) != want or not t.is_floating_point():
            raise CheckpointError(f"optimizer tensor {name} has shape {tuple(t.shape)} and dtype "
                                  f"{t.dtype}; its parameter needs a float tensor of shape {want}",
                                  where=where, fix=_FIX)
        state.setdefault(pid, {})[parts[2]] = t
    try:
        opt.load_state_dict({"state": state, "param_groups": groups})
    except (ValueError, KeyError, TypeError, RuntimeError) as exc:
        raise CheckpointError(f"the optimizer state does not fit: {clip(exc)}", where=where,
                              fix=_FIX) from exc


def check_finite(model, step: int, kept: str = "") -> None:
    """Raise a :class:`TrainError` naming ``step`` and the first tensor of ``model`` holding a NaN
    or an infinity.  Called after every optimizer step and again before every save, so a run never
    writes non-finite weights over a good checkpoint (``kept`` says which one is left).

    Cost: one float32 sum per tensor and one host sync (a NaN or inf anywhere makes its sum
    non-finite); only when some sum is non-finite are the tensors searched one by one, so a sum that
    merely overflowed on huge but finite weights is not a false alarm."""
    tensors = [(n, t) for n, t in model.state_dict().items() if t.is_floating_point()]
    if not tensors:
        return
    sums = torch.stack([torch.sum(t.detach(), dtype=torch.float32) for _, t in tensors])
    if bool(torch.isfinite(sums).all()):
        return
    for name, t in tensors:
        if not bool(torch.isfinite(t.detach()).all()):
            nan = bool(torch.isnan(t.detach()).any())
            said = dict(step=step, name=name, kind="NaN" if nan else "inf")
            if isinstance(kept, dict):  # the kept sentence with its id (messages.part)
                raise TrainError.of("train.weight_nonfinite_kept", where="train", **said, **kept)
            if kept:
                raise TrainError.of("train.weight_nonfinite_kept", where="train", **said, kept=kept)
            raise TrainError.of("train.weight_nonfinite", where="train", **said)


def save_state(out: Path, model, opt, tok, cfg, spec, info, step, elapsed, tokens_seen, last,
               best=None) -> None:
    """Write the zoo checkpoint and the resumable trainer state as one commit of ``out`` (the
    checkpoint's files and the state's, together or not at all).  Non-finite weights are refused
    first (:func:`check_finite`): nothing is written over the last save."""
    check_finite(model, step, kept=messages.part("kept", "train.kept_last", out=out))
    meta = {"step": step, "config": cfg.to_dict(), "spec": spec.to_yaml(), "tokenizer": tok_json(tok),
            "data": info, "elapsed_s": elapsed, "tokens_seen": tokens_seen,
            "lr": lr_at(max(0, step - 1), cfg), "zoo_version": __version__, "last_metrics": last,
            "best": best}
    with txn.transaction(out, where="train.out", error=CheckpointError) as tx:
        save(model, out, tokenizer=tok, metadata={"train": {"step": step, "objective": cfg.objective,
                                                            "data": info.get("data"), "metrics": last}})
        weights, tied = dedupe(model.state_dict())
        tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in weights.items()}
        otensors, ojson = optimizer_tensors(opt)
        tensors.update(otensors)
        header = {"zoo.trainer": json.dumps(meta, ensure_ascii=False), "zoo.tied": json.dumps(tied),
                  "zoo.optimizer": json.dumps(ojson)}
        tx.write_file(STATE_FILE, lambda tmp: save_file(tensors, tmp, metadata=header))
        text = json.dumps({k: v for k, v in meta.items() if k != "tokenizer"}, ensure_ascii=False,
                          indent=1)
        tx.write_file(STATE_JSON, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


_FIX = "resume from a trainer state zoo wrote (or an earlier copy), or start a new run"


def _entry(meta: dict, key: str, kind: type, where: str, required: bool = True):
    """One JSON entry of the state file's header, of type ``kind`` (typed reading: a missing,
    unparsable or mistyped entry is a :class:`CheckpointError` naming it)."""
    raw = meta.get(key)
    if raw is None:
        if required:
            raise CheckpointError(f"the trainer state has no '{key}' entry", where=f"{where}: {key}",
                                  fix=_FIX)
        return kind()
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"'{key}' is not JSON: {clip(exc)}", where=f"{where}: {key}",
                              fix=_FIX) from exc
    if not isinstance(value, kind):
        raise CheckpointError(f"'{key}' must be a JSON {_KIND[kind]}, got {short(value)}",
                              where=f"{where}: {key}", fix=_FIX)
    return value


_KIND = {dict: "object", list: "array", str: "string"}


def _typed_trainer(meta: dict, where: str) -> dict:
    """The ``zoo.trainer`` entry with every field the resume uses checked by type and range."""
    where = f"{where}: zoo.trainer"

    def bad(field_, value, expected):
        raise CheckpointError(f"'{field_}' must be {expected}, got {short(value)}",
                              where=f"{where}.{field_}", fix=_FIX)

    def count(v):
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2 ** 63

    for key, ok, expected in (
            ("step", count, "a non-negative integer"),
            ("config", lambda v: isinstance(v, dict), "a mapping of training options"),
            ("spec", lambda v: isinstance(v, str), "the model's spec as YAML text"),
            ("tokenizer", lambda v: isinstance(v, (str, dict)), "a stored tokenizer"),
            ("data", lambda v: isinstance(v, dict) and isinstance(v.get("data"), str)
             and isinstance(v.get("data_sha256"), str), "the data facts (path and sha256)")):
        if key not in meta:
            raise CheckpointError(f"the trainer state has no '{key}'", where=f"{where}.{key}", fix=_FIX)
        if not ok(meta[key]):
            bad(key, meta[key], expected)
    for key, ok, expected in (
            ("tokens_seen", count, "a non-negative integer"),
            ("elapsed_s", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
             and math.isfinite(v) and v >= 0, "a non-negative number of seconds"),
            ("best", lambda v: isinstance(v, dict) and isinstance(v.get("eval_loss"), (int, float))
             and (v.get("step") is None or count(v.get("step"))), "the best evaluation so far")):
        if meta.get(key) is not None and not ok(meta[key]):
            bad(key, meta[key], expected)
    return meta


def read_state(out: str | os.PathLike) -> tuple[dict, dict, dict]:
    """``(trainer metadata, tensors, optimizer json)`` from ``out/trainer_state.safetensors``.

    Typed reading: the header's entries (``zoo.trainer``, ``zoo.optimizer``, ``zoo.tied``) must be
    JSON of the right shape, and the fields a resume uses of the right type and range; anything
    else is a :class:`CheckpointError` naming the entry, raised before any work."""
    file = Path(out) / STATE_FILE
    where = str(file)
    if not _has_state(Path(out)):
        raise CheckpointError("no trainer state to resume from", where=where,
                              fix="start the run without resume, or point out= at a run's folder")
    try:  # the last commit's state file, opened once
        with txn.committed(out, [STATE_FILE], where=where, error=CheckpointError) as files:
            fh = files[STATE_FILE]
            try:
                entries, meta, start = read_header(file, fh=fh)
            except CheckpointError as exc:
                raise CheckpointError(f"corrupt trainer state: {exc.what}", where=exc.where,
                                      fix="resume from an earlier copy or start over") from exc
            tensors = {k: read_tensor(fh, entries[k], start, k, where) for k in sorted(entries)}
    except OSError as exc:
        raise CheckpointError(f"corrupt trainer state: {exc}", where=where,
                              fix="resume from an earlier copy or start over") from exc
    trainer = _typed_trainer(_entry(meta, "zoo.trainer", dict, where), where)
    ojson = _entry(meta, "zoo.optimizer", dict, where)
    tied = _entry(meta, "zoo.tied", dict, where, required=False)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in tied.items()):
        raise CheckpointError(f"'zoo.tied' must map tensor names to tensor names, got {short(tied)}",
                              where=f"{where}: zoo.tied", fix=_FIX)
    return trainer, tensors, {**ojson, "tied": tied}


def _has_state(out: Path) -> bool:
    """Whether ``out`` holds a trainer state: its last commit names one (or, in a folder without a
    manifest, the file is there)."""
    try:
        m = txn.read_manifest(out, error=CheckpointError)
    except CheckpointError:
        m = None
    if m is not None and STATE_FILE in m["files"]:
        return True
    return (out / STATE_FILE).is_file()


def saved_run_step(out: Path):
    """The step of the run saved in ``out``, ``"?"`` if its JSON is missing, None if there is no run."""
    if not _has_state(out):
        return None
    try:
        with txn.committed(out, [STATE_JSON], error=CheckpointError, kind="json") as files:
            meta = json.loads(files[STATE_JSON].read(txn.MAX_MANIFEST_BYTES * 64))
    except (ValueError, RecursionError, CheckpointError):  # missing or damaged: the step is unknown
        meta = {}
    return meta.get("step", "?") if isinstance(meta, dict) else "?"


def model_from_state(spec, tensors: dict, ojson: dict, where: str):
    """Rebuild the model from the trainer state's ``model.*`` tensors (built on the meta device,
    so no random init is wasted), re-tying shared weights."""
    net = build(spec, device="meta").to_empty(device="cpu")
    sd = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    try:
        net.load_state_dict(sd, strict=False)
    except RuntimeError as exc:  # a tensor of the wrong shape
        raise CheckpointError(f"trainer state does not fit the spec: {clip(exc)}", where=where,
                              fix=_FIX) from exc
    missing = set(net.state_dict()) - set(sd) - set(ojson["tied"])
    if missing:
        raise CheckpointError(f"trainer state lacks tensors {sorted(missing)[:5]}", where=where)
    net.tie_weights()
    net.reset_buffers()
    return net
