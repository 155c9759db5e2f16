"""Activations are a registered component family (issue 34, goal 7): ``mish`` is one small plugin
file (docs/examples/mish_activation.py), pip-installed here as a real package with the
``pyproject.toml`` docs/PLUGINS.md shows, then named in a spec.

What is checked: the guide shows the example file and its ``pyproject.toml`` as they are (with a
``[build-system]`` table); pip builds and installs it (``--target`` a temporary folder, no network);
in a fresh interpreter the installed entry point registers ``activation:mish``, and a model whose
feed-forward names it computes exactly what a hand-written ``W2 · mish(W1 x + b1) + b2`` gives with
the same weights; an unknown activation is a ``SpecError`` at ``ffn.activation`` listing the
registered names; the built-in four are the ``torch.nn.functional`` functions themselves.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.registry import activation_fn

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "PLUGINS.md"
EXAMPLE = ROOT / "docs" / "examples" / "mish_activation.py"


def _guide_block(marker: str, lang: str) -> str:
    text = GUIDE.read_text(encoding="utf-8")
    m = re.search(rf"<!-- example: {re.escape(marker)} -->\n```{lang}\n(.*?)```", text, re.S)
    assert m, f"docs/PLUGINS.md has no {lang} block after <!-- example: {marker} -->"
    return m.group(1)


def test_the_guide_shows_the_example_and_a_buildable_pyproject():
    assert _guide_block("docs/examples/mish_activation.py", "python") == EXAMPLE.read_text(encoding="utf-8")
    meta = tomllib.loads(_guide_block("pyproject.toml of zoo-mish", "toml"))
    assert meta["build-system"]["build-backend"] == "setuptools.build_meta"
    assert meta["project"]["entry-points"]["zoo"] == {"mish": "zoo_mish"}
    # the temperature example's pyproject.toml has its [build-system] too
    text = GUIDE.read_text(encoding="utf-8")
    toml_blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    assert toml_blocks and all("build-backend" in tomllib.loads(b).get("build-system", {})
                               for b in toml_blocks), "every pyproject.toml example needs [build-system]"


def test_builtin_activations_are_torch_functions_unchanged():
    x = torch.randn(4, 7, dtype=torch.float64)
    for name, ref in {"relu": F.relu, "gelu": F.gelu, "silu": F.silu,
                      "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}.items():
        assert torch.equal(activation_fn(name)(x), ref(x)), name
    assert {c.name for c in zoo.list_components("activation")} >= {"relu", "gelu", "gelu_tanh", "silu"}


def test_an_unknown_activation_lists_the_registered_ones():
    with pytest.raises(zoo.SpecError) as err:
        zoo.spec("gpt_tiny", ffn={"kind": "swiglu", "activation": "mish"})
    assert err.value.where == "ffn.activation"
    assert "no activation named 'mish'" in str(err.value)
    assert {"relu", "gelu", "gelu_tanh", "silu"} <= set(err.value.options)


CHILD = r"""
import torch, torch.nn.functional as F, zoo
assert zoo.get_registry().get("activation", "mish").plugin == "mish"
for kind in ("mlp", "swiglu"):
    model = zoo.build("gpt_tiny", num_layers=1, d_model=32, num_heads=2, d_ff=64, vocab_size=50,
                      ffn={"kind": kind, "activation": "mish"}, seed=0).eval()
    ffn = model.decoder.blocks[0].ffn
    x = torch.randn(2, 5, 32)
    if kind == "mlp":
        ref = ffn.down(F.mish(ffn.up(x)))                       # W2 · mish(W1 x + b1) + b2
    else:
        ref = ffn.down(F.mish(ffn.gate(x)) * ffn.up(x))
    got = ffn(x)
    assert torch.equal(got, ref), (kind, (got - ref).abs().max())
    if kind == "mlp":  # and not by accident: a near relative (SiLU) gives another output
        assert not torch.allclose(ffn.down(F.silu(ffn.up(x))), got)
print("ok", model.spec.ffn)
"""


@pytest.mark.slow
def test_mish_installed_as_a_pip_package_works_in_a_spec(tmp_path):
    pkg = tmp_path / "zoo-mish"
    pkg.mkdir()
    (pkg / "pyproject.toml").write_text(_guide_block("pyproject.toml of zoo-mish", "toml"), encoding="utf-8")
    (pkg / "zoo_mish.py").write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "--target", str(site), str(pkg)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("ZOO_DISABLE_PLUGIN_AUTOLOAD", "ZOO_PLUGINS")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["OMP_NUM_THREADS"] = "1"
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "mish" in r.stdout
    r = subprocess.run([sys.executable, "-m", "zoo.cli", "components", "activation"], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0 and "mish" in r.stdout, r.stdout + r.stderr
