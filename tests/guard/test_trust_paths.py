"""Issue 22, goal 1: one way to read a user's path, one way to write one (``zoo.guard.files``).

Reading (:func:`zoo.guard.files.open_read` and what is built on it): the path is checked by type and form,
confined to the folder the user named (symlinks leaving it refused for every file), ``stat``-ed
before it is opened (a FIFO, a device or a folder is refused at once -- nothing blocks), and bounded
in size per kind of file.  Writing (:func:`zoo.guard.files.write_target`, called by ``atomic_write``): the
target is checked before any work.  And a test walks the source of ``zoo/`` and ``plugins/``: a new
``open``/``read_text``/``safe_open``/``from_file``/``write_text`` that bypasses them fails it."""
from __future__ import annotations

import ast
import os
import threading
import time
from pathlib import Path

import pytest

import zoo
from zoo.errors import CheckpointError, ZooError
from zoo.guard.files import (open_read, read_bytes, read_text, regular_file, safetensors_open, user_path,
                       write_target)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tree(tmp_path):
    """A model folder with a regular file, a FIFO, a symlink out, a symlink loop; a secret outside."""
    d = tmp_path / "model"
    d.mkdir()
    (d / "ok.json").write_text("{}")
    (tmp_path / "secret.json").write_text('{"secret": 1}')
    os.mkfifo(d / "fifo.json")
    (d / "out.json").symlink_to(tmp_path / "secret.json")
    (d / "loop").symlink_to(d / "loop")
    (d / "sub").mkdir()
    return d


def _quick(fn):
    """Run fn in a thread; fail (and unblock) if it does not answer within 5 s."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc
    t = threading.Thread(target=run, daemon=True)
    t0 = time.perf_counter()
    t.start()
    t.join(5)
    assert not t.is_alive(), "blocked"
    box["seconds"] = time.perf_counter() - t0
    return box


@pytest.mark.parametrize("name, match", [
    ("fifo.json", "a FIFO"), ("sub", "a folder"), ("out.json", "outside the folder"),
    ("loop", "cannot resolve|loop|outside"), ("../secret.json", "outside"), ("missing.json", "no such file"),
])
def test_reading_inside_a_named_folder(tree, name, match):
    box = _quick(lambda: open_read(tree / name, root=tree, where="w"))
    assert isinstance(box.get("error"), ZooError), box
    assert box["error"].where == "w"
    import re

    assert re.search(match, str(box["error"])), str(box["error"])
    with open_read(tree / "ok.json", root=tree, where="w") as fh:
        assert fh.read() == b"{}"


@pytest.mark.parametrize("path, match", [
    ("/dev/zero", "character device"), ("/dev/urandom", "character device"),
    ("/dev/null", "character device"), ("/proc/self", "folder"), ("/", "folder"),
    ("a\x00b", "NUL"), ("n" * 300, "too long"), (b"bytes", "expected a path"), (None, "expected a path"),
    ("", "non-empty"), (5, "expected a path"),
])
def test_reading_odd_paths_is_refused_at_once(path, match):
    box = _quick(lambda: read_bytes(path, where="w"))
    assert isinstance(box.get("error"), ZooError) and match in str(box["error"]), box
    assert box["seconds"] < 1.0


def test_size_bounds_per_kind(tmp_path, monkeypatch):
    import zoo.guard.files as trust

    p = tmp_path / "big.json"
    p.write_bytes(b"x" * 2000)
    monkeypatch.setitem(trust.MAX_BYTES, "json", 1000)
    with pytest.raises(ZooError, match="more than the 1,000 a json file"):
        read_bytes(p, where="w")
    assert len(read_bytes(p, where="w", kind="tokenizer")) == 2000
    with pytest.raises(ZooError, match="larger than 1 KiB"):
        read_text(p, where="w", max_bytes=1024)


def test_a_fifo_swapped_in_after_the_check_is_caught_by_fstat(tree, monkeypatch):
    """The race: stat() sees a regular file, open() gets a FIFO.  The descriptor is opened
    non-blocking and fstat()-ed, so the swap is refused instead of blocking."""
    import zoo.guard.files as trust

    monkeypatch.setattr(trust, "regular_file", lambda path, **kw: Path(path))
    box = _quick(lambda: open_read(tree / "fifo.json", where="w"))
    assert isinstance(box.get("error"), ZooError) and "FIFO" in str(box["error"])


@pytest.mark.parametrize("target, folder, match", [
    ("/dev/null", False, "system file system"), ("/dev/null", True, "system file system"),
    ("/proc/self/x", True, "system file system"), ("a\x00b", True, "NUL"),
    ("n" * 300, True, "too long"), ("FILE", True, "not a folder"), ("FILE/x", False, "Not a directory|is a file"),
    ("DIR", False, "a folder"), ("LOOP/x", True, "loop|resolve|Too many"), ("FIFO", False, "FIFO"),
])
def test_write_targets_are_checked_before_any_work(tmp_path, target, folder, match):
    import re

    (tmp_path / "FILE").write_text("x")
    (tmp_path / "DIR").mkdir()
    (tmp_path / "LOOP").symlink_to(tmp_path / "LOOP")
    os.mkfifo(tmp_path / "FIFO")
    path = target if target.startswith("/") or "\x00" in target else tmp_path / target
    with pytest.raises(ZooError) as info:
        write_target(path, where="save.path", folder=folder)
    assert re.search(match, str(info.value)), str(info.value)
    assert info.value.where == "save.path" and info.value.fix
    assert write_target(tmp_path / "new" / "deeper", where="w", folder=True)  # created later: fine


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_unwritable_parent_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(ZooError, match="not writable"):
            write_target(ro / "x", where="w", folder=True)
    finally:
        ro.chmod(0o700)


@pytest.mark.parametrize("target", ["/dev/null", "/proc/self", "a\x00b", "n" * 300, "FILE", "FILE/x",
                                    "FIFO.safetensors", "LOOP.safetensors"])
def test_zoo_save_refuses_before_any_work_and_leaves_nothing(tmp_path, monkeypatch, target):
    model = zoo.build("gpt_tiny", num_layers=1, d_model=16, num_heads=2, vocab_size=50, seed=0)
    (tmp_path / "FILE").write_text("x")
    os.mkfifo(tmp_path / "FIFO.safetensors")
    (tmp_path / "LOOP.safetensors").symlink_to(tmp_path / "LOOP.safetensors")
    monkeypatch.chdir(tmp_path)
    import zoo.io.checkpoint as zio

    calls = []
    monkeypatch.setattr(zio, "dedupe", lambda sd: calls.append(1) or (sd, {}))  # "any work"
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(CheckpointError) as info:
        zoo.save(model, target)
    assert info.value.where == "save.path" and not calls
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_checkpoint_folder_whose_weights_link_out_is_refused(tmp_path):
    model = zoo.build("gpt_tiny", num_layers=1, d_model=16, num_heads=2, vocab_size=50, seed=0)
    good = zoo.save(model, tmp_path / "good")
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "model.safetensors").symlink_to(good)
    with pytest.raises(CheckpointError, match="outside"):
        zoo.load(tmp_path / "evil")
    assert zoo.load(tmp_path / "good") is not None  # the link's target itself is fine


def test_safetensors_open_refuses_a_fifo(tree):
    box = _quick(lambda: safetensors_open(tree / "fifo.json", where="w"))
    assert isinstance(box.get("error"), ZooError)


# ---------------------------------------------------------------------- nothing bypasses them
READ_CALLS = {"open", "safe_open", "load_file", "from_file", "read_text", "read_bytes"}
WRITE_CALLS = {"write_text", "write_bytes", "save_file", "savefig"}
#: Calls that read or write without zoo.guard.files, each with the reason it is allowed.
ALLOWED = {
    ("zoo/io/checkpoint.py", "atomic_write"): "fsyncs its own temporary file",
    ("zoo/io/checkpoint.py", "_umask"): "reads /proc/self/status, not a user's path",
    ("zoo/guard/run_budget.py", "machine_available"): "reads /proc/meminfo, not a user's path",
    ("zoo/guard/run_budget.py", "_status"): "reads /proc/self/status, not a user's path",
    ("zoo/guard/run_budget.py", "_cgroup_files"): "reads /proc/self/cgroup and mountinfo",
    ("zoo/guard/run_budget.py", "_read_int"): "reads a cgroup's memory limit under /sys/fs/cgroup",
    ("zoo/guard/sandbox.py", "_serve"): "the template worker reads its own /proc/self/status",
    ("zoo/guard/build_budget.py", "_meminfo"): "reads /proc/meminfo, not a user's path",
    ("zoo/commands/threads.py", "_cgroup_quota"): "reads the cgroup's CPU quota (cpu.max, cfs files)",
    ("zoo/train/data.py", "read_text"): "ground floor (below zoo.guard.files): stat-checked just before",
    ("zoo/train/data.py", "write_pairs"): "writes a data file the caller names (tests, scripts)",
    ("zoo/train/metrics.py", "add"): "appends to metrics.jsonl in the run folder, checked by train()",
    ("zoo/train/metrics.py", "read_metrics"): "reads the run's own metrics.jsonl",
    ("zoo/train/metrics.py", "plot_history"): "writes loss.png into the run folder train() checked",
    ("zoo/train/prepare.py", "data_fingerprint"): "hashes the data file train() checked",
    ("zoo/inside/plots.py", "*"): "matplotlib writes the figure to a path the caller checked",
    ("zoo/experiment/*", "*"): "the experiment's own run files (issue 21; to route: follow-up)",
    ("plugins/task_poems.py", "*"): "the shipped poems corpus inside the package",
    ("zoo/io/tokenizers.py", "*"): "no file access: the name read_text is not called here",
}


def _calls(path: Path):
    """(function name, call name, is a write, line) for every file call in ``path``, skipping calls
    made inside a lambda given to atomic_write / write_file (the one writer: a transaction's
    ``tx.write_file`` or ``zoo.guard.transaction.write_file``) and calls on ``trust.``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    from_trust = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                  and ((n.module or "").endswith(("trust", "guard.files")) or (n.module == "files" and n.level == 1)) for a in n.names}
    own = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}  # checked where defined
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if name not in READ_CALLS | WRITE_CALLS:
            continue
        if isinstance(f, ast.Name) and (name in from_trust or name in own):
            continue
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "trust":
            continue
        up, func, in_atomic = node, "<module>", False
        while up in parents:
            up = parents[up]
            if isinstance(up, ast.Lambda) and isinstance(parents.get(up), ast.Call):
                call = parents[up]
                cname = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
                in_atomic = in_atomic or cname in ("atomic_write", "write_file")
            if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef)) and func == "<module>":
                func = up.name
        if in_atomic:
            continue
        yield func, name, name in WRITE_CALLS, node.lineno


def _allowed(rel: str, func: str) -> bool:
    import fnmatch

    return any(fnmatch.fnmatch(rel, f) and (fn == "*" or fn == func) for f, fn in ALLOWED)


def test_every_file_access_in_zoo_goes_through_trust():
    bypass = []
    for path in sorted([*ROOT.glob("zoo/**/*.py"), *ROOT.glob("plugins/*.py")]):
        rel = str(path.relative_to(ROOT))
        if rel in ("zoo/guard/files.py", "zoo/guard/transaction.py"):  # the reader and the one writer
            continue
        for func, name, _, line in _calls(path):
            if not _allowed(rel, func):
                bypass.append(f"{rel}:{line} {func}() calls {name}")
    assert not bypass, ("file access outside zoo.guard.files (route it through trust.open_read / "
                        "read_bytes / safetensors_open / write_target, or add it to ALLOWED with "
                        "the reason):\n" + "\n".join(bypass))


def test_the_bypass_check_sees_a_new_bypass(tmp_path):
    """The check itself can fail: a module that opens a path directly is reported."""
    p = tmp_path / "mod.py"
    p.write_text("from pathlib import Path\n"
                 "def f(x):\n    return open(x).read() + Path(x).read_text()\n"
                 "def g(x):\n    atomic_write(x, lambda tmp: Path(tmp).write_text('a'))\n"
                 "def h(x):\n    from .trust import read_text\n    return read_text(x)\n")
    found = [(f, n) for f, n, _, _ in _calls(p)]
    assert sorted(found) == [("f", "open"), ("f", "read_text")]


def test_a_relative_file_under_a_relative_folder(tmp_path, monkeypatch):
    """``zoo.load("runs/gpt")``: the folder and the file are both relative (a bug fixed in
    d9eb674 looked for runs/gpt/runs/gpt/model.safetensors)."""
    monkeypatch.chdir(tmp_path)
    model = zoo.build("gpt_tiny", num_layers=1, d_model=16, num_heads=2, vocab_size=50, seed=0)
    zoo.save(model, "runs/gpt")
    assert regular_file("runs/gpt/model.safetensors", root="runs/gpt", where="w").name == \
        "model.safetensors"
    assert zoo.load("runs/gpt") is not None
    with pytest.raises(ZooError, match="outside"):
        regular_file("runs/other.json", root="runs/gpt", where="w")
