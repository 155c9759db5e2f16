"""The plugin manager and the component registry.

One ``pluggy.PluginManager("zoo")``.  Built-in components (the modules listed in
``zoo.plugins.BUILTINS``) are registered first, through exactly the hooks a third-party package uses;
then every entry point in the group ``zoo``, in name order.  Each third-party plugin is imported,
registered with pluggy and has its hooks called inside its own ``try``: a failure at import (any
exception, even ``SystemExit``), in a hook, or in a registration (bad name, bad class, bad
capabilities, a duplicate name) is recorded on the plugin's :class:`PluginInfo` (``zoo plugins``
shows it) and never breaks zoo or the other plugins.  A plugin's valid registrations are kept.

pluggy's ``check_pending`` idea, per plugin: a hook implementation whose name matches no hookspec (a
misspelling such as ``register_attentions``) and a function that looks like a hook but lacks
``@zoo.hookimpl`` are both reported on that plugin, with the closest valid hook name.

Environment controls, in the spirit of pytest (``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` / ``-p``):

``ZOO_DISABLE_PLUGIN_AUTOLOAD=1``
    load no entry-point plugins automatically (the test suite sets this so plugins installed on the
    machine never leak into tests).
``ZOO_PLUGINS=name1,name2``
    load only these entry-point plugins (by entry-point name).  The names are loaded even when
    autoloading is disabled, like ``pytest -p``; a name no installed package provides is reported.

The registry is built lazily on first use, so ``import zoo`` stays cheap.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata as md
import inspect
import os
import re
import threading
import traceback
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Iterable

import pluggy

from . import hookspecs
from .components import FAMILIES as FAMILY_TABLE
from .components import FAMILY_BASES, Capabilities
from .deprecation import moved, moved_method
from .errors import PluginError, UnknownComponentError, closest, did_you_mean
from .version import __version__

#: the package of the built-in plugins (the repository's ``plugins/`` folder), listing them in
#: ``BUILTINS``; each is registered through the same hooks a third-party plugin uses
BUILTIN_PACKAGE = "zoo.plugins"

#: family -> hook name (from the one family table, :data:`zoo.components.FAMILIES`)
FAMILY_HOOKS = {f.name: f.hook for f in FAMILY_TABLE}
#: the family names, in table order
FAMILY_NAMES = tuple(FAMILY_HOOKS)
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
#: the values ``Capabilities.dtypes`` / ``.devices`` may name
KNOWN_DTYPES = ("float32", "float64", "bfloat16", "float16")
KNOWN_DEVICES = ("cpu", "cuda", "mps", "xpu")


@dataclass(frozen=True)
class Component:
    """One registered component: what a spec's ``kind:`` resolves to."""

    family: str
    name: str
    cls: Any
    config: type | None
    plugin: str
    version: str

    @property
    def key(self) -> str:
        """``"family:name"``, unique across the registry."""
        return f"{self.family}:{self.name}"

    @property
    def capabilities(self) -> Capabilities:
        return getattr(self.cls, "capabilities", Capabilities())

    @property
    def doc(self) -> str:
        """First paragraph of the component's docstring (module docstring as a fallback)."""
        text = (self.cls.__doc__ or "").strip()
        if not text or text == (FAMILY_BASES[self.family].__doc__ or "").strip():
            mod = importlib.import_module(self.cls.__module__)
            text = (mod.__doc__ or "").strip()
        return text.split("\n\n")[0].replace("\n", " ")

    @property
    def lesson(self) -> dict[str, str]:
        """The component's lesson, ``{"en": ..., "zh": ...}``: the problem it solves, its equation and
        when it helps (the class attribute ``lesson``; ``{}`` when a component has none)."""
        lesson = getattr(self.cls, "lesson", None)
        return dict(lesson) if isinstance(lesson, dict) else {}

    def make(self, ctx: Any, **params: Any) -> Any:
        """The component on its own, ``cls(config(**params), ctx)`` (``ctx``: a
        :class:`~zoo.components.BuildContext`, e.g. ``BuildContext.for_heads(4, 8)``), in eval mode.
        Inside a model the engine builds components from the spec instead."""
        config = self.config(**params) if self.config is not None else None
        return self.cls(config, ctx).eval()

    def params(self) -> dict[str, Any]:
        """Parameter name -> default (``dataclasses.MISSING`` where required)."""
        if self.config is None:
            return {}
        out = {}
        for f in dataclasses.fields(self.config):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                out[f.name] = f.default_factory()  # type: ignore[misc]
            else:
                out[f.name] = dataclasses.MISSING
        return out


@dataclass
class PluginInfo:
    """What ``zoo plugins`` shows for one plugin.

    ``source``: ``"builtin"``, ``"distribution NAME"`` (an installed package's entry point),
    ``"requested"`` (a name asked for through ``ZOO_PLUGINS`` that nobody provides) or whatever a
    caller of :meth:`Registry.add_plugin` passed (``"test"``).  ``module``: the entry point's target
    (``package.module``), or the module's name.
    """

    name: str
    version: str
    source: str  # "builtin" or "distribution NAME"
    components: list[str] = field(default_factory=list)  # "family:name"
    errors: list[str] = field(default_factory=list)
    module: str = ""
    distribution: str | None = None

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def builtin(self) -> bool:
        return self.source == "builtin"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able row (``zoo plugins --json``, the UI's plugin table)."""
        return {"name": self.name, "version": self.version, "source": self.source,
                "module": self.module, "distribution": self.distribution, "ok": self.ok,
                "components": list(self.components), "errors": list(self.errors)}


class Registry:
    """Components by family and name, with the plugin that registered each."""

    def __init__(self, *, builtins: bool = True, entry_points: bool | None = None):
        self.pm = pluggy.PluginManager("zoo")
        self.pm.add_hookspecs(hookspecs)
        self.components: dict[str, dict[str, Component]] = {f: {} for f in FAMILY_NAMES}
        self.plugins: dict[str, PluginInfo] = {}
        if builtins:
            # loaded by name, like an entry point: the engine never imports a plugin module
            builtin_pkg = importlib.import_module(BUILTIN_PACKAGE)
            for modname in builtin_pkg.BUILTINS:
                mod = importlib.import_module(f"{builtin_pkg.__name__}.{modname}")
                self.add_plugin(mod, name=f"zoo.{modname}", source="builtin", strict=True)
        only = _env_names("ZOO_PLUGINS")
        if entry_points is None:
            autoload = os.environ.get("ZOO_DISABLE_PLUGIN_AUTOLOAD", "").strip().lower() in (
                "", "0", "false", "no")
            entry_points = autoload or bool(only)  # named plugins load even with autoload off
        if entry_points:
            self.load_entry_points(only=only or None)

    # ------------------------------------------------------------------ loading
    def load_entry_points(self, only: Iterable[str] | None = None) -> None:
        """Load the plugins of the ``zoo`` entry-point group, each isolated from the others.

        ``only``: entry-point names to load (default: ``$ZOO_PLUGINS`` if set, else all).  A requested
        name that no installed distribution provides is recorded as a plugin with an error.
        """
        wanted = set(only) if only is not None else set(_env_names("ZOO_PLUGINS"))
        found = set()
        for ep in sorted(md.entry_points(group="zoo"), key=lambda e: (e.name, e.value)):
            if wanted and ep.name not in wanted:
                continue
            found.add(ep.name)
            self.load_entry_point(ep)
        for name in sorted(wanted - found):
            info = self._new_info(name, "?", "requested")
            installed = sorted({e.name for e in md.entry_points(group="zoo")})
            hint = did_you_mean(name, installed)
            info.errors.append(f"requested (ZOO_PLUGINS or the caller), but no installed package "
                               f"provides an entry point '{name}' in the group 'zoo' (installed: "
                               f"{', '.join(installed) or 'none'})" + (f"; {hint}" if hint else ""))

    def load_entry_point(self, ep: md.EntryPoint) -> PluginInfo:
        """Import one entry point and register it; every failure is recorded, never raised."""
        dist = getattr(ep, "dist", None)
        version = str(getattr(dist, "version", None) or "?")
        dist_name = _dist_name(dist)
        source = f"distribution {dist_name}" if dist_name else "entry point"
        try:
            obj = ep.load()
        except BaseException as exc:  # noqa: BLE001 - a plugin may raise anything at import
            if isinstance(exc, KeyboardInterrupt):
                raise
            info = self._new_info(ep.name, version, source, module=ep.value, distribution=dist_name)
            info.errors.append(f"import of '{ep.value}' failed: {type(exc).__name__}: {exc} "
                               f"({_last_frame(exc)})")
            return info
        return self.add_plugin(obj, name=ep.name, source=source, version=version, module=ep.value,
                               distribution=dist_name)

    def _new_info(self, name: str, version: str, source: str, **kw) -> PluginInfo:
        """A fresh :class:`PluginInfo`; a name already taken by another plugin gets an error."""
        clash = self.plugins.get(name)
        if clash is None:
            info = self.plugins[name] = PluginInfo(name, version, source, **kw)
            return info
        i = 2
        while f"{name}#{i}" in self.plugins:
            i += 1
        info = self.plugins[f"{name}#{i}"] = PluginInfo(f"{name}#{i}", version, source, **kw)
        info.errors.append(f"plugin name '{name}' is already used by {clash.source} "
                           f"({clash.module or clash.name}); this one was not loaded")
        return info

    def add_plugin(self, obj: ModuleType | object, *, name: str, source: str = "test",
                   version: str | None = None, strict: bool = False, module: str | None = None,
                   distribution: str | None = None) -> PluginInfo:
        """Register one plugin object (module or instance) and run its hooks.

        ``strict=True`` (built-ins) raises on any problem; otherwise problems are recorded on the
        plugin's :class:`PluginInfo` and the plugin's valid registrations are kept.
        """
        if version is None:
            version = str(getattr(obj, "__version__", "") or "") or __version__
        modname = module or getattr(obj, "__name__", None) or type(obj).__name__
        info = self._new_info(name, version, source, module=modname, distribution=distribution)
        if info.name != name:  # name clash: recorded by _new_info
            if strict:
                raise PluginError(info.errors[-1], where=f"plugin {name}")
            return info

        def problem(msg: str, exc: BaseException | None = None) -> None:
            if strict:
                raise PluginError(msg, where=f"plugin {name}",
                                  fix="see the plugin author's guide, docs/PLUGINS.md") from exc
            info.errors.append(msg)

        try:
            self.pm.register(obj, name=name)
        except Exception as exc:  # pluggy validation: bad hookimpl signature, duplicate object, ...
            problem(f"could not register plugin: {type(exc).__name__}: {exc}", exc)
            return info
        for msg in self._hook_name_problems(obj):
            problem(msg)
        for family, hook_name in FAMILY_HOOKS.items():
            for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
                if impl.plugin is not obj:
                    continue
                register = _Register(self, family, info, strict)
                try:
                    # hooks only ever gain parameters: pass each implementation what it asks for
                    offered = {"register": register}
                    impl.function(**{a: offered[a] for a in impl.argnames})
                except PluginError:
                    if strict:
                        raise
                except Exception as exc:  # noqa: BLE001 - a hook may raise anything
                    problem(f"{hook_name} raised {type(exc).__name__}: {exc} ({_last_frame(exc)})",
                            exc)
                finally:
                    register.closed = True
        if not info.components and not info.errors:
            problem("the plugin registered no components: does it implement a hook such as "
                    "register_attention(register) decorated with @zoo.hookimpl?")
        return info

    def _hook_name_problems(self, obj: object) -> list[str]:
        """Misspelled hook implementations and hook-like functions missing ``@zoo.hookimpl``."""
        out = []
        valid = set(FAMILY_HOOKS.values())
        for caller in self.pm.get_hookcallers(obj) or []:
            if caller.spec is None:  # pluggy would raise in check_pending()
                hint = did_you_mean(caller.name, valid)
                out.append(f"unknown hook '{caller.name}': zoo has no such hookspec"
                           + (f" ({hint})" if hint else f"; valid hooks: {', '.join(sorted(valid))}"))
        for attr in dir(obj):
            if attr.startswith("_") or attr in ("register",):
                continue
            try:
                fn = getattr(obj, attr)
            except Exception:  # noqa: BLE001 - properties of odd plugin objects
                continue
            if not (inspect.isfunction(fn) or inspect.ismethod(fn)) or hasattr(fn, "zoo_impl"):
                continue
            if getattr(fn, "__module__", None) != getattr(obj, "__name__", getattr(fn, "__module__",
                                                                                   None)):
                continue  # imported helpers are not hooks
            if attr in valid or (attr.startswith("register_") and did_you_mean(attr, valid)):
                out.append(f"function '{attr}' looks like a hook but is not decorated with "
                           f"@zoo.hookimpl, so zoo never calls it")
        return out

    # ------------------------------------------------------------------ lookup
    def get(self, family: str, name: str, *, where: str | None = None) -> Component:
        """The component ``name`` of ``family``; an :class:`UnknownComponentError` if absent."""
        if family not in self.components:
            raise UnknownComponentError.of("registry.unknown_family", where=where, options=FAMILY_NAMES,
                                           family=family)
        table = self.components[family]
        if name not in table:
            best = closest(name, table)
            broken = [p.name for p in self.plugins.values() if p.errors]
            # the failed plugins are a sentence of their own ("; "), each translated by its id
            raise UnknownComponentError.of(
                "registry.unknown_component", where=where, options=table, family=family, name=name,
                suggestion=best, plugins=", ".join(broken),
                fix=("hint.did_you_mean" if best else "registry.unknown_component",
                     "registry.broken_plugins" if broken else None))
        return table[name]

    def names(self, family: str) -> list[str]:
        return sorted(self.components[family])

    def list(self, family: str | None = None) -> list[Component]:
        fams = [family] if family else list(FAMILY_NAMES)
        for f in fams:
            if f not in self.components:
                raise UnknownComponentError(f"unknown component family '{f}'", options=FAMILY_NAMES)
        return [c for f in fams for _, c in sorted(self.components[f].items())]

    # ------------------------------------------------------------------ moved
    # the compatibility rules moved to zoo.guard.compat (the registry loads and looks up);
    # registry.require(spec, ...) still works, as zoo.guard.compat.require(spec, ..., registry=registry)
    stack_components = moved_method("Registry", "stack_components", "zoo.guard.compat:stack_components")
    check_compatible = moved_method("Registry", "check_compatible", "zoo.guard.compat:check_compatible")
    check_runtime = moved_method("Registry", "check_runtime", "zoo.guard.compat:check_runtime")
    require = moved_method("Registry", "require", "zoo.guard.compat:require")




class _Register:
    """The ``register`` callback handed to one hook call of one plugin."""

    def __init__(self, reg: Registry, family: str, info: PluginInfo, strict: bool):
        self.reg, self.family, self.info, self.strict = reg, family, info, strict
        self.closed = False

    def __call__(self, name: str, component: Any, *, config: type | None = None) -> None:
        family, info = self.family, self.info
        where = f"plugin {info.name}, {FAMILY_HOOKS[family]}"
        problem = _registration_problem(self.reg, family, name, component, config, info.name)
        if self.closed:
            problem = (f"register({name!r}, ...) was called after {FAMILY_HOOKS[family]} returned; "
                       f"register components inside the hook")
        if problem:
            if self.strict:
                raise PluginError(problem, where=where, fix="rename the component or remove "
                                  "one of the plugins" if "duplicate" in problem else None)
            info.errors.append(problem)
            return
        self.reg.components[family][name] = Component(family, name, component, config,
                                                      info.name, info.version)
        info.components.append(f"{family}:{name}")


def _registration_problem(reg: Registry, family: str, name: Any, component: Any, config: Any,
                          plugin: str) -> str | None:
    base = FAMILY_BASES[family]
    if not isinstance(name, str) or not _NAME_RE.match(name):
        return (f"invalid component name {name!r}: use lower-case letters, digits and '_', "
                f"starting with a letter")
    if not (isinstance(component, type) and issubclass(component, base)):
        return f"'{name}' must be a subclass of zoo.components.{base.__name__}, got {component!r}"
    if config is not None and not (dataclasses.is_dataclass(config) and isinstance(config, type)):
        return f"config of '{name}' must be a dataclass type, got {config!r}"
    if config is not None and not config.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        return (f"config of '{name}' must be a frozen dataclass (@dataclass(frozen=True)): specs "
                f"are immutable and hashable")
    caps = getattr(component, "capabilities", Capabilities())
    if not isinstance(caps, Capabilities):
        return (f"'{name}'.capabilities must be a zoo.components.Capabilities instance, got "
                f"{type(caps).__name__}")
    bad = [d for d in caps.dtypes if d not in KNOWN_DTYPES]
    bad += [d for d in caps.devices if d not in KNOWN_DEVICES]
    if bad or not caps.dtypes or not caps.devices:
        return (f"'{name}'.capabilities lists unknown or no dtypes/devices {bad}: use dtypes from "
                f"{list(KNOWN_DTYPES)} and devices from {list(KNOWN_DEVICES)}")
    if family == "activation" and not (callable(getattr(component, "fn", None))
                                       or component.forward is not base.forward):
        return (f"activation '{name}' gives no function: set `fn = staticmethod(F.NAME)` (a "
                f"function tensor -> tensor) or override forward")
    if name in reg.components[family]:
        other = reg.components[family][name].plugin
        return (f"duplicate {family} name '{name}': already registered by plugin '{other}', now "
                f"also by '{plugin}'; the first registration is kept")
    return None


def _env_names(var: str) -> list[str]:
    return [s.strip() for s in os.environ.get(var, "").split(",") if s.strip()]


def _dist_name(dist: Any) -> str | None:
    if dist is None:
        return None
    try:
        return dist.name or dist.metadata["Name"]
    except Exception:  # noqa: BLE001 - broken metadata
        return None


def _last_frame(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    return f"{tb[-1].filename}:{tb[-1].lineno}" if tb else "?"


_REGISTRY: Registry | None = None
_LOCK = threading.Lock()


def get_registry() -> Registry:
    """The process-wide registry, built on first use."""
    global _REGISTRY
    if _REGISTRY is None:
        with _LOCK:
            if _REGISTRY is None:
                _REGISTRY = Registry()
    return _REGISTRY


def set_registry(registry: Registry | None) -> Registry | None:
    """Replace the process-wide registry (tests; ``None`` rebuilds on next use). Returns the old."""
    global _REGISTRY
    old, _REGISTRY = _REGISTRY, registry
    return old


def blame(exc: BaseException) -> BaseException:
    """Add a note to ``exc`` naming the plugin component whose code raised it, and return it.

    Called only when an exception is already on its way out of a model's forward (so the normal
    path pays nothing): the traceback is walked and the innermost frame whose ``self`` is an
    instance of a registered component class names the family, the component and its plugin."""
    if getattr(exc, "_zoo_blamed", False) or not hasattr(exc, "add_note"):
        return exc
    owners = {}
    for table in get_registry().components.values():
        for comp in table.values():
            if isinstance(comp.cls, type):
                owners.setdefault(comp.cls, comp)
    found, tb = None, exc.__traceback__
    while tb is not None:
        owner = owners.get(type(tb.tb_frame.f_locals.get("self")))
        if owner is not None:
            found = owner  # keep walking: the innermost component is the one to name
        tb = tb.tb_next
    if found is not None:
        exc.add_note(f"zoo: raised inside {found.family} component '{found.name}' from plugin "
                     f"{found.plugin} {found.version}; if the inputs are valid, report it to that "
                     f"plugin's author")
        exc._zoo_blamed = True
    return exc


def plugin_sources(plugin_names) -> dict[str, str]:
    """``{plugin: distribution name or "builtin"}`` for plugins of the process registry; stored in
    checkpoints so that loading one without the plugin can say what to ``pip install``."""
    plugins = get_registry().plugins
    out = {}
    for name in plugin_names:
        info = plugins.get(name)
        if info is not None:
            out[name] = "builtin" if info.builtin else (info.distribution or info.source)
    return out


def missing_plugins_hint(saved: dict[str, str], sources: dict[str, str]) -> tuple[str, str]:
    """``(what, fix)`` for a checkpoint whose plugins are not all loaded: which of the ``saved``
    plugins (``{name: version}``) are missing, and what to install."""
    plugins = get_registry().plugins
    missing = [n for n in saved if n not in plugins or not plugins[n].components]
    if not missing:
        return f"it was saved with plugins {saved}", "install the plugin that provides it"
    parts, installs = [], []
    for n in missing:
        dist = sources.get(n)
        parts.append(f"'{n}' {saved[n]}" + (f" (distribution {dist})" if dist and dist != "builtin"
                                              else ""))
        if dist and dist != "builtin" and not dist.startswith(("entry point", "test", "module")):
            installs.append(f"{dist}>={saved[n]}" if saved[n] not in ("", "?") else dist)
    what = f"it needs plugin {', '.join(parts)}, which is not loaded"
    fix = (f"pip install {' '.join(installs)}" if installs else "install the plugin named above")
    off = os.environ.get("ZOO_DISABLE_PLUGIN_AUTOLOAD", "").strip().lower()
    if off not in ("", "0", "false", "no"):
        fix += f" (ZOO_DISABLE_PLUGIN_AUTOLOAD is set: also set ZOO_PLUGINS={','.join(missing)})"
    return what, fix + "; `zoo plugins` lists what is loaded"


def activation_fn(name: str, *, where: str = "ffn.activation", registry: Registry | None = None):
    """The function a feed-forward block applies for ``activation: name``: the registered
    :class:`~zoo.components.ActivationFunction`'s ``fn`` itself (a plain function: calling it costs
    what calling ``F.gelu`` costs), or an instance of the class when it overrides ``forward``
    instead.  Blocks call it once, in ``__init__``::

        self.act = activation_fn(config.activation)

    An unknown name is an :class:`~zoo.errors.UnknownComponentError` at ``where`` listing the
    registered activations (``zoo components activation``)."""
    comp = (registry or get_registry()).get("activation", name, where=where)
    fn = getattr(comp.cls, "fn", None)
    return fn if fn is not None else comp.cls(None, None)


def list_components(family: str | None = None) -> list[Component]:
    """Everything registered (optionally one family), each with its owning plugin and version."""
    return get_registry().list(family)


def list_plugins() -> list[PluginInfo]:
    """Every plugin seen, built-in or third-party, with its components and any errors."""
    return list(get_registry().plugins.values())


#: moved with the compatibility rules
__getattr__ = moved(__name__)  # the old names it had: zoo.deprecation.NAMES
