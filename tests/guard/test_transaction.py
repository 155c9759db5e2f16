"""Issue 35, goals 1-2: every folder zoo writes is a transaction (``zoo.guard.transaction``).

One lock per folder (a second writer refused naming the holder's pid, or waiting when asked), one
commit per save (``zoo-manifest.json`` written last; readers open what it names), a folder without
a manifest read as before, no write through a symlink or outside the named folder, a full disk
(``EFBIG`` under a real ``RLIMIT_FSIZE``) a ``CheckpointError`` with the old state intact.  The
crash-consistency and concurrent-writer tests (real SIGKILL) are in ``test_crash_consistency.py``.
"""
from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

import zoo
from zoo.errors import CheckpointError, TrainError, ZooError
from zoo.guard import transaction as txn
from zoo.io.checkpoint import SPEC_FILE, WEIGHTS

from helpers import in_child

ROOT = Path(__file__).resolve().parents[2]
TEXT = "春眠不觉晓，处处闻啼鸟。\n\n夜来风雨声，花落知多少。\n" * 4
SPEC = dict(name="t", arch="decoder", vocab_size=64, max_len=32, d_model=16, num_layers=1,
            num_heads=2, d_ff=32)


def tiny(seed: int = 0, **kw):
    return zoo.build("gpt_tiny", num_layers=1, d_model=16, num_heads=2, vocab_size=50, seed=seed, **kw)


def same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


# ---------------------------------------------------------------------- a child process: helpers.in_child
class Holder:
    """A forked child that holds ``folder``'s lock until :meth:`release`."""

    def __init__(self, folder: Path):
        self.released, self._once = False, threading.Lock()
        self.go_r, self.go_w = os.pipe()
        self.ready_r, self.ready_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - the child
            try:
                with txn.lock(folder, where="test"):
                    os.write(self.ready_w, b"held")
                    os.read(self.go_r, 1)
            finally:
                os._exit(0)
        assert select.select([self.ready_r], [], [], 30)[0], "the holder did not take the lock"
        assert os.read(self.ready_r, 4) == b"held"

    def release(self):
        """Let the child go and reap it; once only, from whichever thread asks first."""
        with self._once:
            if self.released:
                return
            self.released = True
        os.write(self.go_w, b"x")
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:  # already reaped
            pass
        for fd in (self.go_r, self.go_w, self.ready_r, self.ready_w):
            os.close(fd)


# ---------------------------------------------------------------------- one commit
def test_a_folder_save_is_one_commit_named_by_its_manifest(tmp_path):
    d = tmp_path / "ck"
    zoo.save(tiny(), d)
    m = json.loads((d / txn.MANIFEST).read_text())
    assert set(m["files"]) == {WEIGHTS, SPEC_FILE}
    for name, e in m["files"].items():
        data = (d / name).read_bytes()
        import hashlib
        assert e["size"] == len(data) and e["sha256"] == hashlib.sha256(data).hexdigest()
    # nothing else is left: no lock (it lives while held), no stage folder, no temp file
    assert sorted(p.name for p in d.iterdir()) == sorted([WEIGHTS, SPEC_FILE, txn.MANIFEST])
    assert same(zoo.load(d, verify=True), tiny())


def test_a_reader_sees_the_commit_not_the_files_half_moved(tmp_path, monkeypatch):
    """A writer stopped right after model.safetensors took its name (the issue's torn pair): the
    manifest names the new spec.yaml still in the stage folder, and readers read the new pair; the
    next writer finishes the move."""
    d = tmp_path / "ck"
    zoo.save(tiny(0, name="old_one"), d)

    class Crash(BaseException):
        pass

    def step(name):
        if name == f"moved:{WEIGHTS}":
            raise Crash
    monkeypatch.setattr(txn, "_STEP", step)
    with pytest.raises(Crash):
        zoo.save(tiny(1, name="new_one"), d)
    monkeypatch.setattr(txn, "_STEP", None)
    assert "old_one" in (d / SPEC_FILE).read_text()  # the file under its name is still the old one
    with txn.committed(d, [WEIGHTS, SPEC_FILE], strict=True) as f:
        weights_meta = zoo.io.checkpoint.read_header(d / WEIGHTS, fh=f[WEIGHTS])[1]
        spec_text = f[SPEC_FILE].read().decode()
    assert "new_one" in spec_text and spec_text == weights_meta["zoo.spec"]  # one version, the new
    assert zoo.load(d).spec.name == "new_one"
    assert zoo.load_spec(d).name == "new_one"
    zoo.save(tiny(2, name="third"), d)  # the next writer finishes the move first, then commits
    assert "third" in (d / SPEC_FILE).read_text() and zoo.load(d, verify=True).spec.name == "third"
    assert not list(d.glob(".zoo-stage.*"))


def test_a_writer_stopped_before_the_commit_leaves_the_old_version(tmp_path, monkeypatch):
    d = tmp_path / "ck"
    zoo.save(tiny(0), d)
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    for point in (f"staged:{WEIGHTS}", f"staged:{SPEC_FILE}", "manifest-written"):
        monkeypatch.setattr(txn, "_STEP", lambda name, point=point: (_ for _ in ()).throw(
            KeyboardInterrupt) if name == point else None)
        with pytest.raises(KeyboardInterrupt):
            zoo.save(tiny(1), d)
        assert {p.name: p.read_bytes() for p in d.iterdir()} == before, point  # stage removed too
    monkeypatch.setattr(txn, "_STEP", None)
    assert same(zoo.load(d, verify=True), tiny(0))


def test_a_folder_without_a_manifest_is_read_as_before_and_gains_one_at_its_next_save(tmp_path):
    """Checkpoints saved before manifests (the shipped ones) load; a save into one adopts it."""
    shipped = ROOT / "checkpoints" / "poet_gpt"
    assert not (shipped / txn.MANIFEST).exists()
    d = tmp_path / "legacy"
    shutil.copytree(shipped, d)
    a = zoo.load(shipped)
    b = zoo.load(d, verify=True)
    assert same(a, b)
    rows = zoo.io.loading.check(d, digest=False)
    assert "commit" not in [r[0] for r in rows]
    zoo.save(b, d)
    assert json.loads((d / txn.MANIFEST).read_text())["files"].keys() == {WEIGHTS, SPEC_FILE}
    assert (d / "README.md").exists() and (d / "loss.png").exists()  # other files untouched
    assert same(zoo.load(d, verify=True), a)


def test_verify_holds_the_file_against_the_commit(tmp_path):
    d = tmp_path / "ck"
    zoo.save(tiny(), d)
    with open(d / WEIGHTS, "ab") as fh:  # a byte appended after saving
        fh.write(b"\0")
    zoo.load(d)  # plain reading trusts the file's own checks
    with pytest.raises(CheckpointError, match="not the file that was committed"):
        zoo.load(d, verify=True)
    with pytest.raises(CheckpointError, match="not the file that was committed"):
        zoo.io.loading.check(d)


def test_a_damaged_manifest_is_a_checkpoint_error_and_a_save_replaces_it(tmp_path):
    d = tmp_path / "ck"
    zoo.save(tiny(), d)
    for bad in ("{nope", "[]", json.dumps({"format": txn.FORMAT, "txid": "x", "files": {"../x": {
            "size": 1, "sha256": "0" * 64}}}), json.dumps({"format": txn.FORMAT, "txid": "x",
                                                           "files": {}, "staged": "../../etc"})):
        (d / txn.MANIFEST).write_text(bad)
        with pytest.raises(CheckpointError, match=txn.MANIFEST):
            zoo.load(d)
    zoo.save(tiny(3), d)
    assert same(zoo.load(d, verify=True), tiny(3))


# ---------------------------------------------------------------------- one lock
@pytest.mark.forks
def test_a_second_writer_is_refused_naming_the_holder_and_waits_when_asked(tmp_path):
    d = tmp_path / "ck"
    zoo.save(tiny(0), d)
    holder = Holder(d)
    try:
        assert (d / txn.LOCK).read_text().split()[0] == str(holder.pid)
        with pytest.raises(CheckpointError, match=f"being written by process {holder.pid}") as info:
            zoo.save(tiny(1), d)
        assert info.value.where == "save.path" and "wait" in info.value.fix
        t0 = time.perf_counter()
        with pytest.raises(ZooError, match=f"process {holder.pid}"):
            with txn.lock(d, where="test"):  # refused at once: no waiting unless asked
                pass
        assert time.perf_counter() - t0 < 1
        with pytest.raises(CheckpointError, match=f"process {holder.pid}"):
            zoo.save(tiny(1), d, wait=0.3)  # waited 0.3 s, then refused
        timer = threading.Timer(0.5, holder.release)
        timer.start()
        t0 = time.perf_counter()
        zoo.save(tiny(1), d, wait=True)  # waits for the holder, then saves
        assert time.perf_counter() - t0 >= 0.4
        timer.join()
    finally:
        holder.release()
    assert same(zoo.load(d, verify=True), tiny(1))
    assert not (d / txn.LOCK).exists()
    with pytest.raises(CheckpointError, match="wait must be"):
        zoo.save(tiny(1), d, wait="yes")


def test_another_thread_of_the_process_is_refused_too(tmp_path):
    d = tmp_path / "ck"
    held, go = threading.Event(), threading.Event()

    def hold():
        with txn.lock(d, where="test"):
            held.set()
            go.wait(30)
    t = threading.Thread(target=hold)
    t.start()
    held.wait(30)
    try:
        with pytest.raises(CheckpointError, match="another thread of this process"):
            zoo.save(tiny(), d)
    finally:
        go.set()
        t.join()
    zoo.save(tiny(), d)


def test_the_same_thread_re_enters_and_a_nested_transaction_joins_the_outer_commit(tmp_path):
    d = tmp_path / "ck"
    with txn.transaction(d, where="test") as tx:
        zoo.save(tiny(), d)  # joins: nothing is committed yet
        assert not (d / txn.MANIFEST).exists() and not (d / WEIGHTS).exists()
        tx.write_file("extra.txt", lambda tmp: Path(tmp).write_text("x"))
    assert set(json.loads((d / txn.MANIFEST).read_text())["files"]) == {WEIGHTS, SPEC_FILE, "extra.txt"}


@pytest.mark.forks
def test_two_trainers_on_one_out_the_second_is_refused_naming_the_first(tmp_path):
    data = tmp_path / "d.txt"
    data.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "run"
    holder = Holder(out)  # a running trainer holds its folder the same way
    try:
        with pytest.raises(TrainError, match=f"being written by process {holder.pid}") as info:
            zoo.train.train(SPEC, data, out=out, steps=2, batch_size=4, block_size=8, progress=False,
                            holdout=0.2, fit_vocab=True)
        assert info.value.where == "train.out"
    finally:
        holder.release()
    assert not out.exists()  # the refused run wrote nothing (the holder's lock file left with it)


def test_a_refused_or_failed_run_leaves_no_folder_behind(tmp_path):
    with pytest.raises(ZooError):
        zoo.train.train(None, None, out=tmp_path / "a" / "b", resume=True, steps=2, progress=False)
    assert not (tmp_path / "a").exists()


# ---------------------------------------------------------------------- the one writer
@pytest.fixture
def outside(tmp_path):
    f = tmp_path / "outside.txt"
    f.write_text("precious")
    return f


@pytest.mark.parametrize("name", [WEIGHTS, SPEC_FILE])
def test_a_checkpoint_file_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path, outside, name):
    d = tmp_path / "ck"
    d.mkdir()
    (d / name).symlink_to(outside)
    with pytest.raises(CheckpointError, match="does not write through") as info:
        zoo.save(tiny(), d)
    assert info.value.where == "save.path"
    assert outside.read_text() == "precious" and not (d / txn.MANIFEST).exists()


@pytest.mark.parametrize("name", ["metrics.jsonl", "loss.png", "trainer_state.safetensors",
                                  "trainer_state.json", "best"])
def test_a_run_folder_entry_that_is_a_symlink_is_refused_before_training(tmp_path, outside, name):
    data = tmp_path / "d.txt"
    data.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "run"
    out.mkdir()
    (out / name).symlink_to(outside if name != "best" else tmp_path)
    with pytest.raises(ZooError, match="does not write through") as info:
        zoo.train.train(SPEC, data, out=out, steps=2, batch_size=4, block_size=8, progress=False,
                        holdout=0.2, fit_vocab=True, keep_best=True)
    assert info.value.where.startswith("train.")
    assert outside.read_text() == "precious"
    assert sorted(p.name for p in out.iterdir()) == [name]


def test_names_that_leave_the_folder_are_refused(tmp_path):
    d = tmp_path / "f"
    d.mkdir()
    (d / "sub").symlink_to(tmp_path)
    for name in ["../x", "/etc/passwd", "a/../../x", "", "sub/x", "a\x00b", "./x"]:
        with pytest.raises(ZooError):
            txn.target(d, name, where="t")
        with pytest.raises(ZooError):
            with txn.transaction(d, where="t") as tx:
                tx.write_file(name, lambda tmp: Path(tmp).write_text("x"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]
    with pytest.raises(ZooError, match="does not write through"):
        txn.append(d, "sub", "x", where="t")
    (d / "log").symlink_to(tmp_path / "f" / "nothing")
    with pytest.raises(ZooError, match="does not write through"):
        txn.append(d, "log", "x", where="t")
    assert not (d / "nothing").exists()


# ---------------------------------------------------------------------- a full disk
def _limited(fn, limit: int):
    """``fn()`` in a child whose files may not grow past ``limit`` bytes (a real RLIMIT_FSIZE: the
    kernel answers EFBIG, as a full disk answers ENOSPC)."""
    def child():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        return fn()
    return in_child(child)


@pytest.mark.forks
def test_a_full_disk_during_save_is_a_checkpoint_error_and_the_old_checkpoint_is_intact(tmp_path):
    d = tmp_path / "ck"
    zoo.save(tiny(0), d)
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    big = zoo.build("gpt_tiny", num_layers=2, d_model=64, num_heads=2, vocab_size=500, seed=1)
    for target in (d, tmp_path / "one.safetensors"):
        status, text = _limited(lambda: str(zoo.save(big, target)), 200_000)
        assert status == "error" and text.startswith("CheckpointError"), text
        assert "EFBIG" in text and "previous version is kept" in text
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before  # no stage folder, no temp file
    assert not (tmp_path / "one.safetensors").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
    assert same(zoo.load(d, verify=True), tiny(0))


@pytest.mark.forks
def test_a_full_disk_during_a_resumed_run_s_save_keeps_the_last_good_save(tmp_path):
    data = tmp_path / "d.txt"
    data.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "run"
    zoo.train.train(SPEC, data, out=out, steps=2, batch_size=4, block_size=8, progress=False,
                    holdout=0.2, fit_vocab=True, save_every=2, eval_every=100)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "metrics.jsonl"}
    limit = (out / "trainer_state.safetensors").stat().st_size // 2  # the logs fit, the state not
    status, text = _limited(lambda: zoo.train.train(None, None, out=out, resume=True, steps=4,
                                                    progress=False).step, limit)
    assert status == "error" and text.startswith("CheckpointError") and "EFBIG" in text, text
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != "metrics.jsonl"} == before
    assert zoo.train.read_state(out)[0]["step"] == 2
    assert zoo.train.train(None, None, out=out, resume=True, steps=4, progress=False).step == 4
