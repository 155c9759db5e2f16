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
import stat
from pathlib import Path
from typing import Any

import yaml

from ..deprecation import moved
from ..errors import SpecError, ZooError

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
# ---------------------------------------------------------------------- reading a user's path
#: Size bounds per kind of file read through :func:`open_read` (bytes).
MAX_BYTES = {
    "spec": MAX_YAML_BYTES,               # a YAML spec is ~1 KB
    "json": 64 * 1024 * 1024,             # config.json, a shard index, trainer_state.json
    "tokenizer": 128 * 1024 * 1024,       # a tokenizer.json (real ones: 0.5 - 35 MB)
    "text": 4 * 1024 ** 3,                # training data
    "checkpoint": None,                   # safetensors: the header is bounded by read_header
}
#: Longest path component and whole path the OS accepts (Linux: 255 bytes, 4096 bytes).
NAME_MAX, PATH_MAX = 255, 4096
_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}


def user_path(path: Any, *, where: str, error: type[ZooError] = ZooError) -> Path:
    """``path`` as a :class:`Path`, checked by type and form before the OS sees it: a ``str`` or
    ``os.PathLike`` (not bytes), non-empty, without NUL, every component at most 255 bytes and the
    whole at most 4096 (the OS would raise ``ValueError`` / ``OSError: File name too long``)."""
    fix = "pass a file or folder path as a string"
    if isinstance(path, (bytes, bytearray)) or not isinstance(path, (str, os.PathLike)):
        raise error(f"expected a path, got {short(path)} ({type(path).__name__})", where=where,
                    fix=fix)
    text = os.fspath(path)
    if not isinstance(text, str) or not text:
        raise error(f"expected a non-empty path, got {short(text)}", where=where, fix=fix)
    if "\x00" in text:
        raise error(f"the path {short(text)} contains a NUL byte", where=where,
                    fix="remove the NUL character from the path")
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) > PATH_MAX or any(len(part) > NAME_MAX for part in raw.split(b"/")):
        raise error(f"the path {short(text)} is too long (a name over {NAME_MAX} bytes or a path "
                    f"over {PATH_MAX})", where=where, fix="use a shorter file or folder name")
    return Path(text)


def _describe(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def regular_file(path: Any, *, where: str | None = None, root: Any = None, kind: str = "json",
                 error: type[ZooError] = ZooError) -> Path:
    """The checked path of an existing regular file, *before* anything opens it.

    ``root``: the folder the user named; ``path`` must then resolve inside it (``..`` and symlinks
    leaving it are refused, for every file -- shards, config.json, tokenizer.json alike).  The file
    must be a regular file (``stat`` first: a FIFO would block ``open`` forever, ``/dev/zero`` never
    ends, a folder is not a file) and no larger than ``MAX_BYTES[kind]``."""
    where = where or str(path)
    p = user_path(path, where=where, error=error)
    if root is not None:
        base = user_path(root, where=where, error=error)
        # relative to the folder, whether the user wrote both paths relative or not ("runs/gpt"
        # and "runs/gpt/model.safetensors" is the file model.safetensors, not runs/gpt/runs/gpt/...)
        rel = os.path.relpath(os.path.abspath(p), os.path.abspath(base))  # outside: "../..."
        p = confine(base, rel, where=where, error=error)  # resolves '..' and symlinks
    try:
        st = os.stat(p)
    except FileNotFoundError as exc:
        raise error(f"no such file {short(str(p))}", where=where,
                    fix="check the path") from exc
    except OSError as exc:  # a symlink loop, a component that is a file, no permission
        raise error(f"cannot reach {short(str(p))}: {exc.strerror or exc}", where=where,
                    fix="check the path and its permissions") from exc
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{short(str(p))} is {_describe(st.st_mode)}, not a regular file", where=where,
                    fix="pass a regular file (not a folder, a FIFO or a device)")
    limit = MAX_BYTES.get(kind)
    if limit is not None and st.st_size > limit:
        raise error(f"the file has {st.st_size:,} bytes, more than the {limit:,} a {kind} file may "
                    f"have", where=where, fix="pass the right file")
    return p


def open_read(path: Any, *, where: str | None = None, root: Any = None, kind: str = "json",
              error: type[ZooError] = ZooError):
    """Open a user's file for reading in binary, the one way zoo does it: :func:`regular_file`
    checks first, then the file is opened non-blocking and ``fstat`` confirms that what was opened
    is still that regular file (a FIFO swapped in after the check would otherwise block)."""
    where = where or str(path)
    p = regular_file(path, where=where, root=root, kind=kind, error=error)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise error(f"cannot open {short(str(p))}: {exc.strerror or exc}", where=where,
                    fix="check the path and its permissions") from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise error(f"{short(str(p))} is {_describe(st.st_mode)}, not a regular file", where=where,
                    fix="pass a regular file (not a folder, a FIFO or a device)")
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_bytes(path: Any, *, where: str | None = None, root: Any = None, kind: str = "json",
               error: type[ZooError] = ZooError) -> bytes:
    """The bytes of a user's file (:func:`open_read`), at most ``MAX_BYTES[kind]``."""
    limit = MAX_BYTES.get(kind)
    with open_read(path, where=where, root=root, kind=kind, error=error) as fh:
        data = fh.read() if limit is None else fh.read(limit + 1)
    if limit is not None and len(data) > limit:  # the file grew after the check
        raise error(f"the file is larger than {limit:,} bytes", where=where or str(path),
                    fix="pass the right file")
    return data


def safetensors_open(path: Any, *, where: str | None = None, root: Any = None,
                     error: type[ZooError] = ZooError, **kwargs):
    """``safetensors.safe_open`` on a checked regular file (the library would otherwise open a
    FIFO or a device itself and block or read forever)."""
    from safetensors import safe_open

    p = regular_file(path, where=where, root=root, kind="checkpoint", error=error)
    return safe_open(str(p), framework=kwargs.pop("framework", "pt"), **kwargs)


def read_text(path: str | os.PathLike, *, where: str | None = None, max_bytes: int = MAX_YAML_BYTES,
              error: type[ZooError] = SpecError, root: Any = None) -> str:
    """A small UTF-8 text file (through :func:`open_read`: a regular file, confined to ``root``
    when given), refusing one larger than ``max_bytes`` before reading it."""
    where = where or str(path)
    with open_read(path, where=where, root=root, kind="checkpoint", error=error) as fh:
        if os.fstat(fh.fileno()).st_size > max_bytes:
            raise error(f"the file is larger than {max_bytes // 1024} KiB", where=where,
                        fix="a spec is a few KB; pass the right file")
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise error(f"the file is larger than {max_bytes // 1024} KiB", where=where,
                    fix="a spec is a few KB; pass the right file")
    return _decode(data, where, error)


# ---------------------------------------------------------------------- writing a user's path
#: Where zoo never writes, whatever the permissions: kernel and device file systems.
_NO_WRITE = ("/proc", "/sys", "/dev")


def write_target(path: Any, *, where: str, folder: bool = False,
                 error: type[ZooError] = ZooError) -> Path:
    """Check a path zoo is about to write, *before any work*; return it.

    ``folder=True``: ``path`` is a folder that will hold files (it may not exist yet); otherwise
    it is a file.  Refused with a :class:`ZooError` naming the path and the fix: a malformed path
    (:func:`user_path`: NUL, a name over 255 bytes); an existing file where a folder is expected
    (or a folder where a file is); a device, FIFO or socket (``/dev/null`` included); anything
    under ``/proc``, ``/sys`` or ``/dev``; a symlink loop; a parent that is a file; the nearest
    existing folder not writable; a path whose last component is ``.``, ``..`` or empty (``"."``,
    ``"./"``, ``"runs/.."``, ``"/"``): it names no checkpoint of its own, and a save would scatter
    ``model.safetensors`` and ``spec.yaml`` into whatever folder that is (the current one, by
    accident).  Write into the current folder by naming the file: ``"./model.safetensors"``."""
    p = user_path(path, where=where, error=error)
    last = os.fspath(path).rstrip("/").rsplit("/", 1)[-1]
    if last in ("", ".", ".."):  # "", ".", "./", "..", "a/..", "/": no name of its own
        raise error(f"{short(os.fspath(path))} names no file or folder of its own (it ends in "
                    f"{'/' if not last else repr(last)}): zoo would write its files (model.safetensors, "
                    f"spec.yaml, ...) straight into {'/' if not last else 'that folder'}",
                    where=where, fix="name the checkpoint, e.g. runs/my_model (a folder) or "
                                     "my_model.safetensors (one file)")
    fix = "choose a writable folder you own"
    try:
        resolved = p.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise error(f"cannot resolve {short(str(p))}: {exc}", where=where,
                    fix="remove the symlink loop, or choose another path") from exc
    if any(str(resolved) == d or str(resolved).startswith(d + "/") for d in _NO_WRITE):
        raise error(f"{short(str(p))} is on a system file system ({resolved.parts[1]})",
                    where=where, fix=fix)
    try:
        st = os.stat(resolved)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # a component that is a file: ENOTDIR; a loop: ELOOP
        raise error(f"cannot use {short(str(p))}: {exc.strerror or exc}", where=where,
                    fix=fix) from exc
    if st is not None:
        if folder and not stat.S_ISDIR(st.st_mode):
            raise error(f"{short(str(p))} is {_describe(st.st_mode) if not stat.S_ISREG(st.st_mode) else 'a file'}, "
                        f"not a folder", where=where,
                        fix="name a folder (it is created if missing), or a path ending in "
                            ".safetensors to write one file")
        if not folder and not stat.S_ISREG(st.st_mode):
            raise error(f"{short(str(p))} is {_describe(st.st_mode)}; zoo writes only regular files",
                        where=where, fix=fix)
    # the nearest existing ancestor must be a folder we may write in
    probe = resolved if (st is not None and folder) else resolved.parent
    while True:
        try:
            pst = os.stat(probe)
            break
        except FileNotFoundError:
            if probe.parent == probe:
                break
            probe = probe.parent
        except OSError as exc:
            raise error(f"cannot use {short(str(p))}: {exc.strerror or exc}", where=where,
                        fix=fix) from exc
    if not stat.S_ISDIR(pst.st_mode):
        raise error(f"{short(str(probe))} is a file, so {short(str(p))} cannot be created inside it",
                    where=where, fix="choose a path whose parent is a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise error(f"the folder {short(str(probe))} is not writable", where=where, fix=fix)
    return p


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
            raise error.of("yaml.too_large", where=where, kib=max_bytes // 1024)
        text = _decode(bytes(text), where, error)
    if not isinstance(text, str):
        raise error.of("yaml.not_text", where=where, type=type(text).__name__)
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise error.of("yaml.too_large", where=where, kib=max_bytes // 1024)
    try:
        depth = 0
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > max_depth:
                    line = event.start_mark.line + 1 if event.start_mark else "?"
                    raise error.of("yaml.too_deep", where=where, depth=max_depth, at=f" (line {line})")
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
        loc = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""  # for the depth refusal
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if "nesting depth" in problem:  # newer libyaml scans a flow ahead and stops at its own limit
            raise error.of("yaml.too_deep", where=where, depth=max_depth, at=loc) from exc
        if mark:
            raise error.of("yaml.invalid_at", where=where, fix="yaml.fix", line=mark.line + 1,
                           column=mark.column + 1, problem=clip(problem)) from exc
        raise error.of("yaml.invalid", where=where, fix="yaml.fix", problem=clip(problem)) from exc
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # e.g. a date 2020-13-45, or an integer of 10,000 digits
        raise error.of("yaml.bad_value", where=where, detail=clip(exc)) from exc


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
                raise error.of("yaml.recursive_alias", where=where, line=line)
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
            raise error.of("yaml.expands", where=where, limit=max_nodes, line=line)
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
            raise error.of("yaml.duplicate_key", where=where, key=short(key.value),
                           line=key.start_mark.line + 1)
        seen.add(ident)


#: moved: naming a plugin in an error is the registry's (it knows who registered what), probing a
#: freshly built model is assembly's
__getattr__ = moved(__name__)  # the old names it had: zoo.deprecation.NAMES
