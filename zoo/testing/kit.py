"""The conformance kit: the checks every registered component must pass.

Each check builds small models from the shipped tiny presets (``gpt_tiny``, ``bert_tiny``, ``t5_tiny``,
cut to 2 layers) with the component under test substituted in, and measures one property against
something independent of the component:

==================  ============================================================================
``compatible``      builds in at least one architecture (encoder, decoder, encoder-decoder)
``build``           builds in this architecture (skipped when capabilities say it cannot); decoders
                    use grouped-query attention (half as many key/value heads as query heads)
``forward_backward`` CPU float32 forward and backward: right output shape, no NaN/inf in outputs or
                    gradients, and every parameter of the component receives a gradient
``bfloat16``        (where the component declares bfloat16) forward/backward finite, and the
                    bfloat16 outputs agree with float32 to a relative error below 5%
``causal``          changing future tokens changes nothing at earlier positions (decoders)
``padding``         padding a sequence (left for decoders, right for encoders) does not change the
                    outputs at its real positions
``kv_cache``        (where declared) incremental decoding with the KV cache — a prefill, single
                    tokens and a multi-token chunk, on a left-padded batch — equals the full forward
``save_load``       ``zoo.save`` / ``zoo.load`` round-trips every tensor and the outputs bit-exactly
``reference``       attention kernels that declare ``exact``: agree with the naive per-query loop
                    (no mask, causal, a boolean mask, a score bias, queries that are a suffix of the
                    keys, grouped-query heads), outputs and weights
``masked_rows``     attention kernels: a query row with nothing to attend to gives zeros, and no NaN
                    in the gradients
``weights``         attention kernels that return weights: rows sum to 1, masked entries are 0 and
                    ``out == weights @ v``
``mask_offset``     mask rules: the mask for queries starting at an offset (a KV cache) equals the
                    matching rows of the full mask
``tokenizer``       tokenizers: ids in range; ``from_json(to_json())`` encodes and decodes the same
``loads``           third-party plugins: the plugin loaded and registered without errors
==================  ============================================================================

Use it as ``zoo verify [NAME...]`` (a table), from Python (:func:`verify`), or from pytest through the
``zoo`` pytest plugin (see :mod:`zoo.testing.pytest_plugin`).
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import json
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import torch

from ..model.build import build, resolve_device
from ..components import FAMILY, BuildContext, MaskContext, causal_mask, repeat_kv
from ..errors import IncompatibleComponentsError, UnknownComponentError, ZooError, did_you_mean
from ..io.checkpoint import save
from ..model.layers import attend
from ..io.loading import load
from ..registry import Component, Registry, get_registry, set_registry
from ..model.spec import resolve_spec_source
from ..io.tokenizers import tokenizer

#: architecture -> the preset its models start from
ARCH_PRESETS = {"decoder": "gpt_tiny", "encoder": "bert_tiny", "encoder_decoder": "t5_tiny"}
ARCHS = tuple(ARCH_PRESETS)
MODEL_CHECKS = ("build", "forward_backward", "bfloat16", "causal", "padding", "kv_cache", "save_load")
ATTENTION_CHECKS = ("reference", "masked_rows", "weights")
CHECKS = ("loads", "compatible") + MODEL_CHECKS + ATTENTION_CHECKS + ("mask_offset", "tokenizer")
_DECODING = ("decoder", "encoder_decoder")  # archs with a causal decoder
BATCH, SEQ, LAYERS = 2, 10, 2
TOL = {"causal": 1e-5, "padding": 1e-4, "kv_cache": 1e-4, "save_load": 0.0, "reference": 1e-5,
       "weights": 1e-4, "bfloat16": 5e-2, "masked_rows": 0.0, "mask_offset": 0.0}
SAMPLE_TEXT = "Attention is all you need. 注意力就是你所需要的。 123 !?"


@dataclass
class CheckResult:
    """One row of the table.  ``subject``: ``family:name`` (or ``plugin:NAME``); ``case``: the
    architecture or sub-case; ``status``: ``pass``, ``fail`` or ``skip``; ``error``: the measured
    error (max abs unless the check says otherwise) and ``tol`` the bound it was held to."""

    subject: str
    check: str
    case: str = ""
    status: str = "pass"
    error: float | None = None
    tol: float | None = None
    note: str = ""
    reference: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status != "fail"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Skip(Exception):
    """The check does not apply (declared capability, incompatible architecture)."""


class Fail(AssertionError):
    """The check failed; the message says what was measured."""


@dataclass(frozen=True)
class Case:
    """One check of one component (in one architecture); run it with :meth:`Kit.run`."""

    subject: str
    check: str
    arch: str = ""

    @property
    def id(self) -> str:
        return "-".join(p for p in (self.subject, self.check, self.arch) if p)


@dataclass
class BoundCase:
    """A :class:`Case` with its kit: what the pytest plugin hands a test as ``zoo_case``."""

    kit: "Kit"
    case: Case

    @property
    def id(self) -> str:
        return self.case.id

    def run(self) -> CheckResult:
        return self.kit.run(self.case)

    def check(self) -> CheckResult:
        """Run the check: return on pass, ``pytest.skip`` when it does not apply, raise
        ``AssertionError`` (with the measured error) when it fails."""
        res = self.run()
        if res.status == "skip":
            import pytest  # here: pytest is a test-only dependency; `zoo verify` runs without it

            pytest.skip(res.note)
        if res.status == "fail":
            raise AssertionError(f"{self.id}: {res.note} (error {res.error}, tol {res.tol})")
        return res

    __call__ = check

    def __repr__(self) -> str:
        return f"<zoo_case {self.id}>"


@contextlib.contextmanager
def using_registry(registry: Registry) -> Iterator[Registry]:
    """Make ``registry`` the process-wide one (what ``zoo.build`` / ``zoo.load`` use) for a while."""
    old = set_registry(registry)
    try:
        yield registry
    finally:
        set_registry(old)


def kit_registry(plugins: Iterable[str] = (), modules: Iterable[Any] = ()) -> Registry:
    """A registry with the built-ins plus the named entry-point plugins (loaded even when
    ``ZOO_DISABLE_PLUGIN_AUTOLOAD`` is set) and plugin modules (objects or dotted names)."""
    reg = Registry(entry_points=False)
    plugins = [p for p in plugins if p]
    if plugins:
        reg.load_entry_points(only=plugins)
    for mod in modules:
        if isinstance(mod, str):
            mod = importlib.import_module(mod)
        reg.add_plugin(mod, name=getattr(mod, "__name__", repr(mod)), source="module")
    return reg


# ---------------------------------------------------------------------- the kit
class Kit:
    """Runs the checks for the components of one registry (default: the process-wide one).

    ``params``: ``{"family:name" or "name": {param: value}}`` for components whose config has
    required parameters or whose defaults make a check trivial.
    """

    def __init__(self, registry: Registry | None = None, params: dict[str, dict] | None = None,
                 device: Any = None):
        self.registry = registry or get_registry()
        self.params = dict(params or {})

        self.device = resolve_device(device) or torch.device("cpu")  # a clear error without CUDA
        self._models: dict[tuple, Any] = {}

    # -------------------------------------------------------------- selection
    def select(self, names: Iterable[str] | None = None) -> tuple[list[Component], list[str]]:
        """Components (and third-party plugin names) matching ``names``: ``family:name``, a bare
        component name, or a plugin name.  ``None``: everything registered."""
        reg = self.registry
        comps = reg.list()
        if not names:
            return comps, [p.name for p in reg.plugins.values() if not p.builtin]
        out: list[Component] = []
        plugins: list[str] = []
        for n in names:
            hit = [c for c in comps if n in (c.key, c.name) or c.plugin == n]
            if n in reg.plugins:
                plugins.append(n)
            if not hit and n not in reg.plugins:
                # the names to choose from are a hundred: suggest the closest, never print them all
                everything = sorted({c.key for c in comps} | set(reg.plugins))
                installed = sorted(p.name for p in reg.plugins.values() if not p.builtin)
                raise UnknownComponentError(
                    f"no component or plugin named '{n}'", where="verify",
                    fix="; ".join(filter(None, (
                        did_you_mean(n, everything),
                        f"installed plugins: {', '.join(installed) or 'none besides the built-ins'} "
                        f"(install the plugin first; `zoo plugins` lists what is loaded)",
                        f"or name one of the {len(comps)} components, as family:name or by its name "
                        f"(`zoo components`)"))))
            out += [c for c in hit if c not in out]
        return out, plugins

    def cases(self, names: Iterable[str] | None = None, checks: Iterable[str] | None = None,
              archs: Iterable[str] | None = None) -> list[Case]:
        """Every applicable (component, check, architecture) for the selection."""
        comps, plugins = self.select(names)
        want = set(checks) if checks else set(CHECKS)
        bad = want - set(CHECKS)
        if bad:
            raise ZooError(f"unknown checks {sorted(bad)}", where="checks", options=CHECKS)
        arch_list = [a for a in ARCHS if not archs or a in set(archs)]
        out = [Case(f"plugin:{p}", "loads") for p in plugins if "loads" in want]
        for c in comps:
            if c.family == "tokenizer":
                if "tokenizer" in want:
                    out.append(Case(c.key, "tokenizer"))
                continue
            if "compatible" in want:
                out.append(Case(c.key, "compatible"))
            for check in MODEL_CHECKS:
                if check not in want:
                    continue
                for arch in arch_list:
                    if check in ("causal", "kv_cache") and arch not in _DECODING:
                        continue
                    out.append(Case(c.key, check, arch))
            if c.family == "attention":
                out += [Case(c.key, ch) for ch in ATTENTION_CHECKS if ch in want]
            if c.family == "mask" and "mask_offset" in want:
                out.append(Case(c.key, "mask_offset"))
        return out

    # -------------------------------------------------------------- running
    def run(self, case: Case) -> CheckResult:
        res = CheckResult(case.subject, case.check, case.arch, tol=TOL.get(case.check))
        t0 = time.perf_counter()
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny tensors: intra-op threads only add overhead (20x on a busy box)
        with using_registry(self.registry):
            try:
                if case.check == "loads":
                    info = self.registry.plugins[case.subject.split(":", 1)[1]]
                    if info.errors:
                        raise Fail("; ".join(info.errors))
                    res.note = f"registered {', '.join(info.components)}"
                else:
                    family, name = case.subject.split(":", 1)
                    comp = self.registry.get(family, name)
                    fn = _CHECKS[case.check]
                    out = fn(self, comp, case.arch) if case.arch else fn(self, comp)
                    if out:
                        res.error, res.note = out[0], out[1] if len(out) > 1 else ""
                        if len(out) > 2:
                            res.reference = out[2]
                    if res.error is not None and res.tol is not None and not res.error <= res.tol:
                        res.status = "fail"
                        res.note = (res.note + "; " if res.note else "") + \
                            f"measured {res.error:.3g} > tolerance {res.tol:.3g}"
            except Skip as exc:
                res.status, res.note = "skip", str(exc)
            except Fail as exc:
                res.status, res.note = "fail", str(exc)
            except Exception as exc:  # noqa: BLE001 - a component may raise anything
                res.status = "fail"
                res.note = f"{type(exc).__name__}: {exc}"
            finally:
                torch.set_num_threads(threads)
        res.seconds = time.perf_counter() - t0
        return res

    def run_all(self, cases: Iterable[Case]) -> list[CheckResult]:
        return [self.run(c) for c in cases]

    # -------------------------------------------------------------- building
    def params_for(self, comp: Component) -> dict:
        p = self.params.get(comp.key, self.params.get(comp.name))
        if p is not None:
            return dict(p)
        missing = [k for k, v in comp.params().items() if v is dataclasses.MISSING]
        if missing:
            raise Skip(f"{comp.key} needs parameters {missing}; pass them with "
                       f"params={{'{comp.key}': {{...}}}}")
        return {}

    def raw_spec(self, comp: Component, arch: str) -> dict:
        """The preset of ``arch`` (2 layers) with ``comp`` substituted in."""
        raw = copy.deepcopy(resolve_spec_source(ARCH_PRESETS[arch]))
        raw["num_layers"] = LAYERS
        raw["dropout"] = 0.0
        if arch == "decoder" and raw.get("num_kv_heads") is None and raw.get("num_heads", 1) % 2 == 0:
            raw["num_kv_heads"] = raw["num_heads"] // 2  # grouped-query attention in decoders
        for role in ("encoder", "decoder"):
            if isinstance(raw.get(role), dict):
                raw[role] = dict(raw[role])
                raw[role]["num_layers"] = LAYERS
                raw[role].pop("dropout", None)
        entry = {"kind": comp.name, **self.params_for(comp)}
        fam = FAMILY[comp.family]
        sections = [raw[r] for r in ("encoder", "decoder") if isinstance(raw.get(r), dict)]
        if fam.field is None:  # not a model part (tokenizers)
            return raw
        if fam.parent is not None or fam.name == FAMILY["placement"].parent:  # norm + placement
            norm = raw.get("norm", FAMILY["norm"].default)
            norm = dict(norm) if isinstance(norm, dict) else {"kind": norm}
            if fam.parent is None:
                norm = {**entry, "placement": norm.get("placement", FAMILY["placement"].default)}
            else:
                norm["placement"] = entry
            raw["norm"] = norm
            for sec in sections:
                sec.pop("norm", None)
        elif not fam.many:
            raw[fam.field] = entry
            for sec in sections:
                sec.pop(fam.field, None)
        else:  # mask rules compose: a decoder keeps its causal rule
            causal_kind = comp.cls.is_causal
            dec_mask = entry if causal_kind else ["causal", entry]
            if arch == "encoder":
                raw["mask"] = entry
            elif arch == "decoder":
                raw["mask"] = dec_mask
            else:
                raw.pop("mask", None)
                raw.setdefault("encoder", {})["mask"] = entry
                raw.setdefault("decoder", {})["mask"] = dec_mask
        return raw

    def build(self, comp: Component, arch: str, *, dtype=None, fresh: bool = False):
        """A built model (eval mode, seed 0); cached unless ``fresh``.  Raises :class:`Skip` when
        the component cannot work in ``arch``."""
        key = (comp.key, arch, str(dtype))
        if not fresh and key in self._models:
            return self._models[key]
        if any(k[0] != comp.key for k in self._models):
            self._models.clear()  # cases come grouped by component: keep one component's models
        raw = self.raw_spec(comp, arch)
        try:
            model = build(raw, seed=0, dtype=dtype, device=self.device).eval()
        except IncompatibleComponentsError as exc:
            raise Skip(f"not compatible with {arch}: {exc}") from exc
        if not fresh:
            self._models[key] = model
        return model


# ---------------------------------------------------------------------- inputs and calls
def _gen(seed: int = 1234) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _ids(model, B: int = BATCH, T: int = SEQ, seed: int = 1234) -> torch.Tensor:
    """Random token ids avoiding the low ids where presets keep special tokens."""
    V = model.spec.vocab_size
    lo = min(5, V - 1)
    dev = next(model.parameters()).device
    return torch.randint(lo, V, (B, T), generator=_gen(seed)).to(dev)


def _forward(model, arch: str, ids, mask=None, src=None, src_padding=None, hidden: bool = False):
    """Logits (or hidden states) ``(B, T, ·)``; for encoder-decoder ``ids`` is the target."""
    if arch == "encoder_decoder":
        src = ids if src is None else src
        return model(src, ids, src_padding=src_padding, tgt_padding=mask, return_hidden=hidden)
    return model(ids, attention_mask=mask, return_hidden=hidden)


def _maxdiff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().double() - b.detach().double()).abs().max()) if a.numel() else 0.0


def _finite(t: torch.Tensor, what: str) -> None:
    if not bool(torch.isfinite(t).all()):
        raise Fail(f"{what} contains NaN or inf")


def _component_params(model, comp: Component) -> list[tuple[str, torch.nn.Parameter]]:
    out = []
    for mname, mod in model.named_modules():
        if isinstance(mod, comp.cls):
            out += [(f"{mname}.{n}", p) for n, p in mod.named_parameters() if p.requires_grad]
    return out


# ---------------------------------------------------------------------- model checks
def check_compatible(kit: Kit, comp: Component):
    ok, why = [], []
    for arch in ARCHS:
        try:
            kit.build(comp, arch)
            ok.append(arch)
        except Skip as exc:
            why.append(str(exc))
    if not ok:
        raise Fail("builds in no architecture: " + " | ".join(why))
    return None, f"builds in {', '.join(ok)}"


def check_build(kit: Kit, comp: Component, arch: str):
    model = kit.build(comp, arch)
    n = sum(p.numel() for p in model.parameters())
    return None, f"{n:,} parameters"


def check_forward_backward(kit: Kit, comp: Component, arch: str):
    model = kit.build(comp, arch, fresh=True).train()
    ids = _ids(model)
    out = _forward(model, arch, ids)
    V = model.spec.vocab_size
    if out.dim() == 3 and tuple(out.shape) != (BATCH, SEQ, V):
        raise Fail(f"output shape {tuple(out.shape)}, expected {(BATCH, SEQ, V)}")
    _finite(out, "forward output")
    loss = out.float().pow(2).mean()
    loss.backward()
    loss = loss.detach()
    for name, p in model.named_parameters():
        if p.grad is not None:
            _finite(p.grad, f"gradient of {name}")
    own = _component_params(model, comp)
    missing = [n for n, p in own if p.grad is None]
    if missing:
        raise Fail(f"parameters of the component got no gradient: {missing[:5]}")
    gmax = max((float(p.grad.abs().max()) for _, p in model.named_parameters()
                if p.grad is not None), default=0.0)
    return None, f"loss {loss.item():.4g}, max |grad| {gmax:.3g}, {len(own)} own parameter tensors"


def check_bfloat16(kit: Kit, comp: Component, arch: str):
    if "bfloat16" not in comp.capabilities.dtypes:
        raise Skip(f"bfloat16 not declared (dtypes {list(comp.capabilities.dtypes)})")
    ref = kit.build(comp, arch)
    model = kit.build(comp, arch, dtype=torch.bfloat16, fresh=True)
    ids = _ids(model)
    with torch.no_grad():
        want = _forward(ref, arch, ids).float()
        got = _forward(model, arch, ids).float()
    _finite(got, "bfloat16 output")
    model.train()
    out = _forward(model, arch, ids)
    out.float().pow(2).mean().backward()
    for name, p in model.named_parameters():
        if p.grad is not None:
            _finite(p.grad, f"bfloat16 gradient of {name}")
    rel = _maxdiff(got, want) / max(float(want.abs().max()), 1e-6)
    return rel, "relative max error vs float32", "float32 model"


def check_causal(kit: Kit, comp: Component, arch: str):
    model = kit.build(comp, arch)
    ids = _ids(model)
    src = _ids(model, seed=5)  # encoder-decoder: a fixed source, only the target changes
    cut = SEQ // 2
    other = ids.clone()
    other[:, cut:] = _ids(model, seed=99)[:, cut:]
    with torch.no_grad():
        a, b = _forward(model, arch, ids, src=src), _forward(model, arch, other, src=src)
    if _maxdiff(a[:, cut:], b[:, cut:]) == 0.0:
        raise Fail("the outputs do not depend on the input tokens at all")
    return _maxdiff(a[:, :cut], b[:, :cut]), f"positions < {cut} after changing tokens >= {cut}"


def check_padding(kit: Kit, comp: Component, arch: str):
    model = kit.build(comp, arch)
    pad_id = model.spec.pad_id if model.spec.pad_id is not None else 0
    n, P = SEQ - 3, 3
    x = _ids(model, B=1, T=n, seed=7)
    other = _ids(model, B=1, T=SEQ, seed=8)
    pads = torch.full((1, P), pad_id, dtype=torch.long, device=x.device)
    left = arch == "decoder"
    row0 = torch.cat([pads, x], 1) if left else torch.cat([x, pads], 1)
    ids = torch.cat([row0, other])
    mask = torch.ones_like(ids)
    if left:
        mask[0, :P] = 0
    else:
        mask[0, n:] = 0
    real = slice(P, SEQ) if left else slice(0, n)
    with torch.no_grad():
        if arch == "encoder_decoder":  # pad the source; the decoder's outputs must not change
            tgt = _ids(model, B=2, T=6, seed=9)
            alone = model(x, tgt[:1], return_hidden=True)
            both = model(ids, tgt, src_padding=mask, return_hidden=True)
            return _maxdiff(both[:1], alone), "decoder states, source right-padded by 3"
        alone = _forward(model, arch, x, hidden=True)
        both = _forward(model, arch, ids, mask=mask, hidden=True)
    side = "left" if left else "right"
    return _maxdiff(both[0:1, real], alone), f"hidden states of real tokens, {side}-padded by {P}"


def check_kv_cache(kit: Kit, comp: Component, arch: str):
    if not comp.capabilities.supports_kv_cache:
        raise Skip("supports_kv_cache=False declared")
    model = kit.build(comp, arch)
    if not hasattr(model, "new_cache"):
        raise Fail(f"{type(model).__name__} has no new_cache()")
    steps = [(0, 5), (5, 6), (6, 7), (7, 8), (8, SEQ)]  # prefill, single tokens, a 2-token chunk
    errs = []
    with torch.no_grad():
        if arch == "decoder":
            ids = _ids(model)
            mask = torch.ones_like(ids)
            mask[0, :2] = 0  # row 0 left-padded
            full = model(ids, attention_mask=mask)
            cache = model.new_cache()
            for a, b in steps:
                got = model(ids[:, a:b], attention_mask=mask[:, a:b], cache=cache)
                errs.append(_maxdiff(got[1:], full[1:, a:b]))
                errs.append(_maxdiff(got[0:1, max(a, 2) - a:], full[0:1, max(a, 2):b]))
            note = "prefill 5, 3 single tokens, a 2-token chunk; row 0 left-padded"
        else:
            src = _ids(model, seed=5)
            tgt = _ids(model, seed=6)
            memory, mem_pad = model.encode(src)
            full = model.decode(tgt, memory, mem_pad)
            cache = model.new_cache()
            for a, b in steps:
                got = model.decode(tgt[:, a:b], memory, mem_pad, cache=cache)
                errs.append(_maxdiff(got, full[:, a:b]))
            note = "decoder: prefill 5, 3 single tokens, a 2-token chunk"
    return max(errs), note, "full forward without cache"


def check_save_load(kit: Kit, comp: Component, arch: str):
    model = kit.build(comp, arch)
    ids = _ids(model)
    with tempfile.TemporaryDirectory(prefix="zoo-kit-") as tmp:
        save(model, tmp)
        again = load(tmp, device=kit.device)
    if again.spec != model.spec:
        raise Fail("the loaded spec differs from the saved one")
    mine, theirs = model.state_dict(), again.state_dict()
    if set(mine) != set(theirs):
        raise Fail(f"state dict keys differ: {sorted(set(mine) ^ set(theirs))[:5]}")
    for k in mine:
        if mine[k].dtype != theirs[k].dtype or not torch.equal(mine[k], theirs[k]):
            raise Fail(f"tensor '{k}' changed in the round trip")
    with torch.no_grad():
        err = _maxdiff(_forward(model, arch, ids), _forward(again, arch, ids))
    return err, f"{len(mine)} tensors equal; outputs compared", "the saved model"


# ---------------------------------------------------------------------- attention checks
def _kernel(comp: Component, kit: Kit, h=4, h_kv=2, hd=8, scale: float | None = None):
    ctx = BuildContext.for_heads(h, hd, num_kv_heads=h_kv, causal=True, scale=scale)
    return comp.make(ctx, **kit.params_for(comp)).to(kit.device)


def _mv(dev, *items):
    """Tensors (and the tensors in dicts) moved to ``dev``."""
    out = []
    for it in items:
        if isinstance(it, dict):
            out.append({k: v.to(dev) if isinstance(v, torch.Tensor) else v for k, v in it.items()})
        else:
            out.append(it.to(dev))
    return out


def _qkv(B=2, h=4, h_kv=2, Tq=7, Tk=7, hd=8, seed=3):
    g = _gen(seed)
    return (torch.randn(B, h, Tq, hd, generator=g), torch.randn(B, h_kv, Tk, hd, generator=g),
            torch.randn(B, h_kv, Tk, hd, generator=g))


def _random_mask(B, Tq, Tk, seed=4, empty_row: int | None = 2):
    m = torch.rand(B, 1, Tq, Tk, generator=_gen(seed)) > 0.4
    m[..., 0] = True  # every row sees something...
    if empty_row is not None:
        m[0, :, empty_row, :] = False  # ...except one
    return m


def _attention_cases(caps):
    """(name, kwargs for the kernel, Tq, Tk) the kernel claims to handle."""
    Tq = Tk = 7
    cases = [("causal", dict(is_causal=True), Tq, Tk)]
    if not caps.causal_only:
        cases.insert(0, ("no mask", {}, Tq, Tk))
    if caps.supports_mask and not caps.causal_only:
        cases.append(("bool mask", dict(mask=_random_mask(2, Tq, Tk)), Tq, Tk))
        cases.append(("suffix queries", dict(mask=causal_mask(3, Tk)[None, None]), 3, Tk))
    if caps.supports_bias:
        bias = torch.randn(1, 4, Tq, Tk, generator=_gen(5))
        cases.append(("score bias", dict(bias=bias, is_causal=True), Tq, Tk))
        if caps.supports_mask and not caps.causal_only:
            cases.append(("bias + mask", dict(bias=bias, mask=_random_mask(2, Tq, Tk, 6)), Tq, Tk))
    return cases


#: The scale the reference check builds kernels with: not 1/sqrt(hd), so a kernel that ignores
#: ``self.scale`` (and hard-codes the usual value) fails it.
REFERENCE_SCALE = 0.6 * 8 ** -0.5


def _sdpa_reference(q, k, v, *, scale: float, mask=None, bias=None, is_causal=False):
    """``F.scaled_dot_product_attention`` under zoo's conventions, as an outside reference: GQA by
    repeating k/v, a boolean mask where True means "may attend" (SDPA's own boolean convention), a
    causal flag as the aligned-to-the-end mask, an additive bias, and fully masked rows as zeros
    (SDPA gives NaN there)."""
    kk, vv = repeat_kv(k, v, q.shape[1])  # (B, h, Tk, hd)
    m = mask
    if is_causal:
        c = causal_mask(q.shape[2], k.shape[2], q.device)[None, None]
        m = c if m is None else m & c
    attn = m
    if bias is not None:
        attn = bias.to(q.dtype) if m is None else bias.to(q.dtype).masked_fill(~m, float("-inf"))
    out = torch.nn.functional.scaled_dot_product_attention(q, kk, vv, attn_mask=attn, scale=scale)
    if m is not None:
        out = out.masked_fill(~m.any(-1, keepdim=True), 0.0)
    return out


def check_reference(kit: Kit, comp: Component):
    """Against two references nobody here wrote the maths of twice: the naive per-query loop and
    PyTorch's ``F.scaled_dot_product_attention``, at a non-default scale (:data:`REFERENCE_SCALE`)."""
    caps = comp.capabilities
    if not caps.exact:
        raise Skip("exact=False declared: not softmax attention, so not compared with the naive loop")
    kernel = _kernel(comp, kit, scale=REFERENCE_SCALE)
    naive = _kernel(kit.registry.get("attention", "naive"), kit, scale=REFERENCE_SCALE)
    errs = []
    for name, kw, Tq, Tk in _attention_cases(caps):
        q, k, v, kw = _mv(kit.device, *_qkv(Tq=Tq, Tk=Tk), kw)
        with torch.no_grad():
            out, w = attend(kernel, q, k, v, need_weights=caps.returns_weights, **kw)
            ref, rw = attend(naive, q, k, v, need_weights=True, **kw)
            sdpa = _sdpa_reference(q, k, v, scale=REFERENCE_SCALE, **kw)
        err = max(_maxdiff(out, ref), _maxdiff(out, sdpa))
        if caps.returns_weights:
            if w is None:
                raise Fail(f"{name}: returns_weights declared but need_weights=True gave None")
            err = max(err, _maxdiff(w, rw))
        errs.append((name, err))
    worst = max(e for _, e in errs)
    return (worst, ", ".join(f"{n} {e:.1e}" for n, e in errs),
            "naive per-query loop and F.scaled_dot_product_attention (GQA 4/2 heads, scale 0.6/sqrt(hd))")


def check_masked_rows(kit: Kit, comp: Component):
    caps = comp.capabilities
    if not caps.supports_mask or caps.causal_only:
        raise Skip("arbitrary masks not supported (declared)")
    kernel = _kernel(comp, kit)
    q, k, v = (t.requires_grad_() for t in _mv(kit.device, *_qkv()))
    out, _ = attend(kernel, q, k, v, mask=_random_mask(2, 7, 7, empty_row=2).to(kit.device))
    _finite(out, "output")
    out.pow(2).sum().backward()
    for name, t in (("q", q), ("k", k), ("v", v)):
        _finite(t.grad, f"gradient of {name}")
    return float(out[0, :, 2].detach().abs().max()), "output of the fully masked row (must be 0)"


def check_weights(kit: Kit, comp: Component):
    caps = comp.capabilities
    if not caps.returns_weights:
        raise Skip("returns_weights=False declared")
    kernel = _kernel(comp, kit)
    errs = []
    for name, kw, Tq, Tk in _attention_cases(caps):
        q, k, v, kw = _mv(kit.device, *_qkv(Tq=Tq, Tk=Tk), kw)
        with torch.no_grad():
            out, w = attend(kernel, q, k, v, need_weights=True, **kw)
        if w is None or tuple(w.shape) != (2, 4, Tq, Tk):
            raise Fail(f"{name}: weights {None if w is None else tuple(w.shape)}, expected "
                       f"{(2, 4, Tq, Tk)}")
        mask = kw.get("mask")
        if kw.get("is_causal"):
            mask = causal_mask(Tq, Tk, kit.device)[None, None]
        live = mask.any(-1) if mask is not None else torch.ones(1, 1, Tq, dtype=torch.bool,
                                                                device=kit.device)
        sums = w.sum(-1)
        errs.append(float((sums - 1).abs().masked_fill(~live, 0).max()))
        if mask is not None:
            errs.append(float(w.masked_fill(mask, 0).abs().max()))
        _, vv = repeat_kv(k, v, 4)  # (B, h, Tk, hd)
        errs.append(_maxdiff(out, w @ vv))
    return max(errs), "row sums - 1, weight on masked keys, out - weights @ v"


# ---------------------------------------------------------------------- other families
def check_mask_offset(kit: Kit, comp: Component):
    rule = comp.make(BuildContext.for_heads(2, 4, causal=True), **kit.params_for(comp))
    T = 12

    def make(offset):
        m = rule(MaskContext(q_len=T - offset, k_len=T, device=torch.device("cpu"),
                             q_offset=offset, batch_size=2))
        if m is None:
            return torch.ones(1, 1, T - offset, T, dtype=torch.bool)
        if m.dtype != torch.bool:
            raise Fail(f"mask dtype {m.dtype}, expected torch.bool")
        while m.dim() < 4:
            m = m[None]
        return m.expand(2, 1, T - offset, T)

    full = make(0)
    bad = 0
    for off in (1, 5, T - 1):
        bad += int((make(off) != full[:, :, off:]).sum())
    return float(bad), "entries that differ from the full mask at offsets 1, 5, 11"


def check_tokenizer(kit: Kit, comp: Component):
    params = kit.params_for(comp)
    try:
        tok = tokenizer(comp.name, **params)
    except ZooError as exc:
        if params:
            raise
        raise Skip(f"cannot be built with default parameters ({exc}); pass "
                   f"params={{'{comp.key}': {{...}}}}") from exc
    ids = tok.encode(SAMPLE_TEXT)
    if not ids or not all(isinstance(i, int) and 0 <= i < tok.vocab_size for i in ids):
        raise Fail(f"encode gave ids outside [0, {tok.vocab_size}): {ids[:10]}")
    data = json.loads(json.dumps(tok.to_json(), ensure_ascii=False))
    again = type(tok).from_json(data)
    if again.encode(SAMPLE_TEXT) != ids or again.decode(ids) != tok.decode(ids):
        raise Fail("from_json(to_json()) encodes or decodes differently")
    lossless = tok.decode(ids) == SAMPLE_TEXT
    return None, f"{len(ids)} ids, vocab {tok.vocab_size}, " + (
        "text round-trips exactly" if lossless else "lossy on the sample (unknown characters)")


_CHECKS: dict[str, Callable] = {
    "compatible": check_compatible, "build": check_build,
    "forward_backward": check_forward_backward, "bfloat16": check_bfloat16,
    "causal": check_causal, "padding": check_padding, "kv_cache": check_kv_cache,
    "save_load": check_save_load, "reference": check_reference, "masked_rows": check_masked_rows,
    "weights": check_weights, "mask_offset": check_mask_offset, "tokenizer": check_tokenizer,
}


# ---------------------------------------------------------------------- front doors
def verify(names: Iterable[str] | None = None, *, checks: Iterable[str] | None = None,
           archs: Iterable[str] | None = None, registry: Registry | None = None,
           params: dict[str, dict] | None = None, device: Any = None,
           progress: Callable[[CheckResult], None] | None = None) -> list[CheckResult]:
    """Run the kit over ``names`` (``family:name``, component or plugin names; default: all
    registered) and return one :class:`CheckResult` per (component, check, architecture).
    ``device``: where the model and kernel checks run (default CPU; e.g. ``"cuda"``)."""
    kit = Kit(registry, params, device)
    out = []
    for case in kit.cases(names, checks, archs):
        res = kit.run(case)
        out.append(res)
        if progress:
            progress(res)
    return out


run_checks = verify  # the name the UI's Verify tab looks for


def format_table(results: list[CheckResult], *, width: int = 60) -> str:
    """A plain-text pass / fail table with the measured errors."""
    head = ("component", "check", "case", "status", "error", "tol", "note")
    rows = []
    for r in results:
        err = "-" if r.error is None else f"{r.error:.2e}" if r.error else "0"
        tol = "-" if r.tol is None or r.error is None else f"{r.tol:.0e}" if r.tol else "0"
        note = r.note if len(r.note) <= width else r.note[:width - 3] + "..."
        rows.append((r.subject, r.check, r.case, r.status.upper(), err, tol, note))
    widths = [max(len(str(x[i])) for x in rows + [head]) for i in range(6)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    lines = [fmt.format(*head)] + [fmt.format(*r) for r in rows]
    n = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "skip")}
    lines.append(f"\n{n['pass']} passed, {n['fail']} failed, {n['skip']} skipped "
                 f"({sum(r.seconds for r in results):.1f} s)")
    return "\n".join(lines)


def conformance_test(**selection):
    """A pytest test function running the kit over ``selection`` (the keywords of the
    ``zoo_conformance`` marker: ``plugin``, ``module``, ``components``, ``checks``, ``archs``,
    ``params``).  The one line a plugin's test suite needs::

        test_zoo_conformance = zoo.testing.conformance_test(plugin="linear_attention")
    """
    import pytest  # here: pytest is a test-only dependency; `zoo verify` runs without it

    @pytest.mark.zoo_conformance(**selection)
    def test_zoo_conformance(zoo_case):
        zoo_case.check()

    return test_zoo_conformance

