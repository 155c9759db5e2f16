"""Every test marked ``forks`` (a saver killed with SIGKILL, a child under RLIMIT_FSIZE / RLIMIT_AS,
a lock held by another process, a forked sandbox) in a fresh interpreter, where forking is safe.

Fork copies one thread.  In the full suite earlier tests leave threads behind (a Gradio server's, a
reader thread, OpenMP's pool after a test used two intra-op threads); a lock one of them held at the
fork stays held in the child forever -- seen twice: the crash tests stalled at 44 %, and CI's run
of the RLIMIT tests had four children time out.  tests/conftest.py skips ``forks`` tests unless
``ZOO_FORK_FRESH=1``; this test sets it and runs them in one new process under a time limit, so a
hang is a failure and a forking test can never be skipped silently."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
def test_the_forking_tests_pass_in_a_fresh_interpreter(tmp_path):
    env = {**os.environ, "ZOO_FORK_FRESH": "1"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "forks",
                        "--basetemp", str(tmp_path / "t"), str(HERE)],
                       capture_output=True, text=True, env=env, timeout=1200, cwd=HERE.parents[1])
    tail = (r.stdout + r.stderr)[-3000:]
    assert r.returncode == 0, tail
    last = r.stdout.strip().splitlines()[-1]
    assert " passed" in last and "skipped" not in last and "failed" not in last, tail
    assert int(last.split(" passed")[0].split()[-1]) >= 12, tail  # every forking test ran (12 on 2026-12-01)
