"""A corpus of hostile inputs, per category, for issue 12's promise: every one is a ``ZooError`` (or is
accepted), never a bare traceback, a hang or a runaway allocation.

Used by ``tests/test_hostile.py`` (one test per case) and ``scripts/hostile_table.py`` (the table in
the issue's closing note).  Each case is ``Case(category, name, run)``; ``run(ctx)`` performs the
hostile call.  :func:`outcome` runs one case and classifies what happened.
"""
from __future__ import annotations

import json
import math
import os
import resource
import signal
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

import zoo

CATEGORIES = ("converter", "generation", "checkpoints", "yaml", "sizes")


@dataclass(frozen=True)
class Case:
    category: str
    name: str
    run: Callable[["Ctx"], Any]


class Ctx:
    """Shared, lazily made material for the cases: a tiny model, its checkpoint, an HF folder."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._model = self._ckpt = None
        self._n = 0

    def fresh(self, name: str = "case") -> Path:
        self._n += 1
        d = self.root / f"{name}-{self._n}"
        d.mkdir(parents=True)
        return d

    @property
    def model(self):
        if self._model is None:
            self._model = zoo.build("gpt_tiny", num_layers=1, d_model=32, num_heads=2, vocab_size=300,
                                    max_len=64, seed=0)
            self._model.tokenizer = zoo.tokenizer("byte")
        return self._model

    @property
    def checkpoint(self) -> Path:
        if self._ckpt is None:
            self._ckpt = zoo.save(self.model, self.root / "good")
        return self._ckpt


# ---------------------------------------------------------------------- safetensors by hand
def read_st(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_st(path: Path, header: dict, data: bytes, *, raw_header: bytes | None = None) -> Path:
    head = raw_header if raw_header is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + data)
    return path


def mutated(ctx: Ctx, change: Callable[[dict, bytes], tuple[dict, bytes]]) -> Path:
    header, data = read_st(ctx.checkpoint)
    header, data = change(json.loads(json.dumps(header)), data)
    d = ctx.fresh("ckpt")
    return write_st(d / "model.safetensors", header, data)


def with_meta(key: str, value: str | None):
    def change(h, d):
        if value is None:
            h["__metadata__"].pop(key, None)
        else:
            h["__metadata__"][key] = value
        return h, d
    return change


def hf_gpt2(ctx: Ctx, config: dict | None = None, tensors: dict | None = None,
            drop: tuple = ()) -> Path:
    """A tiny GPT-2 ``save_pretrained``-style folder written by hand (no transformers needed)."""
    from safetensors.torch import save_file

    D, V, P, F = 8, 16, 16, 32
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g) * 0.1  # noqa: E731
    st = {"wte.weight": r(V, D), "wpe.weight": r(P, D), "ln_f.weight": 1 + r(D), "ln_f.bias": r(D),
          "h.0.ln_1.weight": 1 + r(D), "h.0.ln_1.bias": r(D), "h.0.attn.c_attn.weight": r(D, 3 * D),
          "h.0.attn.c_attn.bias": r(3 * D), "h.0.attn.c_proj.weight": r(D, D),
          "h.0.attn.c_proj.bias": r(D), "h.0.ln_2.weight": 1 + r(D), "h.0.ln_2.bias": r(D),
          "h.0.mlp.c_fc.weight": r(D, F), "h.0.mlp.c_fc.bias": r(F), "h.0.mlp.c_proj.weight": r(F, D),
          "h.0.mlp.c_proj.bias": r(D)}
    st.update(tensors or {})
    for k in drop:
        st.pop(k, None)
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 1, "n_head": 2,
           "n_embd": D, "vocab_size": V, "n_positions": P, "n_inner": None,
           "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}
    cfg.update(config or {})
    d = ctx.fresh("hf")
    save_file(st, str(d / "model.safetensors"), metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def convert(path):
    from zoo.convert import from_pretrained

    return from_pretrained(path, certify=False)


# ---------------------------------------------------------------------- the categories
def _converter() -> list[Case]:
    out = []

    def cfg_case(name, **config):
        out.append(Case("converter", f"config {name}", lambda c: convert(hf_gpt2(c, config))))

    for key in ("n_layer", "n_head", "n_embd", "vocab_size", "n_positions"):
        for label, v in (("missing", None), ("string", "2"), ("zero", 0), ("negative", -3),
                         ("float", 2.5), ("huge", 10**12), ("list", [2]), ("bool", True),
                         ("nan", float("nan"))):
            if v is None:
                def run(c, key=key):
                    d = hf_gpt2(c)
                    cfg = json.loads((d / "config.json").read_text())
                    del cfg[key]
                    (d / "config.json").write_text(json.dumps(cfg))
                    return convert(d)
                out.append(Case("converter", f"config {key} missing", run))
            else:
                cfg_case(f"{key}={label}", **{key: v})
    cfg_case("model_type unknown", model_type="nonsense")
    cfg_case("model_type list", model_type=["gpt2"])
    cfg_case("activation unknown", activation_function="sigmoid_of_doom")
    cfg_case("layer_norm_epsilon string", layer_norm_epsilon="tiny")

    def raw_config(text: bytes):
        def run(c):
            d = hf_gpt2(c)
            (d / "config.json").write_bytes(text)
            return convert(d)
        return run

    for label, text in (("not JSON", b"{not json"), ("a list", b"[1, 2]"), ("empty", b""),
                        ("non-UTF-8", b"\xff\xfe{}"), ("deep nesting", b"[" * 100000 + b"]" * 100000),
                        ("huge", b"{\"a\": \"" + b"x" * (5 * 2**20) + b"\"}"), ("null", b"null")):
        out.append(Case("converter", f"config.json {label}", raw_config(text)))

    def index_case(label, weight_map, make_outside=False, symlink=False):
        def run(c):
            d = hf_gpt2(c)
            (d / "model.safetensors").rename(d / "shard-1.safetensors")
            if make_outside:
                outside = d.parent / "outside"
                outside.mkdir(exist_ok=True)
                (outside / "secret.safetensors").write_bytes((d / "shard-1.safetensors").read_bytes())
            if symlink:
                os.symlink(d.parent / "outside" / "secret.safetensors", d / "link.safetensors")
            wm = weight_map(d) if callable(weight_map) else weight_map
            (d / "model.safetensors.index.json").write_text(json.dumps(wm))
            return convert(d)
        out.append(Case("converter", f"index {label}", run))

    index_case("../outside escape", {"weight_map": {"wte.weight": "../outside/secret.safetensors"}},
               make_outside=True)
    index_case("absolute path", lambda d: {"weight_map": {
        "wte.weight": str(d.parent / "outside" / "secret.safetensors")}}, make_outside=True)
    index_case("symlink out", {"weight_map": {"wte.weight": "link.safetensors"}}, make_outside=True,
               symlink=True)
    index_case("missing shard", {"weight_map": {"wte.weight": "nope.safetensors"}})
    index_case("no weight_map", {"metadata": {}})
    index_case("weight_map list", {"weight_map": ["shard-1.safetensors"]})
    index_case("shard name int", {"weight_map": {"wte.weight": 5}})
    index_case("shard name NUL", {"weight_map": {"wte.weight": "a\x00b"}})
    index_case("index a list", [1, 2])

    def weights_case(label, **kw):
        out.append(Case("converter", f"weights {label}", lambda c: convert(hf_gpt2(c, **kw))))

    weights_case("missing tensor", drop=("h.0.mlp.c_fc.weight",))
    weights_case("wrong shape", tensors={"wte.weight": torch.zeros(3, 3) + 0.5})
    weights_case("int8 tensor", tensors={"wte.weight": torch.ones(16, 8, dtype=torch.int8)})
    weights_case("extra unknown tensor", tensors={"h.0.mystery": torch.ones(2)})
    weights_case("vocab claims 10**9", config={"vocab_size": 10**9})
    weights_case("positions claim 10**9", config={"n_positions": 10**9})

    def truncated(c):
        d = hf_gpt2(c)
        raw = (d / "model.safetensors").read_bytes()
        (d / "model.safetensors").write_bytes(raw[: len(raw) // 2])
        return convert(d)
    out.append(Case("converter", "weights truncated", truncated))

    def garbage(c):
        d = hf_gpt2(c)
        (d / "model.safetensors").write_bytes(b"\xff" * 64)
        return convert(d)
    out.append(Case("converter", "weights garbage", garbage))

    def pickle_only(c):
        d = hf_gpt2(c)
        (d / "model.safetensors").rename(d / "pytorch_model.bin")
        return convert(d)
    out.append(Case("converter", "pickle only", pickle_only))
    out.append(Case("converter", "not a folder", lambda c: convert(c.root / "does-not-exist")))
    return out


_HOSTILE_VALUES = (("-1", -1), ("0", 0), ("1e-45", 1e-45), ("1e-300", 1e-300), ("nan", math.nan),
                   ("inf", math.inf), ("-inf", -math.inf), ("str", "1"), ("list", [1]),
                   ("True", True), ("2**64", 2**64), ("2**200", 2**200), ("1.5", 1.5), ("dict", {}),
                   ("object", object()), ("10**9", 10**9))
_OPTIONS = ("max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop_tokens",
            "decoder_start_id", "pad_id", "prefix_length", "vocab_limit", "do_sample", "use_cache",
            "attention_mask", "ids")


def _generation() -> list[Case]:
    from zoo.generate import generate, generate_text

    out = []
    for opt in _OPTIONS:
        for label, v in _HOSTILE_VALUES:
            def run(c, opt=opt, v=v):
                kw = {"max_new_tokens": 2, "do_sample": True, "seed": 0}
                if opt == "ids":
                    return generate(c.model, v, **kw)
                kw[opt] = v
                return generate(c.model, [[1, 2, 3]], **kw)
            out.append(Case("generation", f"{opt}={label}", run))
    texts = (("lone surrogate", "a\ud800b"), ("int", 5), ("None", None), ("bytes", b"abc"),
             ("list of ints", [1, 2]), ("nested list", [["a"]]), ("empty", ""),
             ("NUL", "\x00\x00"), ("1M chars", "x" * 10**6 + "\ud800"))
    for label, text in texts:
        out.append(Case("generation", f"text {label}",
                        lambda c, t=text: generate_text(c.model, t, max_new_tokens=2)))
    for kind in ("byte", "char"):
        for label, text in texts[:5]:
            out.append(Case("generation", f"{kind} encode {label}",
                            lambda c, k=kind, t=text: zoo.tokenizer(k, **({"text": "abc"} if k == "char" else {})).encode(t)))
        for label, ids in (("floats", [1.5]), ("int", 3), ("nested", [[1]]), ("strings", ["a"]),
                           ("None", None)):
            out.append(Case("generation", f"{kind} decode {label}",
                            lambda c, k=kind, i=ids: zoo.tokenizer(k, **({"text": "abc"} if k == "char" else {})).decode(i)))
    for label, params in (("char specials empty string", {"kind": "char", "text": "a", "specials": [""]}),
                          ("char text int", {"kind": "char", "text": 5}),
                          ("byte specials duplicate", {"kind": "byte", "specials": ["<a>", "<a>"]}),
                          ("hf path outside", {"kind": "hf", "path": "/nonexistent/tokenizer.json"}),
                          ("unknown kind", {"kind": "sentencepiece-ish"})):
        out.append(Case("generation", f"tokenizer {label}",
                        lambda c, p=params: zoo.tokenizer(**p)))
    return out


def _checkpoints() -> list[Case]:
    out = []

    def case(name, change, **load_kw):
        out.append(Case("checkpoints", name, lambda c: zoo.load(mutated(c, change), **load_kw)))

    for frac in (0.0, 0.001, 0.01, 0.1, 0.5, 0.9, 0.999):
        def trunc(c, frac=frac):
            raw = c.checkpoint.read_bytes()
            p = c.fresh("ckpt") / "model.safetensors"
            p.write_bytes(raw[: int(len(raw) * frac)])
            return zoo.load(p)
        out.append(Case("checkpoints", f"truncated at {frac:.1%}", trunc))

    def raw_header(name, head: bytes, length: int | None = None):
        def run(c):
            p = c.fresh("ckpt") / "model.safetensors"
            n = len(head) if length is None else length
            p.write_bytes(struct.pack("<Q", n) + head + b"\0" * 64)
            return zoo.load(p)
        out.append(Case("checkpoints", f"header {name}", run))

    raw_header("not JSON", b"{nope")
    raw_header("a list", b"[1,2,3]")
    raw_header("length 2**63", b"{}", length=2**63)
    raw_header("length past the end", b"{}", length=10**6)
    raw_header("deep nesting", b"[" * 50000 + b"]" * 50000)
    raw_header("non-UTF-8", b"{\"\xff\": 1}")
    raw_header("metadata not strings", b'{"__metadata__": {"zoo.spec": 5}}')
    raw_header("entry not an object", b'{"a": 5}')
    raw_header("unknown dtype", b'{"a": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 4]}}')
    raw_header("negative shape", b'{"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}')
    raw_header("offsets past the end", b'{"a": {"dtype": "F32", "shape": [1000000], "data_offsets": [0, 4000000]}}')
    raw_header("offsets disagree with shape", b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}')
    raw_header("huge shape", b'{"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}}')

    def flip(h, d):  # one bit of the data
        d = bytearray(d)
        d[len(d) // 2] ^= 1
        return h, bytes(d)
    case("bit flip, verify=True", flip, verify=True)
    spec_yaml = "arch: decoder\nvocab_size: 300\nd_model: 32\nnum_layers: 1\nnum_heads: 2\n"
    for label, value in (("spec missing", None), ("spec invalid YAML", "a: [1,"),
                         ("spec alias bomb", _bomb(9)), ("spec not a mapping", "[1, 2]"),
                         ("spec unknown component", spec_yaml + "attention: warp_drive\n"),
                         ("spec vocab 10**9", spec_yaml.replace("300", "1000000000")),
                         ("spec vocab 10**7 (shapes)", spec_yaml.replace("300", "10000000")),
                         ("spec max_len 10**9", spec_yaml + "max_len: 1000000000\n"),
                         ("spec d_ff 0", spec_yaml + "d_ff: 0\n"),
                         ("spec duplicate keys", spec_yaml + "d_model: 64\n"),
                         ("spec deep nesting", "a: " + "[" * 5000 + "]" * 5000),
                         ("tied not JSON", "{"), ("tied a list", "[1]"),
                         ("tied to nothing", '{"lm_head.weight": "nope"}'),
                         ("tied wrong shapes", '{"lm_head.weight": "decoder.final_norm.weight"}'),
                         ("plugins not JSON", "{"), ("plugins a list", "[]"),
                         ("tokenizer not JSON", "{"), ("tokenizer no kind", "{}"),
                         ("tokenizer unknown kind", '{"kind": "nope"}'),
                         ("tokenizer data a list", '{"kind": "byte", "data": []}'),
                         ("tokenizer char chars missing", '{"kind": "char", "data": {"specials": []}}'),
                         ("tokenizer char chars int", '{"kind": "char", "data": {"chars": 5, "specials": []}}'),
                         ("tokenizer byte specials int", '{"kind": "byte", "data": {"specials": 5}}'),
                         ("tokenizer hf json garbage", '{"kind": "hf", "data": {"json": "{nope"}}'),
                         ("digest malformed", "md5:abc"), ("digest wrong", "sha256:" + "0" * 64)):
        key = ("zoo.spec" if label.startswith("spec") else "zoo.tied" if label.startswith("tied")
               else "zoo.plugins" if label.startswith("plugins") else "zoo.tokenizer"
               if label.startswith("tokenizer") else "zoo.digest")
        case(f"metadata {label}", with_meta(key, value), verify=label.startswith("digest"))

    def plugins_missing(h, d):
        h["__metadata__"]["zoo.spec"] = h["__metadata__"]["zoo.spec"].replace("kind: sdpa", "kind: warp")
        h["__metadata__"]["zoo.plugins"] = "[5]"
        return h, d
    case("metadata unknown component with broken plugins entry", plugins_missing)

    def retype(dtype: str, size: int):
        def change(h, d):
            name = next(k for k in h if k != "__metadata__")
            old = h[name]
            n = math.prod(old["shape"])
            begin = len(d)
            h[name] = {"dtype": dtype, "shape": old["shape"], "data_offsets": [begin, begin + n * size]}
            return h, d + b"\1" * (n * size)
        return change
    case("dtype int8 tensor", retype("I8", 1))
    case("dtype bool tensor", retype("BOOL", 1))
    case("dtype int64 tensor", retype("I64", 8))
    case("dtype mixed F32 + BF16", retype("BF16", 2))

    def reshape(h, d):
        name = "tok_emb.weight"
        h[name]["shape"] = [h[name]["shape"][1], h[name]["shape"][0]]
        return h, d
    case("shape transposed", reshape)

    def drop_tensor(h, d):
        h.pop(next(k for k in sorted(h) if k.endswith("ffn.up.weight")))
        return h, d
    case("tensor missing", drop_tensor)

    def extra_tensor(h, d):
        h["mystery"] = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}
        return h, d
    case("tensor unexpected", extra_tensor)
    case("dtype option unknown", lambda h, d: (h, d), dtype="int8")
    case("device option unknown", lambda h, d: (h, d), device="tpu:9")
    out.append(Case("checkpoints", "not safetensors suffix",
                    lambda c: zoo.load(_touch(c.fresh("ckpt") / "model.pt", b"x"))))
    out.append(Case("checkpoints", "empty folder", lambda c: zoo.load(c.fresh("ckpt"))))
    out.append(Case("checkpoints", "nonexistent", lambda c: zoo.load(c.root / "nope.safetensors")))
    out.append(Case("checkpoints", "a folder named model.safetensors",
                    lambda c: zoo.load(_mkdir(c.fresh("ckpt") / "x" / "model.safetensors").parent)))
    out.append(Case("checkpoints", "zoo check bit flip",
                    lambda c: __import__("zoo.io").io.check(mutated(c, flip))))
    return out


def _touch(p: Path, data: bytes) -> Path:
    p.write_bytes(data)
    return p


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True)
    return p


def _bomb(levels: int) -> str:
    """The "billion laughs" YAML: each level lists the previous one 9 times (9**levels leaves)."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _yaml() -> list[Case]:
    out = []
    base = "arch: decoder\nvocab_size: 64\nd_model: 16\nnum_layers: 1\nnum_heads: 2\n"
    texts: list[tuple[str, str | bytes]] = [
        *((f"alias bomb {n} levels", _bomb(n)) for n in (3, 6, 9, 12)),
        ("alias bomb beside a valid spec", base + _bomb(9)),
        ("recursive alias", base + "mask: &m [*m]\n"),
        ("recursive mapping alias", base + "norm: &n {kind: layernorm, x: *n}\n"),
        ("deep flow sequence", base + "name: " + "[" * 10000 + "]" * 10000 + "\n"),
        ("deep flow mapping", base + "name: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n"),
        ("deep block nesting", base + "".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "v: 1\n"),
        ("duplicate top-level key", base + "d_model: 32\n"),
        ("duplicate nested key", base + "norm: {kind: layernorm, kind: rmsnorm}\n"),
        ("non-UTF-8 bytes", base.encode() + b"name: \xff\xfe\n"),
        ("NUL byte", base + "name: a\x00b\n"),
        ("python tag", base + "name: !!python/object/apply:os.system ['true']\n"),
        ("unknown tag", base + "name: !custom 1\n"),
        ("bad binary", base + "name: !!binary '%%%'\n"),
        ("bad timestamp", base + "name: 2020-13-45\n"),
        ("int with 10,000 digits", base + "max_len: " + "9" * 10000 + "\n"),
        ("float overflow", base + "dropout: 1e999\n"),
        ("unhashable key", base + "? [a, b]\n: 1\n"),
        ("merge of a scalar", base + "<<: 5\n"),
        ("300 KB file", base + "name: '" + "x" * 300_000 + "'\n"),
        ("root a list", "- 1\n- 2\n"), ("root a scalar", "42\n"), ("root null", "~\n"),
        ("tabs", "arch:\tdecoder\n\tvocab_size: 3\n"), ("unclosed quote", base + "name: 'abc\n"),
        ("unclosed bracket", base + "mask: [causal\n"), ("document stream", base + "---\n" + base),
        ("huge key", base + "k" * 100_000 + ": 1\n"), ("value a huge list", base + "mask: [" + "causal, " * 20000 + "causal]\n"),
        ("bool as key", base + "true: 1\n"), ("int key", base + "5: 1\n"), ("null key", base + "~: 1\n"),
        ("field a mapping", base.replace("vocab_size: 64", "vocab_size: {a: 1}")),
        ("field a list", base.replace("d_model: 16", "d_model: [16]")),
        ("field nan", base + "dropout: .nan\n"), ("field inf", base + "attn_scale: .inf\n"),
        ("BOM then text", "\ufeff" + base + "d_model: 1\n"),
        ("component kind a list", base + "attention: {kind: [sdpa]}\n"),
        ("component param bomb", base + _bomb(9).replace("a0:", "x0:") + "positions: {kind: rope, base: *a8}\n"),
    ]
    for label, text in texts:
        out.append(Case("yaml", f"zoo.spec {label}", lambda c, t=text: zoo.spec(t)))
    for label, text in texts[:12]:
        def from_file(c, t=text):
            p = c.fresh("yaml") / "spec.yaml"
            p.write_bytes(t.encode("utf-8", "surrogatepass") if isinstance(t, str) else t)
            return zoo.build(p)
        out.append(Case("yaml", f"file {label}", from_file))
    for label, value in (("bomb", _bomb(9).replace("\n", " ")), ("deep", "[" * 10000),
                         ("duplicate", "{a: 1, a: 2}")):
        def cli_set(c, v=value):
            from zoo.commands import parse_sets

            return parse_sets([f"name={v}"])
        out.append(Case("yaml", f"--set {label}", cli_set))
    return out


def _sizes() -> list[Case]:
    out = []
    for name, preset, over in (
            ("vocab_size 10**9", "gpt_tiny", {"vocab_size": 10**9}),
            ("max_len 10**9 (sinusoidal table)", "gpt_tiny", {"max_len": 10**9}),
            ("max_len 10**9 (learned)", "gpt_tiny", {"max_len": 10**9, "positions": "learned"}),
            ("d_ff 10**9", "gpt_tiny", {"d_ff": 10**9}),
            ("d_model 2**20", "gpt_tiny", {"d_model": 2**20, "num_heads": 16}),
            ("num_layers 4096 x d_model 4096", "gpt_tiny", {"num_layers": 4096, "d_model": 4096,
                                                            "num_heads": 32}),
            ("type_vocab_size 10**9", "bert_tiny", {"type_vocab_size": 10**9}),
            ("num_labels 10**9", "bert_tiny", {"head": {"kind": "classifier", "num_labels": 10**9}}),
            ("T5 num_buckets 10**10", "t5_tiny", {"positions": {"kind": "t5_relative",
                                                                 "num_buckets": 10**10}}),
            ("encoder d_ff 10**9", "t5_tiny", {"encoder": {"d_ff": 10**9}}),
            ("decoder num_layers 4000 x d_model 2048", "t5_tiny", {"decoder": {"num_layers": 4000},
                                                                  "d_model": 2048, "num_heads": 8}),
            ("num_heads x head_dim 65536 x 4096", "gpt_tiny", {"num_heads": 4096, "head_dim": 65536}),
            ("num_kv_heads 10**9", "gpt_tiny", {"num_kv_heads": 10**9}),
            ("vocab_size 2**63", "gpt_tiny", {"vocab_size": 2**63}),
            ("max_len 10**18 (rope: no table)", "llama_tiny", {"max_len": 10**18}),
            ("d_ff 0", "gpt_tiny", {"d_ff": 0}),
            ("head_dim 0", "gpt_tiny", {"head_dim": 0}),
            ("budget -1", "gpt_tiny", {"budget": -1}),
            ("budget nan", "gpt_tiny", {"budget": math.nan}),
    ):
        out.append(Case("sizes", name, lambda c, p=preset, o=over: zoo.build(p, **o)))

    def load_claims(c):  # a checkpoint whose spec claims a huge vocabulary: refused before building
        return zoo.load(mutated(c, with_meta("zoo.spec", (
            "arch: decoder\nvocab_size: 1000000000\nd_model: 32\nnum_layers: 1\nnum_heads: 2\n")))
        )
    out.append(Case("sizes", "zoo.load spec claims vocab 10**9", load_claims))
    out.append(Case("sizes", "from_pretrained vocab 10**9",
                    lambda c: convert(hf_gpt2(c, {"vocab_size": 10**9}))))
    return out


def cases() -> list[Case]:
    return [*_converter(), *_generation(), *_checkpoints(), *_yaml(), *_sizes()]


# ---------------------------------------------------------------------- running one
class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


#: A case taking longer than this is a hang; one raising peak RSS by more than RUNAWAY_BYTES a
#: runaway allocation.
HANG_S = 20.0
RUNAWAY_BYTES = 1 << 30


def outcome(case: Case, ctx: Ctx, hang_s: float = HANG_S) -> tuple[str, float, int, str]:
    """``(kind, seconds, peak RSS growth in bytes, detail)``; kind is ``"zoo_error"``,
    ``"accepted"``, ``"raw"`` (any other exception) or ``"hang"``."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, hang_s)
    t0 = time.perf_counter()
    try:
        case.run(ctx)
        kind, detail = "accepted", ""
    except zoo.ZooError as exc:
        kind, detail = "zoo_error", str(exc)
    except Hang:
        kind, detail = "hang", f"over {hang_s:.0f} s"
    except BaseException as exc:  # noqa: BLE001 - what the corpus is looking for
        if isinstance(exc, KeyboardInterrupt):
            raise
        kind, detail = "raw", f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    seconds = time.perf_counter() - t0
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    return kind, seconds, grew, detail
