"""A corpus of hostile inputs, per category, for issue 12's promise: every one is a ``ZooError`` (or is
accepted), never a bare traceback, a hang or a runaway allocation -- and, since issue 22, never data
lost (a good file overwritten by a failed run) and never silent (a hostile input accepted that is
not in :data:`ACCEPTED`).

Used by ``tests/guard/test_hostile.py`` (one test per case) and ``scripts/hostile_table.py`` (the table in
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

CATEGORIES = ("converter", "generation", "checkpoints", "yaml", "sizes", "training",
              "tokenizer files", "paths", "using a model", "chat templates", "gguf", "generation options",
              "experiments")

#: Hostile-looking inputs that are in fact valid and rightly accepted (anything else accepted is
#: "silent": the table counts it, and tests/guard/test_hostile.py fails on it).
ACCEPTED = {
    "max_new_tokens=0", "temperature=1.5", "temperature=10**9", "temperature=2**64",
    "temperature=2**200", "top_k=10**9", "seed=-1", "seed=0", "seed=10**9", "stop_tokens=0",
    "stop_tokens=list", "decoder_start_id=0", "pad_id=0", "prefix_length=0", "prefix_length=10**9",
    "vocab_limit=10**9", "do_sample=True", "use_cache=True", "ids=str", "ids=list", "text empty",
    "text NUL", "char encode lone surrogate",  # char maps unknown characters to <unk>
    "max_len 10**18 (rope: no table)",  # rope keeps no max_len-sized table: nothing to refuse
    "resume option beta2=0.0", "resume option grad_clip=0",  # valid edges of AdamW and clipping
    "tokenizer file published pattern (llama 3)", "tokenizer file NFKC + Lowercase + Prepend",
    "beams with every token a stop token",  # valid: every beam ends at its first token (issue 35)
}


class DataLost(Exception):
    """A case found a good file changed by a call that failed or should have failed."""


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
    for label, v in (("NaN", math.nan), ("inf", math.inf)):  # issue 22: converted silently before
        def nonfinite(c, v=v):
            w = torch.randn(16, 8) * 0.1
            w[1, 1] = v
            return convert(hf_gpt2(c, tensors={"wte.weight": w}))
        out.append(Case("converter", f"weight holding {label}", nonfinite))
    return out


_HOSTILE_VALUES = (("-1", -1), ("0", 0), ("1e-45", 1e-45), ("1e-300", 1e-300), ("nan", math.nan),
                   ("inf", math.inf), ("-inf", -math.inf), ("str", "1"), ("list", [1]),
                   ("True", True), ("2**64", 2**64), ("2**200", 2**200), ("1.5", 1.5), ("dict", {}),
                   ("object", object()), ("10**9", 10**9))
_OPTIONS = ("max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop_tokens",
            "decoder_start_id", "pad_id", "prefix_length", "vocab_limit", "do_sample", "use_cache",
            "attention_mask", "ids")


def _generation() -> list[Case]:
    from zoo.run.generate import generate, generate_text

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
    # the earlier list of issue 22
    out.append(Case("checkpoints", "zoo.load(None)", lambda c: zoo.load(None)))
    out.append(Case("checkpoints", "zoo.load dtype=torch.int8", lambda c: zoo.load(c.checkpoint,
                                                                                   dtype=torch.int8)))
    out.append(Case("checkpoints", "zoo.save metadata not JSON",
                    lambda c: zoo.save(c.model, c.fresh("s") / "m.safetensors", metadata={"x": object()})))
    out.append(Case("checkpoints", "zoo.save metadata 200 MB",
                    lambda c: zoo.save(c.model, c.fresh("s") / "m.safetensors",
                                       metadata={"x": "a" * 200_000_000})))
    out.append(Case("checkpoints", "zoo.save metadata a list",
                    lambda c: zoo.save(c.model, c.fresh("s") / "m.safetensors", metadata=[1])))
    out.append(Case("checkpoints", "zoo.build 'a' * 100000", lambda c: zoo.build("a" * 100_000)))
    out.append(Case("checkpoints", "zoo check bit flip",
                    lambda c: __import__("zoo.io.loading").loading.check(mutated(c, flip))))
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


# ---------------------------------------------------------------------- training (issue 22)
def _digests(folder: Path) -> dict:
    import hashlib

    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())
            if p.is_file()}


def _good_run(c: Ctx) -> Path:
    """A copy of a finished 2-step training run (made once per context, copied per case)."""
    import shutil

    from zoo.train import train

    src = c.root / "good-run"
    if not src.exists():
        (c.root / "run-data.txt").write_text("春眠不觉晓，处处闻啼鸟。\n\n夜来风雨声，花落知多少。\n" * 4,
                                             encoding="utf-8")
        train(dict(name="t", arch="decoder", vocab_size=64, max_len=32, d_model=16, num_layers=1,
                   num_heads=2, d_ff=32, dropout=0.0), c.root / "run-data.txt", out=src, steps=2,
              batch_size=4, block_size=8, progress=False, holdout=0.2, eval_every=100,
              save_every=100)
    dst = c.fresh("run")
    shutil.rmtree(dst)
    shutil.copytree(src, dst)
    return dst


def _guarded(c: Ctx, action: Callable[[Path], Any]) -> Any:
    """Run ``action(run folder)``; if the run's files changed although it failed or stopped, that is
    data lost (raised as :class:`DataLost`, which the table counts on its own)."""
    out = _good_run(c)
    before = _digests(out)
    try:
        return action(out)
    finally:
        after = {k: v for k, v in _digests(out).items() if k in before}
        if after != before:
            changed = sorted(k for k in before if after.get(k) != before[k])
            if "model.safetensors" in changed:
                import torch as _t
                from safetensors.torch import load_file

                bad = [k for k, t in load_file(str(out / "model.safetensors")).items()
                       if not bool(_t.isfinite(t).all())]
                if bad:
                    raise DataLost(f"model.safetensors overwritten with {len(bad)} non-finite tensors")


def _edit_state(out: Path, change: Callable[[dict, dict], None]) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    f = out / "trainer_state.safetensors"
    with safe_open(str(f), framework="pt") as fh:
        meta, tensors = dict(fh.metadata()), {k: fh.get_tensor(k) for k in fh.keys()}
    change(meta, tensors)
    save_file(tensors, str(f), metadata=meta)


def _training() -> list[Case]:
    from zoo.train import train

    out = []
    for label, kw in (("lr=inf", {"lr": math.inf}), ("lr=nan", {"lr": math.nan}),
                      ("lr=1e30", {"lr": 1e30}), ("lr='1e-3'", {"lr": "1e-3"}),
                      ("beta1=nan", {"beta1": math.nan}), ("beta2=2.0", {"beta2": 2.0}),
                      ("beta2=0.0", {"beta2": 0.0}), ("seed=2**70", {"seed": 2**70}),
                      ("seed=-1", {"seed": -1}), ("steps=True", {"steps": True}),
                      ("steps=2.5", {"steps": 2.5}), ("grad_clip=-1", {"grad_clip": -1.0}),
                      ("grad_clip=0", {"grad_clip": 0}), ("grad_clip=nan", {"grad_clip": math.nan}),
                      ("weight_decay=inf", {"weight_decay": math.inf}),
                      ("holdout=1.0", {"holdout": 1.0}), ("warmup=-1", {"warmup": -1}),
                      ("batch_size=0", {"batch_size": 0}), ("block_size=1", {"block_size": 1}),
                      ("progress='no'", {"progress": "no"}), ("objective=5", {"objective": 5}),
                      ("unknown option", {"learning_rate": 1e-3})):
        def run(c, kw=kw):
            return _guarded(c, lambda o: train(None, None, out=o, resume=True,
                                               **{"steps": 3, "progress": False, **kw}))
        out.append(Case("training", f"resume option {label}", run))

    def nan_weights(c):  # a finite lr that slips through validation cannot exist; inject NaN instead
        def act(o):
            def change(meta, tensors):
                tensors["model.tok_emb.weight"][0, 0] = math.nan
            _edit_state(o, change)
            return train(None, None, out=o, resume=True, steps=3, progress=False)
        return _guarded(c, act)
    out.append(Case("training", "resume from a state with a NaN weight", nan_weights))

    def state_case(label, change):
        def run(c):
            def act(o):
                _edit_state(o, change)
                return train(None, None, out=o, resume=True, steps=3, progress=False)
            return _guarded(c, act)
        out.append(Case("training", f"state {label}", run))

    def trainer(edit):
        def change(meta, tensors):
            t = json.loads(meta["zoo.trainer"])
            edit(t)
            meta["zoo.trainer"] = json.dumps(t)
        return change

    def optim(edit):
        def change(meta, tensors):
            o = json.loads(meta["zoo.optimizer"])
            edit(o)
            meta["zoo.optimizer"] = json.dumps(o)
        return change

    state_case("zoo.trainer missing", lambda m, t: m.pop("zoo.trainer"))
    state_case("zoo.trainer not JSON", lambda m, t: m.update({"zoo.trainer": "{"}))
    state_case("zoo.trainer a list", lambda m, t: m.update({"zoo.trainer": "[]"}))
    state_case("config missing", trainer(lambda t: t.pop("config")))
    state_case("config a list", trainer(lambda t: t.update(config=[])))
    state_case("step a string", trainer(lambda t: t.update(step="1")))
    state_case("spec not YAML", trainer(lambda t: t.update(spec="a: [")))
    state_case("tokenizer garbage", trainer(lambda t: t.update(tokenizer="{")))
    state_case("data a list", trainer(lambda t: t.update(data=[])))
    state_case("optimizer groups emptied", optim(lambda o: o.update(param_groups=[])))
    state_case("optimizer group params emptied", optim(lambda o: o["param_groups"][0].update(params=[])))
    state_case("optimizer not JSON", lambda m, t: m.update({"zoo.optimizer": "nope"}))
    state_case("moment of the wrong shape", lambda m, t: t.update(
        {next(k for k in sorted(t) if k.endswith("exp_avg")): torch.zeros(2)}))
    state_case("tied a list", lambda m, t: m.update({"zoo.tied": "[1]"}))

    def data_is(label, make):
        def run(c):
            return train(dict(arch="decoder", vocab_size=64, d_model=16, num_layers=1, num_heads=2),
                         make(c), out=c.fresh("t") / "o", steps=1, progress=False)
        out.append(Case("training", f"data {label}", run))
    data_is("a FIFO", lambda c: _fifo(c.fresh("fifo") / "data.txt"))
    data_is("/dev/zero", lambda c: "/dev/zero")
    data_is("a folder", lambda c: c.fresh("d"))
    data_is("with NUL", lambda c: "a\x00b")
    return out


def _fifo(p: Path) -> Path:
    os.mkfifo(p)
    return p


# ---------------------------------------------------------------------- tokenizer files (issue 22)
def _tok_file(pre=None, norm=None, dec=None) -> str:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    if pre is not None:  # written into the JSON directly: the library refuses some patterns itself
        tok.pre_tokenizer = pre_tokenizers.Split(Regex("x"), "isolated")
    if norm is not None:
        tok.normalizer = norm(normalizers, Regex)
    if dec is not None:
        tok.decoder = dec(decoders)
    data = json.loads(tok.to_str())
    if pre is not None:
        data["pre_tokenizer"]["pattern"]["Regex"] = pre
    return json.dumps(data)


def _tokenizer_files() -> list[Case]:
    out = []

    def hf(label, make, prompt="a" * 4000 + "c"):
        def run(c):
            tok = zoo.tokenizer("hf", json=make())
            return tok.encode(prompt)
        out.append(Case("tokenizer files", label, run))

    for pattern in ("(a+)+b", "(a|aa)*c", r"(\w+\s?)*$", "(a*)*b", "(?:x?y?)+z", r"(a*)\1",
                    "(a{1,100})+b", r"(\p{L}+ ?)+!", "(", "[abc", "*a", "a" * 5000):
        hf(f"pre-tokenizer regex {pattern[:20]}", lambda p=pattern: _tok_file(pre=p))
    hf("tokenizer file published pattern (llama 3)", lambda: _tok_file(
        pre=r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
            r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"))
    hf("normalizer Replace a -> 20,000 chars", lambda: _tok_file(
        norm=lambda n, R: n.Replace("a", "x" * 20000)))
    hf("normalizer Sequence 4 x 5", lambda: _tok_file(
        norm=lambda n, R: n.Sequence([n.Replace("a", "xxxx"), n.Replace("x", "yyyyy")])))
    hf("normalizer empty regex match", lambda: _tok_file(norm=lambda n, R: n.Replace(R("x*"), "y" * 20)))
    hf("decoder Replace a -> 1,000 chars", lambda: _tok_file(dec=lambda d: d.Replace("a", "x" * 1000)))
    hf("tokenizer file NFKC + Lowercase + Prepend", lambda: _tok_file(
        norm=lambda n, R: n.Sequence([n.NFKC(), n.Lowercase(), n.Prepend("_")])))
    for label, text in (("not JSON", "{nope"), ("a list", "[]"), ("no model", "{}"),
                        ("model a number", '{"model": 5}'), ("model unknown type", '{"model": {"type": "Nope"}}'),
                        ("deep nesting", "[" * 100000), ("not a str", 5)):
        out.append(Case("tokenizer files", f"json {label}",
                        lambda c, t=text: zoo.tokenizer("hf", json=t)))
    for label, make in (("a FIFO", lambda c: str(_fifo(c.fresh("f") / "tokenizer.json"))),
                        ("/dev/zero", lambda c: "/dev/zero"), ("/dev/urandom", lambda c: "/dev/urandom"),
                        ("a folder", lambda c: str(c.fresh("d"))), ("NUL", lambda c: "a\x00b"),
                        ("missing", lambda c: str(c.root / "nope.json"))):
        out.append(Case("tokenizer files", f"path {label}",
                        lambda c, m=make: zoo.tokenizer("hf", path=m(c))))
    from zoo.io.tokenizers import from_json

    for stored in ("{nope", "[1]", "null", '{"kind": 5}', '{"kind": ["byte"]}',
                   '{"kind": "byte", "data": []}', '{"kind": "byte", "data": {"specials": 5}}',
                   '{"kind": "byte", "data": {"specials": [1]}}', '{"kind": "char", "data": {}}',
                   '{"kind": "char", "data": {"chars": 5, "specials": []}}',
                   '{"kind": "hf", "data": {}}', '{"kind": "hf", "data": {"json": 5}}',
                   '{"kind": "hf", "data": {"json": "{}"}}', "[" * 100000):
        out.append(Case("tokenizer files", f"from_json {stored[:40]}",
                        lambda c, s=stored: from_json(s)))
    return out


# ---------------------------------------------------------------------- paths (issue 22)
def _hostile_paths(c: Ctx) -> dict[str, Any]:
    """Paths that are not what a reader or a writer expects, made fresh for each case."""
    d = c.fresh("paths")
    (d / "file").write_text("x")
    os.mkfifo(d / "fifo")
    (d / "loop").symlink_to(d / "loop")
    return {"a FIFO": d / "fifo", "/dev/zero": "/dev/zero", "/dev/urandom": "/dev/urandom",
            "/dev/null": "/dev/null", "/proc/self": "/proc/self", "a symlink loop": d / "loop",
            "a NUL byte": "a\x00b", "a 300-byte name": d / ("n" * 300), "bytes": b"model",
            "None": None, "an int": 5, "empty": "", "a file as a folder": d / "file" / "x",
            "a folder": d, **_as_files(d)}


def _as_files(d: Path) -> dict[str, Path]:
    """The same hostile objects under names ending in .safetensors (a file target)."""
    os.mkfifo(d / "fifo.safetensors")
    (d / "loop.safetensors").symlink_to(d / "loop.safetensors")
    (d / "dir.safetensors").mkdir()
    return {"a FIFO .safetensors": d / "fifo.safetensors",
            "a symlink loop .safetensors": d / "loop.safetensors",
            "a folder .safetensors": d / "dir.safetensors",
            "/dev/null .safetensors": Path("/dev/null.safetensors"),
            "a file as a folder .safetensors": d / "file" / "x.safetensors"}


def _model_folder(c: Ctx, name: str, link_to: Path | None = None, fifo: bool = False) -> Path:
    """A checkpoint folder whose ``name`` is a symlink out of it or a FIFO."""
    import shutil

    d = c.fresh("folder")
    shutil.copy(c.checkpoint, d / "model.safetensors")
    target = d / name
    if target.exists():
        target.unlink()
    if fifo:
        os.mkfifo(target)
    elif link_to is not None:
        target.symlink_to(link_to)
    return d


def _paths() -> list[Case]:
    from zoo.io.loading import check
    from zoo.train import train

    out = []
    readers = {
        "zoo.load": lambda p: zoo.load(p), "zoo.read_metadata": lambda p: zoo.read_metadata(p),
        "zoo.load_spec": lambda p: zoo.load_spec(p), "zoo check": lambda p: check(p),
        "zoo.spec": lambda p: zoo.spec(p), "zoo.build": lambda p: zoo.build(p),
        "hf tokenizer": lambda p: zoo.tokenizer("hf", path=p), "convert": lambda p: convert(p),
    }
    labels = ("a FIFO", "/dev/zero", "/dev/urandom", "/dev/null", "/proc/self", "a symlink loop",
              "a NUL byte", "a 300-byte name", "bytes", "None", "a file as a folder")
    for rname, read in readers.items():
        for label in labels:
            out.append(Case("paths", f"{rname} reads {label}",
                            lambda c, r=read, lb=label: r(_hostile_paths(c)[lb])))
    writers = {
        "zoo.save": lambda c, p: zoo.save(c.model, p),
        "train out": lambda c, p: train(dict(arch="decoder", vocab_size=300, d_model=16, num_layers=1,
                                             num_heads=2), _data(c), out=p, steps=1, progress=False),
    }
    for wname, write in writers.items():
        for label in ("/dev/null", "/proc/self", "a symlink loop", "a NUL byte", "a 300-byte name",
                      "bytes", "None", "an int", "empty", "a file as a folder", "a FIFO"):
            out.append(Case("paths", f"{wname} writes {label}",
                            lambda c, w=write, lb=label: w(c, _hostile_paths(c)[lb])))
    for label in ("a FIFO .safetensors", "a symlink loop .safetensors", "a folder .safetensors",
                  "/dev/null .safetensors", "a file as a folder .safetensors"):
        out.append(Case("paths", f"zoo.save writes {label}",
                        lambda c, lb=label: zoo.save(c.model, _hostile_paths(c)[lb])))
    out.append(Case("paths", "zoo.save over an existing file expecting a folder",
                    lambda c: zoo.save(c.model, _hostile_paths(c)["a folder"] / "file")))
    out.append(Case("paths", "checkpoint folder model.safetensors symlink out",
                    lambda c: zoo.load(_model_folder(c, "model.safetensors", link_to=c.checkpoint))))
    out.append(Case("paths", "checkpoint folder model.safetensors a FIFO",
                    lambda c: zoo.load(_model_folder(c, "model.safetensors", fifo=True))))

    def hf_with(c, name, fifo=False, link=None):
        d = hf_gpt2(c)
        if fifo:
            (d / name).unlink(missing_ok=True)
            os.mkfifo(d / name)
        if link is not None:
            (d / name).unlink(missing_ok=True)
            (d / name).symlink_to(link)
        return convert(d)
    out.append(Case("paths", "convert tokenizer.json symlink out",
                    lambda c: hf_with(c, "tokenizer.json", link=c.root / "outside.json")))
    out.append(Case("paths", "convert tokenizer.json a FIFO",
                    lambda c: hf_with(c, "tokenizer.json", fifo=True)))
    out.append(Case("paths", "convert config.json a FIFO", lambda c: hf_with(c, "config.json", fifo=True)))
    out.append(Case("paths", "convert config.json symlink out",
                    lambda c: hf_with(c, "config.json", link=c.root / "outside.json")))
    out.append(Case("paths", "convert model.safetensors a FIFO",
                    lambda c: hf_with(c, "model.safetensors", fifo=True)))
    return out


def _data(c: Ctx) -> Path:
    p = c.root / "path-data.txt"
    if not p.exists():
        p.write_text("abc abc abc\n" * 20)
    return p


# ---------------------------------------------------------------------- entry points, work, health
def _in_empty_cwd(c: Ctx, action: Callable[[], Any]) -> Any:
    """Run ``action`` with an empty current folder; anything written there is data out of place."""
    d, cwd = c.fresh("cwd"), os.getcwd()
    os.chdir(d)
    try:
        return action()
    finally:
        os.chdir(cwd)
        if any(d.iterdir()) or any(d.parent.glob("*.safetensors")):
            raise DataLost(f"files written into the current folder: {sorted(x.name for x in d.iterdir())}")


def _entry_points() -> list[Case]:
    gen = zoo.run.generate
    out = [
        Case("using a model", "generate(-1, [])", lambda c: gen.generate(-1, [])),
        Case("using a model", "stream(None, [1])", lambda c: list(gen.stream(None, [1]))),
        Case("using a model", "trace(nn.Linear, [1])", lambda c: zoo.trace(torch.nn.Linear(2, 2), [1])),
        Case("using a model", "classify('gpt_tiny', 'x')", lambda c: zoo.classify("gpt_tiny", "x")),
        Case("using a model", "fill_mask(-1, '')", lambda c: zoo.fill_mask(-1, "")),
        Case("using a model", "trace ragged ids", lambda c: zoo.trace(c.model, [[1], [2, 3]])),
        Case("using a model", "trace ids 2**70", lambda c: zoo.trace(c.model, [1, 2 ** 70])),
        Case("using a model", "trace float ids", lambda c: zoo.trace(c.model, torch.ones(1, 3))),
    ]
    for target in ("", ".", "./", "..", "/"):
        out.append(Case("using a model", f"save(model, {target!r})",
                        lambda c, t=target: _in_empty_cwd(c, lambda: zoo.save(c.model, t))))
    out.append(Case("using a model", "train(out='.')", lambda c: _in_empty_cwd(
        c, lambda: zoo.train.train("gpt_tiny", _data(c), out=".", steps=1))))
    return out


def _work() -> list[Case]:
    def forward(c, T, **over):
        m = zoo.build("gpt_tiny", seed=0, max_len=T, **over).eval()
        with torch.no_grad():
            return m(torch.zeros(1, T, dtype=torch.long))

    def trace(c):
        m = zoo.build("gpt_tiny", seed=0, max_len=8192, num_heads=16)
        return zoo.trace(m, torch.zeros(1, 8192, dtype=torch.long))

    def generate(c, rows, new, **over):
        m = zoo.build("gpt_tiny", seed=0, max_len=512, **over)
        return gen_(m, torch.ones(rows, 10, dtype=torch.long), new)

    gen_ = zoo.run.generate.generate
    return [
        Case("using a model", "eager forward 65,536 tokens", lambda c: forward(c, 65536, attention="eager")),
        Case("using a model", "eager forward 65,536 tokens, naive kernel",
             lambda c: forward(c, 65536, attention="naive")),
        Case("using a model", "trace 8,192 tokens (16 heads)", trace),
        Case("using a model", "generate 10,000 prompts x 250 new (d_model 512)",
             lambda c: generate(c, 10000, 250, d_model=512, num_heads=8)),
        Case("using a model", "beam search 1,000 prompts x 10 beams x 250 new (d_model 512)",
             lambda c: zoo.run.generate.generate(zoo.build("gpt_tiny", seed=0, max_len=512, d_model=512,
                                                       num_heads=8),
                                             torch.ones(1000, 10, dtype=torch.long), 250,
                                             num_beams=10)),
        Case("using a model", "training step 65,536 x 64", lambda c: zoo.train.train(
            "gpt_tiny", _data(c), out=c.fresh("run"), steps=1, batch_size=65536, block_size=64, holdout=0)),
    ]


def _poisoned(c: Ctx):
    m = zoo.build("gpt_tiny", num_layers=1, d_model=32, num_heads=2, vocab_size=300, max_len=64, seed=0)
    with torch.no_grad():
        m.decoder.blocks[0].ffn.down.weight[0, 0] = math.nan
    return m


def _health() -> list[Case]:
    g = zoo.run.generate
    out = [Case("using a model", "NaN weights greedy", lambda c: g.generate(_poisoned(c), [1, 2], 3)),
           Case("using a model", "NaN weights sample",
                lambda c: g.generate(_poisoned(c), [1, 2], 3, do_sample=True, seed=0)),
           Case("using a model", "NaN weights stream", lambda c: list(g.stream(_poisoned(c), [1, 2], 3))),
           Case("using a model", "NaN weights beam", lambda c: g.generate(_poisoned(c), [1, 2], 3,
                                                                            num_beams=2)),
           Case("using a model", "NaN weights beam sample", lambda c: g.generate(
               _poisoned(c), [1, 2], 3, num_beams=2, do_sample=True, seed=0))]

    def t5(c):
        m = zoo.build("t5_tiny", seed=0)
        with torch.no_grad():
            m.decoder.blocks[0].ffn.down.weight.fill_(math.inf)
        return g.generate(m, [1, 2], 3, do_sample=True, seed=0)
    out.append(Case("using a model", "inf weights t5 sample", t5))
    return out


# ---------------------------------------------------------------------- issue 35: new surfaces
_NESTED_LOOPS = "".join(f"{{% for a{i} in [1] %}}" for i in range(25)) + "x" + "{% endfor %}" * 25
#: Hostile chat templates (as a checkpoint's metadata may carry them) -> what the refusal says
#: (tests/guard/test_sandbox.py checks each message; the corpus counts the outcomes).
CHAT_TEMPLATES = {
    "division by zero": ("{{ 1 / 0 }}", "ZeroDivisionError"),
    "cycler() with no items": ("{{ cycler().next() }}", "RuntimeError"),
    "25 nested loops": (_NESTED_LOOPS, "nests too deeply"),
    "5,000 nested parentheses": ("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", "nests too deeply"),
    "raise_exception printed": ("{{ raise_exception }}", "prints a function"),
    "a cycler printed": ("{{ cycler(1, 2) }}", "prints a Cycler"),
    "range printed in a list": ("{{ [range] }}", "prints a list"),
    "'x' * 10**9": ("{{ 'x' * 10**9 }}", "more than 512 MiB|more than 8,000,000 characters"),
    "indent(2e8)": ("{{ 'a\nb' | indent(2e8) }}", "TypeError"),
    "indent(200000000)": ("{{ 'a\nb' | indent(200000000) }}", "MiB|characters|did not finish"),
    "tojson(indent=1e8)": ("{{ messages | tojson(indent=1e8) }}", "TypeError"),
    "tojson(indent=10**8)": ("{{ messages | tojson(indent=100000000) }}", "MiB|characters|did not finish"),
    "nested range(99999) loops": ("{% for i in range(99999) %}{% for j in range(99999) %}{{ '' }}"
                                  "{% endfor %}{% endfor %}", "did not finish"),
    "a macro calling itself": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recurses"),
    "a string doubled 40 times": ("{% set ns = namespace(s='x') %}{% for i in range(40) %}"
                                  "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
                                  "MiB|did not finish"),
    "memory taken, nothing printed": ("{% set big = 'x' * 10**9 %}done", "MiB"),
    "a 10-million-character prompt": ("{% for i in range(100) %}{{ 'x' * 100000 }}{% endfor %}",
                                      "more than 8,000,000 characters"),
}


def _chat_templates() -> list[Case]:
    from zoo.run.chat import render

    msgs = [{"role": "user", "content": "hello"}]
    return [Case("chat templates", name, lambda c, t=t: render(t, msgs))
            for name, (t, _) in CHAT_TEMPLATES.items()]


def _gguf_header(kvs=(), *, n_tensors=0, n_kv=None, tail=b"", version=3) -> bytes:
    out = b"GGUF" + struct.pack("<IQQ", version, n_tensors, len(kvs) if n_kv is None else n_kv)
    for key, value in kvs:
        out += struct.pack("<Q", len(key)) + key.encode() + value
    return out + tail


def _gguf_tensor(name: bytes, dims, qtype: int, offset: int = 0) -> bytes:
    return struct.pack("<Q", len(name)) + name + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, qtype, offset)


def _gguf() -> list[Case]:
    from zoo.convert import from_gguf

    u32 = lambda v: struct.pack("<II", 4, v)  # noqa: E731 - a UINT32 value
    files = {
        "array of numbers past the end": _gguf_header([("a", struct.pack("<IIQ", 9, 4, 10**12))]),
        "array of strings past the end": _gguf_header([("a", struct.pack("<IIQ", 9, 8, 10**9))]),
        "nested arrays": _gguf_header([("a", struct.pack("<IIQIIQ", 9, 9, 1, 9, 9, 1))]),
        "a string of 2**63 bytes": _gguf_header([("a", struct.pack("<IQ", 8, 2**63))]),
        "2**60 tensors": _gguf_header(n_tensors=2**60),
        "2**62 metadata entries": _gguf_header(n_kv=2**62),
        "an unknown value type": _gguf_header([("a", struct.pack("<I", 77))]),
        "a tensor past the end": _gguf_header(n_tensors=1, tail=_gguf_tensor(b"t", (4096, 4096), 0)),
        "a tensor of five dimensions": _gguf_header(n_tensors=1, tail=_gguf_tensor(b"t", (1,) * 5, 0)),
        "a row of half a Q8_0 block": _gguf_header(n_tensors=1, tail=_gguf_tensor(b"t", (16,), 8) + bytes(64)),
        "tensor type 9999": _gguf_header(n_tensors=1, tail=_gguf_tensor(b"t", (4,), 9999) + bytes(64)),
        "a tensor named twice": _gguf_header(n_tensors=2, tail=_gguf_tensor(b"t", (8,), 0)
                                             + _gguf_tensor(b"t", (8,), 0, 32) + bytes(96)),
        "a key named twice": _gguf_header([("a", u32(1)), ("a", u32(2))]),
        "alignment 3": _gguf_header([("general.alignment", u32(3))]),
        "a key not UTF-8": b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2) + b"\xff\xfe" + u32(1),
        "version 99": _gguf_header(version=99),
        "magic only": b"GGUF",
        "empty file": b"",
        "not GGUF: a secret": b"token=hunter2\x1b[31m",
        "no architecture": _gguf_header([("general.name", struct.pack("<IQ", 8, 1) + b"x")]),
    }

    def run(c, data):
        p = c.fresh("gguf") / "m.gguf"
        p.write_bytes(data)
        return from_gguf(p)
    return [Case("gguf", name, lambda c, d=d: run(c, d)) for name, d in files.items()]


def _generation_options() -> list[Case]:
    gen = zoo.run.generate.generate
    P = torch.tensor([[1, 2, 3]])
    rules = {"suppress every token": {"suppress_tokens": list(range(300))},
             "bad_words every token": {"bad_words": [[i] for i in range(300)]},
             "vocab_limit=5 + no_repeat_ngram_size=1": {"vocab_limit": 5, "no_repeat_ngram_size": 1}}
    modes = {"greedy": {}, "sampling": {"do_sample": True, "seed": 0}, "beams": {"num_beams": 3},
             "beam sampling": {"num_beams": 3, "do_sample": True, "seed": 0}}
    out = [Case("generation options", f"{r}, {m}", lambda c, o={**ro, **mo}: gen(c.model.eval(), P, 8, **o))
           for r, ro in rules.items() for m, mo in modes.items()]
    out.append(Case("generation options", "beams with every token a stop token",
                    lambda c: gen(c.model.eval(), P, 5, num_beams=3, stop_tokens=list(range(300)))))

    def numerals(c, text):
        import warnings

        m = zoo.load("numerals_t5")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return m.generate(text, 4)
    out.append(Case("generation options", "numeral of 4,301 digits", lambda c: numerals(c, "1" * 4301)))
    for ch in ("\x1c", "\x1f", "\x85"):
        out.append(Case("generation options", f"poem prompt with {ch!r}",
                        lambda c, ch=ch: zoo.load("poet_gpt").generate(f"床前{ch}明月光，", 2)))

    def contract(c, pattern):
        from zoo.run.input_contract import InputContract

        return InputContract.from_json({"description": "x", "example": "a", "pattern": pattern})
    out.append(Case("generation options", "contract pattern (?:(?:a|aa){16}){16}",
                    lambda c: contract(c, "(?:(?:a|aa){16}){16}")))

    def over_budget(c, call):
        import zoo.guard.run_budget as rb

        m = zoo.build("gpt_tiny", max_len=4096, positions={"kind": "rope"}).eval()
        old, rb.BUDGET = rb.BUDGET, 300 * 2**20
        try:
            return call(m)
        finally:
            rb.BUDGET = old
    out.append(Case("generation options", "run_with_cache of 2,048 tokens over the budget",
                    lambda c: over_budget(c, lambda m: m.run_with_cache(torch.zeros(1, 2048, dtype=torch.long)))))
    out.append(Case("generation options", "generate(return_cache=True) 4 x 2,000 over the budget",
                    lambda c: over_budget(c, lambda m: m.generate(torch.zeros(4, 1000, dtype=torch.long), 1000,
                                                                  return_cache=True))))

    def int8_bf16(c):
        from zoo.run import precision

        m = zoo.build("gpt_tiny", num_layers=1, d_model=32, num_heads=2, vocab_size=300, max_len=64, seed=0)
        return precision.quantize_int8(m).to(torch.bfloat16)(P)

    def int4_train(c):
        from zoo.run import precision

        m = zoo.build("gpt_tiny", num_layers=1, d_model=64, num_heads=2, vocab_size=300, max_len=64, seed=0)
        q = precision.quantize_int4(m).train()
        q(P).float().sum().backward()
    out += [Case("generation options", "quantize_int8 then bfloat16", int8_bf16),
            Case("generation options", "quantize_int4 then backward", int4_train)]
    return out


_EXP = {"name": "hostile", "base": {"preset": "gpt_tiny", "num_layers": 1, "d_model": 16, "num_heads": 2,
                                    "d_ff": 32, "max_len": 16},
        "variants": [{"name": "a", "set": {}}], "seeds": 1, "task": {"kind": "copy", "length": 4, "vocab": 6},
        "train": {"batch_size": 4, "eval_every": 1000, "save_every": 1000}, "budget": {"steps": 1}}


def _exp(**change) -> dict:
    d = json.loads(json.dumps(_EXP))
    d.update(change)
    return d


def _planned(c: Ctx, name: str) -> Path:
    """A results folder holding a planned (not run) experiment: its experiment.json, no trial."""
    import zoo.experiment as ze
    from zoo.experiment.run import _claim_folder

    out = c.root / "exp" / name
    exp = ze.load(_EXP)
    _claim_folder(exp, ze.plan(exp), out)
    return out


def _guard_outside(c: Ctx, action: Callable[[Path], Any]) -> Any:
    """``action(victim)`` with a file outside every results folder; raises DataLost if it changed."""
    victim = c.root / "exp-victim.txt"
    victim.write_text("precious", encoding="utf-8")
    try:
        return action(victim)
    finally:
        if victim.read_text(encoding="utf-8") != "precious":
            raise DataLost("a file outside the results folder was overwritten")


def _experiments() -> list[Case]:
    import zoo.experiment as ze

    def parse(d):
        return lambda c: ze.parse(d)

    def run(out_of=None, **kw):
        def go(c):
            out = out_of(c) if out_of else c.root / "exp" / "run"
            return ze.run(_EXP, out=out, executor=kw.pop("executor", "inline"), report=False, **kw)
        return go

    def damaged_plan(data: bytes):
        def go(c):
            out = c.root / "exp" / f"plan{len(data)}{abs(hash(data)) % 1000}"
            out.mkdir(parents=True, exist_ok=True)
            (out / "experiment.json").write_bytes(data)
            return ze.Results.from_dir(out)
        return go

    def damaged_result(data: bytes | None, sparse: int = 0):
        def go(c):
            out = _planned(c, f"res{sparse}{abs(hash(data)) % 1000}")
            f = out / "trials" / "a" / "seed0" / "result.json"
            f.parent.mkdir(parents=True, exist_ok=True)
            if sparse:
                with open(f, "wb") as fh:
                    fh.truncate(sparse)
            else:
                f.write_bytes(data)
            ze.Results.from_dir(out).markdown()  # the report reads it: marked, not a crash
            return ze.run(_EXP, out=out, executor="inline", report=False)  # resume refuses it
        return go

    def fifo(c):
        return _fifo(c.root / "exp-fifo")

    def a_file(c):
        return _touch(c.root / "exp-file", b"x")

    def report_through_link(name):
        def go(c):
            out = _planned(c, "link" + name.replace("/", "_"))

            def act(victim):
                (out / name).parent.mkdir(parents=True, exist_ok=True)
                (out / name).symlink_to(victim)
                return ze.Results.from_dir(out).write_report(inside=False)
            return _guard_outside(c, act)
        return go

    def trial_link(c):
        out = _planned(c, "triallink")
        (out / "trials").mkdir()
        elsewhere = _mkdir(c.root / "exp-elsewhere")
        (out / "trials" / "a").symlink_to(elsewhere)
        return ze.run(_EXP, out=out, executor="inline", report=False)

    grid64k = {"num_layers": list(range(40)), "d_ff": list(range(40)), "d_model": list(range(40))}
    return [
        Case("experiments", "variant named ..", parse(_exp(variants=[{"name": ".."}]))),
        Case("experiments", "variant named .", parse(_exp(variants=[{"name": "."}]))),
        Case("experiments", "variant name with /", parse(_exp(variants=[{"name": "a/../../b"}]))),
        Case("experiments", "variant name 300 chars", parse(_exp(variants=[{"name": "a" * 300}]))),
        Case("experiments", "variant name with NUL", parse(_exp(variants=[{"name": "a\x00b"}]))),
        Case("experiments", "grid value ../../../../x",
             parse(_exp(variants=None, grid={"positions": ["../../../../x"]}))),
        Case("experiments", "grid value with /", parse(_exp(variants=None, grid={"task.length": ["4/x"]}))),
        Case("experiments", "64,000-variant grid", parse(_exp(variants=None, grid=grid64k))),
        Case("experiments", "budget steps .inf", parse(_exp(budget={"steps": math.inf}))),
        Case("experiments", "budget flops nan", parse(_exp(budget={"flops": math.nan}))),
        Case("experiments", "budget tokens -inf", parse(_exp(budget={"tokens": -math.inf}))),
        Case("experiments", "budget steps 1e30", parse(_exp(budget={"steps": 1e30}))),
        Case("experiments", "task poems path /etc/passwd", parse(_exp(task={"kind": "poems", "path": "/etc/passwd"}))),
        Case("experiments", "task poems path ../../x", parse(_exp(task={"kind": "poems", "path": "../../x"}))),
        Case("experiments", "out=''", run(lambda c: "")),
        Case("experiments", "out=/dev/null", run(lambda c: "/dev/null")),
        Case("experiments", "out a file", run(a_file)),
        Case("experiments", "out a FIFO", run(fifo)),
        Case("experiments", "jobs=0", run(jobs=0)),
        Case("experiments", "jobs=-3", run(jobs=-3)),
        Case("experiments", "threads=0", run(threads=0)),
        Case("experiments", "executor nosuch", run(executor="nosuch")),
        Case("experiments", "experiment.json truncated", damaged_plan(b'{"name": "x", "trials": [')),
        Case("experiments", "experiment.json binary", damaged_plan(bytes(range(256)))),
        Case("experiments", "experiment.json []", damaged_plan(b"[]")),
        Case("experiments", "experiment.json trials [1]",
             damaged_plan(b'{"name": "x", "experiment": {}, "trials": [1]}')),
        Case("experiments", "result.json []", damaged_result(b"[]")),
        Case("experiments", "result.json non-UTF-8", damaged_result(b'{"key": "\xff\xfe"}')),
        Case("experiments", "result.json steps null", damaged_result(b'{"key": null, "steps": null}')),
        Case("experiments", "result.json 3 GB sparse", damaged_result(None, sparse=3 * 2 ** 30)),
        Case("experiments", "results.md symlink out", report_through_link("results.md")),
        Case("experiments", "results.csv symlink out", report_through_link("results.csv")),
        Case("experiments", "report.html symlink out", report_through_link("report.html")),
        Case("experiments", "figures/curves.png symlink out", report_through_link("figures/curves.png")),
        Case("experiments", "trials/a symlink out", trial_link),
    ]


def cases() -> list[Case]:
    return [*_converter(), *_generation(), *_checkpoints(), *_yaml(), *_sizes(), *_training(),
            *_tokenizer_files(), *_paths(), *_entry_points(), *_work(), *_health(),
            *_chat_templates(), *_gguf(), *_generation_options(), *_experiments()]


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
    ``"accepted"``, ``"silent"`` (accepted, but not in :data:`ACCEPTED`), ``"raw"`` (any other
    exception), ``"hang"`` or ``"data_lost"``."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, hang_s)
    t0 = time.perf_counter()
    try:
        case.run(ctx)
        kind, detail = "accepted", ""
    except zoo.errors.ZooInternalError as exc:  # an escape the API's boundary caught: a bug, not a refusal
        kind, detail = "raw", f"{type(exc.__cause__).__name__}: {str(exc.__cause__)[:200]}"
    except zoo.ZooError as exc:
        kind, detail = "zoo_error", str(exc)
    except Hang:
        kind, detail = "hang", f"over {hang_s:.0f} s"
    except DataLost as exc:
        kind, detail = "data_lost", str(exc)
    except BaseException as exc:  # noqa: BLE001 - what the corpus is looking for
        if isinstance(exc, KeyboardInterrupt):
            raise
        kind, detail = "raw", f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    if kind == "accepted" and case.name not in ACCEPTED:
        kind = "silent"
    seconds = time.perf_counter() - t0
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    return kind, seconds, grew, detail
