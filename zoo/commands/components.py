"""``zoo components [FAMILY]``: what is registered, with the owning plugin.

Descriptions are printed as plain text: the reStructuredText markup of docstrings (````name````,
``:func:`x```) is removed, and each description is the docstring's whole first sentence, wrapped to
the terminal, never cut mid-word.
"""
import re
import shutil
import textwrap

import click

import zoo

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")  # :func:`zoo.build` -> zoo.build
_LITERAL = re.compile(r"``([^`]+)``|`([^`]+)`")  # ``x`` / `x` -> x
# a sentence ends at ". " / "! " / "? " outside parentheses and quotes (checked below)
_END = re.compile(r"[.!?](?=\s|$)")


def plain(doc: str) -> str:
    """A docstring fragment without reStructuredText markup, whitespace collapsed."""
    text = _ROLE.sub(lambda m: m.group(1).split(".")[-1] if m.group(1).startswith("~") else m.group(1), doc)
    text = _LITERAL.sub(lambda m: m.group(1) or m.group(2), text)
    return " ".join(text.split())


def first_sentence(doc: str) -> str:
    """The first whole sentence of ``doc`` as plain text: up to the first ``.``/``!``/``?`` that is
    followed by a space (or the end) and lies outside brackets and quotes, so "(Shazeer, 2020,
    "GLU Variants Improve Transformer")" and "et al." inside brackets never end it."""
    text = plain(doc)
    depth, quoted = 0, False
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(depth - 1, 0)
        elif ch == '"':
            quoted = not quoted
        elif _END.match(text, i) and depth == 0 and not quoted:
            # "e.g." / "al." / "vs." are abbreviations, not the end of a sentence
            if re.search(r"(\be\.g|\bi\.e|\bal|\bvs|\bcf)\.$", text[: i + 1]):
                continue
            return text[: i + 1]
    return text


@click.command("components")
@click.argument("family", required=False)
@click.option("--lessons", is_flag=True, help="Also print each component's lesson (English and Chinese).")
def command(family, lessons):
    """List registered components (optionally one FAMILY) with their plugin and parameters."""
    rows = zoo.list_components(family)
    width = max(min(shutil.get_terminal_size((100, 24)).columns, 120), 60)
    indent = " " * 19
    current = None
    for c in rows:
        if c.family != current:
            current = c.family
            click.secho(f"\n{current}", bold=True)
        params = ", ".join(f"{k}={v}" for k, v in c.params().items())
        click.echo(f"  {c.name:<16} {c.plugin} {c.version}" + (f"  [{params}]" if params else ""))
        if c.doc:
            click.echo(textwrap.fill(first_sentence(c.doc), width=width, initial_indent=indent,
                                     subsequent_indent=indent, break_long_words=False))
        for lang, text in (c.lesson.items() if lessons else ()):
            click.echo(textwrap.fill(f"[{lang}] {plain(text)}", width=width, initial_indent=indent,
                                     subsequent_indent=indent, break_long_words=False))
