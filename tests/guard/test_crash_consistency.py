"""Issue 35, goal 6 (part): savers and trainers killed with a real SIGKILL at random instants and at
every step of a commit, and writers running at the same time, while readers read.

Every read must see one whole version -- the one before the killed save or the one it was writing --
never a torn one: ``zoo.load(verify=True)`` passes, the weights match their own metadata's digest,
``spec.yaml`` is the spec inside the weights, and a run folder's checkpoint, trainer state and its
JSON copy are of one step.  The children are forked from the test process (a real process and a
real SIGKILL, without a second interpreter's start-up); loops are bounded in count and time and
touch only ``tmp_path``.
"""
from __future__ import annotations

import json
import os
import random
import select
import signal
import time
from pathlib import Path

import pytest

import zoo
from zoo.errors import TrainError, ZooError
from zoo.guard import transaction as txn
from zoo.io.checkpoint import SPEC_FILE, WEIGHTS, dedupe, read_header, tensor_digest
from zoo.train.state import STATE_FILE, STATE_JSON

# The children are forked, and fork is safe only in a process with no other threads: a thread that
# holds a lock when the fork happens (a Gradio server's, the chat sandbox's reader, a tokenizer's
# pool) leaves the child waiting for it forever -- seen in the full suite, where earlier tests leave
# such threads.  So these tests are marked ``forks``: they run only in a fresh interpreter, started
# by tests/guard/test_forks_fresh.py with a time limit.
pytestmark = pytest.mark.forks

TEXT = "春眠不觉晓，处处闻啼鸟。\n\n夜来风雨声，花落知多少。\n" * 4
SPEC = dict(name="t", arch="decoder", vocab_size=64, max_len=32, d_model=16, num_layers=1,
            num_heads=2, d_ff=32)
#: every step of a commit, in order; the first three are before the commit point
STEPS = [f"staged:{WEIGHTS}", f"staged:{SPEC_FILE}", "manifest-written", "committed",
         f"moved:{WEIGHTS}", f"moved:{SPEC_FILE}", "tidied"]


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """One short run in this process first: what a run imports and measures once (torch._dynamo
    for AdamW, matplotlib, the matmul peak) is then inherited by every forked trainer."""
    d = tmp_path_factory.mktemp("warm")
    (d / "d.txt").write_text(TEXT, encoding="utf-8")
    zoo.train.train(SPEC, d / "d.txt", out=d / "o", steps=1, batch_size=4, block_size=8,
                    progress=False, holdout=0.2, fit_vocab=True)


def model(k: int):
    return zoo.build("gpt_tiny", num_layers=1, d_model=16, num_heads=2, vocab_size=50,
                     seed=k, name=f"v{k}")


# ---------------------------------------------------------------------- readers
def read_version(d: Path) -> int:
    """The version a reader sees in checkpoint folder ``d``, every consistency check passed."""
    m = zoo.load(d, verify=True)  # digest, integrity, and the file against the commit
    k = int(m.spec.name[1:])
    plain = zoo.load(d)  # opened once: its weights are its metadata's
    tensors, _ = dedupe(plain.state_dict())
    assert tensor_digest(tensors) == plain.checkpoint_metadata["zoo.digest"], "torn weights"
    with txn.committed(d, [WEIGHTS, SPEC_FILE]) as f:  # the pair, as of one commit
        meta = read_header(d / WEIGHTS, fh=f[WEIGHTS])[1]
        assert f[SPEC_FILE].read().decode() == meta["zoo.spec"], "spec.yaml of another model"
    return k


def read_run(out: Path) -> int:
    """The step a reader sees in run folder ``out``: checkpoint, state and its copy agree."""
    with txn.committed(out, [WEIGHTS, SPEC_FILE, STATE_FILE, STATE_JSON]) as f:
        meta = read_header(out / WEIGHTS, fh=f[WEIGHTS])[1]
        state_meta = read_header(out / STATE_FILE, fh=f[STATE_FILE])[1]
        copy = json.loads(f[STATE_JSON].read())
        assert f[SPEC_FILE].read().decode() == meta["zoo.spec"]
    step = json.loads(meta["zoo.extra.train"])["step"]
    assert json.loads(state_meta["zoo.trainer"])["step"] == step == copy["step"], "torn run"
    return step


# ---------------------------------------------------------------------- a child that saves
class Saver:
    """A forked child saving versions ``first, first + 1, ...`` into ``d`` (waiting for the lock),
    reporting each committed version on a pipe; ``kill_at``: it SIGKILLs itself at that commit
    step of its first save."""

    def __init__(self, d: Path, first: int, *, kill_at: str | None = None, count: int = 10 ** 6):
        self.r, w = os.pipe()
        self.done: list[int] = []
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - the child
            os.close(self.r)
            try:
                if kill_at is not None:
                    txn._STEP = lambda name: os.kill(os.getpid(), signal.SIGKILL) if name == kill_at else None
                for k in range(first, first + count):
                    zoo.save(model(k), d, wait=True)
                    os.write(w, f"{k}\n".encode())
            finally:
                os._exit(0)
        os.close(w)

    def poll(self) -> None:
        while select.select([self.r], [], [], 0)[0]:
            block = os.read(self.r, 4096)
            if not block:
                break
            self.done += [int(x) for x in block.decode().split()]

    def kill(self) -> None:
        if self.r is not None:
            os.kill(self.pid, signal.SIGKILL)
            self.wait()

    def wait(self) -> None:
        if self.r is None:
            return
        os.waitpid(self.pid, 0)
        self.poll()
        os.close(self.r)
        self.r = None


def test_a_save_killed_at_every_step_of_its_commit_leaves_the_old_or_the_new_version(tmp_path):
    d = tmp_path / "ck"
    zoo.save(model(0), d)
    old = 0
    for i, step in enumerate(STEPS):
        new = old + 1
        s = Saver(d, new, kill_at=step, count=1)  # one save: a step never reached cannot hang
        s.wait()
        assert s.done == []  # it died inside its first save
        seen = read_version(d)
        want = old if STEPS.index(step) < STEPS.index("committed") else new
        assert seen == want, (step, seen)
        old = seen
    with txn.lock(d, where="test"):  # a killed holder's lock died with it (its file may stay)
        pass


@pytest.mark.slow
def test_savers_killed_at_random_instants_while_readers_read_see_no_torn_state(tmp_path):
    """Bounded: 40 kills or 25 s.  The issue's numbers: 11 of 544 verified loads failed and 1 of 296
    plain loads returned weights that did not match their own digest."""
    rng = random.Random(35)
    d = tmp_path / "ck"
    zoo.save(model(0), d)
    last, kills, reads, seen_new = 0, 0, 0, 0
    until = time.monotonic() + 25
    while kills < 40 and time.monotonic() < until:
        s = Saver(d, last + 1)
        try:
            stop = time.monotonic() + rng.uniform(0.0, 0.6)
            floor = last
            while time.monotonic() < stop:  # read while it saves
                s.poll()
                k = read_version(d)
                reads += 1
                assert k >= floor, "a reader went back to an older version"
                floor = k
        finally:
            s.kill()
        kills += 1
        k = read_version(d)
        reads += 1
        committed = s.done[-1] if s.done else last
        assert k in (committed, committed + 1), (k, committed)  # the old or the new, nothing else
        seen_new += k == committed + 1
        last = k
    print(f"\ncrash consistency (savers): {kills} kills, {reads} reads, 0 torn, "
          f"{seen_new} kills caught a save past its commit point, last version {last}")
    assert kills >= 10 and reads >= kills


def _trainer(out: Path, data: Path, steps: int, *, resume: bool = False):
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            zoo.train.train(None if resume else SPEC, None if resume else data, out=out,
                            resume=resume, steps=steps, batch_size=4, block_size=8, progress=False,
                            holdout=0.2, fit_vocab=not resume, save_every=1, eval_every=10 ** 6,
                            log_every=1)
        finally:
            os._exit(0)
    return pid


@pytest.mark.slow
def test_trainers_killed_at_random_instants_leave_one_step_s_files(tmp_path, warm):
    rng = random.Random(36)
    data = tmp_path / "d.txt"
    data.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "run"
    kills, reads, step = 0, 0, 0
    until = time.monotonic() + 25
    while kills < 8 and time.monotonic() < until:
        pid = _trainer(out, data, 10 ** 6, resume=step > 0)
        try:
            t_end = time.monotonic() + rng.uniform(0.3, 2.0)
            while time.monotonic() < t_end:
                if (out / txn.MANIFEST).exists():
                    s = read_run(out)
                    reads += 1
                    assert s >= step
                    step = s
                time.sleep(0.01)
        finally:  # a failed check must not leave a trainer running
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        kills += 1
        if (out / txn.MANIFEST).exists():
            s = read_run(out)
            reads += 1
            assert s >= step
            step = s
    print(f"\ncrash consistency (trainers): {kills} kills, {reads} reads, 0 torn, last step {step}")
    assert step > 0
    r = zoo.train.train(None, None, out=out, resume=True, steps=step + 1, progress=False)
    assert r.step == step + 1 and read_run(out) == step + 1
    steps = [x["step"] for x in zoo.train.read_metrics(out) if "loss" in x]
    assert steps == sorted(steps) and steps[-1] == step + 1  # the log of one run, not two


# ---------------------------------------------------------------------- writers at the same time
def test_two_writers_at_once_while_a_reader_reads(tmp_path):
    """Two processes saving into one folder (each waiting for the other), a reader looping
    ``zoo.load`` with and without ``verify``: every read is one whole version."""
    d = tmp_path / "ck"
    zoo.save(model(0), d)
    a, b = Saver(d, 1, count=6), Saver(d, 100, count=6)
    reads, until = 0, time.monotonic() + 40
    try:
        while time.monotonic() < until:
            read_version(d)
            reads += 1
            a.poll()
            b.poll()
            if len(a.done) == 6 and len(b.done) == 6:
                break
        a.wait()
        b.wait()
    finally:
        a.kill()
        b.kill()
    assert a.done == list(range(1, 7)) and b.done == list(range(100, 106))
    assert read_version(d) in (6, 105) and reads > 0
    print(f"\nconcurrent writers: 12 saves, {reads} reads, 0 torn")


def test_two_trainers_on_one_out_at_once_one_runs_and_the_other_is_refused(tmp_path, warm):
    data = tmp_path / "d.txt"
    data.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "run"
    first = _trainer(out, data, 10 ** 6)
    deadline = time.monotonic() + 60
    while not (out / txn.LOCK).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        with pytest.raises(TrainError, match=f"being written by process {first}"):
            zoo.train.train(SPEC, data, out=out, steps=3, batch_size=4, block_size=8,
                            progress=False, holdout=0.2, fit_vocab=True, overwrite=True)
    finally:
        os.kill(first, signal.SIGKILL)
        os.waitpid(first, 0)
    runs = [r for r in zoo.train.read_metrics(out) if r.get("event") == "start"]
    assert len(runs) <= 1  # the refused one wrote nothing into the log
