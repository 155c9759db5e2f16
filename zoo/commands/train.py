"""``zoo train SPEC_OR_CHECKPOINT --data FILE --objective clm|mlm|prefix_lm|seq2seq --steps N --out DIR``.

Runs :func:`zoo.train.train`; ``--compile`` trains through ``torch.compile``.  Every log line of
``metrics.jsonl`` (and the progress bar) carries tokens/s and the MFU against a matmul peak measured
at the start (:mod:`zoo.train.mfu`).  The same command trains data-parallel under ``torchrun
--nproc_per_node=N -m zoo.cli train ...`` (or ``torchrun --nproc_per_node=N $(which zoo) train ...``).
"""
import os

import click

import zoo
from zoo.io.loading import checkpoint_or_spec
from zoo.commands import parse_sets
from zoo.commands.threads import threads_option
from zoo.io.checkpoint import load_spec
from zoo.train import DEFAULT_OBJECTIVE, OBJECTIVES, TrainConfig, train
from zoo.train.config import WINDOW_STARTS

_D = TrainConfig()


@click.command("train")
@click.argument("source", metavar="SPEC_OR_CHECKPOINT", required=False)
@click.option("--data", type=click.Path(dir_okay=False), help="Training text (documents separated "
              "by blank lines) or source<TAB>target pairs (seq2seq).")
@click.option("--objective", type=click.Choice(OBJECTIVES), help="What to learn; default: clm for "
              "a decoder, mlm for an encoder, seq2seq for an encoder-decoder.")
@click.option("--steps", type=int, default=None, help=f"Optimizer steps [default: {_D.steps}].")
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Run folder: checkpoint, trainer state, metrics.jsonl, loss.png.")
@click.option("--batch-size", type=int, help=f"Sequences per step, all ranks [{_D.batch_size}].")
@click.option("--grad-accum", type=int, help=f"Micro-batches per step [{_D.grad_accum}].")
@click.option("--block-size", type=int, help="Window length for documents [min(max_len, 128)].")
@click.option("--window-starts", type=click.Choice(WINDOW_STARTS), help="Where a training window "
              f"may begin: any token, a line start, a document start [{_D.window_starts}].")
@click.option("--mask-prob", type=float, help=f"mlm: share of tokens to predict [{_D.mask_prob}].")
@click.option("--mask-token-frac", type=float, help="mlm: share of those replaced by <mask>; the "
              f"rest half random, half kept [{_D.mask_token_frac}: BERT's 80/10/10].")
@click.option("--lr", type=float, help=f"Peak learning rate [{_D.lr}].")
@click.option("--warmup", type=int, help=f"Warm-up steps [{_D.warmup}].")
@click.option("--weight-decay", type=float, help=f"AdamW weight decay [{_D.weight_decay}].")
@click.option("--grad-clip", type=float, help=f"Max gradient norm, 0 = off [{_D.grad_clip}].")
@click.option("--holdout", type=float, help=f"Held-out fraction [{_D.holdout}].")
@click.option("--eval-every", type=int, help=f"Evaluate every N steps [{_D.eval_every}].")
@click.option("--save-every", type=int, help=f"Save every N steps [{_D.save_every}].")
@click.option("--log-every", type=int, help=f"Log train loss every N steps [{_D.log_every}].")
@click.option("--seed", type=int, help=f"Seed for init, batches and dropout [{_D.seed}].")
@click.option("--tokenizer", type=str, help="For a fresh model: char (vocabulary read off the "
              "data) or byte [char].")
@click.option("--fit-vocab", is_flag=True, help="Set a fresh spec's vocab_size to the tokenizer's.")
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE",
              help="Override a spec field (YAML value), e.g. --set num_layers=2.")
@click.option("--device", help="cpu, cuda, cuda:1 [cuda if available]")
@click.option("--no-bf16", is_flag=True, help="Train in float32 on CUDA too.")
@click.option("--compile", "use_compile", is_flag=True, help="Train through torch.compile(model): "
              "generated kernels for the forward and backward (the first step compiles; "
              "checkpoints are the same).")
@click.option("--resume", is_flag=True, help="Continue the run saved in --out.")
@click.option("--overwrite", is_flag=True, help="Start over even if --out holds a run.")
@click.option("--no-progress", is_flag=True, help="No progress bar (logs still go to metrics.jsonl).")
@threads_option
def command(source, data, objective, steps, out, batch_size, grad_accum, block_size, window_starts,
            mask_prob, mask_token_frac, lr, warmup,
            weight_decay, grad_clip, holdout, eval_every, save_every, log_every, seed, tokenizer, fit_vocab,
            sets, device, no_bf16, use_compile, resume, overwrite, no_progress):
    """Train SPEC_OR_CHECKPOINT (a spec/preset, or a checkpoint to fine-tune) on --data."""
    knobs = {k: v for k, v in dict(batch_size=batch_size, grad_accum=grad_accum, block_size=block_size,
                                   window_starts=window_starts, mask_prob=mask_prob,
                                   mask_token_frac=mask_token_frac,
                                   lr=lr, warmup=warmup, weight_decay=weight_decay, grad_clip=grad_clip,
                                   holdout=holdout, eval_every=eval_every, save_every=save_every,
                                   log_every=log_every,
                                   seed=seed, tokenizer=tokenizer).items() if v is not None}
    if no_bf16:
        knobs["bf16"] = False
    if use_compile:
        knobs["compile"] = True
    if no_progress:
        knobs["progress"] = False
    model = source
    if source is None and not resume:
        raise zoo.ZooError("no SPEC_OR_CHECKPOINT given", where="zoo train",
                           fix="name a spec (e.g. gpt_tiny) or a checkpoint, or pass --resume")
    if sets:
        model = zoo.spec(source, **parse_sets(sets))
    if objective is None and source is not None and not resume:
        arch = _arch_of(source if not sets else model)
        objective = DEFAULT_OBJECTIVE[arch]
    result = train(model if not resume else None, data, out=out, objective=objective, steps=steps,
                   resume=resume, overwrite=overwrite, fit_vocab=fit_vocab, device=device, **knobs)
    if int(os.environ.get("RANK", "0")) == 0:
        click.echo(outcome(result))
        click.echo(f"checkpoint: {result.out}/model.safetensors  (resume: zoo train --resume --out "
                   f"{result.out})")


def outcome(result) -> str:
    """One line on how the run ended: the step reached, the time, the last training loss and the
    last held-out measures (or when the first evaluation would have come)."""
    done = f"step {result.step:,}"
    train_loss = next((r["loss"] for r in reversed(result.history) if "loss" in r), None)
    parts = [f"training loss {train_loss:.4f}"] if train_loss is not None else []
    parts += [f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
              for k, v in result.final.items()
              if k not in ("wall_time_s", "steps", "mfu", "train_tokens_per_s")]
    if "mfu" in result.final:
        parts.append(f"{result.final['train_tokens_per_s']:,.0f} tokens/s, MFU "
                     f"{100 * result.final['mfu']:.1f}%")
    took = _took(result)
    if not result.interrupted:
        return f"finished {done} in {took}: {', '.join(parts) or 'no measures'}"
    total = next((r["steps_left"] + r["step"] for r in result.history
                  if r.get("event") == "estimate"), None)
    of = f" of {total:,}" if total else ""
    if not any(k.startswith("eval_") for k in result.final):
        parts.append("no held-out evaluation yet (see --eval-every)")
    return (f"interrupted at {done}{of} after {took}, the checkpoint of that "
            f"step is saved: {', '.join(parts) or 'no step logged yet'}")


def _took(result) -> str:
    """This part's seconds, and for a resumed run the whole run's too: a resumed run's own 62 s read
    as "after 144 s" when only the total was said (issue 34)."""
    earlier = getattr(result, "resumed_time", 0.0) or 0.0
    if earlier <= 0:
        return f"{result.wall_time:.0f} s"
    return f"{result.wall_time - earlier:.0f} s ({result.wall_time:.0f} s in all with the earlier parts)"


def _arch_of(source):
    what = checkpoint_or_spec(source)  # the checkpoint's stored spec, else the spec itself
    return (what if isinstance(what, zoo.ModelSpec) else load_spec(what)).arch
