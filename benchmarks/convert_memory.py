"""Peak memory of converting a big ``save_pretrained`` folder (issue 24, goal 6: big models without
double memory).

Not a test: a script that prints a table.  It writes a Llama-shaped model with random weights
(TinyLlama's 1.1B shape by default: d 2048, 22 layers, 32 heads / 4 kv heads, d_ff 5632, vocab
32000, untied head) with transformers' ``save_pretrained`` into sharded safetensors, then converts
the folder in a fresh child process per case, so each process's peak is its own:

- ``zoo convert``   the command (``zoo convert DIR OUT --no-certify``): read, convert, save;
- ``zoo convert --certify``  the same with the parity certificate (transformers loads the folder too);
- ``from_pretrained``  ``zoo.convert.from_pretrained(DIR)``: an in-memory model;
- ``transformers``  ``AutoModelForCausalLM.from_pretrained(DIR)`` on the same folder, for context;
  transformers 5 may leave the weights memory-mapped from the files, read only when used, so
- ``transformers_touched`` also reads every parameter once (``p.sum()``), as a first forward would.

A child first imports what its case needs, resets its peak RSS to the current RSS
(``/proc/self/clear_refs``; Linux) and reads it (the baseline), then runs the case and reads the
peak (``VmHWM``).  Not ``ru_maxrss``: Linux hands a parent's peak over fork + exec to the child's.
The ratio is ``(peak - baseline) / model bytes``, model bytes being the sum of the tensor bytes in
the folder (= the parameter bytes of the converted model).  1.0 is the floor: the converted model
itself must live somewhere.  Target: <= 1.3.

Measured (2 shared cores, load 2.5-5; 1.1B parameters, 500 MB shards), before -> after streaming:

    case                    float32 (4.10 GiB)   bfloat16 (2.05 GiB)
    zoo convert             2.12 -> 1.03         2.15 -> 1.05
    zoo convert --certify   3.06 -> 1.01         3.08 -> 1.02
    from_pretrained         2.13 -> 1.02         2.14 -> 1.04
    transformers (touched)  1.00                 1.01

The writer builds the model on the meta device, gives it storage in the chosen dtype and fills it
one parameter at a time (``normal_`` with std 0.02, norms near 1), so writing needs one model's
memory, not two.  The folder lives under ``--dir`` (default /tmp) and is removed at the end unless
``--keep``.

    OMP_NUM_THREADS=1 python benchmarks/convert_memory.py [--shape 1b|small|tiny]
        [--dtype float32|bfloat16] [--shard 500MB] [--dir /tmp] [--keep] [--cases a,b,...]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPES = {  # hidden, layers, heads, kv heads, d_ff, vocab
    "1b": (2048, 22, 32, 4, 5632, 32000),   # TinyLlama-1.1B: 1.10e9 parameters
    "small": (768, 12, 12, 4, 2048, 32000),  # ~0.13e9
    "tiny": (256, 4, 4, 2, 688, 4096),
}
CASES = ("zoo_convert", "zoo_convert_certify", "from_pretrained", "transformers", "transformers_touched")


def _config(shape: str, dtype: str):
    from transformers import LlamaConfig

    d, L, h, kv, ff, v = SHAPES[shape]
    return LlamaConfig(hidden_size=d, num_hidden_layers=L, num_attention_heads=h, num_key_value_heads=kv,
                       intermediate_size=ff, vocab_size=v, max_position_embeddings=2048,
                       tie_word_embeddings=False, dtype=dtype)


def write(folder: Path, shape: str, dtype: str, shard: str) -> None:
    """The random model, built on meta and filled parameter by parameter, saved sharded."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    dt = getattr(torch, dtype)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dt)  # parameters made in dtype: no float32 model first
    try:
        with torch.device("meta"):
            model = LlamaForCausalLM(_config(shape, dtype))
    finally:
        torch.set_default_dtype(default)
    model = model.to_empty(device="cpu")  # storage in dtype, nothing initialised yet
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape))
            else:
                p.normal_(0, 0.02)
    model.config.dtype = dtype
    model.save_pretrained(folder, max_shard_size=shard)


def folder_bytes(folder: Path) -> int:
    from zoo.io.checkpoint import ITEMSIZE
    from safetensors import safe_open

    total = 0
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), "pt") as fh:
            for n in fh.keys():
                sl = fh.get_slice(n)
                k = 1
                for s in sl.get_shape():
                    k *= s
                total += k * ITEMSIZE[sl.get_dtype()]
    return total


def _status(key: str) -> int:
    """``VmRSS`` / ``VmHWM`` (peak) of this process in bytes."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(key + ":"))


def _baseline() -> int:
    """Reset this process's peak RSS to its current RSS and return it.  ``ru_maxrss`` alone would
    not do: Linux carries the parent's peak over fork + exec into the child's ``ru_maxrss``."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    return _status("VmRSS")


def _peak() -> int:
    return _status("VmHWM")


def child(case: str, folder: str, out: str) -> dict:
    """Run one case in this (fresh) process; returns baseline and peak RSS in bytes."""
    import torch  # noqa: F401
    import zoo  # noqa: F401
    import zoo.convert  # noqa: F401

    if case.startswith("zoo_convert"):
        from zoo.commands.convert import command

        args = [folder, out, "--certify" if case.endswith("certify") else "--no-certify"]
        if case.endswith("certify"):
            import transformers  # noqa: F401 - the certificate imports it; not counted
            from transformers import LlamaForCausalLM  # noqa: F401
        base, t0 = _baseline(), time.perf_counter()
        command.main(args, standalone_mode=False)
    elif case == "from_pretrained":
        base, t0 = _baseline(), time.perf_counter()
        model = zoo.convert.from_pretrained(folder)
        del model
    elif case.startswith("transformers"):
        from transformers import AutoModelForCausalLM, LlamaForCausalLM  # noqa: F401

        base, t0 = _baseline(), time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
        if case == "transformers_touched":  # its weights may be mapped from the files, read lazily
            with torch.no_grad():
                for p in model.parameters():
                    p.sum()
        del model
    else:
        raise SystemExit(f"unknown case {case!r}; choose from {CASES}")
    return {"case": case, "baseline": base, "peak": _peak(), "seconds": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="1b", choices=SHAPES)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--shard", default="500MB")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--keep", action="store_true", help="keep the written folder (reused by the next run)")
    ap.add_argument("--child", nargs=3, metavar=("CASE", "FOLDER", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(*a.child)))
        return
    root = Path(a.dir) / f"zoo_convert_memory_{a.shape}_{a.dtype}"
    folder = root / "hf"
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    try:
        if not (folder / "config.json").is_file():
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                            "import convert_memory as m; from pathlib import Path; "
                            "m.write(Path(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])",
                            str(Path(__file__).parent), str(folder), a.shape, a.dtype, a.shard],
                           check=True, env=env)
            print(f"wrote {folder} in {time.perf_counter() - t0:.0f} s")
        nbytes = folder_bytes(folder)
        shards = sorted(p.name for p in folder.glob("*.safetensors"))
        print(f"model: Llama {a.shape} {SHAPES[a.shape]}, {a.dtype}, {nbytes / 2**30:.2f} GiB in "
              f"{len(shards)} shard(s) of <= {a.shard}; load average {os.getloadavg()[0]:.2f}")
        print(f"{'case':22s} {'peak - baseline':>16s} {'/ model bytes':>14s} {'seconds':>8s}")
        for case in a.cases.split(","):
            out = root / f"out_{case}"
            shutil.rmtree(out, ignore_errors=True)
            r = subprocess.run([sys.executable, __file__, "--child", case, str(folder), str(out)],
                               capture_output=True, text=True, env=env)
            if r.returncode:
                print(f"{case:22s} failed: {r.stderr.strip().splitlines()[-1:]}")
                continue
            res = json.loads(r.stdout.strip().splitlines()[-1])
            grow = res["peak"] - res["baseline"]
            print(f"{case:22s} {grow / 2**30:13.2f} GiB {grow / nbytes:14.2f} {res['seconds']:8.1f}"
                  f"   (load {os.getloadavg()[0]:.2f})", flush=True)
            shutil.rmtree(out, ignore_errors=True)
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
