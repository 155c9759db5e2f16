"""Numbers for the state of the house (issue 20): function-level imports and long functions.

    python3 scripts/house_stats.py            # counts, and functions over 80 lines in zoo/ and ui/

A function-level import is an ``import`` statement inside a ``def`` (often there only to dodge an
import circle); "zoo's own" are those of ``zoo``, ``plugins``, ``ui`` or a relative module.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OWN = ("zoo", "plugins", "ui")


def _imports_in_functions(tree: ast.AST):
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    yield fn, [a.name for a in node.names], node
                elif isinstance(node, ast.ImportFrom):
                    yield fn, ["." * node.level + (node.module or "")], node


def _area(rel: str) -> str:
    """Where a file stands: the engine core, the commands (lazy imports keep ``zoo --help`` fast),
    the tools above the engine (training, experiments, the test kit), the UI or the plugins."""
    parts = rel.split("/")
    if parts[0] != "zoo":
        return parts[0] + "/"
    if parts[1] in ("commands", "cli.py"):
        return "zoo/commands (lazy, for a fast CLI)"
    if parts[1] in ("train", "experiment", "testing"):
        return f"zoo/{parts[1]}/"
    return "zoo engine core (zoo/*.py, zoo/convert/)"


def main(folders=("zoo", "ui", "plugins"), long_lines: int = 80) -> None:
    total = own = 0
    seen = set()
    longs = []
    per_file = {}
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            rel = path.relative_to(ROOT).as_posix()
            for fn, names, node in _imports_in_functions(tree):
                if id(node) in seen:  # nested functions see the same statement twice
                    continue
                seen.add(id(node))
                total += 1
                if any(n.startswith(".") or n.split(".")[0] in OWN for n in names):
                    own += 1
                    per_file[rel] = per_file.get(rel, 0) + 1
            if folder in ("zoo", "ui"):
                for fn in ast.walk(tree):
                    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        n = fn.end_lineno - fn.lineno + 1
                        if n > long_lines:
                            longs.append((n, f"{rel}:{fn.name}"))
    print(f"function-level imports in {', '.join(folders)}: {total} ({own} of zoo's own)")
    areas: dict[str, int] = {}
    for rel, n in per_file.items():
        areas[_area(rel)] = areas.get(_area(rel), 0) + n
    for area, n in sorted(areas.items()):
        print(f"  {n:3d}  {area}")
    for rel, n in sorted(per_file.items(), key=lambda kv: -kv[1]):
        print(f"      {n:3d}  {rel}")
    print(f"functions over {long_lines} lines in zoo/ and ui/: {len(longs)}")
    for n, name in sorted(longs, reverse=True):
        print(f"  {n:4d}  {name}")


if __name__ == "__main__":
    main(*(sys.argv[1:2] and [tuple(sys.argv[1].split(","))]))
