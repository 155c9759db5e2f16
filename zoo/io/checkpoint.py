"""The checkpoint file format: safetensors only, self-describing, atomic.

This module reads and writes files; it builds no model (that is :mod:`zoo.io.loading`, a floor above
:mod:`zoo.build`).  A checkpoint stores the tensors plus, in the safetensors metadata, the spec (YAML), the zoo version,
the plugins whose components the spec uses, and which tensors are tied to which (tied weights are
stored once).  ``zoo.load(path)`` rebuilds the exact model from that alone, or names the missing
plugin (:func:`zoo.io.loading.load`).  Loading is strict: a missing, unexpected or mis-shaped tensor
is a :class:`CheckpointError` that names it.  Saving writes a temporary file beside the target, fsyncs it, and renames it over the
target, so an interrupted save never damages an existing checkpoint.

Layout: ``zoo.save(model, "run/")`` writes ``run/model.safetensors`` and a human-readable
``run/spec.yaml`` as one transaction (:mod:`zoo.guard.transaction`: the folder's lock, then both
files committed at once by ``run/zoo-manifest.json``); ``zoo.save(model, "m.safetensors")`` writes
just that file.  Extra JSON-able ``metadata`` (a tokenizer, a model card summary) travels in the same
header under ``zoo.extra.*``.  Readers open the weights once (:func:`open_weights`), as of the
folder's last commit.

A checkpoint may come from anyone, so loading trusts nothing in it (see docs/TRUST.md):

- the header is read and checked first (:func:`read_header`: bounded size, offsets inside the file);
- every metadata entry zoo uses is validated on its own (:func:`checked_metadata`), so a damaged
  entry is an error naming that entry, not a ``JSONDecodeError``;
- dtype policy: floating-point tensors only, all of one dtype -- or pass ``dtype=`` to cast
  explicitly; an int8 or mixed checkpoint is refused at load, not at the first forward pass;
- the spec is checked against the memory budget (:mod:`zoo.guard.build_budget`) and the header's tensor shapes
  *before* anything is built or read;
- integrity: ``zoo.save`` writes a SHA-256 digest of the tensor bytes (``zoo.digest``);
  ``zoo.load(..., verify=True)`` and ``zoo check PATH`` recompute it.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import warnings
import math
import os
import re
import struct
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from . import tokenizers
from .. import messages
from ..components import SPEC_FAMILIES
from ..deprecation import moved
from ..errors import CheckpointError, SpecError, UnknownComponentError, ZooError
from ..registry import get_registry, missing_plugins_hint, plugin_sources
from ..model.spec import ModelSpec, parse_spec, preset_dirs, yaml_to_dict
from ..guard.files import clip, open_read, regular_file, short, user_path, write_target
from ..guard import transaction as txn
from ..guard.transaction import (STALE_AFTER_S, glob_escape, remove_stale_temps,  # noqa: F401 (were here)
                                 write_file)
from ..version import __version__

WEIGHTS = "model.safetensors"
#: the human-readable copy of the spec beside the weights in a checkpoint folder
SPEC_FILE = "spec.yaml"


def atomic_write(path: str | os.PathLike, write) -> None:
    """Write ``path`` all or nothing (:func:`zoo.guard.transaction.write_file`): ``write(tmp)``
    fills a temporary file beside it, which is fsynced and renamed over ``path``, so readers see
    the old file or the new one, never half of one.  A symlink at ``path`` is refused; a full disk
    is a :class:`CheckpointError` with the old file intact.

    The temporary file is named ``.NAME.PID.XXXXXXXX.tmp``.  Temporary files of that naming left by
    a process that no longer exists (a save killed mid-write) are removed first.  The result gets
    the permissions a new file normally gets (``0o666`` minus the umask), not ``mkstemp``'s 0600.
    """
    path = write_target(path, where=str(path), error=CheckpointError)  # a device, a loop, /proc: no
    write_file(path, write, where=str(path), error=CheckpointError)


def plugins_used(spec: ModelSpec) -> dict[str, str]:
    """``{plugin name: version}`` of every component the spec names."""
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


# ---------------------------------------------------------------------- integrity of the function
#: Metadata entry: what determines the model's function beyond the tensors -- the identity of each
#: component (name, plugin, version, sha256 of the source file that defines it), a behavioural
#: fingerprint, and a sha256 over every metadata entry (spec, tokenizer, tied, ... and the tensor
#: digest).  Checkpoints saved before it existed load as before; ``verify`` then checks the tensors
#: only and says so.
INTEGRITY_KEY = "zoo.integrity"
#: The fixed probe of the fingerprint: ``PROBE_LEN`` token ids drawn from a generator seeded with
#: ``PROBE_SEED`` (decoder-side ids equal the encoder's for encoder-decoder models).
PROBE_SEED, PROBE_LEN, PROBE_VALUES = 20_220_101, 8, 32
#: Fingerprint tolerance: ``|a - b| <= FINGERPRINT_RTOL * (1 + max |stored|)`` element-wise.
FINGERPRINT_RTOL = 1e-4


def _source_sha(obj: Any) -> str:
    """sha256 of the source file that defines ``obj``'s class or function ("?" when unreadable)."""
    import sys

    mod = sys.modules.get(getattr(obj, "__module__", ""), None)
    file = getattr(mod, "__file__", None)
    try:
        with open_read(file, kind="checkpoint", where="component source") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except (ZooError, TypeError):
        return "?"


def component_identities(spec: ModelSpec, tokenizer_kind: str | None = None) -> dict[str, dict]:
    """``{"family/name": {plugin, version, source}}`` for every component ``spec`` names (and the
    tokenizer): which code computes the function, down to a hash of its source file."""
    reg = get_registry()
    out = {}
    names = set()
    for role in spec.roles:
        st = spec.stack(role)
        for fam in SPEC_FAMILIES:
            value = getattr(st, fam.field)
            for cs in (value if fam.many else (value,)):
                names.add((fam.name, cs.kind))
    if tokenizer_kind is not None:
        names.add(("tokenizer", tokenizer_kind))
    for fam, name in sorted(names):
        c = reg.get(fam, name)
        out[f"{fam}/{name}"] = {"plugin": c.plugin, "version": str(c.version),
                                "source": _source_sha(c.cls)}
    return out


def probe_ids(spec: ModelSpec) -> torch.Tensor:
    """The fingerprint's fixed input: ``(1, min(PROBE_LEN, max_len))`` ids in ``[0, vocab_size)``."""
    g = torch.Generator().manual_seed(PROBE_SEED)
    return torch.randint(0, spec.vocab_size, (1, max(1, min(PROBE_LEN, spec.max_len))), generator=g)


def fingerprint(model: torch.nn.Module) -> dict:
    """The model's behaviour on the fixed probe: ``PROBE_VALUES`` output values at fixed positions
    of the flattened output, its sum and absolute sum, and the dtype it ran in.  Run in eval mode
    without gradients (the training flag is restored), on the model's own device."""
    spec = model.spec
    param = next(model.parameters(), None)
    dev = param.device if param is not None else torch.device("cpu")
    ids = probe_ids(spec).to(dev)
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(ids, ids) if spec.arch == "encoder_decoder" else model(ids)
    finally:
        model.train(was)
    out = out if isinstance(out, torch.Tensor) else getattr(out, "logits", None) \
        if not isinstance(out, (tuple, list)) else out[0]
    x = out.detach().float().flatten().cpu()
    at = torch.linspace(0, x.numel() - 1, min(PROBE_VALUES, x.numel())).long()
    return {"values": [float(v) for v in x[at]], "sum": float(x.sum()), "abs": float(x.abs().sum()),
            "numel": int(x.numel()),
            "dtype": str(param.dtype).replace("torch.", "") if param is not None else "float32"}


def metadata_sha(meta: dict[str, str]) -> str:
    """sha256 over every metadata entry but ``format`` and the integrity entry's own hash, each as
    length-prefixed key and value, in key order: one flipped byte anywhere changes it."""
    h = hashlib.sha256()
    for k in sorted(meta):
        if k in ("format", INTEGRITY_KEY):
            continue
        for part in (k, meta[k]):
            b = part.encode("utf-8", "surrogatepass")
            h.update(len(b).to_bytes(8, "little") + b)
    return "sha256:" + h.hexdigest()


def integrity_entry(model: torch.nn.Module, meta: dict[str, str], tokenizer_kind: str | None) -> str:
    """The ``zoo.integrity`` JSON for ``model`` saved with ``meta`` (the tensor digest included)."""
    body = {"version": 1, "components": component_identities(model.spec, tokenizer_kind),
            "fingerprint": fingerprint(model)}
    full = {**meta, "zoo.integrity.body": json.dumps(body, sort_keys=True)}
    return json.dumps({**body, "sha256": metadata_sha(full)}, sort_keys=True)


def checked_integrity(meta: dict[str, str], where: str) -> dict | None:
    """The parsed ``zoo.integrity`` entry (type-checked), or None for an older checkpoint."""
    if INTEGRITY_KEY not in meta:
        return None
    at = f"{where}: {INTEGRITY_KEY}"
    value = _json_entry(meta, INTEGRITY_KEY, where, None, kind=object)
    fp = value.get("fingerprint") if isinstance(value, dict) else None
    ok = (isinstance(value, dict) and isinstance(value.get("sha256"), str)
          and isinstance(value.get("components"), dict)
          and all(isinstance(v, dict) and all(isinstance(v.get(k), str)
                                              for k in ("plugin", "version", "source"))
                  for v in value["components"].values())
          and isinstance(fp, dict) and isinstance(fp.get("values"), list)
          and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in fp["values"])
          and isinstance(fp.get("dtype"), str))
    if not ok:
        raise CheckpointError(f"the integrity entry is malformed: {short(value)}", where=at,
                              fix="re-save the checkpoint with zoo.save")
    return value


def verify_integrity(meta: dict[str, str], where: str) -> dict | None:
    """Check, before building anything, that no metadata entry changed since saving (the stored
    sha256 over all of them) and that every component the checkpoint was saved with is provided
    now by the same plugin, version and source.  Returns the integrity entry (None: an older
    checkpoint, whose tensors only can be verified)."""
    value = checked_integrity(meta, where)
    if value is None:
        return None
    at = f"{where}: {INTEGRITY_KEY}"
    body = {k: v for k, v in value.items() if k != "sha256"}
    full = {**meta, "zoo.integrity.body": json.dumps(body, sort_keys=True)}
    if metadata_sha(full) != value["sha256"]:
        raise CheckpointError("the metadata was changed after saving (spec, tokenizer, tied "
                              "weights, digest or the integrity record itself)", where=at,
                              fix="get an intact copy of the checkpoint, or re-save it")
    reg = get_registry()
    for key, saved in sorted(value["components"].items()):
        fam, _, name = key.partition("/")
        comp = reg.components.get(fam, {}).get(name)
        if comp is None:
            raise CheckpointError(f"component {short(key)} (plugin {short(saved['plugin'])}) is not "
                                  f"installed", where=at, fix="install the plugin it was saved with")
        now = {"plugin": comp.plugin, "version": str(comp.version), "source": _source_sha(comp.cls)}
        if now != saved and now["plugin"] == saved["plugin"] and now["version"] == saved["version"]:
            # Only the source file differs (an edited docstring, a new option, or other maths): the
            # behavioural fingerprint, checked once the model is rebuilt, decides.  A built-in's
            # file changes between zoo commits; refusing on that alone would orphan every checkpoint.
            warnings.warn(f"{at}: the source of component {key} ({saved['plugin']} "
                          f"{saved['version']}) changed since saving; its outputs on the probe are "
                          f"compared next", stacklevel=3)
            continue
        if now != saved:
            diff = [k for k in ("plugin", "version", "source") if now[k] != saved[k]]
            raise CheckpointError(
                f"component {key} is now provided by plugin {now['plugin']} {now['version']}, not "
                f"the {saved['plugin']} {saved['version']} it was saved with ({', '.join(diff)} "
                f"differ{'s' if len(diff) == 1 else ''}): the model may compute something else",
                where=at, fix=f"install the plugin it was saved with, or re-save the checkpoint "
                              f"under the current plugins after checking its outputs")
    return value


def verify_fingerprint(model: torch.nn.Module, value: dict, where: str) -> float:
    """Run the rebuilt ``model`` on the probe and compare with the stored fingerprint; returns the
    largest difference.  A model loaded in another dtype than it was saved in is compared with a
    tolerance scaled to that dtype's precision."""
    stored = value["fingerprint"]
    now = fingerprint(model)
    if len(now["values"]) != len(stored["values"]):
        raise CheckpointError("the rebuilt model's output has another size than at saving "
                              f"({now['numel']} vs {stored.get('numel')})",
                              where=f"{where}: {INTEGRITY_KEY}", fix="re-save the checkpoint")
    a, b = torch.tensor(now["values"]), torch.tensor(stored["values"], dtype=torch.float32)
    eps = {"float32": FINGERPRINT_RTOL, "float64": FINGERPRINT_RTOL, "bfloat16": 3e-2,
           "float16": 5e-3}.get(now["dtype"], 3e-2) if now["dtype"] != stored["dtype"] else FINGERPRINT_RTOL
    tol = eps * (1 + float(b.abs().max()) if b.numel() else 1.0)
    diff = float((a - b).abs().max()) if b.numel() else 0.0
    if not diff <= tol:  # NaN fails too
        raise CheckpointError(f"the rebuilt model computes something else than the saved one: its "
                              f"output on the fixed probe differs by {diff:.3g} (tolerance "
                              f"{tol:.2g}); the spec's meaning, a component's default or its code "
                              f"changed", where=f"{where}: {INTEGRITY_KEY}.fingerprint",
                              fix="load with the plugins and zoo version it was saved with, or get "
                                  "an intact copy")
    return diff


def dedupe(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Drop tensors that share storage with an earlier one (tied weights are stored once); return
    ``(tensors, {alias: source})`` -- the second dict is what ``zoo.tied`` records."""
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




# ---------------------------------------------------------------------- digest of the tensors
#: safetensors' names of torch dtypes (the digest hashes the name, so a cast changes it)
ST_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
             torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
             torch.uint8: "U8", torch.bool: "BOOL"}
for _n, _s in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2")):
    if hasattr(torch, _n):
        ST_DTYPES[getattr(torch, _n)] = _s
ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
            "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}
FLOATS = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}
DIGEST_KEY = "zoo.digest"


def _digest_entry(h, name: str, dtype: str, shape) -> None:
    h.update(f"{name}\0{dtype}\0{list(shape)}\0".encode("utf-8", "surrogatepass"))


#: torch dtypes by safetensors' names (what :func:`read_tensor` makes)
TORCH_DTYPES = {v: k for k, v in ST_DTYPES.items()}


def read_tensor(fh, entry: tuple, start: int, name: str, where: str) -> torch.Tensor:
    """One tensor of a checked header entry (:func:`read_header`) read from the open file ``fh``
    into its own CPU memory (one copy, as safetensors' reader makes)."""
    dtype, shape, (begin, end) = entry
    dt = TORCH_DTYPES.get(dtype)
    if dt is None:
        raise CheckpointError(f"tensor {short(name)} is {dtype}, which this torch cannot hold",
                              where=where, fix="convert the weights to float32 / bfloat16")
    if end == begin:
        return torch.empty(shape, dtype=dt)
    buf = bytearray(end - begin)
    view = memoryview(buf)
    fh.seek(start + begin)
    done = 0
    while done < len(buf):
        got = fh.readinto(view[done:])
        if not got:
            raise CheckpointError(f"the file ends inside tensor {short(name)}", where=where,
                                  fix="the file is truncated; re-save it")
        done += got
    return torch.frombuffer(buf, dtype=dt).reshape(shape)


def tensor_digest(tensors: dict[str, torch.Tensor]) -> str:
    """``sha256:HEX`` over every tensor in name order: its name, dtype, shape and raw bytes (as
    safetensors stores them), so renaming, casting, reshaping or flipping one bit changes it."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name]
        _digest_entry(h, name, ST_DTYPES.get(t.dtype, str(t.dtype)), t.shape)
        if t.numel():
            h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return "sha256:" + h.hexdigest()


def file_digest(source: str | os.PathLike, chunk: int = 1 << 22, *, fh=None) -> str:
    """:func:`tensor_digest` of a checkpoint, streamed from the file (memory: one ``chunk``);
    ``fh``: the checkpoint's file, already open (:func:`open_weights`), read instead of ``source``."""
    file = resolve_checkpoint(source) if fh is None else Path(source)
    entries, _, start = read_header(file, fh=fh)
    h = hashlib.sha256()
    with _opened(file, fh) as fh:
        for name in sorted(entries):
            dtype, shape, (begin, end) = entries[name]
            _digest_entry(h, name, dtype, shape)
            fh.seek(start + begin)
            left = end - begin
            while left:
                block = fh.read(min(chunk, left))
                if not block:
                    raise CheckpointError(f"the file ends inside tensor {short(name)}",
                                          where=str(file), fix="the file is truncated; re-save it")
                h.update(block)
                left -= len(block)
    return "sha256:" + h.hexdigest()


def verify_digest(source: str | os.PathLike, meta: dict[str, str] | None = None, *, fh=None) -> str:
    """Recompute the digest of a checkpoint and compare it with the stored ``zoo.digest``
    (``fh``: read that open file, as :func:`file_digest`)."""
    if fh is None:
        with open_weights(source) as (fh, file):
            return verify_digest(file, meta, fh=fh)
    file = Path(source)
    meta = meta if meta is not None else read_header(file, fh=fh)[1]
    stored = meta.get(DIGEST_KEY)
    if stored is None:
        raise CheckpointError("the checkpoint stores no digest to verify", where=str(file),
                              fix="re-save it with zoo.save (zoo >= 0.1 writes zoo.digest)")
    if not isinstance(stored, str) or not re.fullmatch(r"sha256:[0-9a-f]{64}", stored):
        raise CheckpointError(f"malformed digest {short(stored)}", where=f"{file}: {DIGEST_KEY}",
                              fix="expected 'sha256:' and 64 hex digits; re-save the checkpoint")
    actual = file_digest(file, fh=fh)
    if actual != stored:
        raise CheckpointError("the tensor bytes do not match the stored digest (the file was "
                              "changed or damaged after saving)", where=str(file),
                              fix="get an intact copy of the checkpoint, or re-save it")
    return actual


# ---------------------------------------------------------------------- the header, checked
#: Largest safetensors header zoo reads (GPT-2 small's is 15 KB; a spec + tokenizer a few hundred).
MAX_HEADER_BYTES = 64 * 1024 * 1024


@contextlib.contextmanager
def _opened(file: Path, fh=None):
    """``fh`` rewound (the caller's, left open), or ``file`` opened for this block."""
    if fh is not None:
        fh.seek(0)
        yield fh
        return
    with open_read(file, kind="checkpoint", error=CheckpointError) as own:
        yield own


@contextlib.contextmanager
def open_weights(source: str | os.PathLike, *, strict: bool = False):
    """``(binary file, path)``: a checkpoint's weights (a file, a folder, a shipped name), opened
    once -- everything a reader takes from it comes through that one file, so a save replacing
    it meanwhile cannot mix two versions.  A folder with a ``zoo-manifest.json`` is read as of its
    last commit (:func:`zoo.guard.transaction.committed`; ``strict``: the file's size and sha256
    must match it); one without (saved before manifests, shipped, hand-made) as its file is."""
    p = user_path(source, where="checkpoint", error=CheckpointError)
    folder = p if p.is_dir() else p.parent if p.name == WEIGHTS else None
    if folder is None:
        resolved = resolve_checkpoint(source)
        folder = resolved.parent if resolved.name == WEIGHTS else None
    if folder is not None and os.path.lexists(folder / txn.MANIFEST):
        file = folder / WEIGHTS
        with txn.committed(folder, [WEIGHTS], where=str(file), error=CheckpointError,
                           strict=strict) as files:
            yield files[WEIGHTS], file
        return
    file = resolve_checkpoint(source)
    with open_read(file, kind="checkpoint", error=CheckpointError) as fh:
        yield fh, file


def read_header(source: str | os.PathLike, *, fh=None) -> tuple[dict[str, tuple[str, tuple[int, ...],
                                                                                tuple[int, int]]],
                                                               dict[str, str], int]:
    """``({name: (dtype, shape, (begin, end))}, metadata, data_start)`` of a safetensors file,
    every field checked: bounded header length, JSON object, known dtypes, shapes of non-negative
    ints, byte ranges that match the shape and lie inside the file.  No tensor is read.  ``fh``:
    the file, already open (``source`` then only names it in messages)."""
    file = Path(source)
    where = str(file)
    try:
        with _opened(file, fh) as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(8)
            if len(head) < 8:
                raise CheckpointError.of("checkpoint.too_short", where=where, fix="checkpoint.resave")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES or n > size - 8:
                raise CheckpointError.of("checkpoint.header_length", where=where, fix="checkpoint.resave", n=n,
                                         mib=MAX_HEADER_BYTES // 2**20)
            raw = fh.read(n)
    except OSError as exc:
        raise CheckpointError(f"cannot read the file: {exc.strerror or exc}", where=where,
                              fix="check the path and its permissions") from exc
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointError.of("checkpoint.header_json", where=where, fix="checkpoint.resave",
                                 detail=clip(exc, 80)) from exc
    if not isinstance(header, dict):
        raise CheckpointError.of("checkpoint.header_object", where=where, fix="checkpoint.resave")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in meta.items()):
        raise CheckpointError.of("checkpoint.metadata_strings", where=where, fix="checkpoint.resave")
    data_len = size - 8 - n
    entries = {}
    for name, e in header.items():
        at = f"{where}: tensor {short(name)}"
        if not isinstance(e, dict) or set(e) - {"dtype", "shape", "data_offsets"}:
            raise CheckpointError.of("checkpoint.entry_fields", where=at, fix="checkpoint.resave")
        dtype, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
        if dtype not in ITEMSIZE:
            raise CheckpointError.of("checkpoint.unknown_dtype", where=at, options=ITEMSIZE, fix="checkpoint.resave",
                                     dtype=short(dtype))
        if not isinstance(shape, list) or len(shape) > 16 or not all(
                isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**48 for d in shape):
            raise CheckpointError.of("checkpoint.bad_shape", where=at, fix="checkpoint.resave", shape=short(shape))
        if not (isinstance(offs, list) and len(offs) == 2 and all(
                isinstance(o, int) and not isinstance(o, bool) for o in offs)
                and 0 <= offs[0] <= offs[1] <= data_len):
            raise CheckpointError.of("checkpoint.offsets", where=at, offsets=short(offs), size=data_len)
        if offs[1] - offs[0] != math.prod(shape) * ITEMSIZE[dtype]:
            raise CheckpointError.of("checkpoint.size_mismatch", where=at, fix="checkpoint.resave",
                                     n=offs[1] - offs[0], shape=tuple(shape), dtype=dtype)
        entries[name] = (dtype, tuple(shape), (offs[0], offs[1]))
    return entries, meta, 8 + n


def _json_entry(meta: dict[str, str], key: str, where: str, default: Any, kind: type = dict) -> Any:
    """One JSON metadata entry, parsed and type-checked on its own."""
    if key not in meta:
        return default
    try:
        value = json.loads(meta[key])
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"metadata entry {key} is not valid JSON: {clip(exc, 80)}",
                              where=f"{where}: {key}", fix="re-save the checkpoint") from exc
    if not isinstance(value, kind) or (kind is dict and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items())):
        raise CheckpointError(f"metadata entry {key} must be a JSON object of strings, got "
                              f"{short(value)}", where=f"{where}: {key}",
                              fix="re-save the checkpoint")
    return value


def checked_metadata(meta: dict[str, str], where: str) -> dict[str, Any]:
    """The metadata entries zoo reads, each validated: ``tied``, ``plugins``, ``plugin_sources``
    (objects of strings), ``tokenizer`` (an object with a ``kind``), ``digest`` (``sha256:HEX``)."""
    out = {"tied": _json_entry(meta, "zoo.tied", where, {}),
           "plugins": _json_entry(meta, "zoo.plugins", where, {}),
           "plugin_sources": _json_entry(meta, "zoo.plugin_sources", where, {}),
           "tokenizer": None, "digest": meta.get(DIGEST_KEY)}
    if tokenizers.META_KEY in meta:
        tok = _json_entry(meta, tokenizers.META_KEY, where, None, kind=object)
        if not isinstance(tok, dict) or not isinstance(tok.get("kind"), str) \
                or not isinstance(tok.get("data", {}), dict):
            raise CheckpointError("the stored tokenizer must be an object with a 'kind' and a "
                                  "'data' object", where=f"{where}: {tokenizers.META_KEY}",
                                  fix="re-save with zoo.save(model, path, tokenizer=tok)")
        out["tokenizer"] = tok
    if out["digest"] is not None and not re.fullmatch(r"sha256:[0-9a-f]{64}", out["digest"]):
        raise CheckpointError(f"malformed digest {short(out['digest'])}",
                              where=f"{where}: {DIGEST_KEY}", fix="re-save the checkpoint")
    return out


def tokenizer_from(tok: dict, where: str):
    """Rebuild the stored tokenizer; a failure inside its plugin becomes an error naming it."""
    try:
        return tokenizers.from_json(tok)
    except ZooError:
        raise
    except Exception as exc:  # the plugin's from_json met data it did not expect
        raise CheckpointError(f"the stored '{clip(tok['kind'], 40)}' tokenizer cannot be rebuilt: "
                              f"{type(exc).__name__}: {clip(exc, 120)}",
                              where=f"{where}: {tokenizers.META_KEY}",
                              fix="re-save the checkpoint with a valid tokenizer") from exc


def save(model: torch.nn.Module, path: str | os.PathLike, *, metadata: dict[str, Any] | None = None,
         tokenizer: Any = None, wait: bool | float = False) -> Path:
    """Save ``model`` (built by zoo) to ``path`` atomically; returns the weights file's path.

    ``tokenizer`` (default: ``model.tokenizer`` if set) is stored as JSON in the metadata under
    ``zoo.tokenizer``; :func:`zoo.load` gives it back as ``model.tokenizer``.

    A folder is written as one transaction (:mod:`zoo.guard.transaction`): under its lock, with
    ``model.safetensors`` and ``spec.yaml`` committed together by ``zoo-manifest.json``.  Another
    writer holding the folder is a :class:`CheckpointError` naming its pid; ``wait=True`` (or a
    number of seconds) waits for it instead.  A ``.safetensors`` path is one file, committed by one
    rename."""
    spec = getattr(model, "spec", None)
    if not isinstance(spec, ModelSpec):
        raise CheckpointError("the model has no zoo spec", where="model",
                              fix="save models built by zoo.build / zoo.load")
    if getattr(model, "quantized", None):  # zoo.run.precision: packed int8 / int4 weights, not loadable
        raise CheckpointError(f"the model holds {model.quantized} weights (zoo.run.precision), which a "
                              "zoo checkpoint cannot hold", where="save.model",
                              fix="save the float model and quantize after loading")
    path = user_path(path, where="save.path", error=CheckpointError)
    folder = path.suffix != ".safetensors"
    write_target(path, where="save.path", folder=folder, error=CheckpointError)  # before any work
    if folder:
        write_target(path / WEIGHTS, where="save.path", error=CheckpointError)
        for name in (WEIGHTS, SPEC_FILE):  # inside the folder, no symlink on the way (the one writer)
            txn.target(path, name, where="save.path", error=CheckpointError)
    txn.deadline(wait, "save.wait", CheckpointError)
    if metadata is not None and not isinstance(metadata, dict):
        raise CheckpointError(f"metadata must be a dict, got {type(metadata).__name__}",
                              where="save.metadata", fix="pass a dict of JSON-able values")
    file = path / WEIGHTS if folder else path
    tensors, tied = dedupe(model.state_dict())
    meta = {"format": "pt", "zoo.version": __version__, "zoo.spec": spec.to_yaml(),
            "zoo.plugins": json.dumps(plugins_used(spec)), "zoo.tied": json.dumps(tied)}
    meta["zoo.plugin_sources"] = json.dumps(plugin_sources(json.loads(meta["zoo.plugins"])))
    tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    if tokenizer is not None:
        tokenizers.check_fits(tokenizer, spec.vocab_size)
        meta[tokenizers.META_KEY] = tokenizers.to_json(tokenizer)
    for k, v in {**conversion_metadata(model), **(metadata or {})}.items():
        try:
            meta[f"zoo.extra.{k}"] = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise CheckpointError(f"metadata entry {short(k)} is not JSON-able: {clip(exc, 80)}",
                                  where="save.metadata", fix="pass strings, numbers, lists and dicts") from exc
    if sum(len(k) + len(v) for k, v in meta.items()) > MAX_HEADER_BYTES // 2:
        raise CheckpointError(f"the metadata is larger than {MAX_HEADER_BYTES // 2**21} MiB",
                              where="save.metadata", fix="store large data beside the checkpoint")
    tensors = {k: v.cpu() for k, v in tensors.items()}
    meta[DIGEST_KEY] = tensor_digest(tensors)
    meta[INTEGRITY_KEY] = integrity_entry(model, meta, tokenizers.kind_of(tokenizer)
                                          if tokenizer is not None else None)
    if not folder:  # one file: its own unit, committed by one rename
        atomic_write(file, lambda tmp: save_file(tensors, tmp, metadata=meta))
        return file
    # a folder: the weights and spec.yaml are one commit under the folder's lock
    with txn.transaction(path, where="save.path", wait=wait, error=CheckpointError) as tx:
        tx.write_file(WEIGHTS, lambda tmp: save_file(tensors, tmp, metadata=meta))
        tx.write_file(SPEC_FILE, lambda tmp: Path(tmp).write_text(spec.to_yaml(), encoding="utf-8"))
    return file


#: ``zoo.extra.*`` entries a loaded checkpoint hands on when it is saved again: where it was
#: converted from, its parity certificate, the input contract it declares (zoo.run.input_contract), its
#: chat template (zoo.run.chat) and its source's generation settings (zoo.io.generation_config).
CARRIED_EXTRAS = ("converted_from", "parity", "input_contract", "chat_template", "generation_config")


def conversion_metadata(model: torch.nn.Module) -> dict[str, str]:
    """What :func:`save` carries over about a model: ``converted_from`` and ``parity`` (JSON) from
    ``model.convert_info`` (:mod:`zoo.convert`), and for a model loaded from a checkpoint the
    :data:`CARRIED_EXTRAS` its metadata holds (so load -> save keeps the input contract)."""
    meta = getattr(model, "checkpoint_metadata", None) or {}
    out = {k: meta[f"zoo.extra.{k}"] for k in CARRIED_EXTRAS if f"zoo.extra.{k}" in meta}
    if getattr(model, "chat_template", None) is not None:  # zoo.run.chat: the instruct model's template
        from .chat_templates import stored

        out["chat_template"] = stored(model)
    if hasattr(model, "generation_config"):  # the model's own settings, set or cleared, win
        from .generation_config import stored as stored_settings

        out.pop("generation_config", None)
        if (settings := stored_settings(model)) is not None:
            out["generation_config"] = settings
    info = getattr(model, "convert_info", None)
    if info is not None:
        out.pop("parity", None)
        out["converted_from"] = json.dumps({k: v for k, v in info.items() if k != "parity"})
        if isinstance(info.get("parity"), dict):
            out["parity"] = json.dumps(info["parity"])
    return out


def resolve_checkpoint(source: str | os.PathLike) -> Path:
    """A weights file from a file path, a checkpoint folder, or a shipped checkpoint's name."""
    p = user_path(source, where="checkpoint", error=CheckpointError)
    if p.is_dir():  # the weights file must be a regular file inside the folder (no symlink out)
        if not ((p / WEIGHTS).exists() or (p / WEIGHTS).is_symlink()):
            _no_checkpoint(source)
        return regular_file(p / WEIGHTS, root=p, kind="checkpoint", where=str(p / WEIGHTS),
                            error=CheckpointError)
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
    if p.exists():  # a FIFO, a device: not a checkpoint, and never opened
        return regular_file(p, kind="checkpoint", error=CheckpointError)
    _no_checkpoint(source)


def _no_checkpoint(source) -> Path:
    raise CheckpointError(f"no checkpoint at {short(str(source))}", where=clip(str(source), 200),
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
    """The safetensors header metadata of a checkpoint (cheap: the tensors are not read; a
    committed folder's last commit, :func:`open_weights`)."""
    with open_weights(source) as (fh, file):
        try:
            return read_header(file, fh=fh)[1]
        except CheckpointError as exc:
            raise CheckpointError(f"corrupt or truncated checkpoint: {exc.what}", where=exc.where, fix=exc.fix,
                                  message_id="checkpoint.corrupt", fix_ids=exc.fix_ids,
                                  params={**exc.params, **messages.cause(exc)}) from exc


def load_spec(source: str | os.PathLike) -> ModelSpec:
    """The spec stored inside a checkpoint."""
    return spec_from_metadata(read_metadata(source), source)


def spec_from_metadata(meta: dict[str, str], source: str | os.PathLike) -> ModelSpec:
    """The spec in a checkpoint's metadata (``source`` names it in messages)."""
    if "zoo.spec" not in meta:
        raise CheckpointError("no zoo spec in the checkpoint metadata", where=str(source),
                              fix="this file was not written by zoo.save; convert it first")
    try:
        return parse_spec(yaml_to_dict(meta["zoo.spec"], f"{source}: zoo.spec"))
    except UnknownComponentError as exc:
        entries = checked_metadata(meta, str(source))
        what, fix = missing_plugins_hint(entries["plugins"], entries["plugin_sources"])
        raise CheckpointError(f"the checkpoint needs a component that is not installed ({exc.what}); "
                              f"{what}", where=str(source), fix=fix) from exc
    except SpecError as exc:
        raise CheckpointError(f"the stored spec is invalid: {exc}", where=str(source)) from exc


def check_dtypes(entries: dict, dt: torch.dtype | None, where: str) -> None:
    """Floating point only; one dtype, or several with an explicit cast (``dtype=``)."""
    for name, (dtype, _, _) in sorted(entries.items()):
        if dtype not in FLOATS:
            raise CheckpointError(f"tensor '{clip(name, 80)}' is {dtype}; zoo checkpoints hold "
                                  f"floating-point tensors only", where=where,
                                  options=sorted(FLOATS),
                                  fix="dequantise / convert the weights to float before saving")
    kinds = sorted({d for d, _, _ in entries.values()})
    if len(kinds) > 1 and dt is None:
        raise CheckpointError(f"the tensors mix dtypes {', '.join(kinds)}", where=where,
                              fix="pass dtype= (e.g. zoo.load(path, dtype='float32')) to cast all "
                                  "of them explicitly")


def check_embedding(spec: ModelSpec, entries: dict, where: str) -> None:
    """The one tensor that grows with ``vocab_size``, held against the spec from the header alone."""
    want = (spec.vocab_size, spec.d_model)
    got = entries.get("tok_emb.weight")
    if got is not None and got[1] != want:
        raise CheckpointError(f"the spec says vocab_size x d_model = {want}, the stored token table "
                              f"is {got[1]}", where=f"{where}: tok_emb.weight",
                              fix="the spec and the weights disagree; re-save the checkpoint")


#: what builds a model from a checkpoint moved up to :mod:`zoo.io.loading`
__getattr__ = moved(__name__)  # the old names it had: zoo.deprecation.NAMES
