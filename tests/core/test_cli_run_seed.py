"""``zoo run``'s sampling seed and speed line (issue 34): ``--sample`` without ``--seed`` varies
from run to run and prints the seed that repeats it; every generation prints its tokens/s."""
from __future__ import annotations

import os
import re
import subprocess
import sys


def zoo_run(*args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "zoo.cli", "run", "poet_gpt", "--prompt", "床前明月光，",
                           "-n", "16", "--threads", "1", *args], capture_output=True, text=True,
                          env=env, timeout=300)


SEED = re.compile(r"note: sampled with seed (\d+); --seed \1 repeats this output")
SPEED = re.compile(r"^(\d+) tokens? in (\d+\.\d\d) s: (\d+\.\d) tokens/s"
                   r"(?:; it ended after (\d+) of (\d+) new tokens: the model wrote its end-of-text token "
                   r"\(or a stop rule matched\))?$", re.M)


def test_sampling_without_a_seed_varies_and_says_the_seed_that_repeats_it():
    runs = [zoo_run("--sample") for _ in range(3)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr
    seeds = [SEED.search(r.stderr).group(1) for r in runs]
    assert len(set(seeds)) == 3, seeds  # three draws of 2**31 seeds: a clash is a bug, not luck
    assert len({r.stdout for r in runs}) >= 2, [r.stdout for r in runs]  # not the identical poem
    again = zoo_run("--sample", "--seed", seeds[0])
    assert again.returncode == 0 and again.stdout == runs[0].stdout  # the printed seed repeats it
    assert SEED.search(again.stderr).group(1) == seeds[0]


def test_greedy_needs_no_seed_and_every_run_prints_its_speed():
    r = zoo_run()
    assert r.returncode == 0, r.stderr
    assert "seed" not in r.stderr
    m = SPEED.search(r.stderr)
    assert m, r.stderr
    n, seconds, rate = int(m.group(1)), float(m.group(2)), float(m.group(3))
    assert 1 <= n <= 16 and seconds > 0
    assert n / (seconds + 0.005) - 0.05 <= rate <= n / max(seconds - 0.005, 1e-9) + 0.05  # n / s, as printed
    assert r.stdout.startswith("床前明月光，")  # stdout holds the text only: the notes go to stderr


def test_a_run_that_ends_before_its_token_count_says_why():
    """The second newcomer walk of issue 34 asked for 24 tokens and got 6 with no word why: the
    poem's end-of-text token.  Seeds 2 and 5 end that early (torch 2.13, this checkpoint), 1 does not."""
    for seed, early in (("2", True), ("5", True), ("1", False)):
        r = zoo_run("--sample", "--seed", seed, "-n", "24")
        assert r.returncode == 0, r.stderr
        m = SPEED.search(r.stderr)
        assert m, r.stderr
        assert (m.group(4) is not None) == early, (seed, r.stderr)
        if early:
            assert int(m.group(4)) < int(m.group(5)) == 24, r.stderr
