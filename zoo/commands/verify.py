"""``zoo verify [NAME...]``: run the conformance kit (``zoo.testing``) and print a pass / fail table.

NAME is ``family:name`` (``attention:sdpa``), a bare component name (``rope``) or a plugin name
(``linear_attention``, ``zoo.masks``); no NAME checks everything registered.  Exit status 1 if any
check fails.
"""
import json

import click

import zoo


@click.command("verify")
@click.argument("names", nargs=-1)
@click.option("--check", "checks", multiple=True, metavar="CHECK",
              help="Run only these checks (repeatable), e.g. --check kv_cache.")
@click.option("--arch", "archs", multiple=True,
              type=click.Choice(["decoder", "encoder", "encoder_decoder"]),
              help="Only these architectures (repeatable).")
@click.option("--param", "params", multiple=True, metavar="COMPONENT.KEY=VALUE",
              help="A parameter for a component, e.g. --param sliding_window.window=4.")
@click.option("--device", default=None, help="Run the checks on this device (default cpu), e.g. cuda.")
@click.option("--failed", "only_failed", is_flag=True, help="Print only the failed checks.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def command(names, checks, archs, params, device, only_failed, as_json):
    """Check components against zoo's conformance kit; print measured errors and tolerances."""
    from zoo.testing import format_table, verify
    from zoo.guard.files import load_yaml

    comp_params: dict = {}
    for item in params:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise zoo.ZooError(f"expected COMPONENT.KEY=VALUE, got '{item}'", where="--param")
        left, value = item.split("=", 1)
        comp, key = left.rsplit(".", 1)
        comp_params.setdefault(comp, {})[key] = load_yaml(value, where=f"--param {left}")

    def progress(r):
        if not as_json and r.status == "fail":
            click.secho(f"FAIL {r.subject} {r.check} {r.case}: {r.note}", fg="red", err=True)

    results = verify(list(names) or None, checks=list(checks) or None, archs=list(archs) or None,
                     params=comp_params, device=device, progress=progress)
    shown = [r for r in results if r.status == "fail"] if only_failed else results
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in shown], indent=2, ensure_ascii=False))
    else:
        click.echo(format_table(shown, width=70))
    if any(r.status == "fail" for r in results):
        raise SystemExit(1)
