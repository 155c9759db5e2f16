"""``zoo inspect CHECKPOINT --text TEXT --out DIR``: figures (PNG) and captured numbers (JSON).

Writes ``attention_grid.png`` (every layer x head), ``attention_L{i}.png`` (per layer, heads
averaged, or ``--head``), ``mask.png``, a positional-encoding view (``positions.png``: sinusoid
waves, RoPE rotation or the score bias, by the spec), ``experts.png`` for a mixture of experts
(tokens per expert and layer), ``cost.png`` (FLOPs vs length) and
``inspect.json`` (tokens, attention weights, residual norms, norm statistics, next-token
predictions, parameter table, compute-cost table and crossover; with ``--measure`` also measured
forward times beside the FLOPs-based estimate).

Every file goes through zoo's one writer (:func:`zoo.guard.transaction.write_file` with ``root=OUT``):
written atomically, and refused when ``OUT/NAME`` is a symlink (it could point outside OUT) or not
a regular file.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import click

import zoo
from zoo.guard.files import short


@click.command("inspect")
@click.argument("checkpoint")
@click.option("--text", "-t", required=True, help="The text to run through the model.")
@click.option("--out", "-o", "out", type=click.Path(file_okay=False), required=True,
              help="Folder for the PNG files and inspect.json.")
@click.option("--head", type=int, default=None, help="Per-layer heatmaps of this head (default: mean).")
@click.option("--tokenizer", default=None, metavar="KIND[:ARG]", help="Override the tokenizer.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", default=None)
@click.option("--measure", is_flag=True, help="Also time forwards at a few lengths beside the "
              "FLOPs estimate (adds 'measured' to inspect.json).")
def command(checkpoint, text, out, head, tokenizer, seed, device, measure):
    """Run CHECKPOINT once on TEXT and write attention figures and numbers to OUT."""
    from zoo.inside import costs as accounting, plots
    from zoo.commands.run import load_model

    from zoo.guard.transaction import write_file

    out = Path(out)
    if os.path.lexists(out) and not out.is_dir():
        raise zoo.ZooError(f"{short(str(out))} exists and is not a folder", where="inspect.out",
                           fix="name a folder (new or existing) for the figures")
    model = load_model(checkpoint, seed=seed, device=device, tokenizer=tokenizer)
    tr = zoo.trace(model, text=text)
    spec, stack = model.spec, model.spec.roles[-1]
    written = []

    def save(fig, name):
        # the one writer: a symlink or a non-file at OUT/name is refused, and the file is replaced
        # atomically (a link to a file outside OUT was overwritten through before)
        import matplotlib.pyplot as plt

        written.append(write_file(out / name, lambda tmp: fig.savefig(tmp, dpi=120, format="png"),
                                  where=f"inspect.out: {name}", root=out))
        plt.close(fig)

    save(plots.attention_grid(tr), "attention_grid.png")
    for i in range(spec.stack(stack).num_layers):
        w = tr.attention(i, stack)[0]  # (h, T, T)
        label = f"head {head}" if head is not None else "mean over heads 各头平均"
        w = w[head] if head is not None else w.mean(0)
        save(plots.attention_heatmap(w, tr.tokens, title=f"layer {i} 第{i}层, {label}"),
             f"attention_L{i}.png")
    save(plots.mask_pattern(spec, min(len(tr.tokens), 24)), "mask.png")
    scheme = zoo.get_registry().get("position", spec.stack(stack).positions.kind).cls
    st = spec.stack(stack)
    if scheme.acts_on_scores:
        save(plots.position_bias(spec), "positions.png")
    elif scheme.acts_on_qk:
        save(plots.rope_rotation(head_dim=st.head_dim), "positions.png")
    elif st.positions.kind == "sinusoidal":
        save(plots.sinusoid_waves(d_model=spec.d_model), "positions.png")
    if tr.names(f"{stack}.blocks.*.ffn.expert_counts"):  # a mixture of experts: the router's load
        save(plots.expert_load(tr.expert_counts(stack)), "experts.png")
    save(plots.compute_cost_curve(model), "cost.png")
    data = tr.summary()
    data["spec"] = spec.to_dict()
    data["parameters"] = accounting.parameter_table(model)
    lens = [2 ** k for k in range(4, 14)]
    data["cost"] = accounting.cost_table(model, lens)
    data["crossover"] = accounting.crossover(model)
    if measure:
        data["measured"] = accounting.measure(model, [L for L in (16, 64, 256) if L <= spec.max_len])
        save(plots.timing(data["measured"]), "timing.png")
        for row in data["measured"]:
            click.echo(f"T={row['seq_len']}: measured {row['measured_s'] * 1e3:.2f} ms, "
                       f"estimate {row['estimated_s'] * 1e3:.2f} ms ({row['flops'] / 1e9:.3f} GFLOPs)")
    text_out = json.dumps(data, ensure_ascii=False, indent=1)
    written.append(write_file(out / "inspect.json", lambda tmp: Path(tmp).write_text(text_out, encoding="utf-8"),
                              where="inspect.out: inspect.json", root=out))
    nxt = data.get("next_token", [])
    if nxt:
        click.echo("next token: " + ", ".join(f"{r.get('text', r['id'])!r} {r['p']:.3f}" for r in nxt))
    for p in written:
        click.echo(f"wrote {p}")
