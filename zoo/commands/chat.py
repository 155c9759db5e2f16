"""``zoo chat CHECKPOINT``: talk to an instruct checkpoint in its own chat template.

An interactive loop: each line you type is a user message; the reply streams back; the whole
conversation is kept and re-rendered each turn (``zoo.run.chat``).  Lines starting with ``/`` are
commands: ``/reset`` forgets the conversation, ``/prompt`` shows the rendered prompt of the next
turn, ``/exit`` (or end of input) leaves.  ``--system`` starts the conversation with a system
message; ``--message TEXT`` (repeatable) runs without a prompt, one turn per message, for scripts.

The checkpoint needs a tokenizer and a chat template (an instruct model converted with
``zoo convert``: the template of its ``tokenizer_config.json`` or GGUF file travels inside the
checkpoint); ``--template FILE`` supplies one.
"""
from __future__ import annotations

import sys

import click

from zoo.commands import generation_options
from zoo.commands.threads import threads_option


@click.command("chat")
@click.argument("checkpoint")
@click.option("--system", default=None, help="A system message that opens the conversation.")
@click.option("--message", "-m", "messages", multiple=True,
              help="Send this message instead of reading the keyboard (repeat for several turns).")
@click.option("--template", "template_file", default=None, type=click.Path(dir_okay=False),
              help="A Jinja chat template file to use instead of the checkpoint's.")
@generation_options(skip=("stop_tokens", "prefix_length", "decoder_start_id", "pad_id", "vocab_limit",
                          "num_beams", "num_return_sequences", "length_penalty", "early_stopping"),
                    defaults={"max_new_tokens": 256, "seed": 0})
@click.option("--device", default=None, help="cpu or cuda (default cpu).")
@threads_option
def command(checkpoint, system, messages, template_file, device, **options):
    """Chat with CHECKPOINT (a converted instruct model) in its own chat template."""
    from zoo.run.chat import ChatError, chat, prompt, template_of
    from zoo.guard.files import read_text

    from .run import load_model

    model = load_model(checkpoint, seed=options.get("seed", 0), device=device)
    if template_file is not None:
        model.chat_template = read_text(template_file, where="--template", error=ChatError,
                                         max_bytes=1024 * 1024)
    if template_of(model) is None:
        raise ChatError(f"{checkpoint} has no chat template", where="checkpoint",
                        fix="convert an instruct model (its tokenizer_config.json or GGUF file carries the "
                            "template), or pass --template FILE")
    max_new_tokens = options.pop("max_new_tokens")
    history = [{"role": "system", "content": system}] if system else []
    interactive = not messages
    lines = iter(messages) if messages else None
    if interactive:
        click.secho("chat with " + checkpoint + "  (/reset, /prompt, /exit)", fg="cyan", err=True)
    while True:
        if interactive:
            try:
                line = click.prompt(click.style("you", bold=True), prompt_suffix="> ", err=True)
            except (EOFError, click.exceptions.Abort):
                click.echo(err=True)
                return
        else:
            line = next(lines, None)
            if line is None:
                return
        cmd = line.strip()
        if cmd in ("/exit", "/quit"):
            return
        if cmd == "/reset":
            history = history[:1] if system else []
            click.secho("(conversation cleared)", fg="cyan", err=True)
            continue
        if cmd == "/prompt":
            click.echo(prompt(model, history + [{"role": "user", "content": "…"}]))
            continue
        history.append({"role": "user", "content": line})
        if interactive:
            click.secho("assistant> ", bold=True, nl=False)
        reply = []
        for piece in chat(model, history, max_new_tokens, stream=True, **options):
            reply.append(piece)
            click.echo(piece, nl=False)
            sys.stdout.flush()
        click.echo()
        history.append({"role": "assistant", "content": "".join(reply)})
