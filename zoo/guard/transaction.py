"""Every folder zoo writes is a transaction: one lock, one commit, readers that trust only it.

A checkpoint folder (``model.safetensors`` + ``spec.yaml``) and a training run folder (the
checkpoint, ``trainer_state.safetensors``, ``trainer_state.json``) hold several files that belong
together.  Renaming them into place one by one is not enough: a kill between two renames leaves a
``spec.yaml`` that describes the other model, and two writers interleave.  So:

* **One lock per folder** (:func:`lock`): ``flock`` on ``FOLDER/.zoo.lock``, which holds the
  holder's pid and exists only while it is held.  A second writer -- another process, or another thread of this one -- is refused
  with an error naming that pid, or waits when asked (``wait=True`` / seconds).  The kernel drops the
  lock when its process dies, SIGKILL included, so a lock is never stale.  The same thread may take
  it again (the trainer holds its run folder for the whole run; its saves re-enter).
* **One commit per save** (:func:`transaction`): every file is first written into a private stage
  folder ``FOLDER/.zoo-stage.PID.HEX/`` and fsynced; then ``zoo-manifest.json`` -- each committed
  file's name, size and sha256, and the stage folder's name -- is written beside them and renamed
  into place.  That rename is the commit point.  Only then are the staged files renamed to their
  names and the stage folder removed.  A crash before the commit point leaves the previous version
  (the stage folder is garbage, removed by the next writer); a crash after it leaves the new one
  (the next writer, or a reader, finds the rest of it in the stage folder the manifest names).
* **Readers trust only the commit** (:func:`committed`): they read the manifest, open every file
  they need from the stage folder it names (not yet moved) or under its own name (moved), then read
  the manifest again: unchanged, they hold one version's files, opened once (a reader never reads a
  file twice by name); changed, they retry.  ``strict=True`` also holds each file's size and sha256
  against the manifest (``zoo.load(verify=True)``, ``zoo check``).
* **A folder without a manifest** (checkpoints saved before it existed, the shipped ones, a folder
  made by hand) is read as its files are, as before; its first transaction writes a manifest.
* **One writer** (:func:`write_file`, :meth:`Transaction.write_file`, :func:`append`): names are
  relative paths inside the folder the user named; a symlink at any step, a ``..``, an absolute
  name or a folder where a file goes is refused -- zoo never writes through a link.
* **Disk full and I/O errors** (``ENOSPC``, ``EFBIG``, ``EDQUOT``, ``EIO``, ``EROFS`` -- from the
  OS or wrapped by safetensors as ``SafetensorError``) are the caller's :class:`ZooError` subclass,
  naming the file and the errno, raised after the stage folder is removed: the old state is intact.

Cost: see docs/TRUST.md (measured per ``zoo.save``).
"""
from __future__ import annotations

import contextlib
import errno as _errno
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import stat
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from .. import messages
from ..errors import ZooError
from ..version import __version__
from .files import clip, open_read, short

MANIFEST = "zoo-manifest.json"
LOCK = ".zoo.lock"
STAGE_PREFIX = ".zoo-stage."
FORMAT = "zoo-manifest/1"
#: largest manifest read (a real one is a few hundred bytes per file)
MAX_MANIFEST_BYTES = 1024 * 1024
#: how often a waiting writer looks at the lock again (seconds)
POLL_S = 0.02
#: how often a reader starts over when the folder changes under it before giving up
READ_RETRIES = 200

_STAGE_RE = re.compile(r"^\.zoo-stage\.\d+\.[0-9a-f]{8,64}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")

#: test seam: called with a step name at each step of a commit (the crash tests kill there)
_STEP: Callable[[str], None] | None = None


def _step(name: str) -> None:
    if _STEP is not None:
        _STEP(name)


# ---------------------------------------------------------------------- errors of the disk
#: errno -> what it means for the person whose save failed
DISK_ERRORS = {
    _errno.ENOSPC: "the disk is full (ENOSPC)",
    _errno.EDQUOT: "the disk quota is used up (EDQUOT)",
    _errno.EFBIG: "the file is larger than this process or file system may write (EFBIG)",
    _errno.EIO: "an I/O error (EIO)",
    _errno.EROFS: "the file system is read-only (EROFS)",
    _errno.EACCES: "permission denied (EACCES)",
    _errno.EPERM: "operation not permitted (EPERM)",
}


def _errno_of(exc: BaseException) -> int | None:
    if isinstance(exc, OSError):
        return exc.errno
    m = re.search(r"os error (\d+)", str(exc))  # safetensors: "I/O error: File too large (os error 27)"
    return int(m.group(1)) if m else None


def _is_io(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return True
    return type(exc).__name__ == "SafetensorError" and _errno_of(exc) is not None


def disk_error(exc: BaseException, what: str, *, where: str, error: type[ZooError]) -> ZooError:
    """``exc`` (an ``OSError`` or safetensors' wrapped one) as ``error`` naming ``what`` failed."""
    code = _errno_of(exc)
    why = DISK_ERRORS.get(code) or (f"{os.strerror(code)} ({_errno.errorcode.get(code, code)})"
                                    if code is not None else clip(exc, 120))
    fix = ("free disk space (or raise the quota / file-size limit) and save again"
           if code in (_errno.ENOSPC, _errno.EDQUOT, _errno.EFBIG) else
           "check the disk and the folder's permissions, then save again")
    return error(f"writing {what} failed: {why}; nothing was committed, the previous version is "
                 f"kept", where=where, fix=fix)


# ---------------------------------------------------------------------- small file-system steps
def fsync_dir(path: str | os.PathLike) -> None:
    """Make a folder's entries (a rename, a new file) durable; a file system that cannot is fine."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (_errno.EINVAL, _errno.ENOTSUP, _errno.EBADF):
            raise
    finally:
        os.close(fd)


def _fsync_file(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(fh) -> str:
    fh.seek(0)
    h = hashlib.sha256()
    for block in iter(lambda: fh.read(1 << 22), b""):
        h.update(block)
    fh.seek(0)
    return h.hexdigest()


def _umask() -> int:
    """The process umask, read without changing it where possible (``os.umask`` sets it)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------------- names inside the folder
def target(root: str | os.PathLike, name: Any, *, where: str, error: type[ZooError] = ZooError,
           folder: bool = False) -> Path:
    """``root / name`` for writing, refusing anything that would leave the folder the user named:
    ``name`` must be a relative path of plain components (no ``..``, ``.``, empty part, NUL or
    absolute path), no step under ``root`` may be a symlink, and what is there already must be a
    regular file (``folder=True``: a folder).  Nothing is created."""
    fix = "name a file inside the folder; remove the symlink, or write to another folder"
    if not isinstance(name, (str, os.PathLike)):
        raise error(f"expected a file name, got {short(name)}", where=where, fix=fix)
    text = os.fspath(name)
    parts = text.split("/")
    if (not text or "\x00" in text or text.startswith("/") or "\\" in text
            or any(p in ("", ".", "..") for p in parts)):
        raise error(f"{short(text)} is not a plain name inside the folder", where=where, fix=fix)
    base = Path(root)
    here = base
    for i, part in enumerate(parts):
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return base.joinpath(*parts)
        except OSError as exc:
            raise error(f"cannot use {short(str(here))}: {exc.strerror or exc}", where=where,
                        fix=fix) from exc
        last = i == len(parts) - 1
        if stat.S_ISLNK(st.st_mode):
            raise error(f"{short(str(here))} is a symlink; zoo does not write through links (it "
                        f"could point outside '{base.name}')", where=where, fix=fix)
        if not last and not stat.S_ISDIR(st.st_mode):
            raise error(f"{short(str(here))} is not a folder", where=where, fix=fix)
        if last and folder and not stat.S_ISDIR(st.st_mode):
            raise error(f"{short(str(here))} is not a folder", where=where, fix=fix)
        if last and not folder and not stat.S_ISREG(st.st_mode):
            raise error(f"{short(str(here))} is not a regular file (a folder, a FIFO or a device)",
                        where=where, fix=fix)
    return here


# ---------------------------------------------------------------------- one file, atomically
STALE_AFTER_S = 3600


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # exists (another user's), or cannot tell: keep the file
    return True


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def remove_stale_temps(path: str | os.PathLike) -> list[Path]:
    """Remove ``.NAME.PID.*.tmp`` files beside ``path`` whose process is gone (and old files of the
    pre-PID naming); returns what was removed.  Never touches any other file."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    ours = re.compile(rf"^\.{re.escape(path.name)}\.(?:(\d+)\.)?[A-Za-z0-9_]+\.tmp$")
    removed = []
    for cand in path.parent.glob(f".{glob_escape(path.name)}.*.tmp"):
        m = ours.match(cand.name)
        if not m or not cand.is_file() or cand.is_symlink():
            continue
        if m.group(1) is not None:
            stale = not _alive(int(m.group(1)))
        else:
            try:
                stale = time.time() - cand.stat().st_mtime > STALE_AFTER_S
            except OSError:
                stale = False
        if stale:
            with contextlib.suppress(OSError):
                cand.unlink()
                removed.append(cand)
    return removed


def write_file(path: str | os.PathLike, fill: Callable[[str], Any], *, where: str | None = None,
               root: str | os.PathLike | None = None, error: type[ZooError] = ZooError) -> Path:
    """Write one file all or nothing: ``fill(tmp)`` writes a temporary file beside ``path``
    (``.NAME.PID.XXXXXXXX.tmp``), which is fsynced and renamed over ``path``; the folder is
    fsynced.  A symlink at ``path`` is refused (the rename would replace it, but a caller that
    names a link meant its target); ``root``: ``path`` must lie inside it with no symlink on the
    way (:func:`target`).  Disk errors are ``error`` (:func:`disk_error`), the old file intact."""
    path = Path(path)
    where = where or str(path)
    if root is not None:
        rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
        path = target(root, rel, where=where, error=error)
    else:
        target(path.parent, path.name, where=where, error=error)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        try:
            fill(tmp)
            os.chmod(tmp, 0o666 & ~_umask())
            _fsync_file(tmp)
            os.replace(tmp, path)
            fsync_dir(path.parent)
        except Exception as exc:
            if _is_io(exc):
                raise disk_error(exc, f"'{path.name}'", where=where, error=error) from exc
            raise
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


# ---------------------------------------------------------------------- the lock
@dataclass
class _Held:
    fd: int
    pid: int
    thread: int
    root: Path
    depth: int = 1
    created: tuple = ()  # folders this lock made (deepest first), removed again if left empty
    tx: "Transaction | None" = None


_HELD: dict[tuple[int, int], _Held] = {}
_REGISTRY = threading.Lock()


def _key(root: Path) -> tuple[int, int]:
    st = os.stat(root)
    return st.st_dev, st.st_ino


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").split()
    except OSError:
        text = []
    if text and text[0].isdigit():
        host = f" on {clip(text[1], 40)}" if len(text) > 1 and text[1] != socket.gethostname() else ""
        return f"process {text[0]}{host}"
    return "another process"


def deadline(wait: Any, where: str, error: type[ZooError] = ZooError) -> float | None:
    """``wait`` checked and made a ``time.monotonic()`` deadline (None: forever, 0: refuse at once)."""
    if wait is True:
        return None
    if wait is False or wait is None:
        return 0.0
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not wait >= 0:
        raise error(f"wait must be True, False or a number of seconds, got {short(wait)}",
                    where=where, fix="pass wait=True to wait for the other writer, or seconds")
    return time.monotonic() + float(wait)


def _busy(root: Path, who: str, where: str, error: type[ZooError]) -> ZooError:
    return error.of("transaction.busy", where=where, root=str(root), who=who, lock=f"{root.name}/{LOCK}")


_RECORD = 64  # bytes of the lock file's "PID HOST" line


def _acquire(root: Path, where: str, until: float | None, error: type[ZooError]) -> int:
    for _ in range(1000):
        try:
            fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                         | getattr(os, "O_CLOEXEC", 0), 0o644)
        except FileNotFoundError:  # the folder was removed under us (an empty one, by its creator)
            root.mkdir(parents=True, exist_ok=True)
            continue
        except OSError as exc:
            if exc.errno == _errno.ELOOP:
                raise error(f"{root / LOCK} is a symlink; zoo does not write through links",
                            where=where, fix="remove the link") from exc
            raise disk_error(exc, f"the lock {root.name}/{LOCK}", where=where, error=error) from exc
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = _holder(fd)
            os.close(fd)
            if until is not None and time.monotonic() >= until:
                raise _busy(root, who, where, error) from None
            time.sleep(POLL_S)
            continue
        try:  # the file we locked must still be the lock file (not one its creator just removed)
            same = os.fstat(fd).st_ino == os.lstat(root / LOCK).st_ino
        except OSError:
            same = False
        if not same:
            os.close(fd)
            continue
        try:  # a fixed-width record, no truncation: ext4 flushes a truncated file at close (7 ms)
            os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}"[:_RECORD - 1].ljust(_RECORD - 1)
                      .encode("ascii", "replace") + b"\n", 0)
        except OSError:
            pass  # the pid is for messages only
        return fd
    raise error(f"could not take the lock of '{root}'", where=where, fix="try again")


@contextlib.contextmanager
def lock(root: str | os.PathLike, *, where: str, wait: Any = False,
         error: type[ZooError] = ZooError) -> Iterator[Path]:
    """Hold ``root``'s exclusive lock (created, with ``root``, when missing); yields ``root``.
    Re-entrant in the thread that holds it.  Taking it finishes or clears what a killed writer
    left (:func:`recover`).  ``wait``: False refuses at once, True waits, a number waits that many
    seconds."""
    root = Path(root)
    until = deadline(wait, where, error)
    created, up = [], root.absolute()
    while not os.path.lexists(up) and up.parent != up:
        created.append(up)
        up = up.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
        key = _key(root)
    except OSError as exc:
        raise disk_error(exc, f"the folder '{root}'", where=where, error=error) from exc
    me = threading.get_ident()
    while True:
        with _REGISTRY:
            held = _HELD.get(key)
            if held is not None and held.pid != os.getpid():  # inherited through fork: not ours
                _HELD.pop(key)
                held = None
            if held is not None and held.thread == me:
                held.depth += 1
                break
            if held is None:
                held = _HELD[key] = _Held(fd=-1, pid=os.getpid(), thread=me, root=root,
                                          created=tuple(created))
                held.depth = 0  # taking it
                break
        if until is not None and time.monotonic() >= until:
            raise _busy(root, f"another thread of this process ({os.getpid()})", where, error)
        time.sleep(POLL_S)
    if held.depth == 0:
        try:
            held.fd = _acquire(root, where, until, error)
            recover(root)
        except BaseException:
            with _REGISTRY:
                _HELD.pop(key, None)
            if held.fd >= 0:
                os.close(held.fd)
            raise
        held.depth = 1
    try:
        yield root
    finally:
        with _REGISTRY:
            held.depth -= 1
            last = held.depth == 0
            if last:
                _HELD.pop(key, None)
        if last:
            # the lock file lives only while it is held: removed *before* the flock is released (a
            # writer that opened it meanwhile sees it gone and starts over, see _acquire), so a
            # finished or refused writer leaves the folder as it found it
            with contextlib.suppress(OSError):
                os.unlink(root / LOCK)
            for made in held.created:  # folders this lock made, still empty: remove them
                try:
                    os.rmdir(made)
                except OSError:
                    break
            os.close(held.fd)  # releases the flock


def holds(root: str | os.PathLike) -> bool:
    """Whether this thread holds ``root``'s lock."""
    try:
        key = _key(Path(root))
    except OSError:
        return False
    with _REGISTRY:
        held = _HELD.get(key)
        return held is not None and held.pid == os.getpid() and held.thread == threading.get_ident() \
            and held.depth > 0


# ---------------------------------------------------------------------- the manifest
def read_manifest(root: str | os.PathLike, *, where: str | None = None,
                  error: type[ZooError] = ZooError) -> dict | None:
    """The folder's manifest, every field checked, or None when it has none (an older folder)."""
    root = Path(root)
    path = root / MANIFEST
    where = where or str(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise error(f"cannot read {MANIFEST}: {exc.strerror or exc}", where=where,
                    fix="check the folder's permissions") from exc
    fix = messages.MESSAGES["manifest.fix"].fix.format(manifest=MANIFEST)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode) or st.st_size > MAX_MANIFEST_BYTES:
        raise error(f"{MANIFEST} is not a regular file of at most {MAX_MANIFEST_BYTES:,} bytes",
                    where=where, fix=fix)
    try:
        with open_read(path, where=where, root=root, kind="json", error=error) as fh:
            raw = fh.read(MAX_MANIFEST_BYTES + 1)
    except ZooError as exc:
        if isinstance(exc.__cause__, FileNotFoundError) or "no such file" in str(exc):
            return None  # replaced between lstat and open: the caller reads it again
        raise
    try:
        m = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise error(f"{MANIFEST} is not valid JSON: {clip(exc, 80)}", where=where, fix=fix) from exc
    ok = (isinstance(m, dict) and m.get("format") == FORMAT and isinstance(m.get("txid"), str)
          and len(m["txid"]) <= 128 and isinstance(m.get("files"), dict) and len(m["files"]) <= 10_000
          and all(isinstance(k, str) and isinstance(v, dict)
                  and isinstance(v.get("size"), int) and not isinstance(v.get("size"), bool)
                  and v["size"] >= 0 and isinstance(v.get("sha256"), str) and _HEX64.match(v["sha256"])
                  for k, v in m["files"].items())
          and (m.get("staged") is None or (isinstance(m["staged"], str) and _STAGE_RE.match(m["staged"]))))
    if not ok:
        raise error.of("manifest.malformed", where=where, fix="manifest.fix", manifest=MANIFEST, value=short(m))
    for name in m["files"]:  # names stay inside the folder, with no link on the way
        try:
            target(root, name, where=where, error=error)
        except ZooError as exc:
            raise error(f"{MANIFEST} names {short(name)}: {exc.what}", where=where, fix=fix) from exc
    return m


def _write_manifest(root: Path, m: dict) -> None:
    text = json.dumps(m, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{MANIFEST}.{os.getpid()}.", suffix=".tmp", dir=root)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fchmod(fh.fileno(), 0o666 & ~_umask())
            os.fsync(fh.fileno())
        _step("manifest-written")
        os.replace(tmp, root / MANIFEST)  # the commit point
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _move_staged(root: Path, stage: Path, names, step: str = "") -> None:
    for name in names:
        src = stage / name
        if not src.exists():
            continue  # moved already (a recovery after a kill in the middle)
        dst = root / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
        _step(f"{step}moved:{name}")
    fsync_dir(root)
    shutil.rmtree(stage, ignore_errors=True)
    _step(f"{step}tidied")


def recover(root: str | os.PathLike) -> list[str]:
    """Under the lock: finish a committed transaction a killed writer left (move the staged files
    the manifest names into place) and remove stage folders of uncommitted ones and stale temp
    files.  Returns what it did (for tests and ``zoo check``)."""
    root = Path(root)
    done = []
    try:
        m = read_manifest(root)
    except ZooError:
        m = None  # a damaged manifest: leave its stage folder alone
        staged = "?"
    else:
        staged = m.get("staged") if m else None
    for cand in root.glob(f"{STAGE_PREFIX}*"):
        if not _STAGE_RE.match(cand.name) or cand.is_symlink() or not cand.is_dir():
            continue
        if m is not None and cand.name == staged:
            _move_staged(root, cand, m["files"], step="recover:")
            done.append(f"finished {cand.name}")
        elif staged != "?":
            shutil.rmtree(cand, ignore_errors=True)
            done.append(f"removed {cand.name}")
    for cand in root.glob(f".{glob_escape(MANIFEST)}.*.tmp"):
        with contextlib.suppress(OSError):
            if not cand.is_symlink():
                cand.unlink()
    return done


# ---------------------------------------------------------------------- the transaction
class _Hash:
    """Size and sha256 of a staged file, computed in a thread (hashlib and file reads release the
    GIL, so it overlaps the fsync and the next file's serialisation)."""

    def __init__(self, path: Path):
        self.path, self.value, self.exc = path, None, None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            with open(self.path, "rb") as fh:
                self.value = {"size": os.fstat(fh.fileno()).st_size, "sha256": _sha256(fh)}
        except BaseException as exc:  # noqa: BLE001 - handed to result()
            self.exc = exc

    def result(self) -> dict:
        self.thread.join()
        if self.exc is not None:
            raise self.exc
        return self.value


@dataclass
class Transaction:
    """The files of one save, staged until :meth:`commit`.  Made by :func:`transaction`."""
    root: Path
    where: str
    error: type[ZooError]
    stage: Path | None = None
    files: dict[str, Path] = field(default_factory=dict)
    committed: bool = False  # past the commit point: the stage folder belongs to the manifest
    _hashes: dict[str, "_Hash"] = field(default_factory=dict)

    def write_file(self, name: str, fill: Callable[[str], Any]) -> Path:
        """Stage ``name`` (a relative path inside the folder): ``fill(tmp)`` writes it; it is
        fsynced now and takes its name at the commit.  Returns the name's final path."""
        final = target(self.root, name, where=self.where, error=self.error)
        remove_stale_temps(final)  # what a killed single-file writer of this name left
        if self.stage is None:
            self.stage = self.root / f"{STAGE_PREFIX}{os.getpid()}.{secrets.token_hex(8)}"
            self.stage.mkdir(mode=0o700)
        staged = self.stage / name
        staged.parent.mkdir(parents=True, exist_ok=True)
        try:
            fill(str(staged))
            os.chmod(staged, 0o666 & ~_umask())
            self._hashes[name] = _Hash(staged)  # the manifest's digest, while the disk syncs
            _fsync_file(staged)
        except Exception as exc:
            if _is_io(exc):
                raise disk_error(exc, f"'{name}'", where=self.where, error=self.error) from exc
            raise
        self.files[name] = staged
        _step(f"staged:{name}")
        return final

    def commit(self) -> dict | None:
        """Write the manifest (the commit point), then move the staged files into place."""
        if not self.files:
            return None
        try:
            fsync_dir(self.stage)
            try:
                old = read_manifest(self.root, error=self.error)
            except ZooError:  # a damaged manifest: this commit replaces it
                old = None
            entries = {name: self._hashes[name].result() for name in self.files}
            kept = {}
            for name, e in (old or {}).get("files", {}).items():  # earlier files still there, unchanged
                p = self.root / name
                if name not in entries and p.is_file() and not p.is_symlink() and p.stat().st_size == e["size"]:
                    kept[name] = e
            m = {"format": FORMAT, "txid": f"{time.time_ns():x}.{os.getpid()}.{secrets.token_hex(4)}",
                 "files": {**kept, **entries}, "staged": self.stage.name,
                 "written_by": {"pid": os.getpid(), "zoo": __version__},
                 "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            _write_manifest(self.root, m)
        except BaseException as exc:
            self.abort()
            if isinstance(exc, Exception) and _is_io(exc):
                raise disk_error(exc, MANIFEST, where=self.where, error=self.error) from exc
            raise
        # committed: from here on nothing is undone -- whatever stops us, readers see the new
        # version (the manifest names the stage folder) and the next writer finishes the move
        self.committed = True
        _step("committed")
        try:
            fsync_dir(self.root)
            _move_staged(self.root, self.stage, entries)
        except OSError as exc:
            raise self.error(f"the save was committed, but moving its files into place failed: "
                             f"{exc.strerror or exc}; zoo readers see the new version and the "
                             f"next save finishes the move", where=self.where,
                             fix="check the disk, then save again") from exc
        self.files.clear()
        self._hashes.clear()
        self.stage = None
        self.committed = False
        return m

    def abort(self) -> None:
        """Discard what was staged (never after the commit point)."""
        for h in self._hashes.values():
            h.thread.join()
        self._hashes.clear()
        if self.stage is not None and not self.committed:
            shutil.rmtree(self.stage, ignore_errors=True)
        self.files.clear()
        self.stage = None


@contextlib.contextmanager
def transaction(root: str | os.PathLike, *, where: str, wait: Any = False,
                error: type[ZooError] = ZooError) -> Iterator[Transaction]:
    """One commit of files into ``root`` under its lock (:func:`lock`): stage them with
    :meth:`Transaction.write_file`; they are committed together when the outermost ``with``
    block of this thread ends normally, and discarded on an exception.  A ``transaction`` opened
    inside another on the same folder joins it (the trainer's save puts ``zoo.save``'s files and
    its own state in one commit)."""
    with lock(root, where=where, wait=wait, error=error) as r:
        key = _key(r)
        with _REGISTRY:
            held = _HELD[key]
            outer = held.tx is None
            if outer:
                held.tx = Transaction(root=r, where=where, error=error)
            tx = held.tx
        try:
            yield tx
            if outer:
                tx.commit()
        except BaseException:
            if outer:
                tx.abort()
            raise
        finally:
            if outer:
                with _REGISTRY:
                    held.tx = None


def append(root: str | os.PathLike, name: str, text: str, *, where: str,
           error: type[ZooError] = ZooError) -> None:
    """Append ``text`` to the log ``root/name`` (``metrics.jsonl``) under the folder's lock
    (taken for the call when this thread does not hold it), never through a symlink.  A log is
    not part of the committed state: it may run ahead of the last commit."""
    with lock(root, where=where, error=error, wait=True):
        path = target(root, name, where=where, error=error)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                         | getattr(os, "O_CLOEXEC", 0), 0o666)
            try:
                data = text.encode("utf-8")
                while data:
                    data = data[os.write(fd, data):]
            finally:
                os.close(fd)
        except OSError as exc:
            if exc.errno == _errno.ELOOP:
                raise error(f"{short(str(path))} is a symlink; zoo does not write through links",
                            where=where, fix="remove the link") from exc
            raise disk_error(exc, f"'{name}'", where=where, error=error) from exc


# ---------------------------------------------------------------------- reading what is committed
@contextlib.contextmanager
def committed(root: str | os.PathLike, names, *, where: str | None = None,
              error: type[ZooError] = ZooError, strict: bool = False,
              kind: str = "checkpoint") -> Iterator[dict[str, Any]]:
    """Open ``names`` of ``root`` as of one commit; yields ``{name: binary file}`` (closed after).

    With a manifest: each file is opened from the stage folder the manifest names (committed, not
    yet moved) or under its name, and the manifest is read again -- if a writer committed in
    between, the files are closed and opened again.  A name the manifest does not list (a file
    from before the folder's first commit) is read as it is.  ``strict``: each file's size and sha256 must match the manifest (the whole file is
    hashed).  Without a manifest (an older folder): the files as they are."""
    root = Path(root)
    where = where or str(root)
    names = list(names)
    for _ in range(READ_RETRIES):
        m1 = read_manifest(root, where=where, error=error)
        files: dict[str, Any] = {}
        try:
            for name in names:
                files[name] = _open_one(root, name, m1, where, error, kind)
            m2 = read_manifest(root, where=where, error=error)
            if (m1 is None) == (m2 is None) and (m1 is None or m1["txid"] == m2["txid"]):
                if strict and m1 is not None:
                    for name, fh in files.items():
                        if name in m1["files"]:
                            _check_against(fh, name, m1, where, error)
                yield files
                return
        finally:
            for fh in files.values():
                fh.close()
        time.sleep(0.001)
    raise error(f"'{root}' kept changing while it was read ({READ_RETRIES} commits)", where=where,
                fix="read it again when the writer is done")


def _open_one(root: Path, name: str, m: dict | None, where: str, error: type[ZooError], kind: str):
    at = f"{where}: {name}" if where != str(root / name) else where
    if m is None:
        return open_read(root / name, where=at, root=root, kind=kind, error=error)
    if name not in m["files"]:  # never committed by a transaction: an older file, read as it is
        return open_read(root / name, where=at, root=root, kind=kind, error=error)
    if m.get("staged"):
        try:
            return open_read(root / m["staged"] / name, where=at, root=root, kind=kind, error=error)
        except ZooError as exc:
            if not isinstance(exc.__cause__, FileNotFoundError) and "no such file" not in str(exc):
                raise
    return open_read(root / name, where=at, root=root, kind=kind, error=error)


def _check_against(fh, name: str, m: dict, where: str, error: type[ZooError]) -> None:
    want = m["files"][name]
    size = os.fstat(fh.fileno()).st_size
    if size != want["size"] or _sha256(fh) != want["sha256"]:
        how = "its sha256 differs" if size == want["size"] else f"{want['size']:,} were committed"
        raise error(f"'{name}' is not the file that was committed ({size:,} bytes, {how}): it was "
                    f"changed or damaged after saving", where=f"{where}: {name}",
                    fix="get an intact copy, or re-save the folder")
