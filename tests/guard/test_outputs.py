"""Component outputs checked at the boundary (issue 22, goal 6).

Each family's output contract is declared once, in its row of the family table
(``zoo.components.FAMILIES[i].outputs``); the build probe (``zoo.model.assembly.probe_components``) runs a
new model at two lengths with every plugin component held to it, and at run time each third-party
component's output is checked once per new input shape (``zoo.guard.outputs``).  The faulty
components here are the built-ins with one method spoiled -- the wrong shape, dtype, device, type,
or NaN -- only at one sequence length, registered through a test plugin like any third-party one.
"""
from __future__ import annotations

import copy
import types

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.guard import outputs as output_contract
from zoo.model.assembly import PROBE_LENGTHS, probe_components
from zoo.components import FAMILIES, FAMILY, BuildContext, MaskContext
from zoo.registry import Registry
from zoo.testing import using_registry
from zoo.testing.kit import ARCHS, Kit, Skip

PLUGIN = "oc_faulty"

#: family -> (the built-in that is spoiled, its spoiled method, how the test spec uses it)
BASES = {
    "attention": ("eager", "forward", {"attention": "faulty"}),
    "norm": ("layernorm", "forward", {"norm": {"kind": "faulty", "placement": "pre"}}),
    "ffn": ("mlp", "forward", {"ffn": "faulty"}),
    "placement": ("pre", "exit", {"norm": {"kind": "layernorm", "placement": "faulty"}}),
    "position.embed": ("sinusoidal", "embed", {"positions": "faulty"}),
    "position.rotate": ("rope", "rotate", {"positions": "faulty"}),
    "position.score_bias": ("alibi", "score_bias", {"positions": "faulty"}),
    "mask": ("sliding_window", "forward", {"mask": ["causal", {"kind": "faulty", "window": 2}]}),
}


def _length(args) -> int:
    """The sequence length a call works on (queries, for attention and masks)."""
    a = args[0]
    if isinstance(a, MaskContext):
        return a.q_len
    return a.shape[-1] if a.dim() == 2 else a.shape[-2]  # positions (B|1, T); else (..., T, D)


def _spoil(value, fault: str):
    if isinstance(value, tuple):  # (out, weights) or (q, k): spoil the first
        return (_spoil(value[0], fault), *value[1:])
    if fault == "shape":
        return value[..., :-1]
    if fault == "dtype":
        return value.double() if value.is_floating_point() else value.float()
    if fault == "int":
        return value.long()
    if fault == "meta":
        return value.to("meta")
    if fault == "list":
        return [value]
    if fault == "scalar":
        return value.sum()
    if fault == "nan":
        value = value.clone()
        value.view(-1)[0] = float("nan")
        return value
    raise AssertionError(fault)


def faulty_registry(family_key: str, fault: str, at: int) -> Registry:
    """The built-ins plus plugin ``oc_faulty``, whose ``faulty`` component of the family is the
    built-in of :data:`BASES` with ``fault`` in the output of one method, only at length ``at``
    (``fault="raise"``: it raises there)."""
    family = family_key.split(".")[0]
    base_name, method, _ = BASES[family_key]
    base = Registry(entry_points=False).get(family, base_name)

    def spoiled(self, *args, **kwargs):
        if fault == "raise" and _length(args) == at:
            raise ValueError("cannot do this length")
        value = getattr(base.cls, method)(self, *args, **kwargs)
        return _spoil(value, fault) if _length(args) == at else value

    cls = type("Faulty" + base.cls.__name__, (base.cls,), {method: spoiled})
    mod = types.ModuleType(PLUGIN)
    mod.__version__ = "0.0.1"

    def hook(register):
        register("faulty", cls, config=base.config)
    hook.__name__ = hook.__qualname__ = FAMILY[family].hook
    hook.__module__ = PLUGIN
    setattr(mod, FAMILY[family].hook, zoo.hookimpl(hook))
    reg = Registry(entry_points=False)
    info = reg.add_plugin(mod, name=PLUGIN)
    assert info.errors == [] and info.components == [f"{family}:faulty"]
    return reg


def ids(T: int) -> torch.Tensor:
    return torch.arange(1, T + 1)[None] % 500 + 3  # (1, T)


def build(family_key: str, **extra):
    return zoo.build("gpt_tiny", num_layers=1, seed=0, **BASES[family_key][2], **extra).eval()


# ---------------------------------------------------------------------- the family table
def test_every_model_family_declares_its_output_contract_once_in_the_table():
    for fam in FAMILIES:
        methods = [m for m, _ in fam.outputs]
        if fam.field is None:  # tokenizers, tasks: not model parts
            assert methods == []
        else:
            assert methods and all(callable(getattr(fam.base, m)) for m in methods), fam.name
    q, k = torch.zeros(2, 4, 7, 8), torch.zeros(2, 2, 9, 8)
    out, weights = dict(FAMILY["attention"].outputs)["forward"](q, k, k)
    assert out.shape == (2, 4, 7, 8) and out.dtype == q.dtype and weights.shape == (2, 4, 7, 9)
    mask = dict(FAMILY["mask"].outputs)["forward"](MaskContext(3, 5, torch.device("cpu"), batch_size=2))
    assert mask.dtype == torch.bool and mask.fits == (2, 1, 3, 5) and mask.optional


# ---------------------------------------------------------------------- run time
@pytest.mark.parametrize("family_key,fault", [
    ("attention", "shape"), ("attention", "dtype"), ("attention", "nan"), ("attention", "meta"),
    ("norm", "scalar"), ("norm", "dtype"), ("norm", "nan"),
    ("ffn", "int"), ("ffn", "list"), ("ffn", "nan"),
    ("placement", "shape"), ("placement", "nan"),
    ("position.embed", "dtype"), ("position.embed", "nan"),
    ("position.rotate", "shape"), ("position.rotate", "nan"),
    ("position.score_bias", "shape"), ("position.score_bias", "int"), ("position.score_bias", "nan"),
    ("mask", "shape"), ("mask", "dtype"),
])
def test_a_fault_only_at_length_7_passes_the_build_and_is_caught_at_run_time(family_key, fault):
    family = family_key.split(".")[0]
    method = BASES[family_key][1]
    with using_registry(faulty_registry(family_key, fault, at=7)):
        model = build(family_key)  # the probe (lengths 3 and 1) passes
        checked = output_contract.installed(model)
        assert {(w.family, w.name) for w in checked} == {(family, "faulty")}  # built-ins unwrapped
        with torch.no_grad():
            for T in (1, 3, 5):
                assert torch.isfinite(model(ids(T))).all()
            with pytest.raises(zoo.PluginError) as err:
                model(ids(7))
    e = err.value
    assert e.where == PLUGIN
    msg = str(e)
    assert f"{family} 'faulty' from plugin {PLUGIN} 0.0.1 {method}() returned" in msg
    assert "at run time" in msg and "fix:" in msg and "choose another" in msg
    if fault == "nan":
        assert "1 NaN" in msg and "all finite, and finite weights" in msg
    else:
        assert f"the {family} contract is" in msg


@pytest.mark.parametrize("fault,without", [("shape", RuntimeError), ("nan", None)])
def test_without_the_check_the_fault_surfaces_elsewhere_or_not_at_all(monkeypatch, fault, without):
    """The control: ZOO_CHECK_OUTPUTS=off -- a wrong shape fails inside torch with no plugin
    named, a NaN comes out as NaN logits."""
    monkeypatch.setenv("ZOO_CHECK_OUTPUTS", "off")
    with using_registry(faulty_registry("ffn", fault, at=7)):
        model = build("ffn")
        assert output_contract.installed(model) == []
        with torch.no_grad():
            if without is None:
                assert not torch.isfinite(model(ids(7))).all()
            else:
                with pytest.raises(without) as err:
                    model(ids(7))
                assert not isinstance(err.value, zoo.ZooError)


def test_the_check_runs_once_per_new_shape(monkeypatch):
    model = zoo.build("gpt_tiny", num_layers=2, seed=0).eval()
    wrappers = output_contract.install(model, "all")
    assert {w.family for w in wrappers} == {"attention", "mask", "norm", "ffn", "placement", "position"}
    calls = []
    real = output_contract.Checked._check
    monkeypatch.setattr(output_contract.Checked, "_check",
                        lambda self, *a: calls.append(self.family) or real(self, *a))
    with torch.no_grad():
        model(ids(6))
        first = len(calls)
        model(ids(6))
        assert len(calls) == first  # the same shape: nothing checked again
        model(ids(5))
    # one forward calls each wrapped method once per layer (the position scheme's embed once;
    # sinusoidal positions neither rotate nor bias, the causal rule is fused into the kernel)
    assert first == sum(1 for w in wrappers if w.method not in ("rotate", "score_bias")
                        and w.family != "mask")
    assert len(calls) == 2 * first


def test_cached_decoding_checks_attention_at_powers_of_two_of_the_key_length(monkeypatch):
    model = zoo.build("gpt_tiny", num_layers=1, seed=0).eval()
    output_contract.install(model, "all")
    calls = []
    real = output_contract.Checked._check
    monkeypatch.setattr(output_contract.Checked, "_check",
                        lambda self, v, args, kw: calls.append((self.family, args)) or real(self, v, args, kw))
    cache = model.new_cache(40)
    with torch.no_grad():
        model(ids(3), cache=cache)
        for _ in range(30):
            model(ids(1), cache=cache)
    key_lengths = [a[1].shape[2] for f, a in calls if f == "attention"]
    assert key_lengths == [3, 4, 8, 16, 32]  # the prompt, then the first step of each doubling


def test_the_check_survives_deepcopy_and_binds_to_the_copy():
    with using_registry(faulty_registry("ffn", "nan", at=7)):
        model = build("ffn")
        twin = copy.deepcopy(model)
        (w,) = output_contract.installed(twin)
        assert w.module is twin.decoder.blocks[0].ffn and w.seen == output_contract.installed(model)[0].seen
        with torch.no_grad():
            twin.decoder.blocks[0].ffn.down.weight.mul_(2)
            assert not torch.equal(twin(ids(5)), model(ids(5)))  # the copy runs its own weights
            with pytest.raises(zoo.PluginError):
                twin(ids(7))
    assert set(twin.state_dict()) == set(model.state_dict())


def test_nan_coming_in_or_in_the_weights_is_not_blamed_on_the_component(monkeypatch):
    monkeypatch.setenv("ZOO_CHECK_OUTPUTS", "all")
    model = zoo.build("gpt_tiny", num_layers=2, seed=0).eval()
    assert len(output_contract.installed(model)) > 20
    with torch.no_grad():
        model.decoder.blocks[0].ffn.up.weight[0, 0] = float("nan")
        logits = model(ids(6))  # NaN flows through every later component: none is blamed
    assert not torch.isfinite(logits).all()


def test_an_unknown_policy_is_a_zoo_error(monkeypatch):
    monkeypatch.setenv("ZOO_CHECK_OUTPUTS", "sometimes")
    with pytest.raises(zoo.ZooError, match="ZOO_CHECK_OUTPUTS.*valid options: all, off, plugins"):
        zoo.build("gpt_tiny", num_layers=1)


# ---------------------------------------------------------------------- the build probe
@pytest.mark.parametrize("family_key,fault", [
    ("attention", "shape"), ("norm", "dtype"), ("ffn", "nan"), ("placement", "list"),
    ("position.embed", "meta"), ("position.rotate", "dtype"), ("position.score_bias", "nan"),
    ("mask", "int"), ("ffn", "raise"), ("position.score_bias", "raise"),
])
@pytest.mark.parametrize("at", PROBE_LENGTHS)
def test_the_build_probe_covers_every_family_at_both_lengths(family_key, fault, at):
    family = family_key.split(".")[0]
    assert sorted(PROBE_LENGTHS) == [1, 3]
    with using_registry(faulty_registry(family_key, fault, at=at)):
        with pytest.raises(zoo.PluginError) as err:
            build(family_key)
    msg = str(err.value)
    assert err.value.where == PLUGIN and f"{family} 'faulty' from plugin {PLUGIN}" in msg
    assert "on the build probe" in msg
    if fault == "raise":
        assert "raises ValueError: cannot do this length" in msg
        assert isinstance(err.value.__cause__, ValueError)


def test_the_probe_of_an_encoder_runs_both_lengths_without_a_cache():
    with using_registry(faulty_registry("ffn", "shape", at=1)):
        with pytest.raises(zoo.PluginError, match=r"build probe \(1 tokens\)"):
            zoo.build("bert_tiny", num_layers=1, ffn="faulty")
    with using_registry(faulty_registry("norm", "nan", at=3)):
        with pytest.raises(zoo.PluginError, match=r"build probe \(3 source and 3 target tokens\)"):
            zoo.build("t5_tiny", num_layers=1, norm={"kind": "faulty", "placement": "pre"})


def test_the_probe_leaves_the_model_as_it_was():
    with using_registry(faulty_registry("ffn", "nan", at=7)):
        model = zoo.build("gpt_tiny", num_layers=1, seed=0, norm="batchnorm", ffn="faulty")
        assert model.training and all(m.training for m in model.modules())
        stats = {k: v.clone() for k, v in model.state_dict().items() if "running" in k}
        assert stats
        probe_components(model, "all")
        assert all(m.training for m in model.modules())
        assert all(torch.equal(stats[k], v) for k, v in model.state_dict().items() if k in stats)
        (w,) = output_contract.installed(model)  # the run-time wrapper is back, unprobing
        assert w.name == "faulty" and not w.probing


@pytest.mark.parametrize("preset", ["gpt_tiny", "bert_tiny", "t5_tiny", "llama_tiny",
                                    "prefix_lm_tiny"])
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_the_presets_keep_every_contract(preset, dtype):
    model = zoo.build(preset, seed=0, dtype=dtype)
    assert output_contract.installed(model) == []  # built-ins run unwrapped
    probe_components(model, "all")


def test_every_builtin_component_keeps_its_contract():
    """Each built-in of every model family, in the first architecture it builds in, probed with
    every component checked."""
    kit, probed = Kit(), set()
    for comp in zoo.get_registry().list():
        if FAMILY[comp.family].field is None:
            continue
        for arch in ARCHS:
            try:
                raw = kit.raw_spec(comp, arch)
                raw["num_layers"] = 1
                model = zoo.build(raw, seed=0)
            except (Skip, zoo.IncompatibleComponentsError, zoo.SpecError):
                continue
            probe_components(model, "all")
            probed.add(comp.key)
            break
    builtins = {c.key for c in zoo.get_registry().list() if FAMILY[c.family].field is not None}
    assert probed == builtins


# ---------------------------------------------------------------------- NaN hidden by sdpa
def test_sdpa_lets_a_nan_query_row_through_as_the_math_kernel_does():
    """PyTorch's fused CPU kernel returns zeros for a query row whose scores are all NaN (it takes
    it for a fully masked row); the sdpa kernel puts the NaN back, row for row as the reference
    (torch's math backend) has it, and finite rows stay bit-identical."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kernel = zoo.get_registry().get("attention", "sdpa").make(BuildContext.for_heads(2, 16))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 16, generator=g) for _ in range(3))
    q[0, 1, 2, 5] = float("nan")
    for causal, Tq in ((True, 6), (False, 1)):
        qq = q[:, :, -Tq:] if Tq == 1 else q
        if Tq == 1:
            qq = qq.clone()
            qq[0, 0, 0, 0] = float("inf")
        out, _ = kernel(qq, k, v, is_causal=causal)
        with sdpa_kernel(SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(qq, k, v, is_causal=causal, scale=kernel.scale)
        bad = ~torch.isfinite(out).all(-1)
        assert bad.any() and torch.equal(bad, ~torch.isfinite(ref).all(-1))
        torch.testing.assert_close(out[~bad], ref[~bad], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attention", ["sdpa", "cope"])
def test_a_nan_weight_of_gpt_tiny_reaches_the_logits_and_generation_names_it(attention):
    """cope turns its gated key counts into table indices: a NaN count once became an index (a raw
    "index out of bounds" RuntimeError) instead of a NaN in the output."""
    model = zoo.build("gpt_tiny", seed=0, attention=attention).eval()
    assert model.spec.stack("decoder").attention.kind == attention
    with torch.no_grad():
        model.decoder.blocks[0].attn.qkv.weight[0, 0] = float("nan")
        assert not torch.isfinite(model(ids(8))).all()
    with pytest.raises(zoo.ZooError, match=r"NaN.*decoder\.blocks\.0\.attn\.qkv\.weight"):
        model.generate(ids(4), 2)


@pytest.mark.parametrize("name", ["sdpa", "cosine", "head_scale"])
def test_kernels_over_the_fused_kernel_keep_a_nan_query_row_nan(name):
    """The built-in kernels that call PyTorch's fused attention without a mask: the rows whose
    query holds NaN or infinity come out non-finite, every other row finite (a prompt with the
    fused causal path, and a cached step, whose single query sees every key with no mask)."""
    kernel = zoo.get_registry().get("attention", name).make(BuildContext.for_heads(2, 16))
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 6, 16, generator=g) for _ in range(3))
    q[1, 0, 4, 7] = float("nan")
    q[0, 1, 5, 0] = float("inf")
    for qq, causal in ((q, True), (q[:, :, -1:], False)):
        out, _ = kernel(qq, k, v, is_causal=causal)
        assert torch.equal(~torch.isfinite(out).all(-1), ~torch.isfinite(qq).all(-1))


@pytest.mark.parametrize("name", ["null_kv", "memory_kv"])
def test_kernels_with_keys_in_front_keep_a_nan_query_row_nan_in_a_cached_step(name):
    """null_kv and memory_kv prepend keys and call the fused kernel through
    ``zoo.model.kernels.sdpa``; in a cached step (one query, no mask, no bias) a NaN or infinite
    query once came out as zeros, hiding it.  Now it shows in its row, and only there."""
    kernel = zoo.get_registry().get("attention", name).make(BuildContext.for_heads(2, 16))
    g = torch.Generator().manual_seed(2)
    q, k, v = torch.randn(2, 2, 1, 16, generator=g), *(torch.randn(2, 2, 6, 16, generator=g) for _ in range(2))
    q[1, 0, 0, 7] = float("nan")
    q[0, 1, 0, 0] = float("inf")
    out, _ = kernel(q, k, v)
    assert torch.equal(~torch.isfinite(out).all(-1), ~torch.isfinite(q).all(-1))
