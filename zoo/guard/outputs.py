"""Component outputs checked at the boundary (issue 22, goal 6).

A component that returns the wrong thing -- float64 from a float32 model, a list, a tensor on the
meta device, a wrong shape, NaN from finite inputs -- used to fail several steps later, deep inside
torch and often blamed on the *next* component (``sdpa``, ``layernorm``).  Here each component's
output is held, right where it leaves the component, to its family's contract: the ``outputs`` of
its row in the family table (:data:`zoo.components.FAMILIES`), which says, from the inputs of a
call, the dtype, device and shape every returned value must have.  A violation is a
:class:`~zoo.errors.PluginError` naming the plugin, the component, the family, what was expected
and what came back.

**How.**  :func:`install` puts a :class:`Checked` wrapper in front of each contract method of a
component *instance* (an instance attribute shadowing the class's ``forward`` / ``enter`` /
``rotate`` ...; the class, the state-dict keys and ``type(module)`` are unchanged, and
:func:`uninstall` removes it).  A wrapper checks a call only when its inputs are new to it --
the first argument's shape, dtype and device, the other tensors' rank and size to a power of two
(so attention under a KV cache, whose keys grow by one each step, is checked at key lengths 1, 2, 4,
8, ...), the keyword flags -- and passes every later call straight through: a checked forward pays
one small key per component call (about 2 us), the check itself is paid once per new shape.
Finiteness is checked on those same calls, for float32 and float64 outputs (in float16 / bfloat16
an overflow is a property of the dtype, not a broken plugin); a non-finite output is blamed on the
component only when its inputs and its own weights were finite (NaN weights are
:mod:`zoo.guard.health`'s business).

**Which components.**  :func:`zoo.model.assembly.construct` installs wrappers on the components of
plugins *not shipped with zoo* (``which="plugins"``): a model of built-in components runs exactly as
built, at no cost.  ``which="all"`` checks the built-ins as well (the build probe, the tests, and
anyone debugging with ``ZOO_CHECK_OUTPUTS=all``); ``ZOO_CHECK_OUTPUTS=off`` turns the run-time check
off.  ``benchmarks/output_check_cost.py`` measures the cost with every component checked.

**The build probe** (:func:`zoo.model.assembly.probe_components`) runs a freshly built model that has
such components on tiny inputs of two lengths with them wrapped in probing mode (:func:`checking`),
where an exception raised inside a component also becomes a ``PluginError`` naming it.
"""
from __future__ import annotations

import contextlib
import math
import os
from typing import Any, Iterator

import torch
from torch import nn

from ..components import FAMILY, MaskContext, Out
from ..errors import PluginError, ZooError
from ..registry import Component, get_registry
from .files import clip

#: the choices of ``which`` (and of the environment variable ``ZOO_CHECK_OUTPUTS``)
POLICIES = ("plugins", "all", "off")
#: the most input shapes a wrapper remembers; past it, it forgets them and starts over
MAX_SEEN = 1024
#: checked for finiteness (see the module docstring for the half-precision dtypes)
_FINITE_DTYPES = (torch.float32, torch.float64)
_compiling = torch.compiler.is_compiling


def policy(which: str | None = None) -> str:
    """``which``, or the environment's ``ZOO_CHECK_OUTPUTS``, or ``"plugins"``; checked."""
    value = which if which is not None else (os.environ.get("ZOO_CHECK_OUTPUTS") or "plugins")
    if value not in POLICIES:
        raise ZooError(f"unknown output-check policy {clip(value, 40)!r}",
                       where="ZOO_CHECK_OUTPUTS" if which is None else "which", options=POLICIES,
                       fix="use 'plugins' (default), 'all' or 'off'")
    return value


# ---------------------------------------------------------------------- describing values
def _rough(a: Any) -> Any:
    """A secondary argument in a key: a tensor's rank and the power of two of its size (so keys
    whose length grows by one each decoding step are checked at lengths 1, 2, 4, 8, ...), a flag's
    value, the type of anything else."""
    if isinstance(a, torch.Tensor):
        return a.dim(), a.numel().bit_length()
    if a is None or isinstance(a, (bool, int, float, str)):
        return a
    return type(a)


def _key(args: tuple, kwargs: dict) -> tuple:
    """One call's inputs, as far as the check goes: the first argument's shape, dtype and device
    (a mask context: its lengths, the key length to a power of two), the others roughly
    (:func:`_rough`), the keyword flags."""
    first = args[0] if args else None
    if isinstance(first, torch.Tensor):
        key = (first.shape, first.dtype, first.device)
    elif isinstance(first, MaskContext):
        key = (first.q_len, first.k_len.bit_length(), first.q_offset == 0, first.batch_size,
               first.key_padding is None, first.prefix_lengths is None)
    else:
        key = (_rough(first),)
    if len(args) > 1:
        key += tuple(map(_rough, args[1:]))
    if kwargs:
        key += tuple((k, _rough(v)) for k, v in kwargs.items())
    return key


def describe(value: Any) -> str:
    """A returned value in a message: ``float64 tensor of shape (1, 4, 7, 32) on cpu``."""
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).replace('torch.', '')} tensor of shape {tuple(value.shape)} " \
               f"on {value.device}"
    return "None" if value is None else f"a {type(value).__name__}"


def _expected(out: Out) -> str:
    dtype = "floating-point" if out.dtype is None else str(out.dtype).replace("torch.", "")
    if out.shape is not None:
        shape = f"of shape {tuple(out.shape)}"
    else:
        shape = "broadcastable to (" + ", ".join("*" if d is None else str(d) for d in out.fits) + ")"
    return f"a {dtype} tensor {shape} on {out.device}" + (" (or None)" if out.optional else "")


def _same_device(a: torch.device, b: Any) -> bool:
    b = torch.device(b)
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def _broadcasts(shape: tuple[int, ...], fits: tuple[int | None, ...]) -> bool:
    if len(shape) > len(fits):
        return False
    return all(s == 1 or f is None or s == f for s, f in zip(reversed(shape), reversed(fits)))


def _problem(value: Any, out: Out) -> str | None:
    """What is wrong with one returned ``value`` against its contract ``out``, or None."""
    if value is None:
        return None if out.optional else "None"
    if not isinstance(value, torch.Tensor):
        return f"{describe(value)} (not a tensor)"
    if out.dtype is None:
        if not value.is_floating_point():
            return describe(value)
    elif value.dtype != out.dtype:
        return describe(value)
    if not _same_device(value.device, out.device):
        return describe(value)
    if out.shape is not None and tuple(value.shape) != tuple(out.shape):
        return describe(value)
    if out.fits is not None and not _broadcasts(tuple(value.shape), out.fits):
        return describe(value)
    return None


def _finite(t: torch.Tensor) -> bool:
    # one reduction read back (NaN and infinity propagate through a sum); a sum that overflowed
    # although every value is finite is re-checked exactly.  Detached first: reading back a value of
    # the autograd graph (a training forward's output) warns "Converting a tensor with
    # requires_grad=True to a scalar", and a check is no part of the graph anyway
    t = t.detach()
    return math.isfinite(float(t.sum())) or bool(torch.isfinite(t).all())


def _all_finite(tensors) -> bool:
    return all(_finite(t) for t in tensors
               if isinstance(t, torch.Tensor) and t.is_floating_point() and not t.is_meta)


# ---------------------------------------------------------------------- the wrapper
class Checked:
    """A component method with its output held to the family contract (see the module docstring).

    Stored as an instance attribute of the component (``module.forward = Checked(...)``), so
    ``module(x)`` and direct calls both go through it.  ``seen``: the input keys already checked.
    ``probing``: also turn an exception raised inside the component into a ``PluginError`` naming
    it (the build probe); ``context``: where the call happens, for the message."""

    __slots__ = ("module", "method", "func", "expect", "family", "name", "plugin", "version", "seen",
                 "probing", "context")

    def __init__(self, module: nn.Module, method: str, comp: Component, expect, probing: bool = False):
        self.module = module
        self.method = method
        self.func = getattr(type(module), method)  # the class's function: copies bind to the copy
        self.expect = expect
        self.family, self.name = comp.family, comp.name
        self.plugin, self.version = comp.plugin, comp.version
        self.seen: set = set()
        self.probing = probing
        self.context = "at run time"

    @property
    def who(self) -> str:
        return f"{self.family} '{self.name}' from plugin {self.plugin} {self.version}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.probing:
            return self._probe_call(args, kwargs)
        value = self.func(self.module, *args, **kwargs)
        if _compiling():
            return value  # a compiled graph is not checked (the eager runs before it were)
        key = _key(args, kwargs)
        if key not in self.seen:
            self._settle(key, value, args, kwargs)
        return value

    def _probe_call(self, args: tuple, kwargs: dict) -> Any:
        try:
            value = self.func(self.module, *args, **kwargs)
        except ZooError:
            raise  # a deliberate error (or an inner component's PluginError): keep it
        except Exception as exc:  # noqa: BLE001 - a plugin may raise anything
            raise self._error(f"raises {type(exc).__name__}: {clip(exc, 160)} in {self.method}() "
                              f"{self.context} (inputs {self._inputs(args)})") from exc
        key = _key(args, kwargs)
        if key not in self.seen:
            self._settle(key, value, args, kwargs)
        return value

    def _settle(self, key: tuple, value: Any, args: tuple, kwargs: dict) -> None:
        if self._check(value, args, kwargs):
            if len(self.seen) >= MAX_SEEN:
                self.seen.clear()
            self.seen.add(key)

    # the slow path: once per new input key
    def _check(self, value: Any, args: tuple, kwargs: dict) -> bool:
        """Raise on a violation; True when the call is settled (False: inconclusive, because the
        output is non-finite but so were the inputs or the weights, so check again next time)."""
        expect = self.expect(*args, **kwargs)
        many = isinstance(expect, tuple)
        if many and (not isinstance(value, (tuple, list)) or len(value) != len(expect)):
            names = ", ".join(e.name for e in expect)
            raise self._error(f"{self.method}() returned {describe(value)} {self.context} for inputs "
                              f"{self._inputs(args)}; the {self.family} contract is a tuple ({names}): "
                              + "; ".join(f"{e.name} {_expected(e)}" for e in expect))
        pairs = list(zip(value, expect)) if many else [(value, expect)]
        for v, e in pairs:
            got = _problem(v, e)
            if got is not None:
                what = f"{e.name} " if many else ""
                raise self._error(f"{self.method}() returned {what}{got} {self.context} for inputs "
                                  f"{self._inputs(args)}; the {self.family} contract is "
                                  f"{_expected(e)}")
        for v, e in pairs:
            if isinstance(v, torch.Tensor) and v.dtype in _FINITE_DTYPES and not _finite(v):
                inputs = [*args, *kwargs.values()]
                if not (_all_finite(inputs) and _all_finite(self.module.parameters())):
                    return False  # not this component's doing: NaN came in, or sits in weights
                nan, inf = int(torch.isnan(v).sum()), int(torch.isinf(v).sum())
                what = f"{e.name} " if many else ""
                raise self._error(f"{self.method}() returned {what}with {nan} NaN and {inf} infinite "
                                  f"values (of {v.numel()}) {self.context} for inputs "
                                  f"{self._inputs(args)}, all finite, and finite weights")
        return True

    @staticmethod
    def _inputs(args: tuple) -> str:
        shown = [str(tuple(a.shape)) if isinstance(a, torch.Tensor) else
                 f"Tq={a.q_len}, Tk={a.k_len}" if isinstance(a, MaskContext) else type(a).__name__
                 for a in args]
        return ", ".join(shown) or "none"

    def _error(self, what: str) -> PluginError:
        field = FAMILY[self.family].field or self.family
        return PluginError(f"{self.who} {what}", where=self.plugin,
                           fix=f"fix the component so it keeps its family's contract (report it "
                               f"to the plugin's author), or choose another {field} kind")


# ---------------------------------------------------------------------- installing
def owners(registry=None) -> dict[type, Component]:
    """Registered component class -> its :class:`~zoo.registry.Component` (first registration)."""
    reg = registry if registry is not None else get_registry()
    found: dict[type, Component] = {}
    for table in reg.components.values():
        for comp in table.values():
            if isinstance(comp.cls, type):
                found.setdefault(comp.cls, comp)
    return found


def _components(model: nn.Module, registry=None) -> Iterator[tuple[nn.Module, Component]]:
    table = owners(registry)
    for module in model.modules():
        comp = table.get(type(module))
        if comp is not None and FAMILY[comp.family].outputs:
            yield module, comp


def _builtin(comp: Component, registry) -> bool:
    info = registry.plugins.get(comp.plugin)
    return info is not None and info.builtin


def install(model: nn.Module, which: str | None = None, *, probing: bool = False,
            registry=None, modules: list[nn.Module] | None = None) -> list[Checked]:
    """Put a :class:`Checked` wrapper in front of every contract method of ``model``'s components
    (``which``: ``"plugins"`` -- components of plugins not shipped with zoo, the default --,
    ``"all"``, ``"off"``; None reads ``ZOO_CHECK_OUTPUTS``).  Wrappers already there are replaced.
    Returns the wrappers installed.  (``modules``: ``list(model.modules())`` if the caller has it.)"""
    which = policy(which)
    modules = list(model.modules()) if modules is None else modules
    uninstall(model, modules)
    if which == "off":
        return []
    reg = registry if registry is not None else get_registry()
    table = owners(reg)
    done = []
    for module in modules:
        comp = table.get(type(module))
        if comp is None or (which == "plugins" and _builtin(comp, reg)):
            continue
        for method, expect in FAMILY[comp.family].outputs:
            if callable(getattr(type(module), method, None)):
                wrapper = Checked(module, method, comp, expect, probing)
                module.__dict__[method] = wrapper
                done.append(wrapper)
    return done


#: every method name a family contract covers (where :func:`uninstall` looks)
METHODS = frozenset(m for f in FAMILY.values() for m, _ in f.outputs)


def installed(model: nn.Module, modules: list[nn.Module] | None = None) -> list[Checked]:
    """The :class:`Checked` wrappers on ``model``, in module order."""
    found = []
    for module in model.modules() if modules is None else modules:
        d = module.__dict__
        found.extend(d[n] for n in METHODS if n in d and type(d[n]) is Checked)
    return found


def uninstall(model: nn.Module, modules: list[nn.Module] | None = None) -> list[Checked]:
    """Remove every :class:`Checked` wrapper from ``model`` (its components then run as their
    classes define them); returns the wrappers removed."""
    found = installed(model, modules)
    for w in found:
        w.module.__dict__.pop(w.method, None)
    return found


@contextlib.contextmanager
def checking(model: nn.Module, which: str = "all", *, probing: bool = False, registry=None,
             modules: list[nn.Module] | None = None) -> Iterator[list[Checked]]:
    """Within the block, ``model``'s components are checked under ``which`` (fresh wrappers, no shape
    seen yet); afterwards the wrappers that were there before are back."""
    modules = list(model.modules()) if modules is None else modules
    before = uninstall(model, modules)
    try:
        yield install(model, which, probing=probing, registry=registry, modules=modules)
    finally:
        uninstall(model, modules)
        for w in before:
            w.module.__dict__[w.method] = w
