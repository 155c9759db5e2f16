"""``python -m zoo.experiment.worker TRIAL_JSON [THREADS]``: run one trial (what each worker process
of :func:`zoo.experiment.run` executes).  Exit 0 when ``result.json`` was written, 2 on a user
error (one line), 130 when stopped by a signal (the trainer saved first)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import ZooError
from .run import FAILURE, Trial, run_trial, write_failure


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    path = Path(args[0])
    threads = int(args[1]) if len(args) > 1 else None
    trial = Trial.from_dict(json.loads(path.read_text(encoding="utf-8")))
    (path.parent / FAILURE).unlink(missing_ok=True)  # a past attempt's error is not this one's
    try:
        run_trial(trial, path.parent, threads)
    except ZooError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        write_failure(path.parent, exc)  # its id and params: the UI words it in the page's language
        if argv is not None:
            raise
        return 2
    except KeyboardInterrupt as exc:
        print(f"stopped: {exc}", file=sys.stderr, flush=True)
        if argv is not None:
            raise
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
