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
    import sys, time, torch, zoo, zoo.io.checkpoint as io
    real = io.save_file
    def slow_save(tensors, path, metadata=None):
        real(tensors, path, metadata=metadata)   # the new file is fully written to the temp path...
        print("WRITTEN", flush=True)
        time.sleep(60)                           # ...and the process dies before the rename
    io.save_file = slow_save
    model = zoo.build({spec!r}, seed=1)
    zoo.save(model, sys.argv[1])
""")

# The write itself, slowed down: safetensors' real bytes go to the temp file in 4 KB pieces, and
# after the first piece the child reports how many bytes are on disk and how many there will be.
MID_WRITE = textwrap.dedent("""
    import os, sys, time, zoo, zoo.io.checkpoint as io
    from safetensors.torch import save
    def chunked_save(tensors, path, metadata=None):
        data = save(tensors, metadata=metadata)
        with open(path, "wb") as fh:
            for i in range(0, len(data), 4096):
                fh.write(data[i:i + 4096]); fh.flush(); os.fsync(fh.fileno())
                if i == 0:
                    print("PARTIAL", 4096, len(data), flush=True)
                time.sleep(1)
    io.save_file = chunked_save
    zoo.save(zoo.build({spec!r}, seed=1), sys.argv[1])
""")


@pytest.mark.parametrize("phase", ["before_rename", "mid_write"])
def test_killed_save_leaves_old_checkpoint_intact(tmp_path, phase):
    old = zoo.build(tiny(), seed=0).eval()
    target = tmp_path / "ckpt.safetensors"
    zoo.save(old, target)
    before = target.read_bytes()
    code = (KILLER if phase == "before_rename" else MID_WRITE).format(spec=tiny())
    proc = subprocess.Popen([sys.executable, "-c", code, str(target)], stdout=subprocess.PIPE,
                            text=True)
    line = proc.stdout.readline().split()
    temps = list(tmp_path.glob(".ckpt.safetensors.*.tmp"))
    assert len(temps) == 1 and f".{proc.pid}." in temps[0].name  # the temp file names its writer
    if phase == "mid_write":  # proof that a write is under way when the kill comes
        assert line[0] == "PARTIAL"
        written, total = int(line[1]), int(line[2])
        assert temps[0].stat().st_size == written < total
    else:
        assert line == ["WRITTEN"]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert target.read_bytes() == before  # the old checkpoint, byte for byte
    if phase == "mid_write":
        assert temps[0].stat().st_size < total  # killed with the temp file half written
    ids = torch.randint(1, 61, (1, 5))
    assert torch.equal(zoo.load(target)(ids), old(ids))
    zoo.save(old, target)  # the next save removes the dead writer's temp file (and only that)
    assert not temps[0].exists() and not list(tmp_path.glob(".*.tmp"))


def test_stale_temp_files_only_of_dead_writers_and_our_naming_are_removed(tmp_path):
    import os

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    names = {"dead": f".model.safetensors.{dead}.abc123.tmp",
             "alive": f".model.safetensors.{os.getpid()}.def456.tmp",
             "old_legacy": ".model.safetensors.k3j4h5g6.tmp",
             "new_legacy": ".model.safetensors.z9y8x7w6.tmp",
             "other_file": ".model.safetensors.notes.txt", "other_target": ".spec.yaml.1.x.tmp.bak"}
    for n in names.values():
        (tmp_path / n).write_text("x")
    two_hours_ago = time.time() - 7200
    os.utime(tmp_path / names["old_legacy"], (two_hours_ago, two_hours_ago))
    zoo.save(zoo.build(tiny(), seed=0), tmp_path)
    left = {k for k, n in names.items() if (tmp_path / n).exists()}
    assert left == {"alive", "new_legacy", "other_file", "other_target"}


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_saved_files_get_the_users_umask(tmp_path, umask, mode):
    import os

    old = os.umask(umask)
    try:
        path = zoo.save(zoo.build(tiny(), seed=0), tmp_path / "m")
    finally:
        os.umask(old)
    assert oct(path.stat().st_mode & 0o777) == oct(mode)
    assert oct((path.parent / "spec.yaml").stat().st_mode & 0o777) == oct(mode)


def _digest_by_hand(path):
    """The documented digest, recomputed with hashlib over what safetensors reads back."""
    import hashlib

    names = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
    h = hashlib.sha256()
    with safe_open(str(path), framework="pt") as f:
        for name in sorted(f.keys()):
            t = f.get_tensor(name)
            h.update(f"{name}\0{names[t.dtype]}\0{list(t.shape)}\0".encode())
            h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
    return "sha256:" + h.hexdigest()


def test_digest_is_stored_verified_and_catches_one_flipped_bit(tmp_path):
    path = zoo.save(zoo.build(tiny(), seed=0), tmp_path / "m")
    stored = zoo.read_metadata(path)["zoo.digest"]
    assert stored == _digest_by_hand(path)
    assert zoo.io.checkpoint.verify_digest(path) == stored
    zoo.load(path, verify=True)
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0x01  # one bit of the last tensor's data
    path.write_bytes(bytes(raw))
    zoo.load(path)  # without verify the damage is not noticed (the file is well-formed)...
    with pytest.raises(zoo.CheckpointError, match="digest"):
        zoo.load(path, verify=True)  # ...with it, it is
    with pytest.raises(zoo.CheckpointError, match="digest"):
        zoo.io.checkpoint.check(path)


def test_dtype_policy_floats_only_and_one_dtype_unless_cast(tmp_path):
    model = zoo.build(tiny(), seed=0)
    src = zoo.save(model, tmp_path / "m")
    with safe_open(str(src), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    name = "tok_emb.weight"
    mixed = dict(tensors, **{name: tensors[name].to(torch.bfloat16)})
    save_file(mixed, str(tmp_path / "mixed.safetensors"), metadata=meta)
    with pytest.raises(zoo.CheckpointError, match="mix dtypes BF16, F32") as info:
        zoo.load(tmp_path / "mixed.safetensors")
    assert "dtype=" in info.value.fix
    cast = zoo.load(tmp_path / "mixed.safetensors", dtype="float32")
    assert {p.dtype for p in cast.parameters()} == {torch.float32}
    assert torch.equal(cast.tok_emb.weight, tensors[name].to(torch.bfloat16).float())
    ints = dict(tensors, **{name: (tensors[name] * 100).to(torch.int8)})
    save_file(ints, str(tmp_path / "int8.safetensors"), metadata=meta)
    with pytest.raises(zoo.CheckpointError, match="tok_emb.weight' is I8"):
        zoo.load(tmp_path / "int8.safetensors", dtype="float32")  # a cast does not dequantise


def test_header_shapes_are_checked_before_building(tmp_path, monkeypatch):
    src = zoo.save(zoo.build(tiny(), seed=0), tmp_path / "m")
    spec = zoo.load_spec(src).replace(vocab_size=5_000_000)  # fits the budget, not the tensors
    _rewrite(src, tmp_path / "claims.safetensors", meta_changes={"zoo.spec": spec.to_yaml()})
    build_module = sys.modules["zoo.model.build"]  # (``zoo.build`` the attribute is the function)

    def no_build(*a, **k):
        raise AssertionError("built before checking the header")
    monkeypatch.setattr(build_module, "build", no_build)
    with pytest.raises(zoo.CheckpointError, match="tok_emb.weight") as info:
        zoo.load(tmp_path / "claims.safetensors")
    assert "(5000000," in str(info.value)


@pytest.mark.parametrize("key,value", [("zoo.tied", "{"), ("zoo.tied", "[1]"),
                                       ("zoo.plugins", '{"a": 1}'), ("zoo.tokenizer", '{"data": {}}'),
                                       ("zoo.digest", "sha1:00")])
def test_each_metadata_entry_is_validated_and_named(tmp_path, key, value):
    src = zoo.save(zoo.build(tiny(), seed=0), tmp_path / "m")
    _rewrite(src, tmp_path / "bad.safetensors", meta_changes={key: value})
    with pytest.raises(zoo.CheckpointError) as info:
        zoo.load(tmp_path / "bad.safetensors")
    assert info.value.where.endswith(f": {key}")
