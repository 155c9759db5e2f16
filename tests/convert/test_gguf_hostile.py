"""Issue 35: hostile GGUF files are ConvertErrors decided from the header's numbers, before any
allocation or loop sized by them (zoo.convert.gguf_header), and a file truncated while it is
converted is a ConvertError, not a SIGBUS.

Each file here is either written byte by byte (``raw``: the header fields the format defines, with a
lying count) or written by the gguf library and then edited (``rewrite``).
"""
from __future__ import annotations

import os
import resource
import struct
import time

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
pytest.importorskip("transformers")

from gguf import GGMLQuantizationType as Q, GGUFValueType as V  # noqa: E402
from test_gguf import hf_model, write_gguf  # noqa: E402

from zoo.convert import ConvertError, from_gguf  # noqa: E402


def raw(kvs=(), *, n_tensors=0, n_kv=None, tail=b"") -> bytes:
    """A GGUF v3 header: magic, version, tensor count, metadata count, ``kvs`` (key, encoded value)."""
    out = b"GGUF" + struct.pack("<IQQ", 3, n_tensors, len(kvs) if n_kv is None else n_kv)
    for key, value in kvs:
        out += struct.pack("<Q", len(key)) + key.encode() + value
    return out + tail


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf")
    return {"llama": write_gguf(d / "llama.gguf", "llama", hf_model("llama"), Q.Q8_0),
            "gpt2": write_gguf(d / "gpt2.gguf", "gpt2", hf_model("gpt2"), Q.F16, tokenizer="gpt2")}


def rewrite(src, dst, *, key=None, value=None, vtype=None, sub=None, tensor=None, array=None):
    """``src`` written again by the gguf library with metadata ``key`` set (or a tensor replaced)."""
    r = gguf.GGUFReader(str(src))
    w = gguf.GGUFWriter(str(dst), r.fields["general.architecture"].contents())
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k in ("general.architecture", key):
            continue
        t = f.types[0]
        w.add_key_value(k, f.contents(), t, **({"sub_type": f.types[-1]} if t == V.ARRAY else {}))
    if key is not None:
        w.add_key_value(key, value, vtype, **({"sub_type": sub} if sub is not None else {}))
    for t in r.tensors:
        if t.name == tensor:
            w.add_tensor(t.name, array)
        else:
            w.add_tensor(t.name, np.array(t.data), raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


HEADERS = [
    ("array of numbers past the end", raw([("a", struct.pack("<IIQ", 9, 4, 10**12))]), "1,000,000,000,000 items"),
    ("array of strings past the end", raw([("a", struct.pack("<IIQ", 9, 8, 10**9))]), "items of 8 or more"),
    ("nested arrays", raw([("a", struct.pack("<IIQIIQ", 9, 9, 1, 9, 9, 1))]), "nested"),
    ("a string of 2**63 bytes", raw([("a", struct.pack("<IQ", 8, 2**63))]), "at most 16,777,216"),
    ("2**60 tensors", raw(n_tensors=2**60), "1,152,921,504,606,846,976 tensors"),
    ("2**62 metadata entries", raw(n_kv=2**62), "metadata entries"),
    ("an unknown value type", raw([("a", struct.pack("<I", 77))]), "value type 77"),
    ("a tensor past the end", raw([], n_tensors=1, tail=struct.pack("<Q", 1) + b"t" + struct.pack(
        "<IQQIQ", 2, 4096, 4096, 0, 0)), "outside the data section"),
    ("a tensor of five dimensions", raw([], n_tensors=1, tail=struct.pack("<Q", 1) + b"t" + struct.pack(
        "<I5QIQ", 5, 1, 1, 1, 1, 1, 0, 0)), "5 dimensions"),
    ("a row of half a block", raw([], n_tensors=1, tail=struct.pack("<Q", 1) + b"t" + struct.pack(
        "<IQIQ", 1, 16, int(Q.Q8_0), 0) + bytes(64)), "not whole Q8_0 blocks"),
]


@pytest.mark.parametrize("data, match", [pytest.param(d, m, id=n) for n, d, m in HEADERS])
def test_header_counts_are_held_against_the_file_before_any_allocation(tmp_path, data, match):
    p = tmp_path / "h.gguf"
    p.write_bytes(data)
    before, t0 = _peak(), time.perf_counter()
    with pytest.raises(ConvertError, match=match) as e:
        from_gguf(p)
    assert time.perf_counter() - t0 < 2 and _peak() - before < 64 << 20
    assert e.value.fix and len(str(e.value)) < 600


def test_not_a_gguf_file_does_not_echo_its_bytes(tmp_path):
    p = tmp_path / "x.gguf"
    for data, kind in ((b"\x1b[31mSECRET-abc", "other binary"), (b"token=hunter2", "text"), (b"", "empty")):
        p.write_bytes(data)
        with pytest.raises(ConvertError, match="not a GGUF file") as e:
            from_gguf(p)
        assert kind in str(e.value)
        assert "SECRET" not in str(e.value) and "hunter2" not in str(e.value) and "\x1b" not in str(e.value)


def test_a_block_count_of_a_million_is_refused_before_a_name_table_is_made(files, tmp_path):
    p = rewrite(files["llama"], tmp_path / "b.gguf", key="llama.block_count", value=10**6, vtype=V.UINT32)
    before, t0 = _peak(), time.perf_counter()
    with pytest.raises(ConvertError, match="block_count=1000000, but the file has tensors for 2") as e:
        from_gguf(p)
    assert e.value.where == "gguf:llama.block_count"
    assert time.perf_counter() - t0 < 5 and _peak() - before < 256 << 20


def test_an_empty_head_count_kv_array_is_a_convert_error(files, tmp_path):
    p = rewrite(files["llama"], tmp_path / "k.gguf", key="llama.attention.head_count_kv", value=[2],
                vtype=V.ARRAY, sub=V.UINT32)
    data = bytearray(p.read_bytes())  # the library refuses to write [], so: count 1 -> 0, value out
    at = data.index(b"llama.attention.head_count_kv") + len(b"llama.attention.head_count_kv")
    assert data[at:at + 16] == struct.pack("<IIQ", 9, int(V.UINT32), 1)
    data[at + 8:at + 16] = struct.pack("<Q", 0)
    del data[at + 16:at + 20]
    start = min(t.data_offset for t in gguf.GGUFReader(str(p)).tensors)
    data[start - 4:start - 4] = bytes(4)  # the data section stays where it was
    p.write_bytes(bytes(data))
    with pytest.raises(ConvertError, match="non-empty list") as e:
        from_gguf(p)
    assert e.value.where == "gguf:llama.attention.head_count_kv"


def test_a_one_dimensional_token_embedding_is_a_convert_error(files, tmp_path):
    p = rewrite(files["llama"], tmp_path / "e.gguf", tensor="token_embd.weight", array=np.zeros(64, np.float32))
    with pytest.raises(ConvertError, match="1 dimension") as e:
        from_gguf(p)
    assert e.value.where == "gguf:token_embd.weight"


@pytest.mark.parametrize("merge, named", [("zzq qqz", "zzq"), ("h e", "he")],
                         ids=["a token outside the vocabulary", "a result that is not a token"])
def test_merges_must_join_tokens_of_the_vocabulary_into_one(files, tmp_path, merge, named):
    merges = gguf.GGUFReader(str(files["gpt2"])).fields["tokenizer.ggml.merges"].contents()
    p = rewrite(files["gpt2"], tmp_path / "m.gguf", key="tokenizer.ggml.merges", value=merges + [merge],
                vtype=V.ARRAY, sub=V.STRING)
    with pytest.raises(ConvertError, match=f"names '{named}', which is not a token") as e:
        from_gguf(p)
    assert e.value.where == f"gguf:tokenizer.ggml.merges[{len(merges)}]"
    from_gguf(files["gpt2"])  # the file's own merges pass the same check
