"""Trust boundaries: reading what other people wrote without letting it read, grow or run away.

zoo opens files it did not write: specs, checkpoints, Hugging Face folders.  Three small tools keep
that safe, and every reader in zoo goes through them instead of re-inventing the checks:

* :func:`confine` -- a name found *inside* a file (a shard in an index, a tokenizer file) must stay
  inside that file's folder.  ``../outside/secret.safetensors``, ``/etc/passwd`` and a symlink that
  points out of the folder are refused.
* :func:`load_yaml` -- the one YAML loader for specs (API, CLI, UI).  It bounds the work before doing
  it: file size, nesting depth, and the size the document would have once every alias is expanded
  (a 346-byte "billion laughs" file expands to hundreds of megabytes).  Duplicate keys are errors,
  not "the last one wins".
* :func:`short` -- the one formatter for a value quoted in an error message.  Its output has a fixed
  maximum length whatever the input, so no message grows with a hostile value.
"""
from __future__ import annotations

import os
import reprlib
from pathlib import Path
from typing import Any

import yaml

from .deprecation import moved
from .errors import SpecError, ZooError

#: Limits of :func:`load_yaml` (a real spec is ~1 KB, ~60 nodes, depth 3).
MAX_YAML_BYTES = 256 * 1024
MAX_YAML_DEPTH = 32
MAX_YAML_NODES = 20_000  # after alias expansion

#: Longest value :func:`short` returns (characters).
SHORT_LEN = 80

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: ~10x faster


# ---------------------------------------------------------------------- values in messages
class _Repr(reprlib.Repr):
    """``reprlib`` with small limits, and ints too large to print shown by their size."""

    def __init__(self):
        super().__init__()
        self.maxlevel, self.maxlist, self.maxtuple, self.maxdict, self.maxset = 3, 6, 6, 6, 6
        self.maxstring, self.maxother, self.maxlong = 40, 40, 40

    def repr_int(self, x, level):
        if x.bit_length() > 128:  # str() of a 5,000-digit int raises; its size is what matters
            return f"<int of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_REPR = _Repr()


def short(value: Any, limit: int = SHORT_LEN) -> str:
    """A ``repr`` of ``value`` for an error message, at most ``limit`` characters long.

    Nested containers are cut after a few items and levels *before* they are walked (``reprlib``),
    so a shared-alias tree with 10**9 leaves costs microseconds, not gigabytes."""
    try:
        text = _REPR.repr(value)
    except Exception:  # a hostile __repr__: show the type only
        text = f"<{type(value).__name__}>"
    return clip(text, limit)


def clip(text: str, limit: int = 160) -> str:
    """Plain text (an exception's message, a file's line) cut to at most ``limit`` characters."""
    text = str(text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ---------------------------------------------------------------------- paths
def confine(root: str | os.PathLike, name: Any, *, where: str,
            error: type[ZooError] = ZooError) -> Path:
    """``root / name``, refusing any ``name`` that would leave the folder ``root``.

    ``name`` comes from a file (a shard index, checkpoint metadata), so it is untrusted: it must be a
    relative path string without NUL bytes, and after resolving ``..`` and symlinks it must still lie
    inside ``root`` (resolved too).  ``where`` names the entry for the error; ``error`` is the
    :class:`ZooError` subclass raised (e.g. the converter's ``ConvertError``).
    """
    fix = "name a file inside the model folder (no '..', no absolute path, no symlink out)"
    if not isinstance(name, (str, os.PathLike)) or not str(name) or "\x00" in str(name):
        raise error(f"expected a relative file name, got {short(name)}", where=where, fix=fix)
    base = Path(root).resolve()
    rel = Path(name)
    if rel.is_absolute() or rel.drive or str(name).startswith(("/", "\\")):
        raise error(f"absolute path {short(str(name))} is not allowed here", where=where, fix=fix)
    try:
        target = (base / rel).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise error(f"cannot resolve {short(str(name))}: {exc}", where=where, fix=fix) from exc
    if target != base and base not in target.parents:
        raise error(f"{short(str(name))} points outside the folder '{base.name}'", where=where,
                    fix=fix)
    return target


# ---------------------------------------------------------------------- YAML
def read_text(path: str | os.PathLike, *, where: str | None = None, max_bytes: int = MAX_YAML_BYTES,
              error: type[ZooError] = SpecError) -> str:
    """A small UTF-8 text file, refusing one larger than ``max_bytes`` before reading it."""
    path = Path(path)
    where = where or str(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"cannot read the file: {exc.strerror or exc}", where=where,
                    fix="check the path and its permissions") from exc
    if len(data) > max_bytes:
        raise error(f"the file is larger than {max_bytes // 1024} KiB", where=where,
                    fix="a spec is a few KB; pass the right file")
    return _decode(data, where, error)


def _decode(data: bytes, where: str, error: type[ZooError]) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise error(f"not UTF-8 text (byte {short(data[exc.start:exc.start + 1])} on line {line})",
                    where=where, fix="save the file as UTF-8") from exc


def load_yaml(text: str | bytes, *, where: str, max_bytes: int = MAX_YAML_BYTES,
              max_depth: int = MAX_YAML_DEPTH, max_nodes: int = MAX_YAML_NODES,
              error: type[ZooError] = SpecError) -> Any:
    """Parse YAML text (safe tags only) within limits; any failure is an ``error`` naming ``where``.

    Three passes, each bounded by the previous one:
    1. the event stream (no tree yet): refuse depth > ``max_depth`` as soon as it is reached;
    2. the node graph (aliases are shared, not copied): count the nodes the document *would* have
       with every alias expanded -- memoised per node, so linear in the file -- and refuse more than
       ``max_nodes``; reject duplicate mapping keys;
    3. only then build Python objects.
    """
    if isinstance(text, (bytes, bytearray)):
        if len(text) > max_bytes:
            raise error(f"the YAML is larger than {max_bytes // 1024} KiB", where=where,
                        fix="a spec is a few KB")
        text = _decode(bytes(text), where, error)
    if not isinstance(text, str):
        raise error(f"expected YAML text, got {type(text).__name__}", where=where)
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise error(f"the YAML is larger than {max_bytes // 1024} KiB", where=where,
                    fix="a spec is a few KB")
    try:
        depth = 0
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > max_depth:
                    line = event.start_mark.line + 1 if event.start_mark else "?"
                    raise error(f"YAML nested deeper than {max_depth} levels (line {line})",
                                where=where, fix="a spec is nested 2-3 levels; flatten it")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        root = yaml.compose(text, Loader=_Loader)
        if root is None:
            return None
        _check_nodes(root, where, max_nodes, error)
        loader = _Loader(text)
        try:
            return loader.construct_document(root)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        loc = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if "nesting depth" in problem:  # newer libyaml scans a flow ahead and stops at its own limit
            raise error(f"YAML nested deeper than {max_depth} levels{loc}", where=where,
                        fix="a spec is nested 2-3 levels; flatten it") from exc
        raise error(f"invalid YAML{loc}: {clip(problem)}", where=where,
                    fix="fix the YAML syntax") from exc
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # e.g. a date 2020-13-45, or an integer of 10,000 digits
        raise error(f"YAML value cannot be read: {clip(exc)}", where=where,
                    fix="quote the value or correct it") from exc


def _check_nodes(root: yaml.Node, where: str, max_nodes: int, error: type[ZooError]) -> None:
    """Expanded node count (memoised, iterative) and duplicate keys of a composed document."""
    size: dict[int, int] = {}
    open_: set[int] = set()  # nodes whose children are still being counted
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in size:
            continue
        children = _children(node)
        if not done:
            if id(node) in open_:  # reached again from inside itself: `&a [*a]`
                line = node.start_mark.line + 1 if node.start_mark else "?"
                raise error(f"YAML alias refers to the node that contains it (line {line})",
                            where=where, fix="remove the recursive alias")
            open_.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in size)
            if isinstance(node, yaml.MappingNode):
                _no_duplicate_keys(node, where, error)
            continue
        open_.discard(id(node))
        total = 1 + sum(size.get(id(c), 0) for c in children)
        if total > max_nodes:
            line = node.start_mark.line + 1 if node.start_mark else "?"
            raise error(f"YAML expands to more than {max_nodes} values (aliases, line {line})",
                        where=where, fix="remove the nested anchors/aliases ('&a', '*a')")
        size[id(node)] = total


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _no_duplicate_keys(node: yaml.MappingNode, where: str, error: type[ZooError]) -> None:
    seen: set = set()
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        ident = (key.tag, key.value)
        if ident in seen:
            raise error(f"duplicate key {short(key.value)} (line {key.start_mark.line + 1})",
                        where=where, fix="keep one of the two entries")
        seen.add(ident)


#: moved: naming a plugin in an error is the registry's (it knows who registered what), probing a
#: freshly built model is assembly's
__getattr__ = moved(__name__, {"blame": "zoo.registry", "probe_attention": "zoo.assembly"})
