"""``zoo plugins``: every plugin zoo loaded or tried to load, with what it registered and any error.

Built-in plugins (``zoo.*``, from the ``plugins/`` folder) come first, then third-party packages found
through the ``zoo`` entry-point group.  A plugin that failed (at import, in a hook, or in a
registration) is listed with its error; zoo itself keeps working.  ``--strict`` turns any plugin error
into exit status 1, for CI.
"""
import dataclasses
import json
import os

import click

import zoo


def _env_line() -> str | None:
    notes = []
    off = os.environ.get("ZOO_DISABLE_PLUGIN_AUTOLOAD", "").strip().lower()
    if off not in ("", "0", "false", "no"):
        notes.append("ZOO_DISABLE_PLUGIN_AUTOLOAD is set: installed plugins are not loaded")
    only = os.environ.get("ZOO_PLUGINS", "").strip()
    if only:
        notes.append(f"ZOO_PLUGINS={only}: only these entry-point plugins are loaded")
    return "; ".join(notes) or None


def _details(name: str) -> None:
    """One plugin: where it came from, each component with its parameters and capabilities."""
    reg = zoo.get_registry()
    info = reg.plugins.get(name)
    if info is None:
        from zoo.errors import PluginError, did_you_mean

        raise PluginError(f"no plugin named '{name}'", where="zoo plugins", options=reg.plugins,
                          fix=did_you_mean(name, reg.plugins) or "run `zoo plugins` for the list")
    click.secho(f"{info.name} {info.version}", bold=True)
    click.echo(f"  source: {info.source}   module: {info.module}")
    for err in info.errors:
        click.secho(f"  ! {err}", fg="red")
    for key in info.components:
        family, cname = key.split(":", 1)
        comp = reg.get(family, cname)
        click.secho(f"\n  {key}", bold=True)
        if comp.doc:
            click.echo(f"    {comp.doc[:300]}")
        params = ", ".join(f"{k}={v!r}" for k, v in comp.params().items())
        if params:
            click.echo(f"    parameters: {params}")
        if family == "attention":
            caps = comp.capabilities
            flags = [f.name for f in dataclasses.fields(caps)  # every flag Capabilities declares
                     if getattr(caps, f.name) is True]
            click.echo(f"    capabilities: {', '.join(flags) or '-'}")
        click.echo(f"    dtypes: {', '.join(comp.capabilities.dtypes)}; "
                   f"devices: {', '.join(comp.capabilities.devices)}")


@click.command("plugins")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
@click.option("--third-party", is_flag=True, help="Hide the built-in plugins.")
@click.option("--strict", is_flag=True, help="Exit with status 1 if any plugin has an error.")
def command(name, as_json, third_party, strict):
    """List plugins: name, version, source (builtin or distribution), components, errors.

    With NAME, describe that plugin's components: docs, parameters, capabilities."""
    if name and not as_json:
        _details(name)
        if strict and not zoo.get_registry().plugins[name].ok:
            raise SystemExit(1)
        return
    infos = [p for p in zoo.list_plugins() if not (third_party and p.builtin)
             and (not name or p.name == name)]
    broken = [p for p in infos if not p.ok]
    if as_json:
        click.echo(json.dumps([p.to_dict() for p in infos], indent=2, ensure_ascii=False))
    else:
        rows = [(p.name, p.version, p.source, "ok" if p.ok else f"ERROR ({len(p.errors)})",
                 ", ".join(p.components) or "-") for p in infos]
        head = ("plugin", "version", "source", "status", "components")
        widths = [max(len(r[i]) for r in rows + [head]) for i in range(4)]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
        click.secho(fmt.format(*head), bold=True)
        for p, row in zip(infos, rows):
            click.echo(fmt.format(*row))
            for err in p.errors:
                click.secho(f"    ! {err}", fg="red")
        third = [p for p in infos if not p.builtin]
        click.echo(f"\n{len(infos)} plugins ({len(third)} third-party), {len(broken)} with errors; "
                   f"{sum(len(p.components) for p in infos)} components.")
        note = _env_line()
        if note:
            click.echo(note)
        if broken:
            click.echo("Broken plugins never stop zoo; their valid components are still usable. "
                       "Fix or uninstall them, or load only some with ZOO_PLUGINS=name1,name2.")
    if strict and broken:
        raise SystemExit(1)
