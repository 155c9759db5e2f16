"""Loading a model: a checkpoint file made into a model object, a floor above building.

:mod:`zoo.io.checkpoint` reads and writes the file format; :mod:`zoo.build` makes a model from a spec; this
module puts the two together: :func:`load` checks a checkpoint from its header (dtypes, the memory
budget, every tensor's name and shape against the spec) before anything is built or read, builds
the model on the meta device and fills it with the stored tensors (:mod:`zoo.model.assembly`).
:func:`check` runs the same checks without reading the weights (``zoo check``).
:func:`checkpoint_or_spec` / :func:`load_or_build` decide, in one place for every command, whether
a name is a checkpoint or a spec.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

from .. import messages
from ..guard import build_budget as budgets
from ..model.assembly import fill
from ..model.build import build, layout, resolve_device, resolve_dtype
from ..guard.compat import check_runtime
from ..errors import CheckpointError, SpecError, ZooError, did_you_mean
from .chat_templates import read_stored as stored_template
from .checkpoint import (WEIGHTS, check_dtypes, check_embedding, checked_metadata, list_checkpoints,
                         open_weights, read_header, read_tensor, resolve_checkpoint, spec_from_metadata,
                         tokenizer_from, verify_digest, verify_fingerprint, verify_integrity)
from .generation_config import read_stored as stored_generation_config
from ..model.spec import ModelSpec, list_presets, parse_spec, resolve_spec_source
from ..guard.files import clip, short
from ..guard.transaction import MANIFEST


def load(source: str | os.PathLike, *, device: Any = None, dtype: Any = None,
         strict: bool = True, verify: bool = False, budget: float | None = None) -> torch.nn.Module:
    """Rebuild the exact model saved at ``source`` (file, folder or shipped checkpoint name).

    Nothing in the file is trusted: the header and each metadata entry are checked, the dtype
    policy applied (floating point only; several dtypes only with an explicit ``dtype=`` cast),
    the spec held against the memory ``budget`` (:mod:`zoo.guard.build_budget`) and the header's tensor shapes
    before anything is built, and ``verify=True`` recomputes the stored digest of the tensor bytes.
    The model is then built on the meta device (no random initialisation) and the tensors are read
    straight onto ``device``.
    """
    with open_weights(source, strict=verify) as (fh, file):  # opened once: one version throughout
        return _load_open(fh, file, device=device, dtype=dtype, strict=strict, verify=verify,
                          budget=budget)


def _load_open(fh, file: Path, *, device: Any, dtype: Any, strict: bool, verify: bool,
               budget: float | None) -> torch.nn.Module:
    """:func:`load` from the checkpoint's open file ``fh`` (``file`` names it)."""
    where = str(file)
    entries, meta, start = read_header(file, fh=fh)
    spec = spec_from_metadata(meta, file)
    info = checked_metadata(meta, where)
    tied = info["tied"]
    dev = resolve_device(device) or torch.device("cpu")
    dt = resolve_dtype(dtype)
    if dt is not None and not dt.is_floating_point:  # int8 would fail deep inside load_state_dict
        raise CheckpointError(f"dtype {str(dt).replace('torch.', '')} is not a floating-point type",
                              where="load.dtype", options=["float32", "float16", "bfloat16", "float64"],
                              fix="load in a float dtype (int8 inference: zoo.run.precision)")
    check_dtypes(entries, dt, where)
    _check_budget(spec, budget, dev, where)
    check_embedding(spec, entries, where)  # the one tensor that grows with vocab_size, before building
    integrity = None
    if verify:
        verify_digest(file, meta, fh=fh)
        integrity = verify_integrity(meta, where)  # metadata unchanged, same component code
    check_runtime(spec, dtype=dt, device=dev)  # declared dtypes / devices (zoo.guard.compat)
    model = build(spec, device="meta", init=False, budget=budget)
    need = match_tensors(model, entries, tied, where, strict=strict)
    try:
        state = {}
        for name in sorted(need):
            t = read_tensor(fh, entries[name], start, name, where)
            t = t.to(dev) if dev.type != "cpu" else t
            state[name] = t.to(dt) if dt is not None else t  # cast one tensor at a time
    except OSError as exc:
        raise CheckpointError.of("checkpoint.corrupt", where=where, fix="checkpoint.resave",
                                 **{**messages.cause(exc), "cause": clip(exc)}) from exc
    fill(model, state, dev)  # the read tensors become the weights; non-strict gaps stay empty
    if dt is not None:
        model = model.to(dt)
    model.eval()
    model.checkpoint_metadata = meta
    if (settings := stored_generation_config(meta, spec.vocab_size, where)) is not None:
        model.generation_config = settings  # the source's generation settings (zoo.io.generation_config)
    if (template := stored_template(meta, where)) is not None:  # the dict conversion set, typed
        model.chat_template = template
    if info["tokenizer"] is not None:
        model.tokenizer = tokenizer_from(info["tokenizer"], where)
    if integrity is not None:  # the rebuilt model must behave as the saved one did
        verify_fingerprint(model, integrity, where)
    return model


def match_tensors(model: torch.nn.Module, entries: dict, tied: dict[str, str], where: str, *,
                  strict: bool = True) -> set[str]:
    """Hold the header's tensors against a (meta) model: ``zoo.tied`` pairs, names and every shape
    -- before any tensor is read.  Returns the names to read."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    bad_tied = {a: b for a, b in tied.items() if a not in expected or b not in expected
                or a in entries or expected[a] != expected[b]}
    if bad_tied:
        a = next(iter(bad_tied))
        raise CheckpointError(f"zoo.tied names {short(a)} -> {short(bad_tied[a])}, which is not a "
                              f"pair of same-shaped model tensors (or the alias is stored too)",
                              where=f"{where}: zoo.tied", fix="re-save the checkpoint")
    need = set(expected) - set(tied)
    stored = set(entries)
    missing, unexpected = sorted(need - stored), sorted(stored - need)
    if strict and (missing or unexpected):
        raise CheckpointError(
            f"tensors do not match the spec: missing {short(missing, 300)}, unexpected "
            f"{short(unexpected, 300)}", where=where,
            fix="load it with the spec it was saved with, or re-save it")
    for name in sorted(need & stored):  # every shape, from the header, before reading any tensor
        if entries[name][1] != expected[name]:
            raise CheckpointError(
                f"tensor '{clip(name, 80)}' has shape {entries[name][1]}, the spec needs "
                f"{expected[name]}", where=where,
                fix="the spec and the weights disagree; re-save the checkpoint")
    return need & stored


def check(source: str | os.PathLike, *, digest: bool = True, report=None) -> list[tuple[str, str]]:
    """Everything :func:`load` checks, without reading the weights into a model, plus the digest:
    ``[(step, detail), ...]``; the first failing step raises its :class:`CheckpointError`.
    ``report(step, detail)`` is called as each step passes (``zoo check`` prints them)."""
    rows: list[tuple[str, str]] = []

    def done(step, detail):
        rows.append((step, detail))
        if report is not None:
            report(step, detail)

    with open_weights(source, strict=digest) as (fh, file):  # every step reads this one version
        _check_open(fh, file, digest, done)
    return rows


def _check_open(fh, file: Path, digest: bool, done) -> None:
    where = str(file)
    if file.name == WEIGHTS and os.path.lexists(file.parent / MANIFEST):
        done("commit", f"{MANIFEST} names this file" + (" (size and sha256 match)" if digest else ""))
    entries, meta, _ = read_header(file, fh=fh)
    nbytes = sum(e - b for _, _, (b, e) in entries.values())
    done("header", f"{len(entries)} tensors, {budgets.human_bytes(nbytes)} of data, "
                   f"{len(meta)} metadata entries")
    info = checked_metadata(meta, where)
    done("metadata", "tied, plugins, plugin_sources, tokenizer and digest entries are well-formed")
    spec = spec_from_metadata(meta, file)
    done("spec", f"{spec.name} ({spec.arch}), valid")
    kinds = sorted({d for d, _, _ in entries.values()})
    check_dtypes(entries, torch.float32, where)
    done("dtypes", ", ".join(kinds) + (" (mixed: zoo.load needs dtype=)" if len(kinds) > 1 else ""))
    _check_budget(spec, None, None, where)
    check_embedding(spec, entries, where)
    model = build(spec, device="meta", init=False)
    need = match_tensors(model, entries, info["tied"], where)
    done("tensors", f"all {len(need)} names and shapes match the spec ({len(info['tied'])} tied)")
    if info["tokenizer"] is not None:
        tok = tokenizer_from(info["tokenizer"], where)
        done("tokenizer", f"{info['tokenizer']['kind']}, {tok.vocab_size} ids")
    if digest:
        if info["digest"] is None:
            done("digest", "none stored (saved by an older zoo): integrity not checked")
        else:
            verify_digest(file, meta, fh=fh)
            done("digest", f"{info['digest'][:23]}... matches the tensor bytes")
        integrity = verify_integrity(meta, where)
        if integrity is None:
            done("integrity", "none stored (saved by an older zoo): spec, tokenizer and components "
                              "not covered; re-save to record them")
        else:
            done("integrity", f"metadata unchanged; {len(integrity['components'])} components from "
                              "the same plugins, versions and sources")
            t0 = time.perf_counter()
            model = _load_open(fh, file, device=None, dtype=None, strict=True, verify=False, budget=None)
            diff = verify_fingerprint(model, integrity, where)
            done("fingerprint", f"the rebuilt model's output on the probe matches (max difference "
                                f"{diff:.2g}, {time.perf_counter() - t0:.2f} s)")


def _check_budget(spec: ModelSpec, budget: Any, device: Any, where: str) -> None:
    """The stored spec against the memory budget, as a :class:`CheckpointError` naming the entry."""
    try:
        budgets.check(spec, budget, device, layout=layout)
    except SpecError as exc:
        raise CheckpointError(f"the stored spec asks for too much memory: {exc.what}",
                              where=f"{where}: zoo.spec.{exc.where}", fix=exc.fix) from exc


# ---------------------------------------------------------------------- checkpoint or spec
def checkpoint_or_spec(source: Any) -> Path | ModelSpec:
    """What ``source`` names, decided in one place for ``zoo run``, ``zoo bench``, ``zoo train`` and
    ``zoo inspect``: a checkpoint's weights file (a ``.safetensors`` file, a folder holding one, a
    shipped checkpoint's name) if it is one, else a parsed spec (a YAML path, a preset name, YAML
    text, a dict, a ``ModelSpec``).  Neither: a ``CheckpointError`` naming both kinds of options."""
    if isinstance(source, (str, os.PathLike)):
        try:
            return resolve_checkpoint(source)
        except CheckpointError as not_checkpoint:
            try:
                resolve_spec_source(source)  # a spec file, preset or YAML text?
            except SpecError:
                names = list_checkpoints() + [p for p in list_presets() if p not in list_checkpoints()]
                raise CheckpointError(
                    f"'{source}' is neither a checkpoint nor a spec ({not_checkpoint.what})",
                    where=str(source), options=names,
                    fix=did_you_mean(str(source), names) or "pass a checkpoint (a .safetensors file, a "
                    "folder holding one, a shipped name) or a spec (a YAML file, a preset name)"
                ) from None
    return parse_spec(source)


def load_or_build(source: Any, *, device: Any = None, dtype: Any = None, seed: int = 0,
                  **overrides: Any) -> torch.nn.Module:
    """The checkpoint ``source`` names (:func:`zoo.load`), else the spec it names built with random
    weights from ``seed`` (:func:`zoo.build`, with ``overrides`` of spec fields); see
    :func:`checkpoint_or_spec`.  Overrides apply to specs only: a trained checkpoint is loaded as
    saved."""
    what = checkpoint_or_spec(source)
    if isinstance(what, Path):
        if overrides:
            raise ZooError(f"overrides (--set {', '.join(sorted(overrides))}) apply to specs, not to "
                           "trained checkpoints", where=str(source),
                           fix="name the spec instead (zoo bench SPEC --set ...), or drop the overrides")
        return load(what, device=device, dtype=dtype)
    return build(what, device=device, dtype=dtype, seed=seed, **overrides)
