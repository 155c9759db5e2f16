"""Issue 12 through the UI: an alias bomb and an oversized spec sent to a real, launched server's
``/validate`` endpoint get a prompt, clear refusal, and the server keeps answering.  (Before the
bounded loader, one 346-byte bomb kept the server busy for minutes at 1.8 GB.)"""
from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import pytest

gr = pytest.importorskip("gradio")
gradio_client = pytest.importorskip("gradio_client")

import zoo  # noqa: E402
from zoo.ui import build_tab, compare_tab  # noqa: E402

from hostile_corpus import _bomb  # noqa: E402
from ui_support import serve_with_checkpoints  # noqa: E402


def test_build_tab_handler_refuses_a_bomb_and_a_huge_spec_quickly():
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for text, words in ((_bomb(9), ("aliases",)),
                        (zoo.spec("gpt_tiny").to_yaml().replace("vocab_size: 512",
                                                                 "vocab_size: 1000000000"),
                         ("vocab_size",))):
        t0 = time.perf_counter()
        status, rows, diagram, ok = build_tab.analyse(text)
        assert time.perf_counter() - t0 < 1.0
        assert not ok and rows == [] and all(w in status for w in words)
        assert len(status) < 1000
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) * 1024 < 100 * 2**20


def test_compare_overrides_use_the_bounded_loader():
    with pytest.raises(zoo.SpecError, match="aliases"):
        compare_tab._overrides(_bomb(9), "left")
    with pytest.raises(zoo.SpecError, match="duplicate key"):
        compare_tab._overrides("attention: eager\nattention: sdpa\n", "left")


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with serve_with_checkpoints(tmp_path_factory) as url:
        yield gradio_client.Client(url, verbose=False)


def test_server_refuses_bomb_and_oversized_spec_promptly_and_stays_up(client):
    for text, word in ((_bomb(9), "aliases"),
                       (zoo.spec("gpt_tiny").to_yaml().replace("vocab_size: 512",
                                                               "vocab_size: 1000000000"),
                        "vocab_size"),
                       ("a: " + "[" * 100_000, "nested")):
        t0 = time.perf_counter()
        status = client.predict(text, api_name="/validate")[0]
        assert time.perf_counter() - t0 < 5.0  # a round trip through the queue, not a computation
        assert word in status and "Traceback" not in status and len(status) < 1000
    good = client.predict(zoo.spec("gpt_tiny").to_yaml(), api_name="/validate")[0]
    assert "✓" in good  # still answering, and still right
