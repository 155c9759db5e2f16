"""Human-readable summaries of a model: parameters per component, shapes."""
from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn


def parameter_table(model: nn.Module) -> "OrderedDict[str, int]":
    """Parameters grouped by component (embeddings, per stack: attention, cross-attention, ffn, norms,
    final norm; heads), each shared tensor counted once."""
    groups: "OrderedDict[str, int]" = OrderedDict()
    seen = set()
    for name, p in model.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        parts = name.split(".")
        if parts[0] in ("encoder", "decoder") and len(parts) > 3 and parts[1] == "blocks":
            sub = parts[3]
            kind = {"attn": "attention", "cross": "cross-attention", "ffn": "feed-forward"}.get(
                sub, "norms" if sub.endswith("_res") else sub)
            key = f"{parts[0]}.{kind}"
        elif parts[0] in ("encoder", "decoder"):
            key = f"{parts[0]}.{parts[1]}"
        elif parts[0] in ("tok_emb", "embed", "enc_embed", "dec_embed"):
            key = "embeddings"
        else:
            key = parts[0]
        groups[key] = groups.get(key, 0) + p.numel()
    return groups


def summary(model: nn.Module, seq_len: int = 16) -> str:
    spec = model.spec
    lines = [f"{spec.name}: {spec.arch}, d_model={spec.d_model}, vocab={spec.vocab_size}, "
             f"max_len={spec.max_len}"]
    for role in spec.roles:
        st = spec.stack(role)
        lines.append(f"  {role}: {st.num_layers} layers x {st.num_heads} heads "
                     f"(kv {st.num_kv_heads}, head_dim {st.head_dim}), d_ff={st.d_ff}; "
                     f"attention={st.attention}, mask={' & '.join(map(str, st.mask))}, "
                     f"positions={st.positions}, norm={st.norm}/{st.placement}, ffn={st.ffn}")
    lines.append("  parameters:")
    table = parameter_table(model)
    total = sum(table.values())
    for k, v in table.items():
        lines.append(f"    {k:<28} {v:>12,}  {100 * v / max(total, 1):5.1f}%")
    lines.append(f"    {'total':<28} {total:>12,}")
    shapes = io_shapes(model, seq_len)
    lines.append("  shapes: " + ", ".join(f"{k} {v}" for k, v in shapes.items()))
    return "\n".join(lines)


@torch.no_grad()
def io_shapes(model: nn.Module, seq_len: int = 16, batch: int = 2) -> dict[str, tuple]:
    """Input and output shapes of one forward on random ids (a smoke test of the build)."""
    spec = model.spec
    dev = next(model.parameters()).device
    T = min(seq_len, spec.max_len)
    ids = torch.randint(1, spec.vocab_size, (batch, T), device=dev)
    was = model.training
    model.eval()
    try:
        out = model(ids, ids) if spec.arch == "encoder_decoder" else model(ids)
    finally:
        model.train(was)
    return {"input": tuple(ids.shape), "output": tuple(out.shape)}
