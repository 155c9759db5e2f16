"""The plugin ecosystem: entry points, fault isolation, controls, capabilities, `zoo plugins`.

The real third-party package (``plugins/zoo-linear-attention``) and three broken ones
(``tests/plugin_packages``) are pip-installed once per session into a temporary ``--target`` folder,
never into the environment; tests put that folder on ``sys.path`` (or ``PYTHONPATH`` for
subprocesses) only while they need it.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import zoo
from zoo.components import AttentionKernel, Capabilities, Norm, PositionScheme
from zoo.registry import Registry, set_registry
from zoo.testing import Kit, using_registry

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [ROOT / "plugins" / "zoo-linear-attention",
            *sorted((ROOT / "tests" / "plugin_packages").glob("zoo-*"))]
PLUGIN_MODULES = ("zoo_linear_attention", "zoo_broken_import", "zoo_duplicate", "zoo_misspelled")


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """A folder holding the four plugin distributions, installed with pip (no network)."""
    tmp = tmp_path_factory.mktemp("plugins")
    src = tmp / "src"
    for pkg in PACKAGES:  # build from copies: setuptools writes build/ and *.egg-info in the source
        shutil.copytree(pkg, src / pkg.name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info",
                                                                           "build"))
    target = tmp / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                           "--no-build-isolation", "--no-index", "--target", str(target),
                           *[str(src / p.name) for p in PACKAGES]],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return target


@pytest.fixture
def on_path(site, monkeypatch):
    """The installed plugins importable and discoverable in this process, for one test."""
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    yield site
    for name in list(sys.modules):
        if name.split(".")[0] in PLUGIN_MODULES:
            del sys.modules[name]


def _env(site: Path | None = None, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ZOO_DISABLE_PLUGIN_AUTOLOAD",
                                                            "ZOO_PLUGINS")}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def _zoo(*args, env, cwd=None):
    return subprocess.run([sys.executable, "-m", "zoo.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


# ---------------------------------------------------------------------- installed packages
def test_entry_points_are_discovered_and_failures_isolated(on_path):
    names = {e.name for e in md.entry_points(group="zoo")}
    assert {"linear_attention", "broken_import", "duplicate", "misspelled"} <= names
    reg = Registry(entry_points=True)
    plugins = reg.plugins
    good = plugins["linear_attention"]
    assert good.ok and good.version == "0.1.0"
    assert good.source == "distribution zoo-linear-attention"
    assert good.components == ["attention:linear", "norm:scalenorm"]
    broken = plugins["broken_import"]
    assert not broken.components and "ModuleNotFoundError" in broken.errors[0]
    assert "zoo_this_dependency_is_not_installed" in broken.errors[0]
    dup = plugins["duplicate"]
    assert dup.components == ["ffn:mlp_copy"]  # its valid component survives
    assert "duplicate attention name 'sdpa'" in dup.errors[0]
    assert "'zoo.attention_sdpa'" in dup.errors[0] and "'duplicate'" in dup.errors[0]
    assert reg.get("attention", "sdpa").plugin == "zoo.attention_sdpa"  # built-in kept its name
    bad = plugins["misspelled"]
    assert not bad.components
    assert any("unknown hook 'register_attentions'" in e and "register_attention'" in e
               for e in bad.errors)
    assert any("'register_norms'" in e and "@zoo.hookimpl" in e for e in bad.errors)
    assert all(p.ok for p in plugins.values() if p.builtin)
    # zoo keeps working, with every valid component
    with using_registry(reg):
        model = zoo.build("gpt_tiny", num_layers=1, attention="linear", ffn="mlp_copy")
        assert model(torch.randint(5, 100, (1, 6))).shape == (1, 6, 512)
        with pytest.raises(zoo.UnknownComponentError) as err:
            zoo.build("gpt_tiny", attention="identity")
        assert "broken_import" in str(err.value) and "zoo plugins" in str(err.value)


def test_autoload_controls(on_path, monkeypatch):
    monkeypatch.setenv("ZOO_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("ZOO_PLUGINS", raising=False)
    assert not [p for p in Registry().plugins.values() if not p.builtin]
    # named plugins load even with autoload disabled (like pytest -p)
    monkeypatch.setenv("ZOO_PLUGINS", "linear_attention")
    third = [p for p in Registry().plugins.values() if not p.builtin]
    assert [p.name for p in third] == ["linear_attention"] and third[0].ok
    monkeypatch.setenv("ZOO_PLUGINS", "linear_atention,duplicate")
    plugins = Registry().plugins
    assert "duplicate" in plugins and "linear_attention" not in plugins
    assert "did you mean 'linear_attention'" in plugins["linear_atention"].errors[0]
    monkeypatch.delenv("ZOO_DISABLE_PLUGIN_AUTOLOAD")
    monkeypatch.setenv("ZOO_PLUGINS", "misspelled")
    assert [p.name for p in Registry().plugins.values() if not p.builtin] == ["misspelled"]


def test_plugin_yaml_save_load_and_missing_plugin(on_path, tmp_path):
    reg = Registry(entry_points=False)
    reg.load_entry_points(only=["linear_attention"])
    spec = ROOT / "plugins" / "zoo-linear-attention" / "examples" / "linear_gpt_tiny.yaml"
    ids = torch.randint(5, 512, (2, 12), generator=torch.Generator().manual_seed(0))
    with using_registry(reg):
        model = zoo.build(spec, num_layers=2, seed=0).eval()
        assert type(model.decoder.blocks[0].attn.kernel).__module__.startswith("zoo_linear_attention")
        out = model(ids)
        zoo.save(model, tmp_path / "ckpt")
        again = zoo.load(tmp_path / "ckpt")
        assert torch.equal(again(ids), out)
    meta = zoo.read_metadata(tmp_path / "ckpt")
    assert json.loads(meta["zoo.plugins"])["linear_attention"] == "0.1.0"
    with using_registry(Registry(entry_points=False)):  # the plugin is not installed here
        with pytest.raises(zoo.CheckpointError) as err:
            zoo.load(tmp_path / "ckpt")
    msg = str(err.value)
    assert "needs plugin 'linear_attention' 0.1.0 (distribution zoo-linear-attention)" in msg
    assert "pip install zoo-linear-attention>=0.1.0" in msg
    assert "ZOO_PLUGINS=linear_attention" in msg  # autoload is disabled in the test suite
    assert json.loads(meta["zoo.plugin_sources"])["linear_attention"] == "zoo-linear-attention"


def test_zoo_plugins_cli_in_a_fresh_process(site):
    proc = _zoo("plugins", env=_env(site))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    line = next(l for l in out.splitlines() if l.startswith("linear_attention"))
    assert line.split()[:4] == ["linear_attention", "0.1.0", "distribution", "zoo-linear-attention"]
    assert "ok" in line and "attention:linear, norm:scalenorm" in line
    assert "ModuleNotFoundError" in out and "duplicate attention name 'sdpa'" in out
    assert "unknown hook 'register_attentions'" in out
    assert "3 with errors" in out
    assert _zoo("plugins", "--strict", env=_env(site)).returncode == 1
    rows = json.loads(_zoo("plugins", "--json", "--third-party", env=_env(site)).stdout)
    assert {r["name"]: r["ok"] for r in rows} == {"broken_import": False, "duplicate": False,
                                                 "linear_attention": True, "misspelled": False}
    only = _zoo("plugins", "--third-party", env=_env(site, ZOO_PLUGINS="linear_attention"))
    assert "broken_import" not in only.stdout and "ZOO_PLUGINS=linear_attention" in only.stdout
    detail = _zoo("plugins", "linear_attention", env=_env(site)).stdout
    assert "distribution zoo-linear-attention" in detail and "Katharopoulos" in detail
    assert "chunk_size=64" in detail and "supports_kv_cache" in detail and "exact" not in detail
    # an installed plugin's component is usable straight from the CLI
    spec = ROOT / "plugins" / "zoo-linear-attention" / "examples" / "linear_gpt_tiny.yaml"
    built = _zoo("build", str(spec), "--set", "num_layers=1", env=_env(site))
    assert built.returncode == 0, built.stderr
    assert "linear" in built.stdout


@pytest.mark.slow
def test_the_plugin_package_own_test_suite_passes(site, tmp_path):
    """The template's tests, including the kit one-liner through the pytest11 `zoo` plugin."""
    work = tmp_path / "pkg"
    shutil.copytree(ROOT / "plugins" / "zoo-linear-attention", work,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "src"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-o", "addopts=", "tests"], cwd=work, env=_env(site),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "attention:linear-kv_cache-decoder" not in proc.stdout  # ids only with -v
    assert " passed" in proc.stdout and "failed" not in proc.stdout


# ---------------------------------------------------------------------- isolation, in process
def _module(name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    for k, v in attrs.items():
        if callable(v) and hasattr(v, "__name__"):
            v.__module__ = name
        setattr(mod, k, v)
    return mod


@dataclasses.dataclass
class _MutableConfig:
    x: int = 1


class _Kernel(AttentionKernel):
    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        return v, None


def test_failing_hook_and_bad_registrations_are_recorded():
    @zoo.hookimpl
    def register_attention(register):
        register("fine", _Kernel)
        register("Bad-Name", _Kernel)
        register("not_a_kernel", torch.nn.Linear)
        register("bad_config", _Kernel, config={"a": 1})
        register("mutable_config", _Kernel, config=_MutableConfig)
        raise RuntimeError("boom")

    @zoo.hookimpl
    def register_norms(register):
        class WeirdCaps(Norm):
            capabilities = Capabilities(dtypes=("float8",))
        register("weird", WeirdCaps)

    reg = Registry(entry_points=False)
    info = reg.add_plugin(_module("p1", register_attention=register_attention,
                                  register_norms=register_norms), name="p1")
    assert info.components == ["attention:fine"]
    text = " | ".join(info.errors)
    assert "invalid component name 'Bad-Name'" in text
    assert "subclass of zoo.components.AttentionKernel" in text
    assert "config of 'bad_config' must be a dataclass" in text
    assert "config of 'mutable_config' must be a frozen dataclass" in text
    assert "register_attention raised RuntimeError: boom" in text
    assert "unknown or no dtypes/devices ['float8']" in text
    assert reg.get("attention", "fine").plugin == "p1"


def test_register_after_the_hook_returned_and_name_clash_and_empty_plugin():
    kept = []

    @zoo.hookimpl
    def register_ffns(register):
        kept.append(register)

    reg = Registry(entry_points=False)
    info = reg.add_plugin(_module("p2", register_ffns=register_ffns), name="p2")
    kept[0]("late", _Kernel)
    assert "called after register_ffns returned" in info.errors[-1]
    clash = reg.add_plugin(_module("p3"), name="zoo.masks")
    assert clash.name == "zoo.masks#2" and "already used by builtin" in clash.errors[0]
    empty = reg.add_plugin(_module("p4"), name="p4")
    assert "registered no components" in empty.errors[0]
    with pytest.raises(zoo.PluginError):  # built-ins are strict: a broken built-in is our bug
        reg.add_plugin(_module("p5"), name="p5", source="builtin", strict=True)


def test_import_failure_and_system_exit_are_contained(tmp_path, monkeypatch):
    (tmp_path / "zoo_exits_at_import.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "zoo_hook_extra_arg.py").write_text(
        "import zoo\n@zoo.hookimpl\ndef register_attention(register, not_a_hook_param):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry(entry_points=False)
    for name, value in (("exits", "zoo_exits_at_import"), ("extra", "zoo_hook_extra_arg"),
                        ("missing", "zoo_no_such_module_at_all:thing")):
        reg.load_entry_point(md.EntryPoint(name, value, "zoo"))
    assert "SystemExit" in reg.plugins["exits"].errors[0]
    assert "not_a_hook_param" in reg.plugins["extra"].errors[0]
    assert "ModuleNotFoundError" in reg.plugins["missing"].errors[0]
    assert zoo.build("gpt_tiny", num_layers=1) is not None


def test_hooks_only_get_the_parameters_they_ask_for():
    seen = []

    @zoo.hookimpl
    def register_masks():  # asks for nothing: must still be called, without arguments
        seen.append("called")

    reg = Registry(entry_points=False)
    reg.add_plugin(_module("p6", register_masks=register_masks), name="p6")
    assert seen == ["called"]


# ---------------------------------------------------------------------- capabilities
class _NoMask(AttentionKernel):
    """A kernel that honours only causal / no masks."""
    capabilities = Capabilities(supports_mask=False, supports_kv_cache=False, supports_bias=False)

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(q.size(1) // k.size(1), 1),
            v.repeat_interleave(q.size(1) // v.size(1), 1), is_causal=is_causal), None


class _Fp32Norm(Norm):
    capabilities = Capabilities(dtypes=("float32",), devices=("cpu",))

    def forward(self, x):
        return x


class _CudaOnlyNorm(Norm):
    capabilities = Capabilities(devices=("cuda",))

    def forward(self, x):
        return x


@pytest.fixture
def cap_registry():
    @zoo.hookimpl
    def register_attention(register):
        register("nomask", _NoMask)

    @zoo.hookimpl
    def register_norms(register):
        register("fp32norm", _Fp32Norm)
        register("cudanorm", _CudaOnlyNorm)

    reg = Registry(entry_points=False)
    info = reg.add_plugin(_module("caps", register_attention=register_attention,
                                  register_norms=register_norms), name="caps")
    assert info.ok, info.errors
    with using_registry(reg):
        yield reg


def test_incompatible_components_name_both_and_the_fix(cap_registry):
    with pytest.raises(zoo.IncompatibleComponentsError) as err:
        zoo.build("gpt_tiny", attention="nomask", mask=["causal", {"kind": "sliding_window"}])
    msg = str(err.value)
    assert "attention 'nomask' (plugin caps)" in msg and "sliding_window" in msg
    assert "valid options:" in msg and "eager" in msg and "fix:" in msg
    with pytest.raises(zoo.IncompatibleComponentsError) as err:  # padding needs masks
        zoo.build("bert_tiny", attention="nomask")
    assert err.value.where == "attention.kind" and "pad_id 0" in str(err.value)
    with pytest.raises(zoo.IncompatibleComponentsError) as err:
        zoo.build("gpt_tiny", attention="nomask", positions="alibi")
    assert "positions 'alibi'" in str(err.value) and "nomask" in str(err.value)
    assert zoo.build("gpt_tiny", attention="nomask", num_layers=1) is not None


def test_dtype_and_device_capabilities_checked_at_build_and_load(cap_registry, tmp_path):
    model = zoo.build("gpt_tiny", num_layers=1, norm={"kind": "fp32norm"})
    with pytest.raises(zoo.IncompatibleComponentsError) as err:
        zoo.build("gpt_tiny", num_layers=1, norm={"kind": "fp32norm"}, dtype="bfloat16")
    msg = str(err.value)
    assert err.value.where == "norm" and "'fp32norm'" in msg and "bfloat16" in msg
    assert "layernorm" in msg and "dtype='float32'" in msg
    zoo.save(model, tmp_path / "m")
    with pytest.raises(zoo.IncompatibleComponentsError):
        zoo.load(tmp_path / "m", dtype="bfloat16")
    with pytest.raises(zoo.IncompatibleComponentsError) as err:
        zoo.build("gpt_tiny", num_layers=1, norm={"kind": "cudanorm"})
    assert "declares devices ['cuda'], not cpu" in str(err.value)
    zoo.build("gpt_tiny", num_layers=1, norm={"kind": "cudanorm"}, device="meta")  # shapes only


def test_require_names_the_component_lacking_a_capability(cap_registry):
    spec = zoo.spec("gpt_tiny", attention="nomask")
    with pytest.raises(zoo.IncompatibleComponentsError) as err:
        cap_registry.require(spec, "supports_kv_cache", "generation with a KV cache")
    assert "nomask" in str(err.value) and err.value.where == "attention"
    cap_registry.require(zoo.spec("gpt_tiny"), "supports_kv_cache", "generation")


# ---------------------------------------------------------------------- the kit catches bugs
class _Leaky(AttentionKernel):
    """Declares a fused causal path, then ignores the causal flag: a decoder sees the future."""
    capabilities = Capabilities(returns_weights=False, fused_causal=True)

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        k, v = (t.repeat_interleave(q.size(1) // t.size(1), 1) for t in (k, v))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask), None


class _Unscaled(AttentionKernel):
    """Forgets the 1/sqrt(hd) scale (claims exact)."""

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        k, v = (t.repeat_interleave(q.size(1) // t.size(1), 1) for t in (k, v))
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, scale=1.0), None


class _ForgetsOffset(PositionScheme):
    """Adds a position signal computed from 0 on every call: wrong under a KV cache."""
    acts_on_embeddings = True

    def embed(self, x, pos):
        local = torch.arange(x.size(1), device=x.device, dtype=x.dtype)[None, :, None]  # (1, T, 1)
        freq = torch.linspace(0.1, 1.0, x.size(-1), device=x.device, dtype=x.dtype)  # (D,)
        return x + torch.sin(local * freq)  # feature-dependent (a uniform shift LayerNorm removes)


def test_the_kit_catches_broken_components():
    @zoo.hookimpl
    def register_attention(register):
        register("leaky", _Leaky)
        register("unscaled", _Unscaled)

    @zoo.hookimpl
    def register_positions(register):
        register("forgets_offset", _ForgetsOffset)

    reg = Registry(entry_points=False)
    reg.add_plugin(_module("bugs", register_attention=register_attention,
                           register_positions=register_positions), name="bugs")
    kit = Kit(reg)
    result = {(c.subject, c.check, c.arch): kit.run(c) for c in kit.cases(
        ["leaky", "unscaled", "forgets_offset"], checks=["causal", "reference", "kv_cache"],
        archs=["decoder"])}
    leak = result[("attention:leaky", "causal", "decoder")]
    assert leak.status == "fail" and leak.error > 1e-3
    assert result[("attention:unscaled", "reference", "")].status == "fail"
    assert result[("attention:unscaled", "causal", "decoder")].status == "pass"
    assert result[("position:forgets_offset", "kv_cache", "decoder")].status == "fail"


def test_zoo_verify_cli_table_and_exit_status():
    runner = CliRunner()
    from zoo.cli import cli

    res = runner.invoke(cli, ["verify", "sdpa", "--check", "reference", "--check", "causal"])
    assert res.exit_code == 0, res.output
    assert "attention:sdpa" in res.output and "PASS" in res.output and "FAIL" not in res.output
    assert "2 passed" not in res.output or "0 failed" in res.output
    res = runner.invoke(cli, ["verify", "sliding_window", "--check", "causal", "--arch", "decoder",
                              "--param", "sliding_window.window=3", "--json"])
    rows = json.loads(res.output)
    assert rows[0]["subject"] == "mask:sliding_window" and rows[0]["status"] == "pass"
    res = runner.invoke(cli, ["verify", "nosuchthing"])
    assert res.exit_code != 0 and "no component or plugin named 'nosuchthing'" in str(res.exception)

    @zoo.hookimpl
    def register_attention(register):
        register("leaky", _Leaky)

    reg = Registry(entry_points=False)
    reg.add_plugin(_module("bugs2", register_attention=register_attention), name="bugs2")
    old = set_registry(reg)
    try:
        res = runner.invoke(cli, ["verify", "leaky", "--check", "causal"])
    finally:
        set_registry(old)
    assert res.exit_code == 1 and "FAIL" in res.output and "tolerance" in res.output


def test_the_guide_example_plugin_passes_the_kit(tmp_path, monkeypatch):
    """docs/PLUGINS.md's complete plugin is real code: it registers and passes the kit."""
    import re

    guide = (ROOT / "docs" / "PLUGINS.md").read_text(encoding="utf-8")
    code = re.findall(r"```python\n(.*?)```", guide, re.S)[0]
    assert len(code.strip().splitlines()) <= 80  # a whole plugin file, docstring included
    (tmp_path / "zoo_guide_example.py").write_text(code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    from zoo.testing import kit_registry

    kit = Kit(kit_registry(modules=["zoo_guide_example"]))
    results = kit.run_all(kit.cases(["zoo_guide_example"], archs=["decoder"],
                                    checks=["loads", "forward_backward", "causal", "kv_cache",
                                            "weights", "masked_rows"]))
    assert len(results) == 6 and all(r.status == "pass" for r in results), \
        [(r.check, r.note) for r in results if r.status != "pass"]
    sys.modules.pop("zoo_guide_example", None)
