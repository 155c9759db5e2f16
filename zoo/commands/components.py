"""``zoo components [FAMILY]``: what is registered, with the owning plugin."""
import click

import zoo


@click.command("components")
@click.argument("family", required=False)
def command(family):
    """List registered components (optionally one FAMILY) with their plugin and parameters."""
    rows = zoo.list_components(family)
    current = None
    for c in rows:
        if c.family != current:
            current = c.family
            click.secho(f"\n{current}", bold=True)
        params = ", ".join(f"{k}={v}" for k, v in c.params().items())
        click.echo(f"  {c.name:<16} {c.plugin} {c.version}" + (f"  [{params}]" if params else ""))
        if c.doc:
            click.echo(f"  {'':<16} {c.doc[:100]}")
