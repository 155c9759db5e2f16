"""Issue 35, goal 4 (chat templates): a template renders in a box bounded in memory, time,
recursion and output (``zoo.guard.sandbox``), and whatever it does is a ``ChatError`` with where and
fix, in bounded time, without this process growing.

The issue's cases escaped as raw ``ZeroDivisionError`` / ``RuntimeError`` / ``SyntaxError`` /
``RecursionError``, printed a function's repr with its memory address, rendered prompts of 10^8-10^9
characters, or never finished.  That real templates still render exactly as transformers does is
tests/run/test_chat.py's job (five families, character for character).
"""
from __future__ import annotations

import json
import os
import re
import resource
import time

import pytest

from zoo.guard import sandbox
from zoo.run.chat import ChatError, compile_template, folder_template, render

import hostile_corpus as hc  # noqa: E402

MSGS = [{"role": "user", "content": "hello"}]
#: (template, what the refusal says): the corpus's table, so the hostile table counts the same cases
HOSTILE = hc.CHAT_TEMPLATES


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(sandbox, "SECONDS", 1.5)


@pytest.mark.parametrize("label", sorted(HOSTILE))
def test_a_hostile_template_is_a_chat_error_in_bounded_time_and_memory(quick, label):
    template, match = HOSTILE[label]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    with pytest.raises(ChatError) as info:
        render(template, MSGS)
    took = time.perf_counter() - t0
    assert re.search(match, str(info.value)), str(info.value)
    assert info.value.where == "chat_template" and info.value.fix
    assert not re.search(r"0x[0-9a-f]{6,}", str(info.value))  # no memory address leaks
    assert len(str(info.value)) < 800
    assert took < sandbox.SECONDS + 10  # the worker is killed at SECONDS; a restart costs < 1 s
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before  # KiB
    assert grown < 200 * 1024, f"this process grew {grown // 1024} MiB"


def test_after_a_template_is_stopped_the_next_one_renders(quick):
    with pytest.raises(ChatError, match="did not finish"):
        render(HOSTILE["nested range(99999) loops"][0], MSGS)
    assert render("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}", MSGS) == "<user>hello"


def test_what_may_be_printed_text_numbers_data_undefined():
    assert render("{{ messages }}|{{ 1.5 }}|{{ none }}|{{ nothing }}|{{ true }}|{{ {'a': [1, 'b']} }}",
                  MSGS) == "[{'role': 'user', 'content': 'hello'}]|1.5|None||True|{'a': [1, 'b']}"


def test_a_broken_template_is_refused_when_it_is_read_not_at_the_first_chat(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": hc.CHAT_TEMPLATES["25 nested loops"][0]}))
    with pytest.raises(ChatError, match="nests too deeply"):
        folder_template(tmp_path)
    with pytest.raises(ChatError, match="does not parse"):
        compile_template("{% for m in messages %}{{ m }")


def test_variables_must_be_plain_data():
    with pytest.raises(ChatError, match="plain data"):
        render("{{ x }}", MSGS, x=object())


@pytest.mark.forks
def test_a_forked_child_renders_with_its_own_worker():
    render("{{ 1 }}", MSGS)  # this process's worker exists
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            out = render("{{ messages[0]['content'] }}", MSGS)
        except BaseException as exc:  # noqa: BLE001
            out = f"{type(exc).__name__}: {exc}"
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 1000).decode() == "hello"
    os.close(r)
    assert render("{{ 2 }}", MSGS) == "2"  # the parent's worker was not disturbed


def test_the_box_costs_a_round_trip():
    render("{{ 1 }}", MSGS)
    t0 = time.perf_counter()
    for _ in range(50):
        render("{% for m in messages %}{{ m['content'] }}{% endfor %}", MSGS)
    assert (time.perf_counter() - t0) / 50 < 0.05
