"""The machinery every family mapping shares: typed config reading, tensor bookkeeping, assembly,
the reverse direction and the parity certificate.

A family module (``zoo/convert/llama.py``, ...) only says *what* maps to what, through a
:class:`Source`; this module does the reading, checking and building.
"""
from __future__ import annotations

import datetime
import importlib.metadata as md
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from safetensors import SafetensorError

from ..model.assembly import fill
from ..model.build import build, resolve_dtype
from ..deprecation import moved
from ..errors import CheckpointError, ZooError
from ..run.arguments import entry
from ..io.checkpoint import conversion_metadata  # noqa: F401 - re-exported: zoo.convert.conversion_metadata
from ..io.checkpoint import read_header
from ..io import generation_config as gen_config
from ..model.spec import parse_spec
from ..io.tokenizers import tokenizer as make_tokenizer
from ..guard.files import confine, open_read, read_bytes, read_text, safetensors_open, short, user_path
from ..version import __version__

#: transformers activation name -> zoo's, and back (INV_ACTS)
ACTS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
         "relu": "relu", "silu": "silu", "swish": "silu"}
INV_ACTS = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}
_REQUIRED = object()
MAX_CONFIG_BYTES = 1024 * 1024  # a real config.json is a few KB
_ST_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
              "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


class ConvertError(ZooError):
    """A source checkpoint cannot be converted exactly (an unsupported config value or tensor)."""


# ---------------------------------------------------------------------- a converter
@dataclass(frozen=True)
class Converter:
    """The converter of one transformers family (one ``config.model_type``): how to read it
    (``read(src, attention) -> (spec dict, tensors)``)
    and how to write a zoo spec back as a transformers config (``write(spec) -> config kwargs``).

    ``refuses`` lists the config fields whose unsupported values are refused (for the docs and the
    tests); ``model_class`` names the transformers class :func:`to_transformers` builds."""

    model_type: str
    read: Callable
    write: Callable
    config_class: str
    model_class: Callable | str
    refuses: tuple[str, ...] = ()

    def hf_model_class(self, spec) -> str:
        return self.model_class(spec) if callable(self.model_class) else self.model_class


#: model_type -> its converter (each module of zoo.convert registers one)
CONVERTERS: dict[str, Converter] = {}


def register(family: Converter) -> Converter:
    CONVERTERS[family.model_type] = family
    return family


# ---------------------------------------------------------------------- reading a source
class Source:
    """A Hugging Face checkpoint as plain data: its config dict and its tensors by name.

    Config values are read through typed accessors (:meth:`int`, :meth:`float`, :meth:`flag`,
    :meth:`text`) that check type and range and name the field in a :class:`ConvertError`.
    ``take(name)`` hands a tensor out once and remembers it, so whatever is left over at the end is
    either dropped on purpose or reported."""

    def __init__(self, config: Mapping[str, Any], state: Mapping[str, torch.Tensor], family: str):
        # a ShardedState stays lazy (each tensor is read from disk when taken); others are copied
        self.config, self.family = dict(config), family
        self.state = state if isinstance(state, ShardedState) else dict(state)
        self.used: set[str] = set()
        self.dropped: list[str] = []

    # -------------------------------------------------------------- typed config reading
    def _value(self, key: str, default: Any) -> Any:
        v = self.config.get(key)
        if v is None:
            if default is _REQUIRED:
                raise ConvertError(f"{self.family} config.json has no '{key}'", where=f"config.{key}",
                                   fix="pass the config.json written by save_pretrained with these weights")
            return default
        return v

    def _bad(self, key: str, v: Any, expected: str) -> ConvertError:
        return ConvertError(f"expected {expected}, got {short(v)}", where=f"config.{key}",
                            fix="repair config.json (it does not look like one transformers wrote)")

    def int(self, key: str, default: Any = _REQUIRED, *, lo: int = 1, hi: int = 2 ** 31) -> Any:
        """An integer in ``[lo, hi]`` (``default`` when absent or null)."""
        v = self._value(key, default)
        if v is default and default is not _REQUIRED:
            return v
        if isinstance(v, bool) or not isinstance(v, int):
            raise self._bad(key, v, "an integer")
        if not lo <= v <= hi:
            raise self._bad(key, v, f"an integer in [{lo}, {hi}]")
        return v

    def float(self, key: str, default: Any = _REQUIRED, *, lo: float = -math.inf, hi: float = math.inf,
              positive: bool = False) -> Any:
        """A finite number in ``[lo, hi]`` (``> 0`` when ``positive``)."""
        v = self._value(key, default)
        if v is default and default is not _REQUIRED:
            return v
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self._bad(key, v, "a finite number")
        if not lo <= v <= hi or (positive and v <= 0):
            raise self._bad(key, v, f"a number in {'(0' if positive else f'[{lo}'}, {hi}]")
        return float(v)

    def flag(self, key: str, default: bool) -> bool:
        v = self._value(key, default)
        if not isinstance(v, bool):
            raise self._bad(key, v, "true or false")
        return v

    def text(self, key: str, default: Any = _REQUIRED) -> Any:
        v = self._value(key, default)
        if v is not default and not isinstance(v, str):
            raise self._bad(key, v, "a string")
        return v

    def mapping(self, key: str) -> dict:
        v = self.config.get(key)
        if v is None:
            return {}
        if not isinstance(v, Mapping):
            raise self._bad(key, v, "a mapping")
        return dict(v)

    def get(self, key: str, default: Any = None) -> Any:
        """An untyped value (prefer the typed accessors)."""
        v = self.config.get(key, default)
        return default if v is None else v

    def refuse(self, key: str, value: Any, why: str, fix: str, options=None) -> None:
        raise ConvertError(f"{self.family} config {key}={short(value)} is not supported: {why}",
                           where=f"config.{key}", options=options, fix=fix)

    def act(self, key: str, allowed=tuple(ACTS), default: Any = _REQUIRED) -> str:
        v = self._value(key, default)
        if v not in allowed:
            self.refuse(key, v, "zoo has no exact equivalent of this activation", options=allowed,
                        fix="convert a model using one of the listed activations")
        return ACTS[v]

    def expect(self, key: str, ok: Callable[[Any], bool], why: str, fix: str) -> None:
        """Refuse ``key`` when it is set to a value for which ``ok`` is false."""
        v = self.config.get(key)
        if v is not None and not ok(v):
            self.refuse(key, v, why, fix)

    # -------------------------------------------------------------- tensors
    def has(self, name: str) -> bool:
        return name in self.state

    def take(self, name: str) -> torch.Tensor:
        if name not in self.state:
            raise ConvertError(f"the {self.family} checkpoint has no tensor '{name}'", where="weights",
                               fix="check that the weights belong to this config.json")
        t = self.state[name]
        if isinstance(t, torch.Tensor) and not t.is_floating_point():
            raise ConvertError(f"tensor '{name}' is {str(t.dtype).replace('torch.', '')}; zoo converts "
                               f"floating-point weights only", where=f"weights.{name}",
                               fix="convert the unquantised (float16 / bfloat16 / float32) checkpoint")
        self.used.add(name)
        return t

    def take_t(self, name: str) -> torch.Tensor:
        """A transposed tensor (GPT-2's ``Conv1D`` stores ``(in, out)``)."""
        return self.take(name).t()

    def cat(self, *names: str) -> torch.Tensor:
        """Row-stacked tensors: separate q, k, v -> zoo's fused ``qkv``."""
        return torch.cat([self.take(n) for n in names], dim=0)

    def split(self, name: str, sizes: list[int]) -> list[torch.Tensor]:
        """The row blocks of one fused tensor: Phi-3's ``gate_up_proj`` -> zoo's ``gate``, ``up``."""
        t = self.take(name)
        if t.shape[0] != sum(sizes):
            raise ConvertError(f"tensor '{name}' has {t.shape[0]} rows, the config implies {sum(sizes)}",
                               where="weights", fix="check that config.json belongs to these weights")
        return list(t.split(sizes, dim=0))

    def permute(self, name: str, fwd: Callable, inv: Callable) -> torch.Tensor:
        """A tensor whose rows are re-ordered by ``fwd`` (``inv`` undoes it, for the reverse)."""
        return fwd(self.take(name))

    def pieces(self, name: str, fwd: Callable, inv: Callable) -> list[torch.Tensor]:
        """Several zoo tensors made from one: ``fwd(t) -> [t1, t2, ...]``, ``inv([t1, t2, ...]) -> t``
        for the reverse (a mixture of experts' fused ``(E, 2F, D)`` gate_up -> zoo's ``(E, D, F)``
        gate and up)."""
        return list(fwd(self.take(name)))

    def drop(self, prefix: str) -> None:
        """Tensors under ``prefix`` that do not affect the outputs (BERT's pooler): listed, unused."""
        for n in self.state:
            if n.startswith(prefix) and n not in self.used:
                self.used.add(n)
                self.dropped.append(n)

    def ignore(self, name: str) -> None:
        """A tensor that carries nothing of its own (a tied alias, a constant buffer)."""
        if name in self.state:
            self.used.add(name)

    def zero(self, name: str, why: str) -> None:
        """A tensor zoo has no place for, accepted only when it is all zeros (no effect)."""
        if name not in self.state:
            return
        t = self.state[name]
        if not t.is_meta and bool(t.count_nonzero()):
            raise ConvertError(f"tensor '{name}' is not zero: {why}", where=f"weights.{name}",
                               fix="zoo cannot reproduce this checkpoint exactly")
        self.used.add(name)

    def prefix(self, *candidates: str) -> str:
        """The name prefix of the base model inside a head model (``transformer.``, ``bert.``...)."""
        for p in candidates:
            if any(k.startswith(p) for k in self.state):
                return p
        return ""

    def tied(self, head: str, embedding: torch.Tensor) -> bool:
        """Whether the output projection ``head`` is (absent or) equal to the embedding matrix."""
        if head not in self.state:
            return True
        w = self.state[head]
        if w.is_meta or embedding.is_meta:  # a model without values (device="meta"): trust the config
            same = self.config.get("tie_word_embeddings", True) is not False
        else:
            same = w is embedding or (w.shape == embedding.shape and bool(torch.equal(w, embedding)))
        if same:
            self.ignore(head)
        return same


def convert_state(config: Mapping[str, Any], state: Mapping[str, torch.Tensor], *,
                  attention: str = "sdpa") -> tuple[dict, dict, list[str]]:
    """``(spec dict, zoo state dict, dropped tensor names)`` from a Hugging Face config dict and its
    tensors.  Raises :class:`ConvertError` for an unsupported family, config value or tensor."""
    if not isinstance(config, Mapping):
        raise ConvertError(f"config.json must be a JSON object, got {type(config).__name__}",
                           where="config.json", fix="pass the config.json written by save_pretrained")
    family = config.get("model_type")
    if not isinstance(family, str) or family not in CONVERTERS:
        raise ConvertError(f"model_type {short(family)} cannot be converted", where="config.model_type",
                           options=list(CONVERTERS), fix="convert one of the supported families")
    src = Source(config, state, family)
    spec, st = CONVERTERS[family].read(src, attention)
    left = sorted(set(src.state) - src.used)
    if left:
        raise ConvertError(f"tensors zoo does not know how to map: {left[:8]}{' ...' if len(left) > 8 else ''}",
                           where="weights", fix=f"this {family} variant has parts zoo lacks; "
                                                "it cannot be converted exactly")
    return spec, st, src.dropped


# ---------------------------------------------------------------------- building the zoo model
def check_shapes(spec_dict: dict, state: Mapping[str, torch.Tensor]):
    """Build the model on the meta device (no memory) and compare every tensor's name and shape
    with ``state``; returns ``(meta model, names to load)``."""
    with torch.device("meta"):  # shapes only: nothing is allocated, whatever the model's size
        model = build(parse_spec(spec_dict), device="meta", init=False)
    model.tie_weights()
    expected = model.state_dict(keep_vars=True)
    seen, need = set(), set()
    for name, t in expected.items():  # a tied tensor is the same object under two names: keep one
        if id(t) not in seen:
            seen.add(id(t))
            need.add(name)
    missing, extra = sorted(need - set(state)), sorted(set(state) - need)
    if missing or extra:
        raise ConvertError(f"converted tensors do not match the spec: missing {missing[:6]}, "
                           f"unexpected {extra[:6]}", where="weights",
                           fix="report this: the converter and the engine disagree")
    for name in sorted(need):
        if tuple(state[name].shape) != tuple(expected[name].shape):
            raise ConvertError(f"tensor '{name}' has shape {tuple(state[name].shape)}, the spec needs "
                               f"{tuple(expected[name].shape)}", where="weights",
                               fix="check that config.json belongs to these weights")
    return model, need


def assemble(spec_dict: dict, state: dict, dtype=None, *, owned: bool = False) -> torch.nn.Module:
    """Check shapes on the meta device, then fill the model with ``state`` (no random init).

    By default every tensor is copied, so the model never shares memory with ``state`` (a
    transformers model's own weights).  ``owned=True`` says the tensors belong to nobody else
    (freshly read from a file): ``state`` is emptied as the model takes them, and a tensor that is
    contiguous and alone in its storage *becomes* the weight, uncopied; only views (a transpose, a
    row block of a fused tensor) and dtype changes are copied, one tensor at a time.  So the peak
    is the converted tensors plus one tensor, not twice the model."""
    model, need = check_shapes(spec_dict, state)
    dt = dtype or state["tok_emb.weight"].dtype
    device = state["tok_emb.weight"].device
    if not owned:
        # contiguous copies: a transposed view (GPT-2's Conv1D weights) would make every matmul slower
        fill(model, {k: state[k].detach().to(dt).clone(memory_format=torch.contiguous_format)
                     for k in need}, device)
        return model.to(device=device, dtype=dt).eval()  # buffers follow the weights
    weights, taken = {}, set()
    for k in sorted(need):
        t = state.pop(k).detach().to(dt)  # a dtype change is a new tensor; the old one goes now
        store = t.untyped_storage()
        if not (t.is_contiguous() and t.storage_offset() == 0 and store.data_ptr() not in taken
                and store.nbytes() == t.numel() * t.element_size()):
            t = t.clone(memory_format=torch.contiguous_format)  # a view: its own storage
        taken.add(t.untyped_storage().data_ptr())
        weights[k] = t
    state.clear()  # what the spec does not need (a tied alias) is not kept alive either
    fill(model, weights, device)
    del weights
    return model.to(device=device, dtype=dt).eval()


def from_transformers(hf_model: Any, *, attention: str = "sdpa", dtype: Any = None,
                      certify: bool = True) -> torch.nn.Module:
    """An equivalent zoo model (spec + weights) of a ``transformers`` model object.

    ``attention`` picks the zoo kernel (``sdpa``, ``eager``, ...); ``dtype`` converts the weights
    (default: keep the source's).  With ``certify`` (default) both models run a fixed probe batch and
    ``model.convert_info["parity"]`` records how closely they agree (see :func:`certify`); ``zoo.save``
    stores it in the checkpoint.  The model comes back in eval mode with ``model.convert_info``.
    """
    config = getattr(hf_model, "config", None)
    if config is None or not hasattr(hf_model, "state_dict") or not hasattr(config, "to_dict"):
        raise ConvertError(f"expected a transformers model, got {type(hf_model).__name__}",
                           where="hf_model", fix="pass e.g. a GPT2LMHeadModel, or use from_pretrained(dir)")
    cfg = config.to_dict()
    spec, st, dropped = convert_state(cfg, hf_model.state_dict(), attention=attention)
    model = assemble(spec, st, resolve_dtype(dtype))
    model.convert_info = {"source": type(hf_model).__name__, "model_type": cfg["model_type"],
                          "dropped": dropped}
    gc = getattr(hf_model, "generation_config", None)  # None for a model that cannot generate
    if gc is not None and hasattr(gc, "to_diff_dict"):
        keep_generation_config(model, gc.to_diff_dict(), derived=bool(getattr(gc, "_from_model_config", False)))
    if certify:
        model.convert_info["parity"] = certify_parity(hf_model, model)
    return model


# ---------------------------------------------------------------------- folders
def read_config(d: Path) -> dict:
    """``config.json`` of a folder, size-limited, as a dict (a ConvertError otherwise)."""
    if not (d / "config.json").is_file():
        raise ConvertError(f"no config.json in '{d.name}'", where=str(d),
                           fix="pass a folder written by save_pretrained")
    text = read_text(d / "config.json", where="config.json", max_bytes=MAX_CONFIG_BYTES, error=ConvertError,
                     root=d)
    try:
        config = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than Python's stack
        raise ConvertError(f"config.json is not valid JSON: {exc}", where="config.json",
                           fix="pass the config.json written by save_pretrained") from exc
    if not isinstance(config, dict):
        raise ConvertError(f"config.json must be a JSON object, got {type(config).__name__}",
                           where="config.json", fix="pass the config.json written by save_pretrained")
    return config


def folder_generation_config(d: Path, config: dict) -> tuple[dict, bool]:
    """``(settings, derived)`` of a folder: its ``generation_config.json`` (size-limited, confined to
    the folder) when there is one, else -- as transformers derives it -- the generation fields of
    ``config.json`` (``derived``)."""
    f = d / "generation_config.json"
    if not (f.exists() or f.is_symlink()):
        return {k: config[k] for k in gen_config.FIELDS if k in config}, True
    text = read_text(f, where="generation_config.json", max_bytes=MAX_CONFIG_BYTES, error=ConvertError,
                     root=d)
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConvertError(f"generation_config.json is not valid JSON: {exc}", where="generation_config.json",
                           fix="pass the generation_config.json written by save_pretrained, or remove it") from exc
    if not isinstance(raw, dict):
        raise ConvertError(f"generation_config.json must be a JSON object, got {type(raw).__name__}",
                           where="generation_config.json", fix="repair or remove generation_config.json")
    return raw, raw.get("_from_model_config") is True


def keep_generation_config(model: torch.nn.Module, raw: Mapping[str, Any], derived: bool) -> None:
    """The source's generation settings on ``model`` (``model.generation_config``, the fields of
    :data:`zoo.io.generation_config.FIELDS` it sets), read typed -- a value of the wrong type, an
    id outside the vocabulary or a setting generation refuses is a :class:`ConvertError` naming
    ``generation_config.<field>`` -- and the token-changing fields zoo does not apply listed in
    ``convert_info["generation_config_not_applied"]``.  An encoder-only model generates nothing:
    nothing is kept."""
    if model.spec.arch == "encoder":
        return
    kept, skipped = gen_config.read(raw, model.spec.vocab_size, error=ConvertError, derived=derived)
    from ..run.options import GenerationOptions, model_defaults  # the options the settings become

    model.generation_config = kept
    try:
        GenerationOptions.from_kwargs(**model_defaults(model))
    except ZooError as exc:  # in range as a value, refused as an option (a penalty of 20)
        option = exc.where.partition(".")[2].partition("[")[0]
        field = GenerationOptions.__dataclass_fields__[option].metadata["option"].hf
        raise ConvertError(f"{exc.what}", where=f"generation_config.{field}",
                           fix="repair generation_config.json, or drop the field") from exc
    if not kept:
        del model.generation_config
    if skipped:
        model.convert_info["generation_config_not_applied"] = skipped


def weight_files(d: Path) -> list[Path]:
    """The safetensors files of a folder: ``model.safetensors`` or the shards its index names
    (each confined to the folder)."""
    index = d / "model.safetensors.index.json"
    if (d / "model.safetensors").is_file():
        return [d / "model.safetensors"]
    if index.is_file():
        where = "model.safetensors.index.json"
        try:
            data = json.loads(read_text(index, where=where, max_bytes=64 * MAX_CONFIG_BYTES, error=ConvertError,
                                        root=d))
            names = data["weight_map"].values()
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise ConvertError(f"not a shard index ({short(exc)})", where=where,
                               fix="pass the index written by save_pretrained") from exc
        return sorted({confine(d, n, where=f"{where}.weight_map", error=ConvertError) for n in names})
    pickled = [p.name for p in d.glob("*.bin")]
    raise ConvertError(f"no safetensors weights in '{d.name}'" + (f" (found {pickled})" if pickled else ""),
                       where=str(d), fix="zoo never loads pickle: re-save the model with "
                                         "save_pretrained(..., safe_serialization=True)")


def read_hf_dir(path: str | os.PathLike, *, meta: bool = False) -> tuple[dict, dict[str, torch.Tensor]]:
    """``(config dict, tensors)`` of a ``save_pretrained`` folder (safetensors, single or sharded).
    With ``meta`` the tensors are shape-only (read from the headers; nothing is loaded)."""
    d = user_path(path, where="convert.path", error=ConvertError)
    if not d.is_dir():
        what = "is a file, not a folder" if d.exists() else "does not exist"
        raise ConvertError(f"{short(str(d))} {what}", where="convert.path",
                           fix="pass the folder written by save_pretrained (config.json + *.safetensors)")
    config = read_config(d)
    state: dict[str, torch.Tensor] = {}
    for f in weight_files(d):
        try:
            with safetensors_open(f, root=d, where=f.name, error=ConvertError) as fh:
                for name in fh.keys():
                    if meta:
                        sl = fh.get_slice(name)
                        dt = getattr(torch, _ST_DTYPES.get(sl.get_dtype(), "uint8"))  # others: not float
                        state[name] = torch.empty(sl.get_shape(), dtype=dt, device="meta")
                    else:
                        state[name] = fh.get_tensor(name)
        except (SafetensorError, OSError) as exc:
            raise ConvertError(f"unreadable safetensors file: {short(str(exc))}", where=f.name,
                               fix="re-save the model with save_pretrained") from exc
    return config, state


def all_finite(t: torch.Tensor, chunk: int = 1 << 20) -> bool:
    """Whether ``t`` holds no NaN or infinity, checked ``chunk`` elements at a time
    (``torch.isfinite`` of a whole tensor makes a temporary as large as the tensor itself)."""
    flat = t.reshape(-1)
    return all(bool(torch.isfinite(flat[i:i + chunk]).all()) for i in range(0, flat.numel(), chunk))


#: safetensors dtype -> torch dtype, for reading a tensor's bytes straight into a tensor
_TORCH_DTYPES = {k: getattr(torch, v) for k, v in _ST_DTYPES.items()}
_TORCH_DTYPES.update({k: getattr(torch, v) for k, v in (("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2"),
                                                         ("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64"))
                      if hasattr(torch, v)})


class ShardedState(Mapping):
    """The tensors of a ``save_pretrained`` folder by name, each read from its shard only when
    asked for, into memory of its own, and not kept: converting a folder tensor by tensor holds the
    converted model plus the tensors of one step (a layer's q, k, v while they are joined), never
    the whole source as well.

    A tensor's bytes are read (``readinto``) straight into a new tensor at the offsets of the
    shard's header (checked by ``safetensors`` and by :func:`zoo.io.checkpoint.read_header`), so no page of the
    file stays mapped into the process; a dtype torch cannot hold that way (or a header zoo's reader
    refuses) goes through ``safetensors``' memory map and is copied out.  Each floating-point tensor
    read is checked for NaN / infinity on the way (``nonfinite``); :meth:`scan_rest` checks the
    ones conversion never read (a dropped pooler)."""

    def __init__(self, root: Path, where: dict[str, Path], spans: dict[str, tuple] | None = None):
        self.root, self.where, self.spans = root, where, spans or {}
        self.nonfinite: set[str] = set()
        self.checked: set[str] = set()

    def _read(self, name: str, f: Path) -> torch.Tensor:
        span = self.spans.get(name)
        if span is None:  # through safetensors' map of the file, then into our own memory
            with safetensors_open(f, root=self.root, where=f.name, error=ConvertError) as fh:
                mapped = fh.get_tensor(name)
                return mapped.clone(memory_format=torch.contiguous_format)
        dtype, shape, start, length = span
        t = torch.empty(shape, dtype=dtype)
        if length:
            buf = memoryview(t.reshape(-1).view(torch.uint8).numpy())
            with open_read(f, root=self.root, where=f.name, kind="checkpoint", error=ConvertError) as fh:
                fh.seek(start)
                got = 0
                while got < length:
                    n = fh.readinto(buf[got:])
                    if not n:
                        raise ConvertError(f"the file ends inside tensor {short(name)}", where=f.name,
                                           fix="the file is truncated; re-save it with save_pretrained")
                    got += n
        return t

    def __getitem__(self, name: str) -> torch.Tensor:
        f = self.where[name]
        try:
            t = self._read(name, f)
        except (SafetensorError, OSError) as exc:
            raise ConvertError(f"unreadable safetensors file: {short(str(exc))}", where=f.name,
                               fix="re-save the model with save_pretrained") from exc
        if name not in self.checked:
            self.checked.add(name)
            if t.is_floating_point() and not all_finite(t):
                self.nonfinite.add(name)
        return t

    def __iter__(self):
        return iter(self.where)

    def __len__(self) -> int:
        return len(self.where)

    def __contains__(self, name: object) -> bool:
        return name in self.where

    def scan_rest(self) -> list[str]:
        """Read (one at a time) the tensors not read yet, for the NaN / infinity check; returns
        the sorted names of every non-finite tensor of the folder."""
        for name in self.where:
            if name not in self.checked:
                self[name]
        return sorted(self.nonfinite)


def open_hf_dir(path: str | os.PathLike) -> tuple[dict, ShardedState]:
    """``(config dict, tensors read on demand)`` of a ``save_pretrained`` folder: like
    :func:`read_hf_dir`, but no weight is read until a converter takes it (:class:`ShardedState`)."""
    d = user_path(path, where="convert.path", error=ConvertError)
    config = read_config(d)
    where: dict[str, Path] = {}
    spans: dict[str, tuple] = {}
    for f in weight_files(d):
        try:
            with safetensors_open(f, root=d, where=f.name, error=ConvertError) as fh:
                names = list(fh.keys())
        except (SafetensorError, OSError) as exc:
            raise ConvertError(f"unreadable safetensors file: {short(str(exc))}", where=f.name,
                               fix="re-save the model with save_pretrained") from exc
        where.update(dict.fromkeys(names, f))
        for n in names:
            spans.pop(n, None)  # a later shard's copy wins, as in read_hf_dir
        try:
            entries, _, data = read_header(f)
        except CheckpointError:  # a header only safetensors itself can describe: read through it
            continue
        if sys.byteorder == "little":  # safetensors stores little-endian bytes
            spans.update({n: (_TORCH_DTYPES[dt], shape, data + b, e - b) for n, (dt, shape, (b, e))
                          in entries.items() if n in where and dt in _TORCH_DTYPES})
    return config, ShardedState(d, where, spans)


def from_pretrained(path: str | os.PathLike, *, attention: str = "sdpa", dtype: Any = None,
                    tokenizer: bool = True, certify: bool = False,
                    allow_nonfinite: bool = False) -> torch.nn.Module:
    """Convert a local ``save_pretrained`` folder (config.json + safetensors) without transformers.

    The config is mapped and every tensor's shape (from the file headers) checked against the spec
    before any weight is read.  A ``tokenizer.json`` in the folder becomes ``model.tokenizer`` (the
    ``hf`` tokenizer), so ``zoo.save`` stores it inside the checkpoint.  ``certify`` (needs
    transformers) also loads the folder with transformers and records the parity certificate.
    Tensors holding NaN or infinity are refused (they would convert silently and fail much later,
    e.g. inside sampling); ``allow_nonfinite=True`` converts them anyway and records their names in
    ``convert_info["nonfinite"]``."""
    if not isinstance(allow_nonfinite, bool):
        raise ConvertError(f"allow_nonfinite must be true or false, got {short(allow_nonfinite)}",
                           where="convert.allow_nonfinite", fix="pass a bool")
    config, header = read_hf_dir(path, meta=True)
    spec, st, _ = convert_state(config, header, attention=attention)
    check_shapes(spec, st)  # before reading a single weight
    dt = resolve_dtype(dtype) or st["tok_emb.weight"].dtype
    # the certificate's reference runs first and is gone before zoo's weights exist (one model at a time)
    reference = folder_reference(path, config, parse_spec(spec), dt) if certify else None
    config, state = open_hf_dir(path)  # streamed: each tensor is read when the converter takes it

    def refuse_nonfinite(names, cause=None):
        raise ConvertError(f"{len(names)} tensor(s) hold NaN or infinity: {short(names)}",
                           where=short(names[0]),
                           fix="get an intact copy of the weights, or pass allow_nonfinite=True "
                               "(zoo convert --allow-nonfinite) to convert them as they are") from cause
    try:
        spec, st, dropped = convert_state(config, state, attention=attention)
    except ConvertError as exc:  # a NaN anywhere in the folder is the cause to report, as before
        if not allow_nonfinite:  # streaming, when every tensor was checked before converting
            try:
                bad = state.scan_rest()
            except ConvertError:  # the file itself is unreadable: that is the error to report
                bad = []
            if bad:
                refuse_nonfinite(bad, exc)
        raise
    nonfinite = state.scan_rest()
    if nonfinite and not allow_nonfinite:
        refuse_nonfinite(nonfinite)
    model = assemble(spec, st, dt, owned=True)
    del st
    model.convert_info = {"source": Path(path).name, "model_type": config.get("model_type"),
                          "architectures": config.get("architectures"), "dropped": dropped,
                          **({"nonfinite": nonfinite} if nonfinite else {})}
    keep_generation_config(model, *folder_generation_config(Path(path), config))
    if certify:
        model.convert_info["parity"] = reference if isinstance(reference, str) else \
            compare_parity(reference, model)
    tj = Path(path) / "tokenizer.json"
    if tokenizer and (tj.exists() or tj.is_symlink()):  # confined to the folder, like the shards
        text = read_bytes(tj, root=path, kind="tokenizer", where="tokenizer.json", error=ConvertError)
        model.tokenizer = make_tokenizer("hf", json=text.decode("utf-8", "replace"))
        from ..run.chat import ChatError, folder_template  # an instruct model's chat template comes along

        try:
            if (template := folder_template(path)) is not None:
                model.chat_template = template
        except ChatError as exc:  # the weights still convert; model.chat will say why it cannot
            model.convert_info["chat_template_error"] = str(exc)
    return model


# ---------------------------------------------------------------------- the parity certificate
PROBE_SEED, PROBE_SHAPE = 1234, (2, 12)


def probe_batch(vocab_size: int) -> torch.Tensor:
    """The fixed probe: ``(2, 12)`` token ids from a seeded generator (ids >= 3 avoid special tokens)."""
    g = torch.Generator().manual_seed(PROBE_SEED)
    return torch.randint(3, max(4, min(vocab_size, 32000)), PROBE_SHAPE, generator=g)


@torch.no_grad()
@entry
def certify_parity(hf_model: Any, model: torch.nn.Module) -> dict:
    """Run the probe batch through the transformers model and the zoo model and say how closely they
    agree: ``max_abs_diff``, ``mean_abs_diff``, ``top1_agreement`` (share of positions with the same
    arg-max), the dtype compared, both libraries' versions and the date (UTC)."""
    if not isinstance(hf_model, torch.nn.Module) or not hasattr(hf_model, "config"):
        raise ZooError(f"expected a transformers model (a torch module with a .config), got "
                       f"{type(hf_model).__name__}", where="certify_parity.hf_model",
                       fix="pass the transformers model the zoo model was converted from")
    p = next(model.parameters())
    return compare_parity(reference_probe(hf_model, model.spec, p.device), model)


@torch.no_grad()
def reference_probe(hf_model: Any, spec, device=None) -> dict:
    """The transformers side of the certificate alone: its outputs on the probe batch (``ref``, on
    the CPU), what they are (``compared``: logits or a base model's hidden states) and the library.
    Kept apart from :func:`compare_parity` so a folder's reference can run, and be freed, before
    the zoo model is built (:func:`from_pretrained`: one model in memory at a time)."""
    hf_dev = next(hf_model.parameters()).device
    ids = probe_batch(spec.vocab_size).to(device or hf_dev)
    was = hf_model.training
    hf_model.eval()
    if spec.arch == "encoder_decoder":
        out = hf_model(input_ids=ids.to(hf_dev), decoder_input_ids=ids.to(hf_dev))
    else:
        out = hf_model(input_ids=ids.to(hf_dev))
    hf_model.train(was)
    lib = type(hf_model).__module__.split(".")[0]
    try:
        lib_version = md.version(lib)
    except md.PackageNotFoundError:
        lib_version = "unknown"
    return {"ref": out[0].float().cpu(), "compared": next(iter(out.keys())), "ids": ids,
            "reference": f"{lib} {lib_version} {type(hf_model).__name__}"}


@torch.no_grad()
def compare_parity(reference: dict, model: torch.nn.Module) -> dict:
    """The certificate: the zoo model on the probe batch against :func:`reference_probe`'s outputs."""
    spec = model.spec
    p = next(model.parameters())
    ids = reference["ids"].to(p.device)
    hidden = reference["compared"] == "last_hidden_state"
    ours = model(ids, ids, return_hidden=hidden) if spec.arch == "encoder_decoder" else \
        model(ids, return_hidden=hidden)
    a, b = reference["ref"], ours.float().cpu()
    d = (a - b).abs()
    return {"max_abs_diff": float(d.max()), "mean_abs_diff": float(d.mean()),
            "top1_agreement": float((a.argmax(-1) == b.argmax(-1)).float().mean()),
            "dtype": str(p.dtype).replace("torch.", ""), "probe": f"{PROBE_SHAPE[0]}x{PROBE_SHAPE[1]} "
            f"token ids, seed {PROBE_SEED}", "compared": reference["compared"],
            "reference": reference["reference"], "zoo": __version__, "torch": torch.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def folder_reference(path, config: dict, spec, dtype: torch.dtype) -> dict | str:
    """transformers loads the folder (in ``dtype``), runs the probe batch and is freed again:
    :func:`reference_probe`'s outputs, or why there can be no certificate."""
    try:
        import transformers
    except ImportError:
        return "no certificate: transformers is not installed"
    archs = config.get("architectures") or []
    cls = getattr(transformers, archs[0], None) if archs and isinstance(archs[0], str) else None
    if cls is None:
        return f"no certificate: transformers has no class {short(archs[:1])}"
    hf = cls.from_pretrained(str(path), dtype=dtype, local_files_only=True)
    try:
        return reference_probe(hf, spec)
    finally:
        del hf


def certify_folder(path, config: dict, model: torch.nn.Module) -> dict | str:
    """The certificate against ``transformers`` loading the same folder, or why there is none."""
    ref = folder_reference(path, config, model.spec, next(model.parameters()).dtype)
    return ref if isinstance(ref, str) else compare_parity(ref, model)


def certificate(meta: Mapping[str, str]) -> dict | None:
    """The parity certificate in a checkpoint's metadata (``zoo.read_metadata(path)``), or None."""
    if not isinstance(meta, Mapping):
        raise ZooError(f"expected a checkpoint's metadata (a mapping), got {type(meta).__name__}",
                       where="certificate.meta", fix="pass zoo.read_metadata(PATH)")
    raw = meta.get("zoo.extra.parity")
    try:
        cert = json.loads(raw) if raw else None
    except ValueError:
        return None
    return cert if isinstance(cert, dict) else None


def certificate_text(meta: Mapping[str, str]) -> str | None:
    """One line for a model card: the certificate, a converted checkpoint's lack of one, or None
    for a model zoo trained itself."""
    cert = certificate(meta)
    if cert is not None:
        return (f"Parity with {cert.get('reference', '?')}: max |Δlogit| {cert.get('max_abs_diff', float('nan')):.2e}, "
                f"mean |Δ| {cert.get('mean_abs_diff', float('nan')):.2e}, top-1 agreement "
                f"{100 * cert.get('top1_agreement', 0):.1f}% ({cert.get('dtype')}, {cert.get('probe')}; "
                f"zoo {cert.get('zoo')}, torch {cert.get('torch')}, {cert.get('date')})")
    if "zoo.extra.converted_from" in meta:
        gguf = gguf_source(meta)
        if gguf is not None:
            return (f"Converted from {gguf} without a parity certificate (a GGUF file has no "
                    "transformers folder to compare with)")
        return ("Converted from transformers without a parity certificate (the source model was not "
                "available at conversion: run `zoo convert --certify`)")
    return None


def gguf_source(meta: Mapping[str, str]) -> str | None:
    """Where a GGUF conversion came from, for a model card -- ``the GGUF file NAME ("general.name";
    architecture ARCH; quantised Q4_1: Q4_1 x 210, F32 x 61, Q8_0 x 1 tensors)`` -- read from
    ``zoo.extra.converted_from`` (:func:`zoo.convert.from_gguf`'s ``convert_info``); None for any
    other checkpoint."""
    try:
        info = json.loads(meta.get("zoo.extra.converted_from") or "null")
    except (ValueError, RecursionError):
        return None
    archs = info.get("architectures") if isinstance(info, dict) else None
    if not (isinstance(archs, list) and archs and str(archs[0]).startswith("gguf:")):
        return None
    parts = [f"architecture {str(archs[0])[5:]}"]
    counts = info.get("quant_types")
    counts = {str(q): n for q, n in counts.items() if isinstance(n, int)} if isinstance(counts, dict) else {}
    tensors = ", ".join(f"{q} x {n}" for q, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    kind = info.get("file_type")
    if isinstance(kind, str):
        parts.append(f"quantised {kind[:40]}" + (f": {tensors} tensors" if tensors else ""))
    elif tensors:
        parts.append(f"stored as {tensors} tensors")
    name = info.get("gguf_name")
    label = f'"{name[:80]}"; ' if isinstance(name, str) and name else ""
    return f"the GGUF file {str(info.get('source', '?'))[:120]} ({label}{'; '.join(parts)})"


# ---------------------------------------------------------------------- the reverse direction
class _Ref:
    """Where one zoo tensor lives in a Hugging Face checkpoint: one or more (row-stacked) tensors,
    possibly transposed, a row block ``part = (index, sizes)`` of one, or permuted (``inv``)."""

    def __init__(self, names: list[str], transpose: bool = False, part=None, inv=None):
        self.names, self.transpose, self.part, self.inv = names, transpose, part, inv


class _Recorder(Source):
    """Runs a family's forward mapping on names and shapes only, recording where each zoo tensor
    comes from, so the reverse mapping is derived from the same code (never a second table)."""

    def __init__(self, config, state, family, tie: bool):
        super().__init__(config, state, family)
        self.tie = tie

    def take(self, name):
        super().take(name)
        return _Ref([name])

    def take_t(self, name):
        super().take(name)
        return _Ref([name], transpose=True)

    def cat(self, *names):
        for n in names:
            super().take(n)
        return _Ref(list(names))

    def split(self, name, sizes):
        super().take(name)
        return [_Ref([name], part=(i, list(sizes))) for i in range(len(sizes))]

    def permute(self, name, fwd, inv):
        super().take(name)
        return _Ref([name], inv=inv)

    def pieces(self, name, fwd, inv):
        super().take(name)
        n = len(fwd(self.state[name]))
        return [_Ref([name], part=(i, n), inv=inv) for i in range(n)]

    def tied(self, head, embedding):
        if head not in self.state:
            return True
        if self.tie:
            self.ignore(head)
        return self.tie


def _guess_family(spec) -> str:
    if spec.name in CONVERTERS:
        return spec.name
    kind = spec.stack(spec.roles[-1]).positions.kind
    fam = {("decoder", "learned"): "gpt2", ("encoder", "learned"): "bert", ("decoder", "rope"): "llama",
           ("encoder_decoder", "t5_relative"): "t5"}.get((spec.arch, kind))
    if fam is None:
        raise ConvertError(f"a {spec.arch} model with '{kind}' positions is none of the families "
                           f"transformers can run", where="spec", options=list(CONVERTERS),
                           fix="convert a model shaped like one of the families, or pass family=")
    return fam


def _comparable(spec) -> dict:
    d = spec.to_dict()
    for k in ("name", "attention", "pad_id", "dropout", "encoder", "decoder"):
        d.pop(k, None)
    for role in spec.roles:  # resolved per-stack values, not how they were written
        st = spec.stack(role)
        d[role] = tuple(str(getattr(st, f)) if not isinstance(getattr(st, f), (int, float, bool, type(None)))
                        else getattr(st, f) for f in st.__dataclass_fields__
                        if f not in ("role", "dropout", "attention"))
    return d


@entry
def to_transformers(model: torch.nn.Module, *, family: str | None = None) -> Any:
    """The equivalent ``transformers`` model of a zoo model shaped like one of the families
    (needs the ``transformers`` library).  ``family`` is guessed from the spec when omitted.

    The reverse mapping is derived from the forward converter, and the result is checked by
    converting its config back: any spec field transformers cannot express is a
    :class:`ConvertError` naming it."""
    import transformers

    spec = model.spec
    family = family or _guess_family(spec)
    if family not in CONVERTERS:
        raise ConvertError(f"unknown family {family!r}", where="family", options=list(CONVERTERS))
    fam = CONVERTERS[family]
    model_name = fam.hf_model_class(spec)
    try:
        kwargs = {**fam.write(spec), **_special_ids(model)}
        hf = getattr(transformers, model_name)(getattr(transformers, fam.config_class)(**kwargs))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConvertError(f"transformers cannot build {model_name} from this spec: {exc}",
                           where="spec", fix=f"convert a spec shaped like {family}") from exc
    rec = _Recorder(hf.config.to_dict(), hf.state_dict(), family, tie=spec.tie_embeddings)
    try:
        spec2, refs = fam.read(rec, "sdpa")
        spec2 = parse_spec(spec2)
    except ZooError as exc:
        raise ConvertError(f"the zoo model cannot be expressed as {model_name}: {exc.what}",
                           where=exc.where, fix="only models shaped like the family convert") from exc
    a, b = _comparable(spec), _comparable(spec2)
    diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if diff:
        raise ConvertError(f"spec field(s) {diff} have no equivalent in {model_name} "
                           f"(zoo: {[a.get(k) for k in diff]}, {family}: {[b.get(k) for k in diff]})",
                           where="spec", fix=f"convert a spec shaped like {family}")
    zs = model.state_dict()
    shapes = {n: t.shape for n, t in rec.state.items()}
    out, parts, joins = {}, {}, {}
    for zname, ref in refs.items():
        t = zs[zname].detach().cpu()
        if ref.part is not None:
            parts.setdefault(ref.names[0], {})[ref.part[0]] = t
            if ref.inv is not None:  # Source.pieces: joined by its own inverse
                joins[ref.names[0]] = ref.inv
        elif ref.inv is not None:
            out[ref.names[0]] = ref.inv(t).contiguous()
        elif len(ref.names) == 1:
            out[ref.names[0]] = t.t().contiguous() if ref.transpose else t.clone()
        else:
            for n, piece in zip(ref.names, t.split([shapes[n][0] for n in ref.names], dim=0)):
                out[n] = piece.clone()
    for name, pieces in parts.items():
        ordered = [pieces[i] for i in sorted(pieces)]
        out[name] = joins[name](ordered).contiguous() if name in joins else torch.cat(ordered, dim=0)
    head = getattr(hf, "lm_head", None)
    if head is not None and "lm_head.weight" in out and not spec.tie_embeddings:
        emb = hf.get_input_embeddings().weight
        if head.weight is emb:  # transformers 5 may tie it regardless of the config
            head.weight = torch.nn.Parameter(out["lm_head.weight"])
    with torch.no_grad():
        hf.load_state_dict(out, strict=False)
    not_set = sorted(set(hf.state_dict()) - set(out) - rec.used)
    if not_set:
        raise ConvertError(f"transformers tensors left unset: {not_set[:6]}", where="weights",
                           fix="report this: the reverse mapping is incomplete")
    settings = getattr(model, "generation_config", None)
    if settings and getattr(hf, "generation_config", None) is not None:  # the source's, as it was
        hf.generation_config = transformers.GenerationConfig(**settings)
    return hf.to(zs["tok_emb.weight"].dtype).eval()


def _special_ids(model: torch.nn.Module) -> dict:
    """The special ids :func:`to_transformers` writes into the config: the model's generation
    config's (each of :data:`zoo.io.generation_config.SPECIAL_IDS`, None where it has none), else
    its tokenizer's; an id no source states is None, never a config class's placeholder outside
    the vocabulary (``GPT2Config``'s 50256)."""
    if model.spec.arch == "encoder":
        return {}  # an encoder's pad id shapes its positions (RoBERTa): the family writes it
    settings = getattr(model, "generation_config", None)
    if settings:
        return {k: settings.get(k) for k in gen_config.SPECIAL_IDS}
    tok, V = getattr(model, "tokenizer", None), model.spec.vocab_size
    out = {k: None for k in ("bos_token_id", "eos_token_id")}
    for key, attr in (("bos_token_id", "bos_id"), ("eos_token_id", "eos_id"), ("pad_token_id", "pad_id")):
        v = getattr(tok, attr, None)
        if isinstance(v, int) and 0 <= v < V:
            out[key] = v
    return out


# ---------------------------------------------------------------------- helpers for families
def norm_entry(kind: str, eps: float, placement: str) -> dict:
    return {"kind": kind, "eps": eps, "placement": placement}


def lm_head(src: Source, spec: dict, st: dict, wte, name: str = "lm_head.weight") -> None:
    """A separate output matrix, unless it is (absent or) the embedding matrix."""
    if not src.tied(name, wte):
        spec["tie_embeddings"], st["lm_head.weight"] = False, src.take(name)


def linears(src: Source, st: dict, hf_prefix: str, zoo_prefix: str, pairs, bias: bool = True) -> None:
    """Copy ``(hf name, zoo name)`` pairs of weights (and biases) under two prefixes."""
    for hf, zn in pairs:
        st[f"{zoo_prefix}{zn}.weight"] = src.take(f"{hf_prefix}{hf}.weight")
        if bias:
            st[f"{zoo_prefix}{zn}.bias"] = src.take(f"{hf_prefix}{hf}.bias")


def qkv(src: Source, st: dict, a: str, z: str, names=("q_proj", "k_proj", "v_proj"), bias: bool = False,
        into: str = "attn.qkv") -> None:
    """Separate q, k, v projections under ``a`` -> zoo's fused ``qkv`` under ``z``."""
    st[f"{z}{into}.weight"] = src.cat(*(f"{a}{n}.weight" for n in names))
    if bias:
        st[f"{z}{into}.bias"] = src.cat(*(f"{a}{n}.bias" for n in names))


#: renamed: "family" and FAMILIES mean the component families of zoo.components
__getattr__ = moved(__name__)  # the old names it had: zoo.deprecation.NAMES
