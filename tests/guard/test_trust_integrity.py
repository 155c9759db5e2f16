"""Issue 22, goal 3: integrity of everything that determines the function.

``zoo.save`` records, beside the tensor digest, the identity of every component (plugin, version,
sha256 of its source file), a behavioural fingerprint (the output on a fixed probe) and a sha256 over
every metadata entry.  ``zoo.load(verify=True)`` and ``zoo check`` rebuild and compare, so an edited
spec, a flipped byte in ``zoo.spec`` / ``zoo.tokenizer``, another plugin's component of the same
name, or other maths behind the same plugin name and version are caught -- even when the attacker
also recomputes the metadata hash, the model's behaviour gives it away."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import zoo
from zoo.errors import CheckpointError
from zoo.io.checkpoint import INTEGRITY_KEY, metadata_sha

import hostile_corpus as hc  # tests/ is on sys.path (conftest)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    model = zoo.build("gpt_tiny", num_layers=1, d_model=32, num_heads=2, vocab_size=300, max_len=64,
                      seed=0)
    model.tokenizer = zoo.tokenizer("byte")
    return zoo.save(model, tmp_path_factory.mktemp("integrity") / "good")


def _rewrite(src, dst, change, *, reseal=False):
    """Copy the checkpoint with ``change(meta)`` applied to its metadata; ``reseal`` recomputes the
    integrity entry's metadata hash as an attacker with zoo's source would."""
    header, data = hc.read_st(src)
    meta = header["__metadata__"]
    change(meta)
    if reseal:
        value = json.loads(meta[INTEGRITY_KEY])
        body = {k: v for k, v in value.items() if k != "sha256"}
        value["sha256"] = metadata_sha({**meta, "zoo.integrity.body": json.dumps(body, sort_keys=True)})
        meta[INTEGRITY_KEY] = json.dumps(value, sort_keys=True)
    dst.parent.mkdir(parents=True, exist_ok=True)
    return hc.write_st(dst, header, data)


def _spec_edit(old, new):
    def change(meta):
        assert old in meta["zoo.spec"], meta["zoo.spec"]
        meta["zoo.spec"] = meta["zoo.spec"].replace(old, new)
    return change


EDITS = {  # the edits: each changes what the model computes, not a byte of its tensors
    "causal -> bidirectional": _spec_edit("mask: causal", "mask: bidirectional"),
    "gelu -> relu": _spec_edit("activation: gelu", "activation: relu"),
    "eps 1e-5 -> 1e3": _spec_edit("eps: 1.0e-05", "eps: 1000.0"),
}


@pytest.mark.parametrize("label", sorted(EDITS))
def test_an_edited_spec_is_caught_and_would_change_the_outputs(ckpt, tmp_path, label):
    bad = _rewrite(ckpt, tmp_path / "bad.safetensors", EDITS[label])
    # without verify the edit loads and computes something else (the silent case) ...
    ids = torch.randint(0, 300, (1, 12), generator=torch.Generator().manual_seed(1))
    diff = (zoo.load(bad)(ids) - zoo.load(ckpt)(ids)).abs().max()
    assert diff > 1e-3, diff
    # ... verify refuses it: the metadata hash
    with pytest.raises(CheckpointError, match="metadata was changed after saving"):
        zoo.load(bad, verify=True)
    # ... and when the hash is recomputed too, the fingerprint: the model behaves otherwise
    resealed = _rewrite(ckpt, tmp_path / "resealed.safetensors", EDITS[label], reseal=True)
    with pytest.raises(CheckpointError, match="computes something else") as info:
        zoo.load(resealed, verify=True)
    assert info.value.where.endswith("zoo.integrity.fingerprint")


@pytest.mark.parametrize("key", ["zoo.spec", "zoo.tokenizer", "zoo.tied", "zoo.plugins"])
def test_one_flipped_byte_in_any_metadata_entry_is_caught(ckpt, tmp_path, key):
    """A flip of one bit in a digit keeps the entry well-formed (``512`` -> ``513``, ``0.1.0`` ->
    ``1.1.0``), so only the integrity hash can tell; a flip anywhere else is caught as well."""
    from zoo.io.loading import check

    text = zoo.read_metadata(ckpt)[key]
    digit = text.index("e-05") + 3 if key == "zoo.spec" else next(
        (j for j, ch in enumerate(text) if ch.isdigit()), None)  # eps 1e-05 -> 1e-04: no shape moves
    for i in (digit, len(text) // 2):
        if i is None:
            continue

        def flip(meta, i=i):
            meta[key] = text[:i] + chr(ord(text[i]) ^ 1) + text[i + 1:]
        bad = _rewrite(ckpt, tmp_path / f"flip{i}.safetensors", flip)
        for attempt in (lambda: zoo.load(bad, verify=True), lambda: check(bad)):
            with pytest.raises(CheckpointError) as info:
                attempt()
            if text[i].isdigit():
                assert "changed after saving" in str(info.value)


@pytest.fixture
def swapped_mlp():
    """A registry where ``ffn/mlp`` is another implementation (relu instead of gelu)."""
    from zoo.registry import Registry, set_registry

    reg = Registry(entry_points=False)
    comp = reg.components["ffn"]["mlp"]

    class OtherMLP(comp.cls):
        def forward(self, x):
            return self.down(torch.relu(self.up(x)))

    def use(**identity):
        reg.components["ffn"]["mlp"] = dataclasses.replace(comp, cls=OtherMLP, **identity)
        return set_registry(reg)

    old = []
    yield lambda **kw: old.append(use(**kw))
    set_registry(old[0] if old else None)


def test_another_plugin_providing_the_same_component_is_caught(ckpt, swapped_mlp):
    swapped_mlp(plugin="evil_mlp", version="9.9")
    assert zoo.load(ckpt) is not None  # without verify it loads (and computes something else)
    with pytest.raises(CheckpointError, match="ffn/mlp is now provided by plugin evil_mlp 9.9"):
        zoo.load(ckpt, verify=True)


def test_the_same_plugin_name_and_version_with_other_maths_is_caught(ckpt, swapped_mlp):
    swapped_mlp()  # same plugin name and version as the built-in; only the code differs
    with pytest.warns(UserWarning, match="source of component ffn/mlp"), \
            pytest.raises(CheckpointError, match="computes something else"):
        zoo.load(ckpt, verify=True)


def test_an_edited_source_with_the_same_behaviour_loads_with_a_note(ckpt, monkeypatch):
    """A built-in's file changes between commits (a docstring, a new option): the fingerprint, not
    the file's hash, decides -- the same outputs load, with a warning naming the component."""
    import zoo.io.checkpoint as zio

    real = zio._source_sha
    monkeypatch.setattr(zio, "_source_sha", lambda obj: "0" * 64 if "MLP" in obj.__name__
                        else real(obj))
    with pytest.warns(UserWarning, match="source of component ffn/mlp"):
        assert zoo.load(ckpt, verify=True) is not None


def test_a_different_implementation_under_an_identical_identity_is_caught_by_behaviour(
        ckpt, swapped_mlp, monkeypatch):
    """Even with identical recorded identities (the source hash faked), the fingerprint differs."""
    import zoo.io.checkpoint as zio

    real = zio._source_sha
    monkeypatch.setattr(zio, "_source_sha", lambda obj: real(obj.__mro__[1])  # MLP's own file
                        if getattr(obj, "__name__", "") == "OtherMLP" else real(obj))
    swapped_mlp()
    with pytest.raises(CheckpointError, match="computes something else"):
        zoo.load(ckpt, verify=True)


def test_an_intact_checkpoint_verifies_and_check_reports_each_step(ckpt):
    from zoo.io.loading import check

    assert zoo.load(ckpt, verify=True) is not None
    steps = dict(check(ckpt))
    assert "metadata unchanged" in steps["integrity"] and "matches" in steps["fingerprint"]


def test_a_checkpoint_saved_before_the_integrity_entry_keeps_loading(ckpt, tmp_path):
    old = _rewrite(ckpt, tmp_path / "old.safetensors", lambda meta: meta.pop(INTEGRITY_KEY))
    assert zoo.load(old, verify=True) is not None  # the tensor digest is still verified
    from zoo.io.loading import check

    assert "none stored" in dict(check(old))["integrity"]


@pytest.mark.parametrize("value", ["{", "[]", '{"sha256": 5}', '{"sha256": "x", "components": [], '
                                                                 '"fingerprint": {}}'])
def test_a_malformed_integrity_entry_is_a_checkpoint_error(ckpt, tmp_path, value):
    bad = _rewrite(ckpt, tmp_path / "m.safetensors", lambda meta: meta.update({INTEGRITY_KEY: value}))
    with pytest.raises(CheckpointError) as info:
        zoo.load(bad, verify=True)
    assert INTEGRITY_KEY in info.value.where


def test_the_fingerprint_does_not_change_the_model(tmp_path):
    """Saving runs the probe in eval mode without gradients and restores the training flag."""
    model = zoo.build("gpt_tiny", num_layers=1, d_model=16, num_heads=2, vocab_size=64, dropout=0.1,
                      seed=0)
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    zoo.save(model, tmp_path / "t")
    assert model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_shipped_checkpoints_keep_loading_with_verify():
    names = zoo.list_checkpoints()
    assert names
    for name in names:
        assert zoo.load(name, verify=True) is not None, name
