"""``zoo bench SPEC_OR_CHECKPOINT``: time forward, greedy generation and a training step."""
import copy
import json

import click

import zoo
from zoo.commands import parse_sets
from zoo.commands.threads import threads_option


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
              help="int8 weights (CPU; zoo.run.precision.quantize_int8); training is skipped.")
@click.option("--int4", "int4", is_flag=True,
              help="int4 weights in groups (CPU; zoo.run.precision.quantize_int4); training is skipped.")
@click.option("--q4", "q4", is_flag=True,
              help="GGUF's Q4_1 blocks, the LM head Q8_0 (CPU; zoo.run.precision.quantize_q4: a Q4_1 "
                   "file's own blocks exactly; batch-1 decoding of a Llama takes the fused step, "
                   "zoo.run.qstep); training is skipped.")
@click.option("--group-size", type=click.Choice(["32", "64", "128", "256"]), default=None,
              help="--int4: inputs per (scale, zero) group (default: the source's own 4-bit blocks "
                   "where its weights have them, else 128).")
@click.option("--vs-float32", is_flag=True,
              help="With --int8 / --int4 / --q4: also decode with the float32 weights, alternating rounds, "
                   "and print the tokens/s ratio (paired).")
@threads_option
@click.option("--compile", "use_compile", is_flag=True, help="Time the torch.compile'd model.")
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE",
              help="Override a spec field (YAML value), e.g. --set num_layers=2.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def command(source, batch, seq_len, prompt_len, new_tokens, train_batch, repeats, warmup, tasks,
            device, dtype, int8, int4, q4, group_size, vs_float32, use_compile, sets, as_json):
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
              zoo bench gpt2 --task generate --int4 --group-size 32 --vs-float32
              zoo bench runs/smollm2 --task generate --q4 --threads 1
    """
    import torch
    from zoo.inside.speed import TASKS, bench

    for name, v in (("--batch", batch), ("--seq-len", seq_len), ("--prompt-len", prompt_len),
                    ("--new-tokens", new_tokens), ("--train-batch", train_batch),
                    ("--repeats", repeats)):
        if v < 1:
            raise zoo.ZooError(f"must be >= 1, got {v}", where=name)
    if warmup < 0:
        raise zoo.ZooError(f"must be >= 0, got {warmup}", where="--warmup")
    schemes = [name for name, on in (("--int8", int8), ("--int4", int4), ("--q4", q4)) if on]
    if len(schemes) > 1:
        raise zoo.ZooError(f"{' and '.join(schemes)} are ways to store the weights; pick one",
                           where="zoo bench", options=["--int8", "--int4", "--q4"],
                           fix=f"keep one of {', '.join(schemes)}")
    overrides = parse_sets(sets)
    model = zoo.load_or_build(source, device=device, dtype=dtype, **overrides)
    tasks = tuple(tasks) or TASKS
    if vs_float32 and not schemes:
        raise zoo.ZooError("--vs-float32 compares quantized weights with float32 ones",
                           where="zoo bench", fix="add --int8, --int4 or --q4")
    reference = copy.deepcopy(model).float() if vs_float32 else None
    if schemes:
        import warnings

        from zoo.run.precision import (QualityWarning, quality_line, quantize_int4, quantize_int8,
                                       quantize_q4)

        with warnings.catch_warnings():  # the quality line below says it, with the figures
            warnings.simplefilter("ignore", QualityWarning)
            if int8:
                quantize_int8(model)
            elif int4:
                quantize_int4(model, int(group_size) if group_size else None)
            else:
                quantize_q4(model)
        tasks = tuple(t for t in tasks if t != "train")  # quantised weights are for inference
    report = bench(model, batch=batch, seq_len=seq_len, prompt_len=prompt_len, new_tokens=new_tokens,
                   train_batch=train_batch, warmup=warmup, repeats=repeats,
                   tasks=tasks, compile=use_compile)
    ratio = paired_decode(reference, model, prompt_len, new_tokens, max(3, repeats // 2)) \
        if reference is not None else None
    quality = getattr(model, "quality", None) if schemes else None
    fused = fused_line(model) if q4 and "generate" in tasks else None
    if as_json:
        click.echo(json.dumps({**report.to_dict(), **({"vs_float32": ratio} if ratio else {}),
                               **({"quality": quality} if quality else {}),
                               **({"q4_decoding": fused} if fused else {})}, indent=2))
    else:
        click.echo(report.table())
        if quality:
            click.echo(quality_line(model))
        if fused:
            click.echo(f"q4 decoding: {fused}")
        if ratio:
            click.echo(f"{model.quantized} decoding: {ratio['quantized_tokens_per_s']:,.1f} tokens/s "
                       f"vs float32 {ratio['float32_tokens_per_s']:,.1f} = {ratio['speedup']:.2f}x "
                       f"(paired median of {ratio['rounds']} alternating rounds, batch 1, "
                       f"{prompt_len} + {new_tokens} tokens)")


def fused_line(model) -> str:
    """How a q4 model's batch-1 generation decoded: the fused step, or the module path and why."""
    from zoo.run import qstep

    why = getattr(model, "qstep_reason", "") or qstep.why_not(model)
    return "the fused step (zoo.run.qstep), one C++ call a token" if why is None else \
        f"the module path ({why})"


def paired_decode(reference, quantized, prompt_len: int, new_tokens: int, rounds: int) -> dict:
    """Greedy decoding with the float32 and the quantized weights, alternating (who goes first
    alternates too), one warm-up each: tokens/s medians and the median per-round ratio."""
    import statistics
    import time

    import torch
    from zoo.inside.speed import greedy, random_ids

    spec = quantized.spec
    prompt = random_ids(spec, 1, min(prompt_len, spec.max_len - new_tokens), "cpu",
                        torch.Generator().manual_seed(0))
    src = prompt if spec.arch == "encoder_decoder" else None
    start = prompt[:, :1] if src is not None else prompt
    calls = {"float32": lambda: greedy(reference, start, new_tokens, src),
             "quantized": lambda: greedy(quantized, start, new_tokens, src)}
    times: dict[str, list[float]] = {k: [] for k in calls}
    with torch.inference_mode():
        for fn in calls.values():
            fn()
        for r in range(rounds):
            for k in (list(calls) if r % 2 == 0 else list(calls)[::-1]):
                t0 = time.perf_counter()
                calls[k]()
                times[k].append(time.perf_counter() - t0)
    return {"float32_tokens_per_s": new_tokens / statistics.median(times["float32"]),
            "quantized_tokens_per_s": new_tokens / statistics.median(times["quantized"]),
            "speedup": statistics.median(f / q for f, q in zip(times["float32"], times["quantized"])),
            "rounds": rounds}
