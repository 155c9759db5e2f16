"""``--threads N`` on the commands that run tensor work (issue 36, goal 4): one shared option that is
checked (a positive whole number, at most the CPUs the process may use: its affinity mask, the
cgroup's quota) and applied before the command does anything, and a default that does not ask for
CPUs other work already keeps busy."""
from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest
import torch

import zoo.commands.threads as threads
from zoo.cli import main

#: command -> arguments that get past the command line and then fail at once with a user error
COMMANDS = {
    "run": ["no-such-model", "--prompt", "hi"],
    "chat": ["no-such-model"],
    "train": ["--out", "{tmp}/run"],              # no SPEC_OR_CHECKPOINT: a ZooError
    "bench": ["no-such-model"],
    "convert": ["{tmp}/empty.gguf", "{tmp}/out"],   # an empty file is not a GGUF file
    "ui": [],                                     # zoo.ui.app is replaced by a stand-in below
}


@pytest.fixture
def calls(monkeypatch, tmp_path):
    """The thread counts handed to torch.set_num_threads, and a stand-in UI that records its launch."""
    seen = []
    monkeypatch.setattr(torch, "set_num_threads", seen.append)
    ui = types.ModuleType("zoo.ui.app")
    ui.build_app = lambda lang: None
    ui.launch = lambda *a, **k: seen.append("launched")
    monkeypatch.setitem(sys.modules, "zoo.ui.app", ui)
    (tmp_path / "empty.gguf").write_bytes(b"")
    return seen


def _zoo(args, tmp_path, capsys):
    try:
        main([a.replace("{tmp}", str(tmp_path)) for a in args])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    _zoo.stdout = out.out
    return code, out.err.strip().splitlines()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_command_applies_the_thread_count_it_is_given(command, calls, tmp_path, capsys):
    code, _ = _zoo([command, "--threads", "1", *COMMANDS[command]], tmp_path, capsys)
    assert calls[:1] == [1]
    assert code == (0 if command == "ui" else 2)


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5", "", "far too many", "²"])
def test_a_thread_count_that_is_not_a_positive_whole_number_is_one_line(command, value, calls,
                                                                        tmp_path, capsys):
    code, lines = _zoo([command, "--threads", value, *COMMANDS[command]], tmp_path, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: --threads: expected a positive whole number") and "fix:" in lines[0]
    assert calls == []  # refused before anything ran


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_more_threads_than_the_process_may_use_is_one_line(command, calls, tmp_path, capsys):
    n, _ = threads.usable_cpus()
    code, lines = _zoo([command, "--threads", str(n + 1), *COMMANDS[command]], tmp_path, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert f"{n + 1} threads is more than" in lines[0] and f"from 1 to {n}" in lines[0]
    assert calls == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("load, want", [(0.0, "all"), (50.0, 1)])
def test_the_default_leaves_busy_cpus_alone(command, load, want, calls, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    _zoo([command, *COMMANDS[command]], tmp_path, capsys)
    assert calls[:1] == [threads.usable_cpus()[0] if want == "all" else want]


def test_the_cgroup_quota_lowers_the_cpus(monkeypatch, tmp_path, capsys, calls):
    quota = tmp_path / "cpu.max"
    monkeypatch.setattr(threads, "CGROUP_V2", quota)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    quota.write_text("max 100000\n")
    assert threads.usable_cpus()[0] == 4 and threads.default_threads() == 4
    quota.write_text("150000 100000\n")  # 1.5 CPUs: two threads, each often waiting
    assert threads.usable_cpus() == (2, "the cgroup's CPU quota of 1.5 CPUs (cpu.max)")
    quota.write_text("50000 100000\n")
    assert threads.usable_cpus()[0] == 1 and threads.default_threads() == 1
    code, lines = _zoo(["bench", "--threads", "2", "gpt_tiny"], tmp_path, capsys)
    assert code == 2 and "cgroup's CPU quota of 0.5 CPUs" in lines[0] and calls == []


def test_the_loaded_machine_gets_one_thread_a_quiet_one_all(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(threads, "_cgroup_quota", lambda: None)
    for load, want in ((0.2, 2), (0.9, 1), (1.4, 1), (7.0, 1)):
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        assert threads.default_threads() == want, load


def test_bench_reports_the_threads_it_ran_with(tmp_path, capsys):
    import json

    before = torch.get_num_threads()
    try:
        code, _ = _zoo(["bench", "gpt_tiny", "--threads", "1", "--task", "generate", "--new-tokens", "2",
                        "--prompt-len", "2", "-r", "1", "--warmup", "0", "--json"], tmp_path, capsys)
        assert code == 0
        assert json.loads(_zoo.stdout)["threads"] == 1 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_the_console_script_prints_one_line_and_exits_2():
    n, _ = threads.usable_cpus()
    r = subprocess.run([sys.executable, "-m", "zoo.cli", "run", "gpt_tiny", "--prompt", "x", "--threads",
                        str(n + 1)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
