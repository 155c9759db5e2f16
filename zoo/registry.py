"""The plugin manager and the component registry.

One ``pluggy.PluginManager("zoo")``.  Built-in components (the modules listed in
``zoo.plugins.BUILTINS``) are registered first, through exactly the hooks a third-party package uses;
then every entry point in the group ``zoo``.  Each third-party plugin is imported and called inside its
own ``try``: a broken plugin is recorded (``zoo plugins`` shows it) and never breaks zoo.

Environment controls, in the spirit of pytest:

``ZOO_DISABLE_PLUGIN_AUTOLOAD=1``
    load no entry-point plugins (the test suite sets this so plugins installed on the machine never
    leak into tests).
``ZOO_PLUGINS=name1,name2``
    load only these entry-point plugins (by entry-point name).

The registry is built lazily on first use, so ``import zoo`` stays cheap.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata as md
import os
import re
import threading
import traceback
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pluggy

from . import hookspecs
from .components import FAMILY_BASES, Capabilities
from .errors import PluginError, UnknownComponentError, did_you_mean

#: family -> hook name
FAMILY_HOOKS = {
    "attention": "register_attention",
    "mask": "register_masks",
    "position": "register_positions",
    "norm": "register_norms",
    "placement": "register_placements",
    "ffn": "register_ffns",
    "tokenizer": "register_tokenizers",
}
FAMILIES = tuple(FAMILY_HOOKS)
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


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
    """What ``zoo plugins`` shows for one plugin."""

    name: str
    version: str
    source: str  # "builtin" or "distribution NAME"
    components: list[str] = field(default_factory=list)  # "family:name"
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


class Registry:
    """Components by family and name, with the plugin that registered each."""

    def __init__(self, *, builtins: bool = True, entry_points: bool | None = None):
        self.pm = pluggy.PluginManager("zoo")
        self.pm.add_hookspecs(hookspecs)
        self.components: dict[str, dict[str, Component]] = {f: {} for f in FAMILIES}
        self.plugins: dict[str, PluginInfo] = {}
        if builtins:
            from . import plugins as builtin_pkg

            for modname in builtin_pkg.BUILTINS:
                mod = importlib.import_module(f"{builtin_pkg.__name__}.{modname}")
                self.add_plugin(mod, name=f"zoo.{modname}", source="builtin", strict=True)
        if entry_points is None:
            entry_points = os.environ.get("ZOO_DISABLE_PLUGIN_AUTOLOAD", "").strip() in ("", "0")
        if entry_points:
            self.load_entry_points()

    # ------------------------------------------------------------------ loading
    def load_entry_points(self) -> None:
        """Load every plugin in the ``zoo`` entry-point group, each isolated from the others."""
        only = {s.strip() for s in os.environ.get("ZOO_PLUGINS", "").split(",") if s.strip()}
        for ep in md.entry_points(group="zoo"):
            if only and ep.name not in only:
                continue
            dist = getattr(ep, "dist", None)
            version = getattr(dist, "version", "?") if dist else "?"
            source = f"distribution {dist.name}" if dist else "entry point"
            try:
                obj = ep.load()
            except BaseException as exc:  # noqa: BLE001 - a plugin may raise anything at import
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                info = self.plugins.setdefault(ep.name, PluginInfo(ep.name, version, source))
                info.errors.append(f"import failed: {type(exc).__name__}: {exc}")
                continue
            self.add_plugin(obj, name=ep.name, source=source, version=version)

    def add_plugin(self, obj: ModuleType | object, *, name: str, source: str = "test",
                   version: str | None = None, strict: bool = False) -> PluginInfo:
        """Register one plugin object (module or instance) and run its hooks.

        ``strict=True`` (built-ins) raises on any problem; otherwise problems are recorded on the
        plugin's :class:`PluginInfo` and the plugin's valid registrations are kept.
        """
        if version is None:
            from . import __version__

            version = __version__
        info = self.plugins.setdefault(name, PluginInfo(name, version, source))
        try:
            self.pm.register(obj, name=name)
        except Exception as exc:  # pluggy validation: bad hookimpl signature, duplicate object, ...
            msg = f"could not register plugin: {type(exc).__name__}: {exc}"
            if strict:
                raise PluginError(msg, where=f"plugin {name}") from exc
            info.errors.append(msg)
            return info
        # misspelled hooks (check_pending, reported per plugin)
        for hook_name in dir(obj):
            if hook_name.startswith("register_") and hook_name not in FAMILY_HOOKS.values():
                impl = getattr(obj, hook_name)
                if callable(impl) and hasattr(impl, "zoo_impl"):
                    hint = did_you_mean(hook_name, FAMILY_HOOKS.values())
                    info.errors.append(f"unknown hook '{hook_name}'" + (f" ({hint})" if hint else ""))
        for family, hook_name in FAMILY_HOOKS.items():
            for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
                if impl.plugin is not obj:
                    continue
                register = self._make_register(family, info, strict)
                try:
                    # hooks only ever gain parameters: pass each implementation what it asks for
                    offered = {"register": register}
                    impl.function(**{a: offered[a] for a in impl.argnames})
                except PluginError:
                    if strict:
                        raise
                except Exception as exc:  # noqa: BLE001
                    if strict:
                        raise
                    info.errors.append(f"{hook_name} raised {type(exc).__name__}: {exc} "
                                       f"({_last_frame(exc)})")
        return info

    def _make_register(self, family: str, info: PluginInfo, strict: bool):
        base = FAMILY_BASES[family]

        def register(name: str, component: Any, *, config: type | None = None) -> None:
            where = f"plugin {info.name}, {FAMILY_HOOKS[family]}"
            problem = None
            if not isinstance(name, str) or not _NAME_RE.match(name):
                problem = (f"invalid component name {name!r}: use lower-case letters, digits and "
                           f"'_', starting with a letter")
            elif not (isinstance(component, type) and issubclass(component, base)):
                problem = (f"'{name}' must be a subclass of zoo.components.{base.__name__}, "
                           f"got {component!r}")
            elif config is not None and not (dataclasses.is_dataclass(config)
                                             and isinstance(config, type)):
                problem = f"config of '{name}' must be a dataclass type, got {config!r}"
            elif name in self.components[family]:
                other = self.components[family][name].plugin
                problem = (f"duplicate {family} name '{name}': already registered by plugin "
                           f"'{other}', now also by '{info.name}'")
            if problem:
                if strict:
                    raise PluginError(problem, where=where, fix="rename the component or remove "
                                      "one of the plugins")
                info.errors.append(problem)
                return
            self.components[family][name] = Component(family, name, component, config,
                                                      info.name, info.version)
            info.components.append(f"{family}:{name}")

        return register

    # ------------------------------------------------------------------ lookup
    def get(self, family: str, name: str, *, where: str | None = None) -> Component:
        """The component ``name`` of ``family``; an :class:`UnknownComponentError` if absent."""
        if family not in self.components:
            raise UnknownComponentError(f"unknown component family '{family}'", where=where,
                                        options=FAMILIES)
        table = self.components[family]
        if name not in table:
            hint = did_you_mean(name, table)
            fix = hint or "install the plugin that provides it, or pick a registered name"
            broken = [p.name for p in self.plugins.values() if p.errors]
            if broken:
                fix += f" (plugins that failed to load: {', '.join(broken)}; run `zoo plugins`)"
            raise UnknownComponentError(f"no {family} named '{name}'", where=where,
                                        options=table, fix=fix)
        return table[name]

    def names(self, family: str) -> list[str]:
        return sorted(self.components[family])

    def list(self, family: str | None = None) -> list[Component]:
        fams = [family] if family else list(FAMILIES)
        for f in fams:
            if f not in self.components:
                raise UnknownComponentError(f"unknown component family '{f}'", options=FAMILIES)
        return [c for f in fams for _, c in sorted(self.components[f].items())]


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


def list_components(family: str | None = None) -> list[Component]:
    """Everything registered (optionally one family), each with its owning plugin and version."""
    return get_registry().list(family)


def list_plugins() -> list[PluginInfo]:
    """Every plugin seen, built-in or third-party, with its components and any errors."""
    return list(get_registry().plugins.values())
