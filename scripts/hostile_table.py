"""Run the hostile-input corpus (tests/hostile_corpus.py) and print the table of issues 12 and 22.

    python scripts/hostile_table.py            # the table, then the headline checks
    python scripts/hostile_table.py --details  # also every case that was not a ZooError
    python scripts/hostile_table.py --only="gguf,chat templates"  # some categories
    python scripts/hostile_table.py --only="API boundary"  # the API boundary fuzzer's calls

Each category runs in its own subprocess (so one category's peak memory does not hide another's)
with a per-case alarm of 20 s ("hang") and the growth of peak RSS watched ("memory over budget":
> 1 GiB).  "data lost": a good file changed by a call that failed; "silent": a hostile input
accepted that the corpus does not list as valid (``ACCEPTED``); "leak": a case that left more file
descriptors open than it found.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the row of the API boundary fuzzer (issue 35): "accepted" there is a valid result of a hostile
#: call; "silent" is not judged (a fuzzer has no oracle for a wrong answer) and "data lost" is not
#: watched (the calls write nowhere but a temporary folder)
API_ROW = "API boundary"
sys.path.insert(0, str(ROOT / "tests"))


def _open_fds() -> set:
    """This process's open file descriptors (a case that leaves more open than it found leaks) --
    less font files: matplotlib's font cache opens each font a figure first uses and keeps it open
    for the life of the process (bounded by the fonts installed), which read as a leak of the first
    report case that drew a figure."""
    try:
        found = {(fd, os.readlink(f"/proc/self/fd/{fd}")) for fd in os.listdir("/proc/self/fd")
                 if os.path.exists(f"/proc/self/fd/{fd}")}
        return {f for f in found if not f[1].lower().endswith((".ttf", ".ttc", ".otf"))}
    except OSError:
        return set()


def run_category(category: str) -> list[dict]:
    os.environ.setdefault("ZOO_DISABLE_PLUGIN_AUTOLOAD", "1")
    import torch

    torch.set_num_threads(1)
    import hostile_corpus as hc

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ctx = hc.Ctx(Path(tmp))
        ctx.checkpoint  # noqa: B018 - made before the cases, so its memory is not counted
        for case in hc.cases():
            if case.category != category:
                continue
            if category == "chat templates":  # the sandbox's worker (and its two pipes) is started
                from zoo.run.chat import render  # lazily, and again after a case killed it: not a leak

                render("{{ 1 }}", [{"role": "user", "content": "x"}])
            fds = _open_fds()
            kind, seconds, grew, detail = hc.outcome(case, ctx)
            import gc
            gc.collect()
            after = _open_fds()  # more descriptors than before (a replaced worker's new pipes are not)
            leaked = sorted(str(f[1]) for f in after - fds) if len(after) > len(fds) else []
            rows.append({"name": case.name, "kind": kind, "seconds": seconds, "grew": grew,
                         "detail": detail + (f" [left open: {', '.join(leaked)}]" if leaked else ""),
                         "leak": len(after) - len(fds) if leaked else 0})
    return rows


def run_api_boundary() -> list[dict]:
    """The API boundary fuzzer's calls (tests/guard/test_api_boundary.py: every public function of
    the inside view, the converters and the experiment API, and a model's own methods, with
    hostile arguments), classified: the table's "API boundary" row."""
    os.environ.setdefault("ZOO_DISABLE_PLUGIN_AUTOLOAD", "1")
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT / "tests" / "guard"))
    import test_api_boundary as api

    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        env = api.Env(Path(tmp))
        os.chdir(tmp)
        try:
            rows = api.tally(env)
        finally:
            os.chdir(cwd)
            (Path(tmp) / "ro").chmod(0o700)
    return rows


def headline() -> list[str]:
    """The issue's "done when" checks, each measured here."""
    os.environ.setdefault("ZOO_DISABLE_PLUGIN_AUTOLOAD", "1")
    import resource

    import hostile_corpus as hc

    import zoo

    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        ctx = hc.Ctx(Path(tmp))
        t0 = time.perf_counter()
        try:
            zoo.spec(hc._bomb(9))
            lines.append("9-level alias bomb: ACCEPTED")
        except zoo.ZooError as exc:
            lines.append(f"9-level alias bomb ({len(hc._bomb(9))} bytes): refused in "
                         f"{(time.perf_counter() - t0) * 1000:.1f} ms: {exc}")
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        try:
            zoo.build("gpt_tiny", vocab_size=10**9)
            lines.append("vocab_size=10**9: BUILT")
        except zoo.ZooError as exc:
            grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
            lines.append(f"zoo.build('gpt_tiny', vocab_size=10**9): refused in "
                         f"{time.perf_counter() - t0:.3f} s, peak RSS +{grew:.1f} MB: {exc}")
        case = next(c for c in hc.cases() if c.name == "index ../outside escape")
        kind, _, _, detail = hc.outcome(case, ctx)
        lines.append(f"escaping shard index: {kind}: {detail}")
        broken = hc.hf_gpt2(ctx)
        (broken / "config.json").write_text("{not json")
        proc = subprocess.run([sys.executable, "-m", "zoo.cli", "convert", str(broken),
                               str(Path(tmp) / "out")], capture_output=True, text=True,
                              env={**os.environ, "COLUMNS": "200"})
        err = proc.stderr.strip().splitlines()
        lines.append(f"zoo convert on a folder with a broken config.json: exit {proc.returncode}, "
                     f"{len(err)} line(s) on stderr: {err[0] if err else ''}".replace(tmp, "TMP"))
    return lines


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--category":
        rows = run_api_boundary() if sys.argv[2] == API_ROW else run_category(sys.argv[2])
        print(json.dumps(rows))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--headline":
        print("\n".join(headline()))
        return
    details = "--details" in sys.argv
    sys.path.insert(0, str(ROOT / "tests"))
    import hostile_corpus as hc

    only = next((a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--only=")), None)
    table, notes = [], []
    for cat in [c for c in (*hc.CATEGORIES, API_ROW) if only is None or c in only]:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "--category", cat], capture_output=True,
                              text=True)
        if proc.returncode:
            print(proc.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"category {cat} crashed")
        rows = json.loads(proc.stdout.strip().splitlines()[-1])
        count = lambda k: sum(r["kind"] == k for r in rows)  # noqa: E731
        runaway = sum(r["grew"] > hc.RUNAWAY_BYTES for r in rows)
        slowest = max(rows, key=lambda r: r["seconds"])
        table.append(f"| {cat} | {len(rows)} | {count('zoo_error')} | {count('accepted')} | "
                     f"{count('raw')} | {count('hang')} | {runaway} | "
                     f"{sum(r.get('leak', 0) > 0 for r in rows)} | {count('data_lost')} | "
                     f"{count('silent')} | {slowest['seconds']:.2f} s ({slowest['name']}) | "
                     f"{time.perf_counter() - t0:.0f} s |")
        notes += [f"  {cat} / {r['name']}: {r['kind']} {r['detail']}" for r in rows
                  if r["kind"] in ("raw", "hang", "data_lost", "silent")
                  or r["grew"] > hc.RUNAWAY_BYTES or r.get("leak", 0) > 0
                  or (details and r["kind"] == "accepted")]
    print("| category | cases | ZooError | accepted (valid) | other exception | hang | memory over "
          "budget | leak (fds) | data lost | silent | slowest case | wall |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(table))
    if notes:
        print("\n".join(["", *notes]))
    proc = subprocess.run([sys.executable, __file__, "--headline"], capture_output=True, text=True)
    print("\n" + (proc.stdout or proc.stderr[-2000:]))


if __name__ == "__main__":
    main()
