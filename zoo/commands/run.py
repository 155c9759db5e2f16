"""``zoo run CHECKPOINT --prompt TEXT``: stream a generation, or fill masks / classify with an encoder.

CHECKPOINT is a checkpoint file or folder, a shipped checkpoint name, or (for a quick look at an
untrained model) a spec / preset name, built with random weights.  Text is encoded with the
checkpoint's own tokenizer; ``--tokenizer byte`` (or ``char:TEXT``, ``hf:PATH``) overrides it.

The number of new tokens defaults to 64, capped by what the model's ``max_len`` leaves after the
prompt (:func:`new_token_room`), so every shipped checkpoint runs with the defaults; an explicit
``-n`` above that room is capped too, with a note on stderr.

``--sample`` without ``--seed`` draws a fresh seed each run (so two runs give two poems) and says
which on stderr (``note: sampled with seed 1234567; --seed 1234567 repeats this output``); with
``--seed N`` the run is repeatable.  Greedy decoding needs no seed.  A spec or preset (random
weights) is built with ``--seed`` too, 0 when none is given.  After a generation, stderr gets its
speed, measured as the UI's Run tab measures it: the continuation's tokens (re-encoded with the
model's tokenizer) over the wall time from the call to the last token, prefill included
(``24 tokens in 0.41 s: 58.5 tokens/s``).
"""
from __future__ import annotations

import secrets
import sys
import time

import click

import zoo
from zoo.commands.threads import threads_option
from zoo.io.loading import checkpoint_or_spec
from zoo.run.input_contract import route_notes
from zoo.commands import generation_options
from zoo.io.tokenizers import tokenizer as make_tokenizer


def load_model(source: str, *, seed: int = 0, device: str | None = None, tokenizer: str | None = None):
    """A checkpoint, else a spec/preset built with random weights (said on stderr)."""
    what = checkpoint_or_spec(source)
    model = zoo.load_or_build(what, seed=seed, device=device).eval()
    if isinstance(what, zoo.ModelSpec):
        click.secho(f"note: '{source}' is a spec, not a checkpoint: random weights (seed {seed})",
                    fg="yellow", err=True)
    if tokenizer:
        kind, _, arg = tokenizer.partition(":")
        params = {"char": {"text": arg}, "hf": {"path": arg}}.get(kind, {})
        model.tokenizer = make_tokenizer(kind, **params)
    elif getattr(model, "tokenizer", None) is None and model.spec.vocab_size >= 261:
        model.tokenizer = make_tokenizer("byte")
        click.secho("note: the checkpoint has no tokenizer; using bytes (--tokenizer to choose)",
                    fg="yellow", err=True)
    return model


DEFAULT_NEW_TOKENS = 64


def new_token_room(model, prompt_tokens: int) -> int:
    """How many new tokens ``model.spec.max_len`` leaves after a prompt of ``prompt_tokens`` tokens.

    A decoder reads prompt + generated tokens, but the last new token is never fed back, so it may
    generate ``max_len - prompt_tokens + 1``; an encoder-decoder's target sequence is separate from
    the source, so it may generate ``max_len``."""
    if model.spec.arch == "decoder":
        return max(model.spec.max_len - prompt_tokens + 1, 0)
    return model.spec.max_len


def prompt_tokens(model, prompt: str) -> int:
    """The prompt's length in tokens as generation encodes it (0 without a tokenizer)."""
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        return 0
    n = len(tok.encode(prompt))
    if model.spec.arch == "encoder_decoder" and tok.eos_id is not None:
        n += 1  # a source sentence ends with eos
    return max(n, 1)


@click.command("run")
@click.argument("checkpoint")
@click.option("--prompt", "-p", required=True, help="Text to continue (or, for an encoder, text "
              "with <mask> tokens to fill / a sentence to classify).")
@generation_options(skip=("stop_tokens", "prefix_length", "decoder_start_id", "pad_id", "vocab_limit"),
                    defaults={"max_new_tokens": None, "seed": None},
                    helps={"max_new_tokens": f"At most this many new tokens [default: {DEFAULT_NEW_TOKENS}, "
                                             "capped by what the model's max_len leaves after the prompt].",
                           "seed": "Sampling seed [default: with --sample a fresh one each run, "
                                   "printed on stderr]; a spec's random-init seed [default: 0]."})
@click.option("--tokenizer", default=None, metavar="KIND[:ARG]",
              help="byte, char:CORPUS_TEXT or hf:PATH/tokenizer.json (default: the checkpoint's).")
@click.option("--device", default=None, help="cpu or cuda (default cpu).")
@click.option("--candidates", type=int, default=5, show_default=True, help="Fill-mask: top-k shown.")
@threads_option
def command(checkpoint, prompt, tokenizer, device, candidates, **options):
    """Generate from CHECKPOINT, streaming tokens as they come (fill-mask for encoder models)."""
    # a prompt outside the checkpoint's input contract is a ZooError (one line, exit 2); one that
    # was normalised or has characters the tokenizer does not know is run with a note on stderr
    with route_notes(lambda text: click.secho(f"note: {text}", fg="yellow", err=True)):
        _run(checkpoint, prompt, tokenizer, device, candidates, **options)


def _run(checkpoint, prompt, tokenizer, device, candidates, **options):
    seed = options["seed"]
    model = load_model(checkpoint, seed=0 if seed is None else seed, device=device, tokenizer=tokenizer)
    spec = model.spec
    if spec.arch == "encoder":
        if spec.head.kind == "classifier":
            row = zoo.classify(model, prompt)
            for i, p in enumerate(row["probs"]):
                click.echo(f"label {i}: {p:.4f}" + ("  <-" if i == row["label"] else ""))
            return
        for cands in zoo.fill_mask(model, prompt, top_k=candidates):
            click.secho(f"position {cands[0]['position']}:", bold=True)
            for c in cands:
                click.echo(f"  {c.get('text', c['id'])!r:>12}  p={c['p']:.4f}  (id {c['id']})")
        return
    room = new_token_room(model, prompt_tokens(model, prompt))
    max_new_tokens = options.pop("max_new_tokens")
    if max_new_tokens is None:
        max_new_tokens = min(DEFAULT_NEW_TOKENS, room)
    elif max_new_tokens > room:
        click.secho(f"note: max_len {spec.max_len} leaves room for {room} new tokens after this "
                    f"prompt; generating {room}, not {max_new_tokens}", fg="yellow", err=True)
        max_new_tokens = room
    if options.get("do_sample") and seed is None:  # a fresh poem each run, and the seed to repeat it
        options["seed"] = secrets.randbelow(2 ** 31)
    start = time.perf_counter()
    pieces = iter(model.generate(prompt, max_new_tokens, stream_tokens=True, **options))
    first = next(pieces, "")  # the prompt is checked (its contract) before anything is printed
    if options.get("do_sample"):
        click.secho(f"note: sampled with seed {options['seed']}; --seed {options['seed']} repeats "
                    f"this output", fg="yellow", err=True)
    if spec.arch == "decoder":
        click.secho(prompt, bold=True, nl=False)
    out, steps = "", 0
    for piece in [first, *pieces] if first else pieces:
        click.echo(piece, nl=False)
        sys.stdout.flush()
        out += piece
        steps += 1
    seconds = time.perf_counter() - start
    click.echo()
    note = speed_note(model, out, seconds)
    if steps < max_new_tokens:  # why a run asked for 24 tokens printed 6 (the newcomer walk, issue 34)
        note += (f"; it ended after {steps} of {max_new_tokens} new tokens: the model wrote its end-of-text "
                 "token (or a stop rule matched)")
    click.echo(note, err=True)


def speed_note(model, text: str, seconds: float) -> str:
    """``"24 tokens in 0.41 s: 58.5 tokens/s"``: the generated ``text``'s tokens (re-encoded with
    the model's tokenizer, as the UI's Run tab counts them) over ``seconds``, prefill included."""
    tok = getattr(model, "tokenizer", None)
    n = len(tok.encode(text)) if tok is not None and text else 0
    rate = n / seconds if seconds > 0 else 0.0
    return f"{n} token{'s' if n != 1 else ''} in {seconds:.2f} s: {rate:.1f} tokens/s"
