"""Paired forward time of zoo's ``moe`` feed-forward against transformers' MoE block on the same
weights (issue 24): batch 4 x 256 tokens, rounds alternating in random order, median of the
per-round ratios zoo / transformers (< 1 means zoo is faster).

    python benchmarks/moe_speed.py [--family mixtral|qwen2_moe] [--rounds 15] [--d 512] [--ff 1024]
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

import torch


def _blocks(family: str, d: int, ff: int, experts: int, top_k: int):
    import transformers as T

    from zoo.convert import from_transformers

    common = dict(vocab_size=64, hidden_size=d, num_hidden_layers=1, num_attention_heads=8,
                  num_key_value_heads=8, num_experts_per_tok=top_k)
    if family == "mixtral":
        hf = T.MixtralForCausalLM(T.MixtralConfig(intermediate_size=ff, num_local_experts=experts, **common))
    else:
        hf = T.Qwen2MoeForCausalLM(T.Qwen2MoeConfig(intermediate_size=ff, moe_intermediate_size=ff,
                                                    shared_expert_intermediate_size=ff, num_experts=experts, **common))
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.05)
    z = from_transformers(hf.eval(), certify=False)
    return hf.model.layers[0].mlp, z.decoder.blocks[0].ffn, hf.config._experts_implementation


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", default="mixtral", choices=["mixtral", "qwen2_moe"])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--ff", type=int, default=1024)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    ref, moe, impl = _blocks(a.family, a.d, a.ff, a.experts, a.top_k)
    x = torch.randn(4, 256, a.d)
    with torch.inference_mode():
        assert (ref(x) - moe(x)).abs().max() < 1e-4  # the same function
        for f in (ref, moe):  # warm up
            f(x)
        ratios, times = [], {"zoo": [], "transformers": []}
        for _ in range(a.rounds):
            order = [("zoo", moe), ("transformers", ref)]
            random.shuffle(order)
            got = {}
            for name, f in order:
                t0 = time.perf_counter()
                f(x)
                got[name] = time.perf_counter() - t0
                times[name].append(got[name])
            ratios.append(got["zoo"] / got["transformers"])
    print(f"{a.family} MoE block, batch 4 x 256, d={a.d}, d_ff={a.ff}, {a.experts} experts, top-{a.top_k}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, transformers experts={impl}")
    print(f"zoo {1e3 * statistics.median(times['zoo']):.2f} ms, transformers "
          f"{1e3 * statistics.median(times['transformers']):.2f} ms, median paired ratio zoo/transformers "
          f"{statistics.median(ratios):.3f} over {a.rounds} rounds")


if __name__ == "__main__":
    main()
