"""The ``zoo`` pytest plugin (entry point ``pytest11: zoo``): zoo's conformance kit in any test suite.

A plugin package's whole conformance suite is one line::

    # tests/core/test_conformance.py
    import zoo.testing
    test_zoo_conformance = zoo.testing.conformance_test(plugin="linear_attention")

or, spelled out, a test that takes the ``zoo_case`` fixture and a marker saying what to check::

    @pytest.mark.zoo_conformance(plugin="linear_attention", checks=["kv_cache", "save_load"])
    def test_conformance(zoo_case):
        zoo_case.check()

Each (component, check, architecture) becomes its own test, with an id such as
``attention:linear-kv_cache-decoder``; a check that does not apply (a capability the component does
not declare) is skipped with the reason, a failure shows the measured error and the tolerance.

Marker keywords: ``plugin`` (an entry-point name, or a list; loaded even when
``ZOO_DISABLE_PLUGIN_AUTOLOAD`` is set), ``module`` (a plugin module or dotted name, for code that is
not installed), ``components`` (``family:name`` or names; default: everything the plugins
registered), ``checks``, ``archs`` and ``params`` (``{"family:name": {param: value}}``).
``--zoo-plugin NAME`` on the command line adds entry-point plugins to every selection.

The ``zoo_registry`` fixture gives a test a registry with the built-ins plus the selected plugins,
installed as the process-wide registry for the duration of the test (so ``zoo.build`` sees it).

Nothing is imported or registered until a test asks for it; ``-p no:zoo`` disables the plugin.
"""
from __future__ import annotations

import pytest

# zoo.testing.kit (and with it torch) is imported inside the hooks below, on purpose: pytest loads
# this plugin in every test session on a machine where zoo is installed, most of which never use it.

_KITS: dict = {}


def pytest_addoption(parser):
    group = parser.getgroup("zoo", "zoo conformance kit")
    group.addoption("--zoo-plugin", action="append", default=[], metavar="NAME",
                    help="load this zoo entry-point plugin for the conformance kit and zoo_registry")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "zoo_conformance(plugin=None, module=None, components=None, checks=None, "
                   "archs=None, params=None): run zoo's conformance kit; the test takes `zoo_case`")


def _listify(x):
    if x is None:
        return []
    return [x] if isinstance(x, str) or not isinstance(x, (list, tuple, set)) else list(x)


def _selection(config, marker) -> dict:
    kw = dict(marker.kwargs) if marker is not None else {}
    plugins = _listify(kw.pop("plugin", None)) + _listify(kw.pop("plugins", None))
    plugins += list(config.getoption("zoo_plugin") or [])
    modules = _listify(kw.pop("module", None)) + _listify(kw.pop("modules", None))
    return {"plugins": plugins, "modules": modules, **kw}


def _kit(plugins, modules, params):
    from zoo.testing.kit import Kit, kit_registry

    key = (tuple(plugins), tuple(m if isinstance(m, str) else id(m) for m in modules),
           repr(sorted((params or {}).items())))
    if key not in _KITS:
        _KITS[key] = Kit(kit_registry(plugins, modules), params)
    return _KITS[key]


def pytest_generate_tests(metafunc):
    if "zoo_case" not in metafunc.fixturenames:
        return
    from zoo.testing.kit import BoundCase

    sel = _selection(metafunc.config, metafunc.definition.get_closest_marker("zoo_conformance"))
    kit = _kit(sel["plugins"], sel["modules"], sel.get("params"))
    names = _listify(sel.get("components"))
    if not names and (sel["plugins"] or sel["modules"]):
        # default: what the selected plugins registered, plus whether they loaded at all
        own = [p for p in kit.registry.plugins.values() if not p.builtin]
        names = [p.name for p in own]
    cases = [BoundCase(kit, c) for c in kit.cases(names or None, _listify(sel.get("checks")) or None,
                                                  _listify(sel.get("archs")) or None)]
    metafunc.parametrize("zoo_case", cases, ids=[c.id for c in cases])


@pytest.fixture
def zoo_registry(request):
    """A registry with the built-ins plus the selected plugins, installed process-wide."""
    from zoo.testing.kit import using_registry

    sel = _selection(request.config, request.node.get_closest_marker("zoo_conformance"))
    kit = _kit(sel["plugins"], sel["modules"], sel.get("params"))
    with using_registry(kit.registry) as reg:
        yield reg
