"""``zoo ui``: start the Gradio UI on http://127.0.0.1:7860 (local only, no sharing, no analytics)."""
import os

import click

from zoo.commands.threads import threads_option


@click.command("ui")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on. Keep 127.0.0.1 unless you mean to expose the UI.")
@click.option("--port", default=7860, show_default=True, type=int)
@click.option("--lang", type=click.Choice(["en", "zh"]), default="en", show_default=True,
              help="Initial language (switchable in the page).")
@threads_option
def command(host, port, lang):
    """Build, run, inspect, compare and verify models in the browser (English / 中文)."""
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"  # before gradio is imported
    try:
        from zoo.ui.app import build_app, launch
    except ImportError as exc:
        raise click.ClickException(f"the UI needs the `ui` extra: pip install -e \".[ui]\" ({exc})")
    if host not in ("127.0.0.1", "localhost", "::1"):
        click.secho(f"warning: listening on {host}: anyone who can reach this machine can use the UI",
                    fg="yellow", err=True)
    click.echo(f"zoo ui on http://{host}:{port}  (Ctrl+C to stop)")
    launch(build_app(lang), host=host, port=port, block=True, lang=lang)
