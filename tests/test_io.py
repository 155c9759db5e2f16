"""Checkpoints: bit-exact round trips, strict loading, clear errors, atomic saves."""
import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import zoo

from helpers import tiny


def _inputs(model):
    torch.manual_seed(1)
    ids = torch.randint(1, model.spec.vocab_size, (2, 7))
    return (ids, ids[:, :5]) if model.spec.arch == "encoder_decoder" else (ids,)


@pytest.mark.parametrize("preset", ["gpt_tiny", "bert_tiny", "t5_tiny", "prefix_lm_tiny"])
def test_save_load_bit_identical(tmp_path, preset):
    model = zoo.build(preset, seed=3).eval()
    path = zoo.save(model, tmp_path / preset)
    assert path.name == "model.safetensors" and (tmp_path / preset / "spec.yaml").is_file()
    loaded = zoo.load(tmp_path / preset)
    assert loaded.spec == model.spec
    with torch.no_grad():
        assert torch.equal(model(*_inputs(model)), loaded(*_inputs(model)))


def test_metadata_is_self_describing_and_tied_weights_stored_once(tmp_path):
    model = zoo.build("gpt_tiny", seed=0)
    file = zoo.save(model, tmp_path / "m.safetensors")
    with safe_open(str(file), framework="pt") as f:
        meta, keys = f.metadata(), set(f.keys())
    assert zoo.parse_spec(meta["zoo.spec"]) == model.spec
    assert meta["zoo.version"] == zoo.__version__
    assert "zoo.attention_sdpa" in json.loads(meta["zoo.plugins"])
    assert json.loads(meta["zoo.tied"]) == {"lm_head.weight": "tok_emb.weight"}
    assert "lm_head.weight" not in keys and "tok_emb.weight" in keys
    loaded = zoo.load(file)
    assert loaded.lm_head.weight is loaded.tok_emb.weight  # tying restored


def test_load_dtype_and_no_random_init(tmp_path):
    model = zoo.build("gpt_tiny", seed=0)
    zoo.save(model, tmp_path / "g")
    half = zoo.load(tmp_path / "g", dtype="bfloat16")
    assert half.tok_emb.weight.dtype == torch.bfloat16
    assert not half.training
    assert torch.equal(half.tok_emb.weight, model.tok_emb.weight.bfloat16())


def test_truncated_and_corrupted_files(tmp_path):
    file = zoo.save(zoo.build("gpt_tiny", seed=0), tmp_path / "g.safetensors")
    data = file.read_bytes()
    trunc = tmp_path / "trunc.safetensors"
    trunc.write_bytes(data[: len(data) // 2])
    with pytest.raises(zoo.CheckpointError, match="trunc.safetensors"):
        zoo.load(trunc)
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(zoo.CheckpointError, match="corrupt"):
        zoo.load(garbage)
    with pytest.raises(zoo.CheckpointError, match="no checkpoint at"):
        zoo.load(tmp_path / "nope")
    pickle = tmp_path / "model.pt"
    pickle.write_bytes(b"x")
    with pytest.raises(zoo.CheckpointError, match="pickle is never loaded"):
        zoo.load(pickle)


def _rewrite(src, dst, tensors=None, meta_changes=None):
    with safe_open(str(src), framework="pt") as f:
        meta = dict(f.metadata())
        ts = {k: f.get_tensor(k) for k in f.keys()}
    if tensors:
        tensors(ts)
    meta.update(meta_changes or {})
    save_file(ts, str(dst), metadata=meta)


def test_mismatched_tensors_are_named(tmp_path):
    file = zoo.save(zoo.build("gpt_tiny", seed=0), tmp_path / "g.safetensors")
    _rewrite(file, tmp_path / "missing.safetensors", lambda ts: ts.pop("decoder.blocks.0.attn.qkv.bias"))
    with pytest.raises(zoo.CheckpointError, match=r"missing \['decoder.blocks.0.attn.qkv.bias'\]"):
        zoo.load(tmp_path / "missing.safetensors")
    _rewrite(file, tmp_path / "extra.safetensors", lambda ts: ts.update(surprise=torch.ones(2)))
    with pytest.raises(zoo.CheckpointError, match=r"unexpected \['surprise'\]"):
        zoo.load(tmp_path / "extra.safetensors")

    def reshape(ts):
        ts["decoder.blocks.1.ffn.up.weight"] = torch.randn(16, 128)
    _rewrite(file, tmp_path / "shape.safetensors", reshape)
    with pytest.raises(zoo.CheckpointError, match=r"decoder.blocks.1.ffn.up.weight.*\(16, 128\).*\(512, 128\)"):
        zoo.load(tmp_path / "shape.safetensors")
    # weights of one spec under the spec of another
    other = zoo.spec("gpt_tiny", d_ff=256).to_yaml()
    _rewrite(file, tmp_path / "wrongspec.safetensors", meta_changes={"zoo.spec": other})
    with pytest.raises(zoo.CheckpointError, match="has shape"):
        zoo.load(tmp_path / "wrongspec.safetensors")


def test_missing_plugin_is_named(tmp_path):
    file = zoo.save(zoo.build("gpt_tiny", seed=0), tmp_path / "g.safetensors")
    spec = zoo.spec("gpt_tiny").to_dict()
    spec["attention"] = "performer"
    text = "\n".join(f"{k}: {json.dumps(v)}" for k, v in spec.items()) + "\n"
    plugins = json.dumps({"zoo-performer": "0.3.1", "zoo.masks": zoo.__version__})
    _rewrite(file, tmp_path / "p.safetensors", meta_changes={"zoo.spec": text, "zoo.plugins": plugins})
    with pytest.raises(zoo.CheckpointError, match="performer.*zoo-performer"):
        zoo.load(tmp_path / "p.safetensors")


def test_save_refuses_foreign_modules(tmp_path):
    with pytest.raises(zoo.CheckpointError, match="no zoo spec"):
        zoo.save(torch.nn.Linear(2, 2), tmp_path / "x.safetensors")


KILLER = textwrap.dedent("""
    import sys, time, torch, zoo, zoo.io as io
    real = io.save_file
    def slow_save(tensors, path, metadata=None):
        real(tensors, path, metadata=metadata)   # the new file is fully written to the temp path...
        print("WRITTEN", flush=True)
        time.sleep(60)                           # ...and the process dies before the rename
    io.save_file = slow_save
    model = zoo.build({spec!r}, seed=1)
    zoo.save(model, sys.argv[1])
""")


@pytest.mark.parametrize("phase", ["before_rename", "mid_write"])
def test_killed_save_leaves_old_checkpoint_intact(tmp_path, phase):
    old = zoo.build(tiny(), seed=0).eval()
    target = tmp_path / "ckpt.safetensors"
    zoo.save(old, target)
    before = target.read_bytes()
    if phase == "before_rename":
        code = KILLER.format(spec=tiny())
        proc = subprocess.Popen([sys.executable, "-c", code, str(target)], stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout.readline().strip() == "WRITTEN"
    else:  # a big model, killed while safetensors is writing its bytes
        code = ("import sys, zoo; m = zoo.build('gpt_tiny', vocab_size=60000, d_model=768, "
                "num_heads=12, num_layers=2, seed=1)\nprint('GO', flush=True)\n"
                "while True: zoo.save(m, sys.argv[1])")
        proc = subprocess.Popen([sys.executable, "-c", code, str(target)], stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout.readline().strip() == "GO"
        time.sleep(0.05)
        for _ in range(200):  # wait until a temp file is being written, then kill
            if list(tmp_path.glob(".ckpt.safetensors.*.tmp")):
                break
            time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if phase == "before_rename":
        assert target.read_bytes() == before
    loaded = zoo.load(target)  # whatever happened, the file at the target is a complete checkpoint
    ids = torch.randint(1, 61, (1, 5))
    if phase == "before_rename":
        assert torch.equal(loaded(ids), old(ids))
