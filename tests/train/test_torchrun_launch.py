"""Ctrl-C under torchrun (issue 34): the workers save, and ``python -m zoo.train.torchrun`` (torchrun
with the same arguments) ends with one line and exit status 130 instead of torchrun's own
``SignalException`` traceback.  The Ctrl-C is a SIGINT to the whole process group, as a terminal
sends it (launcher and workers alike)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_ctrl_c_under_the_launcher_saves_and_says_one_line(tmp_path):
    out = tmp_path / "ddp"
    # OMP_NUM_THREADS unset, as in a newcomer's shell: the launcher sets it (torchrun's own warning
    # about setting it came first in the terminal, issue 34)
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "OMP_NUM_THREADS")}
    env.update(PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p))
    proc = subprocess.Popen(
        [sys.executable, "-m", "zoo.train.torchrun", "--standalone", "--nproc_per_node=2", "-m", "zoo.cli",
         "train", "gpt_tiny", "--data", str(ROOT / "data" / "poems.txt"), "--steps", "2000", "--out", str(out),
         "--fit-vocab", "--no-progress", "--threads", "1", "--log-every", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
        start_new_session=True)
    seen, deadline = [], time.time() + 400
    while time.time() < deadline:
        line = proc.stderr.readline()
        seen.append(line)
        if line.startswith("estimate:"):  # rank 0 has trained its first steps
            break
        if not line and proc.poll() is not None:
            break
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    stdout, stderr = proc.communicate(timeout=300)
    stderr = "".join(seen) + stderr
    assert proc.returncode == 130, (proc.returncode, stderr[-3000:])
    assert "Traceback" not in stderr and "SignalException" not in stderr, stderr[-3000:]
    assert "zoo.train.torchrun: stopped by SIGINT: the workers saved the checkpoint" in stderr
    assert "Setting OMP_NUM_THREADS" not in stderr, stderr[:1500]
    assert stdout.startswith("interrupted at step "), stdout
    assert (out / "model.safetensors").is_file() and (out / "trainer_state.json").is_file()
