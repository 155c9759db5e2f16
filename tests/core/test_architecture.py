"""The house in order: zoo's imports run one way (issue 20, goal 1).

Every ``import`` in ``zoo/`` (at module level *and* inside functions: an import moved into a
function to dodge a circle is still an arrow) is read with ``ast`` and checked against
:data:`FLOORS`, the declared order of the engine from the ground up:

- no import circles (a strongly connected group of two or more modules);
- no upward import: a module imports only modules on its own floor or below;
- the engine never imports a plugin module (``zoo.plugins`` / ``plugins``) nor the UI (only the
  ``zoo ui`` command starts it); the registry loads the built-ins *by name*, like entry points;
- every module of ``zoo/`` stands on a declared floor, so a new module is placed on purpose;
- no module (engine, UI or plugin) imports another module's private ``_names``: a name another
  module needs is public where it belongs;
- ``zoo.experiment`` imports the rest of zoo at module level, never inside a function (only heavy
  optional third-party libraries -- matplotlib, submitit -- wait until they are used).

A name taken from a package face (``from zoo import __version__``, ``from .. import data``) is
charged to the module the face got it from, or to the submodule of that name.
"""
from __future__ import annotations

import ast
import fnmatch
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "zoo"

#: The floors of the engine, from the ground up.  A module may import its own floor and below.
#: Patterns (fnmatch) place packages; ``zoo`` is the package face, the public API.
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ground", ("zoo.version", "zoo.messages", "zoo.errors", "zoo.deprecation", "zoo.hookspecs",
                "zoo.components")),
    ("registry", ("zoo.registry",)),
    ("guard", ("zoo.guard", "zoo.guard.*")),
    ("model", ("zoo.model", "zoo.model.*")),
    ("io", ("zoo.io", "zoo.io.*")),
    ("run", ("zoo.run", "zoo.run.*")),
    ("inside", ("zoo.inside", "zoo.inside.*")),
    ("tools", ("zoo.convert", "zoo.convert.*", "zoo.testing", "zoo.testing.*", "zoo.train", "zoo.train.*",
               "zoo.experiment", "zoo.experiment.*")),
    ("api", ("zoo",)),
    ("commands", ("zoo.commands", "zoo.commands.*", "zoo.cli")),
)
#: Packages mapped under ``zoo`` from other folders (pyproject's package-dir): not engine modules.
PLUGIN_PACKAGES = ("zoo.plugins", "plugins")
UI_PACKAGES = ("zoo.ui", "ui")
DATA_PACKAGES = ("zoo.checkpoints",)
#: The one place the engine may import the UI: the command that starts it.
UI_DOORS = {"zoo.commands.ui"}


# ---------------------------------------------------------------------- reading the imports
def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_sources(root: Path = ZOO) -> dict[str, tuple[Path, ast.Module]]:
    return {module_name(p, root): (p, ast.parse(p.read_text(encoding="utf-8")))
            for p in sorted(root.rglob("*.py"))}


def _package(mod: str, path: Path) -> str:
    return mod if path.name == "__init__.py" else mod.rpartition(".")[0]


def _from_base(package: str, node: ast.ImportFrom) -> str:
    """The module a ``from X import ...`` reads from, relative dots resolved against ``package``."""
    if node.level:
        base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))
    return node.module or ""


def _face_names(tree: ast.Module, package: str) -> dict[str, str]:
    """``name -> module`` for what a package face (``__init__``) imports from its submodules."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for a in node.names:
                out[a.asname or a.name] = f"{package}.{node.module}"
    return out


def import_graph(sources: dict[str, tuple[Path, ast.Module]]) -> dict[str, dict[str, int]]:
    """``module -> {imported module: line}`` over every import statement, wherever it stands.
    Imports of modules outside ``sources`` are kept when they are zoo's (plugins, ui, data) so the
    rules can see them; the standard library and third parties are dropped."""
    modules = set(sources)
    faces = {m: _face_names(tree, m) for m, (p, tree) in sources.items() if p.name == "__init__.py"}
    graph: dict[str, dict[str, int]] = {m: {} for m in modules}
    for mod, (path, tree) in sources.items():
        package = _package(mod, path)
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base_mod = _from_base(package, node)
                for a in node.names:
                    sub = f"{base_mod}.{a.name}"
                    if sub in modules or sub.startswith(PLUGIN_PACKAGES + UI_PACKAGES + DATA_PACKAGES):
                        targets.append(sub)  # a submodule: ``from . import budget``
                    elif base_mod in faces and a.name in faces[base_mod]:
                        targets.append(faces[base_mod][a.name])  # a name a package face re-exports
                    else:
                        targets.append(base_mod)
            for t in targets:
                if t.split(".")[0] not in ("zoo", "plugins", "ui"):
                    continue
                if t not in modules and t.rpartition(".")[0] in modules \
                        and not t.startswith(PLUGIN_PACKAGES + UI_PACKAGES + DATA_PACKAGES):
                    t = t.rpartition(".")[0]  # ``import zoo.x.y`` where y is no module
                if t != mod:
                    graph[mod].setdefault(t, node.lineno)
    return graph


def floor_of(module: str, floors=FLOORS) -> int | None:
    for i, (_, patterns) in enumerate(floors):
        if any(fnmatch.fnmatchcase(module, p) for p in patterns):
            return i
    return None


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected groups of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def private_imports(sources: dict[str, tuple[Path, ast.Module]]) -> list[str]:
    """``"a:LINE from b import _name"`` for every private name (one underscore, not a dunder) that a
    module takes from another module of zoo, the UI or the plugins."""
    bad = []
    for mod, (path, tree) in sorted(sources.items()):
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = _from_base(_package(mod, path), node)
            if base.split(".")[0] not in ("zoo", "plugins", "ui") or base == mod:
                continue
            bad += [f"{mod}:{node.lineno} from {base} import {a.name}" for a in node.names
                    if a.name.startswith("_") and not (a.name.startswith("__") and a.name.endswith("__"))]
    return bad


def function_level_imports(sources: dict[str, tuple[Path, ast.Module]], under: str) -> list[str]:
    """``"a:LINE in f: import ..."`` for every import of a zoo module made inside a function of a
    module at or below ``under``."""
    bad = []
    for mod, (path, tree) in sorted(sources.items()):
        if mod != under and not mod.startswith(under + "."):
            continue
        seen: set[int] = set()
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if id(node) in seen or not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                seen.add(id(node))
                targets = ([a.name for a in node.names] if isinstance(node, ast.Import)
                           else [_from_base(_package(mod, path), node)])
                if any(t.split(".")[0] == "zoo" for t in targets):
                    bad.append(f"{mod}:{node.lineno} in {fn.name}: {ast.unparse(node)}")
    return bad


def upward(graph: dict[str, dict[str, int]], floors=FLOORS) -> list[str]:
    """``"a:LINE -> b"`` for every import from a lower floor to a higher one."""
    bad = []
    for mod, targets in sorted(graph.items()):
        here = floor_of(mod, floors)
        for t, line in sorted(targets.items()):
            there = floor_of(t, floors)
            if here is not None and there is not None and there > here:
                bad.append(f"{mod}:{line} ({floors[here][0]}) -> {t} ({floors[there][0]})")
    return bad


# ---------------------------------------------------------------------- the rules
@pytest.fixture(scope="module")
def graph():
    return import_graph(read_sources())


def test_no_import_circles(graph):
    found = circles(graph)
    assert not found, "import circles in zoo/: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_upward_imports(graph):
    bad = upward(graph)
    assert not bad, "imports that run up the house (see FLOORS):\n" + "\n".join(bad)


def test_every_module_stands_on_a_floor(graph):
    lost = [m for m in graph if floor_of(m) is None]
    assert not lost, f"modules on no floor: {lost}: add them to FLOORS in tests/core/test_architecture.py"


def test_the_engine_never_imports_a_plugin_or_the_ui(graph):
    bad = [f"{m}:{line} -> {t}" for m, ts in sorted(graph.items()) for t, line in ts.items()
           if t.startswith(PLUGIN_PACKAGES) or (t.startswith(UI_PACKAGES) and m not in UI_DOORS)]
    assert not bad, "the engine imports a plugin (or the UI):\n" + "\n".join(bad)


def test_no_module_imports_another_modules_private_names():
    sources = {**read_sources(), **read_sources(ROOT / "ui"), **read_sources(ROOT / "plugins")}
    bad = private_imports(sources)
    assert not bad, "imports of other modules' private names (make the name public where it " \
                    "belongs):\n" + "\n".join(bad)


def test_the_experiment_tools_import_zoo_at_module_level():
    """zoo.experiment once held 43 imports of zoo inside its functions; the one import order
    (module level, checked for circles above) is the whole story now."""
    bad = function_level_imports(read_sources(), "zoo.experiment")
    assert not bad, "imports of zoo inside functions of zoo.experiment (move them to the top):\n" \
                    + "\n".join(bad)


# ---------------------------------------------------------------------- the checker itself
def _write(tmp_path: Path, files: dict[str, str]) -> dict[str, tuple[Path, ast.Module]]:
    for rel, text in files.items():
        p = tmp_path / "zoo" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return read_sources(tmp_path / "zoo")


def test_the_checker_sees_a_circle_made_inside_a_function(tmp_path):
    """The dodge the issue counted 93 times: ``a`` imports ``b`` at the top, ``b`` imports ``a``
    inside a function.  It is still a circle."""
    g = import_graph(_write(tmp_path, {
        "__init__.py": "", "a.py": "from . import b\n",
        "b.py": "def f():\n    from .a import g\n    return g\n", "c.py": "from .b import f\n"}))
    assert circles(g) == [["zoo.a", "zoo.b"]]
    assert g["zoo.c"] == {"zoo.b": 1}


def test_the_checker_sees_private_names_and_imports_inside_functions(tmp_path):
    sources = _write(tmp_path, {
        "__init__.py": "from .version import __version__\n", "version.py": "__version__ = '1'\n",
        "a.py": "_x = 1\ndef _f():\n    return _x\n",
        "b.py": "from . import __version__\nfrom .a import _x\ndef g():\n    from .a import _f\n    return _f\n",
        "tool/__init__.py": "", "tool/c.py": "import math\nfrom ..a import _x as y\n",
        "tool/d.py": "def f():\n    import matplotlib\n    from ..a import g\n    import zoo.b\n"
                     "    def inner():\n        from . import c\n    return g\n"})
    assert private_imports(sources) == ["zoo.b:2 from zoo.a import _x", "zoo.b:4 from zoo.a import _f",
                                        "zoo.tool.c:2 from zoo.a import _x"]
    assert function_level_imports(sources, "zoo.tool") == [
        "zoo.tool.d:3 in f: from ..a import g", "zoo.tool.d:4 in f: import zoo.b",
        "zoo.tool.d:6 in f: from . import c"]
    assert function_level_imports(sources, "zoo.b") == ["zoo.b:4 in g: from .a import _f"]


def test_the_checker_sees_upward_imports_and_face_names(tmp_path):
    g = import_graph(_write(tmp_path, {
        "__init__.py": "from .version import __version__\nfrom .high import thing\n",
        "version.py": "__version__ = '1'\n", "low.py": "from . import __version__\n",
        "high.py": "from .low import x\n", "sub/__init__.py": "", "sub/deep.py": "from .. import thing\n"}))
    floors = (("ground", ("zoo.version", "zoo.low")), ("top", ("zoo.high", "zoo.sub", "zoo.sub.*")),
              ("api", ("zoo",)))
    assert g["zoo.low"] == {"zoo.version": 1}  # a face's name is charged to where it comes from
    assert g["zoo.sub.deep"] == {"zoo.high": 1}
    assert upward(g, floors) == []
    g["zoo.low"]["zoo.high"] = 3
    assert upward(g, floors) == ["zoo.low:3 (ground) -> zoo.high (top)"]


# ---------------------------------------------------------------------- names that moved
@pytest.mark.parametrize("old,new", [("zoo.io.checkpoint:load", "zoo.io.loading:load"),
                                     ("zoo.io.checkpoint:check", "zoo.io.loading:check"),
                                     ("zoo.model.build:load_or_build", "zoo.io.loading:load_or_build"),
                                     ("zoo.model.build:checkpoint_or_spec", "zoo.io.loading:checkpoint_or_spec"),
                                     ("zoo.guard.build_budget:estimate", "zoo.model.build:estimate"),
                                     ("zoo.guard.files:blame", "zoo.registry:blame"),
                                     ("zoo.guard.files:probe_attention", "zoo.model.assembly:probe_attention"),
                                     ("zoo.model.build:spec", "zoo.model.spec:parse_spec"),
                                     ("zoo.convert:FAMILIES", "zoo.convert.core:CONVERTERS"),
                                     ("zoo.convert:Family", "zoo.convert.core:Converter"),
                                     ("zoo.registry:FAMILIES", "zoo.registry:FAMILY_NAMES"),
                                     ("zoo.registry:STACK_COMPONENTS", "zoo.guard.compat:STACK_COMPONENTS"),
                                     ("zoo.run.generate:pick_next", "zoo.run.sampling:pick_next"),
                                     ("zoo.run.generate:Option", "zoo.run.options:Option"),
                                     ("zoo.run.generate:left_pad", "zoo.run.arguments:left_pad"),
                                     ("zoo.run.generate:cli_options", "zoo.commands:generation_options")])
def test_moved_names_still_work_with_a_deprecation_warning(old, new):
    import importlib

    (old_mod, old_name), (new_mod, new_name) = old.split(":"), new.split(":")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = getattr(importlib.import_module(old_mod), old_name)
    assert got is getattr(importlib.import_module(new_mod), new_name)
    assert any(issubclass(w.category, DeprecationWarning) and new_mod in str(w.message) for w in caught)
    with pytest.raises(AttributeError):
        getattr(importlib.import_module(old_mod), "no_such_name")


def test_old_module_paths_are_the_new_modules_with_a_deprecation_warning():
    """0.x's flat modules (``zoo.precision``, ``zoo.hooks``) became the wings; each old path is the new
    module itself -- imported, ``from``-imported or reached as ``zoo.NAME`` -- and says where it went.
    In a fresh interpreter, so each old path is imported for the first time."""
    import subprocess
    import sys

    from zoo.deprecation import MODULES

    assert len(MODULES) == 31  # the 32 flat modules of 0.x that moved, less zoo.io (now the wing itself, below)
    code = """
import importlib, warnings, zoo
from zoo.deprecation import MODULES
for old, new in sorted(MODULES.items()):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = importlib.import_module(old)
    assert got is importlib.import_module(new), (old, got)
    assert any(issubclass(w.category, DeprecationWarning) and f"{old} is deprecated: use {new}" in str(w.message)
               for w in caught), (old, [str(w.message) for w in caught])
    if old != "zoo.build":  # zoo.build stays callable (the face's function, or the module that builds)
        assert getattr(zoo, old.split(".", 1)[1]) is got, old
    exec(f"from {old} import __name__ as n; assert n == {new!r}, n")
assert zoo.build("gpt_tiny", num_layers=1).spec.num_layers == 1
assert zoo.spec("gpt_tiny", num_layers=1).num_layers == 1
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    assert zoo.io.save is importlib.import_module("zoo.io.checkpoint").save  # zoo.io was the file module
assert "zoo.io.save is deprecated: use zoo.io.checkpoint.save" in str(caught[-1].message)
print("ok", len(MODULES))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ok 31" in out.stdout, out.stderr[-3000:]


def test_dir_zoo_is_the_public_api_and_the_wings():
    import zoo

    names = set(dir(zoo))
    assert set(zoo.__all__) <= names
    assert {"model", "io", "run", "inside", "guard", "convert", "train", "experiment", "testing"} <= names
    internal = {"layers", "generate", "hooks", "trust", "workload", "budget", "inspection", "deprecation",
                "doors", "precision", "accounting", "bench", "tasks", "contract"}
    assert not names & internal, names & internal
    assert len(names) <= 50


# ---------------------------------------------------------------------- names that say one thing
def test_zoo_spec_is_the_module_and_still_parses_when_called():
    import importlib
    import sys
    import types

    import zoo

    mod = importlib.import_module("zoo.model.spec")
    assert zoo.spec is mod is sys.modules["zoo.model.spec"] and isinstance(mod, types.ModuleType)
    assert zoo.spec("gpt_tiny", num_layers=1) == mod.parse_spec("gpt_tiny", num_layers=1)
    assert zoo.model.spec.ModelSpec is zoo.ModelSpec


def test_one_meaning_per_name():
    """FAMILIES is the component family table and nothing else; Family its row; the converters of
    transformers families are Converters; the layer's kernel call is not the module's attend."""
    from zoo import components, convert, registry
    from zoo.model import layers

    assert all(isinstance(f, components.Family) for f in components.FAMILIES)
    assert registry.FAMILY_NAMES == tuple(f.name for f in components.FAMILIES)
    assert all(isinstance(c, convert.Converter) for c in convert.CONVERTERS.values())
    for mod in (registry, convert, convert.core):
        assert "FAMILIES" not in vars(mod) and "Family" not in vars(mod)
    assert hasattr(layers.Attention, "run_kernel") and not hasattr(layers.Attention, "attend")


# ---------------------------------------------------------------------- the map follows the house
WINGS = ("guard", "model", "io", "run", "inside")
TEST_FOLDERS = ("core", *WINGS, "convert", "train", "experiment", "ui", "docs")


def test_tests_mirror_the_wings_and_the_fast_lane_names_real_files():
    import conftest

    tests = ROOT / "tests"
    loose = sorted(p.name for p in tests.glob("test_*.py"))
    assert not loose, f"test files outside a wing's folder: {loose}"
    folders = sorted(p.name for p in tests.iterdir() if p.is_dir() and any(p.glob("test_*.py")))
    assert folders == sorted(TEST_FOLDERS), folders
    for wing, files in conftest.FAST_LANE.items():
        for f in files:
            assert (tests / wing / f"{f}.py").exists(), f"FAST_LANE names tests/{wing}/{f}.py, which is gone"
    assert set(conftest.FAST_LANE) == set(TEST_FOLDERS), "every folder has core tests in the fast lane"


def test_architecture_page_lists_every_module_of_every_wing():
    """docs/ARCHITECTURE.md is the map: each wing's row and the floor sheet name all its modules, and
    each wing's ``__init__`` docstring says what it may import."""
    import importlib

    page = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    for wing in WINGS:
        mods = sorted(p.stem for p in (ZOO / wing).glob("*.py") if p.stem != "__init__")
        package = importlib.import_module(f"zoo.{wing}")
        assert sorted(package.MODULES) == mods, (wing, mods)
        assert "May import" in package.__doc__, wing
        sheet = next(line for line in page.splitlines() if line.strip().startswith(f"{wing} ") and f"zoo/{wing}/" in line)
        row = next(line for line in page.splitlines() if line.startswith(f"| `zoo/{wing}/` |"))
        for m in mods:
            assert m in sheet and f"(`{m}`" in row, (wing, m)
    assert len(FLOORS) == 10 and all(name in page for name, _ in FLOORS)
