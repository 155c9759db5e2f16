"""``zoo build SPEC``: validate a spec, build it, print a summary; optionally save it."""
import click

import zoo
from zoo.commands import parse_sets
from zoo.inside.summary import summary


@click.command("build")
@click.argument("spec")
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE",
              help="Override a spec field (YAML value), e.g. --set num_layers=2.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--save", "save_to", type=click.Path(), help="Save the (random-init) model here.")
@click.option("--yaml", "show_yaml", is_flag=True, help="Print the full, validated spec.")
@click.option("--budget", default=None, metavar="SIZE",
              help="Most memory the model may take, e.g. 64GB or inf (default: available memory).")
def command(spec, sets, seed, save_to, show_yaml, budget):
    """Build SPEC (a YAML path or preset name) and print parameters per component and shapes."""
    from zoo.guard.build_budget import parse_bytes

    overrides = parse_sets(sets)
    model = zoo.build(spec, seed=seed, budget=parse_bytes(budget) if budget else None, **overrides)
    if show_yaml:
        click.echo(model.spec.to_yaml())
    click.echo(summary(model))
    if save_to:
        path = zoo.save(model, save_to)
        click.echo(f"saved {path}")
