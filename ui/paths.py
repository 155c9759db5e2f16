"""Paths as the page names them: relative to the UI's runs folder (``runs/NAME/...``) or a checkpoint
folder (``checkpoints/NAME/...``), anything else by its file name only -- the page never shows where
the server keeps its files (issue 22).  Below both :mod:`ui.common` and :mod:`ui.i18n` (whose
``format_error`` names the files an engine error mentions this way)."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any


def runs_dir() -> Path:
    """Where the UI saves models (``$ZOO_RUNS``, default ``./runs``)."""
    return Path(os.environ.get("ZOO_RUNS") or "runs").resolve()


#: an absolute path left in a text (``/home/me/runs/x/data.tsv``): shown as its last part
ABS_PATH = re.compile(r"(?<![\w.])/(?:[^/\s\"'`]+/)+([^/\s\"'`]+)")


def _named_roots() -> list[tuple[str, str]]:
    """(server folder, the name the page uses for it), longest first: the runs folder by its own
    name (``runs``), every checkpoint folder as ``checkpoints``."""
    from zoo.model.spec import preset_dirs

    runs = runs_dir()
    roots = [(runs, runs.name)] + [(d, "checkpoints") for d in preset_dirs()]
    out = []
    for folder, name in roots:
        for form in {str(folder), str(Path(folder).resolve())}:
            out.append((form.rstrip("/"), name))
    return sorted(out, key=lambda r: -len(r[0]))


def shown_path(path: Any) -> str:
    """``path`` as the page names it: relative to the runs folder (``runs/NAME/model.safetensors``)
    or a checkpoint folder (``checkpoints/NAME/...``); any other file by its name only.  The page
    never shows where the server keeps its files."""
    p = Path(path).resolve()
    for folder, name in _named_roots():
        if p.is_relative_to(folder):
            return str(Path(name) / p.relative_to(folder))
    return p.name


def shown_paths(text: Any) -> Any:
    """``text`` with every server path in it named as :func:`shown_path` names it (errors of the
    engine name the files they read; the page shows ``runs/bad/model.safetensors``)."""
    if not isinstance(text, str) or "/" not in text:
        return text
    for folder, name in _named_roots():
        text = text.replace(folder + "/", name + "/").replace(folder, name)
    return ABS_PATH.sub(r"\1", text)
