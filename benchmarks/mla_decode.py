"""One decoding step of multi-head latent attention, absorbed against rebuilt (plugins/attention_mla.py).

The DeepSeek-V2-Lite attention shape (d_model 2048, 16 heads, latent 512, rope key 64, nope and
value 128), one layer, batch 1, float32: the cache is prefilled with ``Tk`` tokens, then one new
token attends to them, either rebuilding every cached token's keys and values from its latent
(``absorb: never``, what transformers does) or attending over the latents (``absorb: decode``).
Paired, alternating rounds; the median of the per-round ratios.  Run with OMP_NUM_THREADS=1 and
report ``uptime`` next to the numbers.

    python benchmarks/mla_decode.py [--tk 512 2048] [--rounds 15]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import zoo
from zoo.model.layers import AttnArgs, LayerCache


def setup(tk: int):
    model = zoo.build(dict(arch="decoder", vocab_size=64, d_model=2048, num_layers=1, num_heads=16, head_dim=64,
                           d_ff=64, attention={"kind": "mla", "kv_lora_rank": 512, "nope_dim": 128, "v_dim": 128},
                           positions="rope", norm="rmsnorm", ffn="swiglu"), seed=0).eval()
    attn, rope = model.decoder.blocks[0].attn, model.decoder.positions
    cache = LayerCache(tk + 1)
    pre = AttnArgs.make(tk, tk, "cpu", is_causal=True, fused_causal=True, rotary=rope,
                        rot_state=rope.qk_state(torch.arange(tk)[None]))
    with torch.no_grad():
        attn(torch.randn(1, tk, 2048), pre, cache)
    step = AttnArgs.make(1, tk + 1, "cpu", rotary=rope, rot_state=rope.qk_state(torch.tensor([[tk]])))
    return attn, cache, step, torch.randn(1, 1, 2048)


def one(attn, cache, step, x, absorb: str):
    attn.absorb = absorb
    n = cache.length
    t = time.perf_counter()
    with torch.no_grad():
        y = attn(x, step, cache)
    dt = time.perf_counter() - t
    cache.length = n  # the next call writes the same slot
    return dt, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tk", type=int, nargs="+", default=[512, 2048])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    for tk in args.tk:
        attn, cache, step, x = setup(tk)
        ratios, t_never, t_abs = [], [], []
        for r in range(args.rounds + 2):
            order = ("never", "decode") if r % 2 == 0 else ("decode", "never")
            got = {a: one(attn, cache, step, x, a) for a in order}
            if r >= 2:  # two warm-up rounds
                t_never.append(got["never"][0])
                t_abs.append(got["decode"][0])
                ratios.append(got["never"][0] / got["decode"][0])
        diff = (got["never"][1] - got["decode"][1]).abs().max().item()
        print(f"Tk {tk}: rebuilt {1e3 * statistics.median(t_never):.2f} ms, absorbed "
              f"{1e3 * statistics.median(t_abs):.2f} ms, median ratio {statistics.median(ratios):.1f}x "
              f"(outputs differ by {diff:.1e})")


if __name__ == "__main__":
    main()
