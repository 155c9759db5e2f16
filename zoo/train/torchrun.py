"""``python -m zoo.train.torchrun``: ``torchrun`` with its arguments unchanged, quiet on Ctrl-C.

Under plain ``torchrun`` a Ctrl-C stops every worker at the next step with its checkpoint saved
(:mod:`zoo.train.dist`), and then torchrun's launcher process prints a ``SignalException``
traceback of its own: the terminal's SIGINT reached it too, and its handler raises.  This module runs
the same launcher and turns that into one line and the exit status 128 + the signal's number (130
for Ctrl-C, 143 for a scheduler's SIGTERM)::

    python -m zoo.train.torchrun --nproc_per_node=2 -m zoo.cli train gpt_tiny --data data/poems.txt --out runs/ddp

A worker's failure is still reported by torchrun as before (its error summary, a non-zero exit).
"""
from __future__ import annotations

import os
import sys

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.run import main as torchrun

def launch(argv: list[str] | None = None) -> int:
    """``torchrun`` with its arguments unchanged (``argv``, default ``sys.argv[1:]``), but a stop by
    a signal -- Ctrl-C, or SIGTERM from a scheduler -- is one line on stderr, not torchrun's
    ``SignalException`` traceback, and the exit status is 128 + the signal's number.  The workers
    have had the signal too and saved their checkpoint (their own line above says which step and
    where); a worker's failure is reported by torchrun as before."""
    # torchrun sets each worker's OMP_NUM_THREADS to 1 when it is unset, and says so in a warning
    # that came first in the newcomer's terminal (issue 34); the same value, set here, without it
    # (`zoo train --threads N` still sets the workers' intra-op threads)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        torchrun(sys.argv[1:] if argv is None else argv)
    except SignalException as exc:
        sig = exc.sigval
        print(f"zoo.train.torchrun: stopped by {sig.name}: the workers saved the checkpoint of their "
              f"last finished step (see their line above); continue with `zoo train --resume --out "
              f"DIR`", file=sys.stderr)
        return 128 + int(sig)
    return 0


if __name__ == "__main__":
    sys.exit(launch())
