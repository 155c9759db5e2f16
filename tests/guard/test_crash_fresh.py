"""The crash-consistency tests (test_crash_consistency.py: savers and trainers killed with a real
SIGKILL at random instants, every reader checked) in a fresh interpreter, where forking is safe: no
thread of an earlier test can hold a lock across the fork.  A time limit turns a hang into a failure."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
def test_crash_consistency_in_a_fresh_interpreter(tmp_path):
    env = {**os.environ, "ZOO_CRASH_FRESH": "1"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--basetemp", str(tmp_path / "t"), str(HERE / "test_crash_consistency.py")],
                       capture_output=True, text=True, env=env, timeout=900, cwd=HERE.parents[1])
    tail = (r.stdout + r.stderr)[-3000:]
    assert r.returncode == 0, tail
    assert " passed" in r.stdout and "skipped" not in r.stdout.splitlines()[-1], tail
