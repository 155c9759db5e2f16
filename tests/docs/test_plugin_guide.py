"""docs/PLUGINS.md's tested example and its answers.

The example kernel (docs/examples/temperature_attention.py: softmax attention with a learned
temperature per head) was written from the guide alone.  Here: the guide shows the file as it is; the
conformance kit passes on it and fails on a copy that ignores the mask; it matches
``torch.nn.functional.scaled_dot_product_attention`` head by head; and each of the guide's answers
(capabilities defaults, mask and bias shapes, scale, dropout, ``steps()``, parameters through
initialisation and loading, registering without packaging) is checked against the engine.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib.util
import math
import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import zoo
import zoo.testing
from zoo.components import Capabilities
from zoo.model.layers import attend
from zoo.registry import Registry
from zoo.testing import kit_registry, using_registry

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "PLUGINS.md"
EXAMPLE = ROOT / "docs" / "examples" / "temperature_attention.py"


def _import_example():
    """The example as an ordinary module (it is not a package: a file a reader copies)."""
    name = "temperature_attention"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the file runs
        spec.loader.exec_module(module)
    return sys.modules[name]


example = _import_example()
Temperature = example.TemperatureAttention


@pytest.fixture
def registry():
    """The built-ins plus the example, registered the way the guide says (no packaging), installed
    as the process-wide registry for the test."""
    reg = Registry(entry_points=False)
    with using_registry(reg):
        zoo.get_registry().add_plugin(example, name="temperature", source="module")
        yield reg


def _register(registry, name: str, cls) -> None:
    """Register kernel class ``cls`` as ``name`` (a variant of the example) in ``registry``."""
    class Plugin:
        @zoo.hookimpl
        def register_attention(self, register):
            register(name, cls, config=example.TemperatureConfig)

    registry.add_plugin(Plugin(), name=name)


def _kernels(model) -> list:
    return [m for m in model.modules() if isinstance(m, Temperature)]


def _tiny(**overrides):
    spec = dict(num_layers=2, d_model=32, num_heads=4, vocab_size=64, max_len=32, seed=0)
    spec.update(overrides)
    return zoo.build("gpt_tiny", **spec)


# ---------------------------------------------------------------------- the guide shows the file
def test_the_guide_shows_the_example_file_as_it_is():
    text = GUIDE.read_text(encoding="utf-8")
    block = re.search(r"<!-- example: docs/examples/temperature_attention.py -->\n```python\n(.*?)```", text, re.S)
    assert block is not None
    assert block.group(1) == EXAMPLE.read_text(encoding="utf-8")


def test_the_guide_states_the_capabilities_defaults():
    text = GUIDE.read_text(encoding="utf-8")
    table = text.split("<!-- capabilities-defaults -->", 1)[1].split("\n\n", 1)[0]
    stated = {k: ast.literal_eval(v) for k, v in re.findall(r"^\| `(\w+)` \| `(.*?)` \|", table, re.M)}
    defaults = {f.name: f.default for f in dataclasses.fields(Capabilities)}
    assert stated == defaults


# ---------------------------------------------------------------------- the conformance kit
test_zoo_conformance = zoo.testing.conformance_test(module=example)


class IgnoresMask(Temperature):
    """The example with one bug: it drops the mask."""

    def steps(self, q, k, v, mask=None, bias=None):
        return super().steps(q, k, v, None, bias)


class _BrokenPlugin:
    @zoo.hookimpl
    def register_attention(self, register):
        register("blind", IgnoresMask, config=example.TemperatureConfig)


def test_the_kit_fails_a_copy_that_ignores_the_mask():
    results = zoo.testing.verify(["attention:blind"], checks=["reference", "causal", "padding"],
                                 archs=["decoder", "encoder"], registry=kit_registry(modules=[_BrokenPlugin()]))
    status = {(r.check, r.case): r.status for r in results}
    assert status == {("reference", ""): "fail", ("causal", "decoder"): "fail",
                      ("padding", "decoder"): "fail", ("padding", "encoder"): "fail"}, status


# ---------------------------------------------------------------------- a reference nobody here wrote
def test_matches_sdpa_head_by_head_with_learned_temperatures():
    g = torch.Generator().manual_seed(0)
    B, h, h_kv, Tq, Tk, hd = 2, 4, 2, 5, 7, 8
    ctx = zoo.components.BuildContext.for_heads(h, hd, num_kv_heads=h_kv)
    kernel = Temperature(example.TemperatureConfig(), ctx).double()
    with torch.no_grad():
        kernel.log_g.copy_(torch.randn(h, generator=g, dtype=torch.float64))
    q = torch.randn(B, h, Tq, hd, generator=g, dtype=torch.float64)
    k, v = (torch.randn(B, h_kv, Tk, hd, generator=g, dtype=torch.float64) for _ in range(2))
    mask = torch.rand(B, 1, Tq, Tk, generator=g) > 0.3
    mask[..., -1] = True  # every row sees its own position
    bias = torch.randn(1, h, Tq, Tk, generator=g, dtype=torch.float64)
    with torch.no_grad():
        out, w = attend(kernel, q, k, v, mask=mask, bias=bias, need_weights=True)
    for i in range(h):  # SDPA with this head's scale; a float mask carries the bias and the -inf
        j = i // (h // h_kv)
        scale = kernel.scale * float(kernel.log_g[i].detach().exp())
        float_mask = bias[:, i:i + 1].masked_fill(~mask, float("-inf"))  # (B, 1, Tq, Tk)
        want = F.scaled_dot_product_attention(q[:, i:i + 1], k[:, j:j + 1], v[:, j:j + 1],
                                              attn_mask=float_mask, scale=scale)
        torch.testing.assert_close(out[:, i:i + 1], want, rtol=0, atol=1e-12)
    assert torch.allclose(w.sum(-1), torch.ones((), dtype=torch.float64)) and not w.masked_select(~mask).any()


# ---------------------------------------------------------------------- the guide's answers
def test_mask_and_bias_arrive_in_the_shapes_the_guide_states(registry):
    seen = []

    class Recording(Temperature):
        def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
            seen.append((None if mask is None else tuple(mask.shape), None if bias is None else tuple(bias.shape),
                         None if mask is None else mask.dtype))
            return super().forward(q, k, v, mask, bias, need_weights)

    _register(registry, "recording", Recording)
    model = _tiny(attention="recording", positions="alibi", num_layers=1).eval()
    seen.clear()  # zoo.build probes each kernel once with a small call
    ids = torch.randint(5, 60, (3, 6), generator=torch.Generator().manual_seed(1))
    pad = torch.ones(3, 6, dtype=torch.long)
    pad[0, :2] = 0  # row 0 left-padded
    with torch.no_grad():
        model(ids)
        model(ids, attention_mask=pad)
        cache = model.new_cache()
        model(ids[:, :4], cache=cache)
        model(ids[:, 4:5], cache=cache)
    h = model.spec.num_heads
    assert seen == [((1, 1, 6, 6), (1, h, 6, 6), torch.bool),   # no padding: one mask for the batch
                    ((3, 1, 6, 6), (3, h, 6, 6), torch.bool),   # padding: a mask (and bias) per row
                    ((1, 1, 4, 4), (1, h, 4, 4), torch.bool),   # cache prefill
                    (None, (1, h, 1, 5), None)]                 # one new token: nothing to forbid


def test_the_kernel_must_use_scale(registry):
    class FixedScale(Temperature):  # the bug the guide warns about: 1/sqrt(hd) hard-coded
        def steps(self, q, k, v, mask=None, bias=None):
            self.scale = q.size(-1) ** -0.5
            return super().steps(q, k, v, mask, bias)

    _register(registry, "fixed", FixedScale)
    ids = torch.randint(5, 60, (2, 8), generator=torch.Generator().manual_seed(2))
    eager = _tiny(attention="eager", attn_scale=1.0).eval()
    with torch.no_grad():
        want = eager(ids)
        for kind, same in (("temperature", True), ("fixed", False)):
            model = _tiny(attention=kind, attn_scale=1.0).eval()
            model.load_state_dict(eager.state_dict(), strict=False)  # the same weights, log_g = 0
            assert torch.allclose(model(ids), want, atol=1e-5) is same, kind
    # the kit's reference check runs at a non-default scale, against the naive loop and SDPA
    res = zoo.testing.verify(["attention:fixed", "attention:temperature"], checks=["reference"],
                             registry=registry)
    assert [r.status for r in res] == ["fail", "pass"], [(r.status, r.note) for r in res]


def test_the_kernel_applies_dropout_in_training_only(registry):
    model = _tiny(attention="temperature", dropout=0.5)
    kernel = _kernels(model)[0]
    assert kernel.dropout_p == 0.5
    ctx_q = torch.randn(1, 4, 6, 8, generator=torch.Generator().manual_seed(3))
    kernel.train()
    a, _ = attend(kernel, ctx_q, ctx_q, ctx_q)
    b, _ = attend(kernel, ctx_q, ctx_q, ctx_q)
    kernel.eval()
    c, _ = attend(kernel, ctx_q, ctx_q, ctx_q)
    d, _ = attend(kernel, ctx_q, ctx_q, ctx_q)
    assert not torch.allclose(a, b) and torch.equal(c, d)


def test_steps_feed_the_trace_and_a_kernel_without_them_is_swapped(registry):
    class NoSteps(Temperature):  # exact=True and the base class's steps() (None): traced as eager
        steps = zoo.components.AttentionKernel.steps

        def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
            s = Temperature.steps(self, q, k, v, mask, bias)
            return s["heads"], (s["weights"] if need_weights else None)

    _register(registry, "nosteps", NoSteps)
    ids = torch.randint(5, 60, (1, 7), generator=torch.Generator().manual_seed(4))
    for kind, faithful in (("temperature", True), ("nosteps", False)):
        model = _tiny(attention=kind).eval()
        with torch.no_grad():
            for kernel in _kernels(model):
                kernel.log_g.fill_(math.log(3.0))  # sharper heads than plain attention
            tr = zoo.trace(model, ids)
            logits = model(ids)
        assert torch.allclose(tr.logits, logits, atol=1e-5) is faithful, kind
        if faithful:
            for key in ("scores_masked", "weights", "heads"):  # hook_attn_scores, hook_pattern, hook_z
                assert f"decoder.blocks.0.attn.{key}" in tr, key
            w = tr["decoder.blocks.0.attn.weights"]
            assert torch.allclose(tr["decoder.blocks.0.attn.scores_masked"].softmax(-1), w)


def test_own_parameters_survive_init_save_and_meta_loading(registry, tmp_path):
    class WithLinear(Temperature):  # what the guide says about the other kinds of state
        def __init__(self, config, ctx):
            super().__init__(config, ctx)
            self.mix = nn.Linear(ctx.num_heads, ctx.num_heads, bias=False)
            nn.init.eye_(self.mix.weight)  # overwritten by zoo.build's N(0, 0.02)
            self.register_buffer("table", self._table(), persistent=False)

        def _table(self):
            return torch.arange(6, dtype=torch.float32).sqrt()

        def reset_buffers(self):
            self.table = self._table()

    _register(registry, "withlinear", WithLinear)
    model = _tiny(attention={"kind": "withlinear", "init": 2.0})
    for kernel in _kernels(model):
        assert torch.equal(kernel.log_g, torch.full_like(kernel.log_g, math.log(2.0)))  # kept
        assert not torch.equal(kernel.mix.weight, torch.eye(4)) and float(kernel.mix.weight.std()) < 0.1
    with torch.no_grad():
        for kernel in _kernels(model):
            kernel.log_g.copy_(torch.randn(4))  # "trained"
    zoo.save(model, tmp_path / "m")
    again = zoo.load(tmp_path / "m")  # built on the meta device, then read from the file
    for mine, theirs in zip(_kernels(model), _kernels(again)):
        assert torch.equal(mine.log_g, theirs.log_g) and torch.equal(mine.mix.weight, theirs.mix.weight)
        assert torch.equal(theirs.table, torch.arange(6, dtype=torch.float32).sqrt())  # reset_buffers ran
    assert "withlinear" in zoo.read_metadata(tmp_path / "m")["zoo.plugins"]


def test_a_checkpoint_of_an_unpackaged_plugin_names_it_when_missing(registry, tmp_path):
    zoo.save(_tiny(attention="temperature", num_layers=1), tmp_path / "m")
    with using_registry(Registry(entry_points=False)):  # a new process: the module not registered
        with pytest.raises(zoo.CheckpointError, match="plugin 'temperature'"):
            zoo.load(tmp_path / "m")
    assert zoo.load(tmp_path / "m").spec.attention.kind == "temperature"  # registered again: loads
