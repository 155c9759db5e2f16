"""An experiment folder is a transaction (issue 35.1/35.2): one writer at a time (a second run is
refused naming the holder's pid), reports written through the one writer that refuses symlinks."""
import subprocess
import sys
import time

import pytest

import zoo.experiment as ze
from zoo.experiment.spec import ExperimentError

EXP = {"name": "lockme", "base": {"preset": "gpt_tiny", "num_layers": 1, "d_model": 16, "num_heads": 2,
                                  "d_ff": 32, "max_len": 16},
       "variants": [{"name": "a", "set": {}}], "seeds": 1, "task": {"kind": "copy", "length": 4, "vocab": 6},
       "train": {"batch_size": 4, "eval_every": 1000, "save_every": 1000}, "budget": {"steps": 2}}

HOLD = """
import sys, time
from zoo.guard.transaction import lock
with lock(sys.argv[1], where="test"):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_second_run_on_one_folder_is_refused_naming_the_holder(tmp_path):
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with pytest.raises(ExperimentError) as e:
            ze.run(EXP, out=out, executor="inline", threads=1, report=False)
        assert str(p.pid) in str(e.value) and e.value.where == "experiment.out"
        assert time.monotonic() - t0 < 30
        assert not (out / "experiment.json").exists()  # nothing was written by the refused run
    finally:
        p.kill()
        p.wait()
    res = ze.run(EXP, out=out, executor="inline", threads=1, report=True)  # free again: it runs
    assert res.done and (out / "results.md").is_file() and not (out / ".zoo.lock").exists()
