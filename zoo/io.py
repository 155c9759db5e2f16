"""Checkpoints: safetensors only, self-describing, strict, atomic.

A checkpoint stores the tensors plus, in the safetensors metadata, the spec (YAML), the zoo version,
the plugins whose components the spec uses, and which tensors are tied to which (tied weights are
stored once).  ``zoo.load(path)`` rebuilds the exact model from that alone, or names the missing
plugin.  Loading is strict: a missing, unexpected or mis-shaped tensor is a :class:`CheckpointError`
that names it.  Saving writes a temporary file beside the target, fsyncs it, and renames it over the
target, so an interrupted save never damages an existing checkpoint.

Layout: ``zoo.save(model, "run/")`` writes ``run/model.safetensors`` and a human-readable
``run/spec.yaml``; ``zoo.save(model, "m.safetensors")`` writes just that file.  Extra JSON-able
``metadata`` (a tokenizer, a model card summary) travels in the same header under ``zoo.extra.*``.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from .components import SPEC_FAMILIES
from .errors import CheckpointError, SpecError, UnknownComponentError
from .spec import ModelSpec, parse_spec, preset_dirs

WEIGHTS = "model.safetensors"


def _atomic_write(path: Path, write) -> None:
    """Write through ``write(tmp_path)`` to a temp file in ``path``'s folder, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with _suppress():
            os.unlink(tmp)
        raise


class _suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True


def plugins_used(spec: ModelSpec) -> dict[str, str]:
    """``{plugin name: version}`` of every component the spec names."""
    from .registry import get_registry

    reg = get_registry()
    out = {}
    for role in spec.roles:
        st = spec.stack(role)
        for fam in SPEC_FAMILIES:  # every family a spec names (the one family table)
            value = getattr(st, fam.field)
            for cs in (value if fam.many else (value,)):
                c = reg.get(fam.name, cs.kind)
                out[c.plugin] = c.version
    return out


def _dedupe(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Drop tensors that share storage with an earlier one; return (tensors, {alias: source})."""
    seen: dict[tuple, str] = {}
    tensors, tied = {}, {}
    for name, t in state.items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.dtype)
        if t.numel() and key in seen:
            tied[name] = seen[key]
            continue
        seen[key] = name
        tensors[name] = t.detach().contiguous()
    return tensors, tied


def save(model: torch.nn.Module, path: str | os.PathLike, *, metadata: dict[str, Any] | None = None,
         tokenizer: Any = None) -> Path:
    """Save ``model`` (built by zoo) to ``path`` atomically; returns the weights file's path.

    ``tokenizer`` (default: ``model.tokenizer`` if set) is stored as JSON in the metadata under
    ``zoo.tokenizer``; :func:`load` gives it back as ``model.tokenizer``."""
    spec = getattr(model, "spec", None)
    if not isinstance(spec, ModelSpec):
        raise CheckpointError("the model has no zoo spec", where="model",
                              fix="save models built by zoo.build / zoo.load")
    from . import __version__

    path = Path(path)
    file = path if path.suffix == ".safetensors" else path / WEIGHTS
    tensors, tied = _dedupe(model.state_dict())
    meta = {"format": "pt", "zoo.version": __version__, "zoo.spec": spec.to_yaml(),
            "zoo.plugins": json.dumps(plugins_used(spec)), "zoo.tied": json.dumps(tied)}
    from .registry import plugin_sources

    meta["zoo.plugin_sources"] = json.dumps(plugin_sources(json.loads(meta["zoo.plugins"])))
    tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    if tokenizer is not None:
        from . import tokenizers

        tokenizers.check_fits(tokenizer, spec.vocab_size)
        meta[tokenizers.META_KEY] = tokenizers.to_json(tokenizer)
    from .convert.core import conversion_metadata  # a converted model's source and parity certificate

    for k, v in {**conversion_metadata(model), **(metadata or {})}.items():
        meta[f"zoo.extra.{k}"] = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
    tensors = {k: v.cpu() for k, v in tensors.items()}
    _atomic_write(file, lambda tmp: save_file(tensors, tmp, metadata=meta))
    if file.name == WEIGHTS:
        _atomic_write(file.parent / "spec.yaml",
                      lambda tmp: Path(tmp).write_text(spec.to_yaml(), encoding="utf-8"))
    return file


def resolve_checkpoint(source: str | os.PathLike) -> Path:
    """A weights file from a file path, a checkpoint folder, or a shipped checkpoint's name."""
    p = Path(source)
    if p.is_dir():
        p = p / WEIGHTS
    if p.is_file() and p.suffix != ".safetensors":
        raise CheckpointError(f"not a safetensors checkpoint: '{source}'", where=str(source),
                              fix="zoo checkpoints are *.safetensors files (pickle is never loaded)")
    if p.is_file():
        return p
    if not p.suffix and p.parent == Path("."):
        for d in preset_dirs():
            cand = d / p.name / WEIGHTS
            if cand.is_file():
                return cand
    if p.suffix not in ("", ".safetensors"):
        raise CheckpointError(f"not a safetensors checkpoint: '{source}'", where=str(source),
                              fix="zoo checkpoints are *.safetensors files (pickle is never loaded)")
    raise CheckpointError(f"no checkpoint at '{source}'", where=str(source),
                          options=list_checkpoints(),
                          fix="pass a .safetensors file, a folder holding model.safetensors, or a "
                              "shipped checkpoint name")


def list_checkpoints() -> list[str]:
    """Names of the shipped (and ``$ZOO_CHECKPOINTS``) checkpoints that have weights."""
    names = set()
    for d in preset_dirs():
        if d.is_dir():
            names.update(p.parent.name for p in d.glob(f"*/{WEIGHTS}"))
    return sorted(names)


def read_metadata(source: str | os.PathLike) -> dict[str, str]:
    """The safetensors header metadata of a checkpoint (cheap: the tensors are not read)."""
    file = resolve_checkpoint(source)
    try:
        with safe_open(str(file), framework="pt") as f:
            return dict(f.metadata() or {})
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"corrupt or truncated checkpoint: {exc}", where=str(file),
                              fix="re-save it; zoo only reads valid safetensors files") from exc


def load_spec(source: str | os.PathLike) -> ModelSpec:
    """The spec stored inside a checkpoint."""
    meta = read_metadata(source)
    if "zoo.spec" not in meta:
        raise CheckpointError("no zoo spec in the checkpoint metadata", where=str(source),
                              fix="this file was not written by zoo.save; convert it first")
    try:
        return parse_spec(meta["zoo.spec"] if "\n" in meta["zoo.spec"] else meta["zoo.spec"] + "\n")
    except UnknownComponentError as exc:
        from .registry import missing_plugins_hint

        what, fix = missing_plugins_hint(json.loads(meta.get("zoo.plugins", "{}")),
                                         json.loads(meta.get("zoo.plugin_sources", "{}")))
        raise CheckpointError(f"the checkpoint needs a component that is not installed ({exc.what}); "
                              f"{what}", where=str(source), fix=fix) from exc
    except SpecError as exc:
        raise CheckpointError(f"the stored spec is invalid: {exc}", where=str(source)) from exc


def _materialize(model: torch.nn.Module, device: torch.device) -> None:
    """Give every tensor still on the meta device (uninitialised) storage on ``device``.

    Cheaper than ``Module.to_empty`` before loading: that would allocate every weight only for
    ``load_state_dict(assign=True)`` to replace it."""
    for m in model.modules():
        for name, b in m._buffers.items():
            if b is not None and b.is_meta:
                m._buffers[name] = torch.empty(b.shape, dtype=b.dtype, device=device)
        for name, p in m._parameters.items():
            if p is not None and p.is_meta:
                m._parameters[name] = torch.nn.Parameter(
                    torch.empty(p.shape, dtype=p.dtype, device=device), requires_grad=p.requires_grad)


def load(source: str | os.PathLike, *, device: Any = None, dtype: Any = None,
         strict: bool = True) -> torch.nn.Module:
    """Rebuild the exact model saved at ``source`` (file, folder or shipped checkpoint name).

    The model is built on the meta device (no random initialisation), then the tensors are read
    straight onto ``device``.  ``dtype`` converts floating tensors after loading.
    """
    from .build import build, resolve_device, resolve_dtype

    file = resolve_checkpoint(source)
    spec = load_spec(file)
    meta = read_metadata(file)
    tied = json.loads(meta.get("zoo.tied", "{}"))
    dev = resolve_device(device) or torch.device("cpu")
    dt = resolve_dtype(dtype)
    from .registry import get_registry

    get_registry().check_runtime(spec, dtype=dt, device=dev)  # declared dtypes / devices
    model = build(spec, device="meta", init=False)
    expected = {k: v for k, v in model.state_dict().items()}
    try:
        with safe_open(str(file), framework="pt", device=str(dev)) as f:
            stored = set(f.keys())
            need = set(expected) - set(tied)
            missing, unexpected = sorted(need - stored), sorted(stored - need)
            if strict and (missing or unexpected):
                raise CheckpointError(
                    f"tensors do not match the spec: missing {missing[:8]}"
                    f"{' ...' if len(missing) > 8 else ''}, unexpected {unexpected[:8]}"
                    f"{' ...' if len(unexpected) > 8 else ''}", where=str(file),
                    fix="load it with the spec it was saved with, or re-save it")
            state = {}
            for name in sorted(need & stored):
                t = f.get_tensor(name)
                if tuple(t.shape) != tuple(expected[name].shape):
                    raise CheckpointError(
                        f"tensor '{name}' has shape {tuple(t.shape)}, the spec needs "
                        f"{tuple(expected[name].shape)}", where=str(file),
                        fix="the spec and the weights disagree; re-save the checkpoint")
                state[name] = t
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"corrupt or truncated checkpoint: {exc}", where=str(file),
                              fix="re-save it; zoo only reads valid safetensors files") from exc
    model.load_state_dict(state, strict=False, assign=True)  # the read tensors become the weights
    model.tie_weights()
    _materialize(model, dev)  # what is still on meta: non-persistent buffers (and, non-strict, gaps)
    model.reset_buffers()
    if dt is not None:
        model = model.to(dt)
    model.eval()
    model.checkpoint_metadata = meta
    from . import tokenizers

    if tokenizers.META_KEY in meta:
        model.tokenizer = tokenizers.from_json(meta[tokenizers.META_KEY])
    return model
