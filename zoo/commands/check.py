"""``zoo check PATH``: is this checkpoint safe and intact to load?  Runs every check ``zoo.load``
runs -- header, each metadata entry, the spec, the dtype policy, the memory budget, every tensor name
and shape against the spec, the tokenizer -- without reading the weights into a model, then
recomputes the SHA-256 digest of the tensor bytes that ``zoo.save`` stored.  One line per step;
the first failing step is an error (exit status 2)."""
import time

import click


@click.command("check")
@click.argument("path")
@click.option("--no-digest", is_flag=True, help="Skip hashing the tensor bytes (the slow step).")
def command(path, no_digest):
    """Check the checkpoint PATH (file, folder or shipped name) without loading it."""
    from zoo.io.loading import check

    t0 = time.perf_counter()
    last = [t0]

    def report(step, detail):
        now = time.perf_counter()
        click.echo(f"ok  {step:<10} {detail}  ({now - last[0]:.2f} s)")
        last[0] = now

    check(path, digest=not no_digest, report=report)
    click.echo(f"checked in {time.perf_counter() - t0:.2f} s")
    from zoo.convert import certificate_text
    from zoo.io.checkpoint import read_metadata

    parity = certificate_text(read_metadata(path))  # converted checkpoints: their parity certificate
    if parity:
        click.echo(parity)
