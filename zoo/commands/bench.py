"""``zoo bench SPEC_OR_CHECKPOINT``: time forward, greedy generation and a training step."""
import json

import click

import zoo
from zoo.commands import parse_sets


@click.command("bench")
@click.argument("source")
@click.option("--batch", "-b", type=int, default=1, show_default=True, help="Forward/generation batch.")
@click.option("--seq-len", "-t", type=int, default=128, show_default=True,
              help="Tokens per sequence for forward and training (clipped to max_len).")
@click.option("--prompt-len", type=int, default=32, show_default=True)
@click.option("--new-tokens", type=int, default=64, show_default=True)
@click.option("--train-batch", type=int, default=8, show_default=True)
@click.option("--repeats", "-r", type=int, default=10, show_default=True)
@click.option("--warmup", type=int, default=2, show_default=True)
@click.option("--task", "tasks", multiple=True,
              type=click.Choice(["forward", "prefill", "generate", "train"]),
              help="Only these tasks (repeatable); default: all that apply.")
@click.option("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cpu).")
@click.option("--dtype", default=None, help="float32, bfloat16, float16 (default: the model's).")
@click.option("--int8", "int8", is_flag=True,
              help="int8 weights (CPU; zoo.precision.quantize_int8); training is skipped.")
@click.option("--int4", "int4", is_flag=True,
              help="int4 weights in groups (CPU; zoo.precision.quantize_int4); training is skipped.")
@click.option("--group-size", type=click.Choice(["32", "64", "128", "256"]), default="128",
              show_default=True, help="--int4: inputs per (scale, zero) group.")
@click.option("--threads", type=int, default=None, help="torch.set_num_threads for CPU runs.")
@click.option("--compile", "use_compile", is_flag=True, help="Time the torch.compile'd model.")
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE",
              help="Override a spec field (YAML value), e.g. --set num_layers=2.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def command(source, batch, seq_len, prompt_len, new_tokens, train_batch, repeats, warmup, tasks,
            device, dtype, int8, int4, group_size, threads, use_compile, sets, as_json):
    """Time SOURCE (a spec, preset or checkpoint) on this machine.

    Reports the median and spread of warm, synchronised repeats; tokens/s; GFLOP/s (FLOPs counted by
    PyTorch on the real model) and the fraction of a matmul peak measured in the same run; for
    decoding, the bytes read per step (weights + KV cache), GB/s, and the fraction of the memory
    roofline (bandwidth measured in the same run).  Decoding is memory-bound: each step reads every
    weight once for one multiply-add.  Prefill is compute-bound: each weight serves every prompt
    token.

    \b
    Example:  zoo bench gpt_tiny --batch 4 --seq-len 256
              zoo bench runs/gpt --device cuda --dtype bfloat16 --compile
              zoo bench gpt2 --task generate --int8
              zoo bench gpt2 --task generate --int4 --group-size 32
    """
    import torch
    from zoo.bench import TASKS, bench

    if threads:
        torch.set_num_threads(threads)
    for name, v in (("--batch", batch), ("--seq-len", seq_len), ("--prompt-len", prompt_len),
                    ("--new-tokens", new_tokens), ("--train-batch", train_batch),
                    ("--repeats", repeats)):
        if v < 1:
            raise zoo.ZooError(f"must be >= 1, got {v}", where=name)
    if warmup < 0:
        raise zoo.ZooError(f"must be >= 0, got {warmup}", where="--warmup")
    if int8 and int4:
        raise zoo.ZooError("--int8 and --int4 are two ways to store the weights; pick one",
                           where="zoo bench", fix="drop --int8 or --int4")
    overrides = parse_sets(sets)
    model = zoo.load_or_build(source, device=device, dtype=dtype, **overrides)
    tasks = tuple(tasks) or TASKS
    if int8:
        from zoo.precision import quantize_int8

        quantize_int8(model)
        tasks = tuple(t for t in tasks if t != "train")  # int8 weights are for inference
    if int4:
        from zoo.precision import quantize_int4

        quantize_int4(model, int(group_size))
        tasks = tuple(t for t in tasks if t != "train")  # int4 weights are for inference too
    report = bench(model, batch=batch, seq_len=seq_len, prompt_len=prompt_len, new_tokens=new_tokens,
                   train_batch=train_batch, warmup=warmup, repeats=repeats,
                   tasks=tasks, compile=use_compile)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(report.table())
