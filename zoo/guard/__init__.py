"""The guards: every rule that keeps a hostile or mistaken input from hurting the process.

Safe file reading and the one writer (``files``: confined paths, bounded YAML, the truncating
formatter), every folder zoo writes as a transaction (``transaction``: one lock per folder, one
commit per save, readers that trust only the commit), the rules a tokenizer file must meet
(``tokenizer_files``), the checks on what a plugin component returns (``outputs``), which
components can work together (``compat``), the memory budget of a build (``build_budget``) and the
memory and work budget of a forward or a generation (``run_budget``, the process's own limits
included), the numeric health of decoding (``health``), and the box foreign chat templates render
in (``sandbox``: a worker process bounded in memory, time and output).

May import: the front door's ground floor (``zoo.errors``, ``zoo.components``, ``zoo.deprecation``,
``zoo.version``) and ``zoo.registry``.  Never the model, io, run or inside wings: a guard takes what
it checks as an argument (``build_budget.check`` is handed the model's exact layout).
"""
from __future__ import annotations

import importlib

#: The modules of this wing, reachable as ``zoo.guard.NAME`` after ``import zoo`` (imported on
#: first use, so ``import zoo`` stays light).
MODULES = ('files', 'transaction', 'tokenizer_files', 'outputs', 'compat', 'health', 'build_budget',
           'run_budget', 'sandbox')


def __getattr__(name: str):
    if name in MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(MODULES))
