"""Small shared helpers for the test suite."""
from __future__ import annotations

import torch

import zoo
from zoo.components import BuildContext
from zoo.model.layers import attend


class Attend:
    """A registered attention kernel, called the way a model calls it (``zoo.model.layers.attend``: the
    engine turns ``is_causal`` into a mask and zeroes fully masked rows)."""

    def __init__(self, module):
        self.module = module

    def __call__(self, q, k, v, **kw):
        return attend(self.module, q, k, v, **kw)

    def cuda(self):
        self.module.cuda()
        return self


def kernel(name: str, head_dim: int, heads: int = 2, kv_heads: int | None = None, scale=None):
    """A registered attention kernel outside a model (eval mode, no dropout), as :class:`Attend`."""
    ctx = BuildContext.for_heads(heads, head_dim, num_kv_heads=kv_heads, causal=True, scale=scale)
    return Attend(zoo.get_registry().get("attention", name).make(ctx))


def mask_rule(name: str, **params):
    return zoo.get_registry().get("mask", name).make(BuildContext.for_heads(2, 4, causal=True), **params)


def tiny(arch: str = "decoder", **over):
    """A very small spec dict of the given architecture."""
    spec = dict(name=f"t_{arch}", arch=arch, vocab_size=61, max_len=32, d_model=16, num_layers=2,
                num_heads=2, d_ff=32)
    spec.update(over)
    return spec


def shrunk(preset):
    """A preset's spec with its components kept but its sizes cut (fast tests for the 100M ones)."""
    d = zoo.spec(preset).to_dict()
    d.update(vocab_size=min(d["vocab_size"], 256), max_len=min(d["max_len"], 64), dropout=0.0,
             num_layers=min(d["num_layers"], 2), d_model=8 * d["num_heads"])
    if d.get("head_dim") is not None:
        d["head_dim"] = 8
    if d.get("d_ff") is not None:
        d["d_ff"] = min(d["d_ff"], 64)
    for role in ("encoder", "decoder"):
        if "num_layers" in d.get(role, {}):
            d[role]["num_layers"] = min(d[role]["num_layers"], 2)
    return d

def in_child(fn, timeout: float = 60.0):
    """Run ``fn()`` in a forked child; return ``("ok", value)`` or ``("error", "Type: text")``
    (``("died", None)`` when it exits without a word); a child still running after ``timeout``
    seconds is killed and the call fails.  ``value`` travels as JSON."""
    import json
    import os
    import select
    import signal
    import time

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        try:
            torch.set_num_threads(1)  # no OpenMP parallel region: the parent's pool is not ours
            out = ("ok", fn())
        except BaseException as exc:  # noqa: BLE001
            out = ("error", f"{type(exc).__name__}: {exc}")
        os.write(w, json.dumps(out, default=str).encode())
        os._exit(0)
    os.close(w)
    data, until = b"", time.monotonic() + timeout
    while True:
        ready = select.select([r], [], [], max(0.0, until - time.monotonic()))[0]
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(r)
            raise AssertionError("the child did not finish in time")
        block = os.read(r, 1 << 16)
        if not block:
            break
        data += block
    os.close(r)
    os.waitpid(pid, 0)
    return tuple(json.loads(data)) if data else ("died", None)
