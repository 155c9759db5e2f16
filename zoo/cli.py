"""The ``zoo`` command line.  Each sub-command lives in ``zoo/commands/<name>.py`` as a click command
named ``command`` and is imported only when invoked, so ``zoo --help`` stays fast.

A user error (every :class:`zoo.ZooError`) is printed as one line -- where, what, the fix -- with exit
status 2, never a traceback.  Anything else is a bug (in zoo or a plugin): one short line naming the
exception, exit status 1, and ``zoo --debug ...`` (or ``ZOO_DEBUG=1``) shows the full traceback.
That is the command line's error boundary (:func:`as_zoo_error`): the escaped exception becomes a
``ZooError`` naming the command (``where: zoo convert``) with the original as its ``__cause__``.
"""
from __future__ import annotations

import importlib
import os
import sys

import click

from .errors import ZooError, internal_error

#: sub-command name -> (module under zoo.commands, one-line help)
COMMANDS = {
    "components": ("components", "List registered components (by family) and their plugins."),
    "build": ("build", "Build a model from a spec and print its summary."),
    "check": ("check", "Check a checkpoint (header, metadata, spec, shapes, digest) without loading it."),
    "run": ("run", "Generate from a checkpoint, streaming (fill-mask / classify for encoders)."),
    "chat": ("chat", "Chat with an instruct checkpoint in its own chat template (an interactive loop)."),
    "inspect": ("inspect", "Write attention figures (PNG) and captured numbers (JSON) for a text."),
    "convert": ("convert", "Convert a Hugging Face save_pretrained folder (GPT-2 ... Marian: docs/CONVERT.md) to a zoo checkpoint."),
    "plugins": ("plugins", "List plugins (built-in and installed), their components and errors."),
    "verify": ("verify", "Run the conformance kit on components; print a pass/fail table."),
    "ui": ("ui", "Start the Gradio UI on http://127.0.0.1:7860 (English / 中文)."),
    "bench": ("bench", "Time forward, generation and a training step (tokens/s, % of peak)."),
    "train": ("train", "Train a spec or checkpoint on a data file (clm, mlm, prefix_lm, seq2seq)."),
    "experiment": ("experiment", "Run experiments: variants x seeds on a task, with intervals and a report."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        mod = importlib.import_module(f"zoo.commands.{COMMANDS[name][0]}")
        return mod.command

    def format_commands(self, ctx, formatter):
        rows = [(n, COMMANDS[n][1]) for n in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="zoo-transformers", prog_name="zoo")
@click.option("--debug", is_flag=True, help="Show the full traceback of an unexpected error.")
def cli(debug):
    """zoo: assemble, run, inspect and train Transformers from pluggable parts."""


def one_line(text: str, limit: int = 2000) -> str:
    """``text`` on one line (newlines folded), at most ``limit`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args[:next((i for i, a in enumerate(args) if a in COMMANDS), len(args))] \
        or os.environ.get("ZOO_DEBUG", "") not in ("", "0")
    try:
        return cli.main(args=args, prog_name="zoo", standalone_mode=False)
    except ZooError as exc:
        click.secho(f"error: {one_line(exc)}", fg="red", err=True)
        sys.exit(2)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # a bug, not a user error: say so in one line
        err = as_zoo_error(exc, where=f"zoo {command_of(args) or ''}".strip())
        if debug:
            raise err from exc
        click.secho(f"error: {one_line(err, 600)}", fg="red", err=True)
        sys.exit(1)


def command_of(args: list[str]) -> str | None:
    """The sub-command named in ``args`` (None before one is named)."""
    return next((a for a in args if a in COMMANDS), None)


def as_zoo_error(exc: BaseException, *, where: str) -> ZooError:
    """The error boundary of an entry point: ``exc`` (not a ZooError: a bug in zoo or a plugin) as a
    ZooError that says where it escaped, with ``exc`` as its ``__cause__``; the CLI prints it in one
    line with exit status 1 (a user error is status 2), ``zoo --debug`` raises it with the chain."""
    return internal_error(exc, where=where, fix="run `zoo --debug ...` to see the traceback, and report it")


if __name__ == "__main__":
    main()
