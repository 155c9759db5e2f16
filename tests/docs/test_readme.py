"""Every code block of README.md and README.zh.md runs as pasted (issue 23), and the README's numbers
come from one source.

What "runs" means here:

- A ```` ```python ```` block runs in a fresh interpreter (nothing carried over from an earlier
  block but the files it wrote), in document order, in a scratch folder that holds links to the
  repository's ``data/`` and ``plugins/`` -- a newcomer pastes the blocks at the root of the clone
  (README: "from the root of the clone"), in order.  It must exit 0.
- A ```` ```yaml ```` block is a spec: ``zoo.spec`` must accept it.
- Each line of an indented (shell) block is run with ``bash`` in the same folder and must exit 0,
  except the lines below, chosen one by one (a new README line that fits none of them simply runs):

  * :data:`SHORTENED`: long runs, run with a tiny step count (``zoo train ... --steps 2000`` runs 3
    steps; the README gives the real duration, and ``zoo train`` prints its own estimate);
  * :data:`CHECKED_ONLY`: lines that install into the environment, start the UI server or run this
    very suite: not run as written; what they name is checked instead (the extras exist in
    pyproject.toml, ``zoo ui --help`` runs), and the template plugin is installed with
    ``pip --target`` into the scratch folder, which later blocks see (``zoo verify`` runs on it).

Blocks of README.zh.md whose code (comments aside) equals a block of README.md already run are not
run twice.
"""
from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
READMES = ("README.md", "README.zh.md")

#: ``(pattern, replacement)``: long commands run shortened (the first match applies).
SHORTENED = [
    (re.compile(r"^(zoo train .*?)--steps \d+(.*)$"), r"\1--steps 3\2 --no-progress"),
    (re.compile(r"^(zoo train --resume .*?)(\s+#.*)?$"), r"\1 --steps 5 --no-progress"),
    (re.compile(r"^((?:torchrun|python -m zoo\.train\.torchrun) .*?)--steps \d+(.*)$"), r"\1--steps 2\2 --no-progress"),
]
#: Lines not run, and how each is checked instead (``ln`` is the line, comment stripped).
CHECKED_ONLY = {
    "pip install torch --index-url https://download.pytorch.org/whl/cpu --timeout 10 --retries 1": "torch",
    'pip install -e ".[ui]" && zoo ui': "extras+ui",
    'pip install -e ".[convert]"': "extras+convert",
    'python3 -m pip install -q -e ".[ui,test]" -e ./plugins/zoo-linear-attention && python3 -m pytest -q': "extras",
    # installed into the scratch folder (pip --target), not into the suite's environment
    "pip install ./plugins/zoo-linear-attention": "local package",
}


# ---------------------------------------------------------------------- reading the blocks
def blocks(text: str) -> list[tuple[str, str]]:
    """``(kind, code)`` in document order: kind ``python`` / ``yaml`` / ``shell`` (indented)."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if m:
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            out.append((m.group(1) or "text", "\n".join(lines[i + 1:j]) + "\n"))
            i = j + 1
            continue
        if lines[i].startswith("    ") and lines[i].strip() and (i == 0 or not lines[i - 1].strip()):
            j = i
            while j < len(lines) and lines[j].startswith("    "):
                j += 1
            out.append(("shell", "\n".join(ln[4:] for ln in lines[i:j]) + "\n"))
            i = j
            continue
        i += 1
    return out


def _bare(code: str) -> str:
    """The code without comments and spacing (to find a README.zh.md block equal to an English one)."""
    return "\n".join(re.sub(r"\s+#.*$|^#.*$", "", ln).strip() for ln in code.splitlines()
                     if re.sub(r"\s+#.*$|^#.*$", "", ln).strip())


def _shell_line(line: str) -> str:
    return re.sub(r"\s+#[^\"']*$", "", line).strip()


def _shortened(line: str) -> str | None:
    for pattern, repl in SHORTENED:
        if pattern.match(line):
            return pattern.sub(repl, line)
    return None


# ---------------------------------------------------------------------- running them
def _env(extra_path: str = "") -> dict:
    """A newcomer's shell: plugins load as usual (the suite's conftest turns autoloading off)."""
    env = {k: v for k, v in os.environ.items() if k not in ("ZOO_DISABLE_PLUGIN_AUTOLOAD", "ZOO_PLUGINS")}
    path = os.pathsep.join(p for p in (extra_path, str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env.update(GRADIO_ANALYTICS_ENABLED="False", OMP_NUM_THREADS="1", PYTHONPATH=path)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def _check_only(how: str, line: str, work: Path) -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for named in re.findall(r'"\.\[([\w,]+)\]"', line):
        assert set(named.split(",")) <= set(extras), (line, sorted(extras))
    for folder in re.findall(r"-e (\./plugins/[\w-]+)", line):  # a local plugin package it installs
        assert (ROOT / folder / "pyproject.toml").is_file(), folder
    if how == "extras+convert":  # the conversion block's import: what the extra installs
        import importlib.util
        for extra in extras["convert"]:
            dist = re.match(r"[\w-]+", extra).group(0)
            assert importlib.util.find_spec(dist.replace("-", "_")) is not None, extra
        assert any(e.startswith("transformers") for e in extras["convert"]), extras["convert"]
    if how == "torch":
        import torch  # noqa: F401 - the step installs torch; the suite runs on it
    if how == "extras+ui":
        r = subprocess.run([sys.executable, "-m", "zoo.cli", "ui", "--help"], capture_output=True,
                           text=True, env=_env(), timeout=120)
        assert r.returncode == 0, r.stderr
    if how == "local package":
        folder = work / line.split()[-1]  # from the root, as the README says (a link to the clone's)
        assert (folder / "pyproject.toml").is_file(), folder
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                            "--no-build-isolation", "--target", str(work / "site"), str(folder)],
                           capture_output=True, text=True, env=_env(), timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]


def run_readme(name: str, work: Path, skip: set[str] = frozenset()) -> list[str]:
    """Run README ``name``'s blocks in ``work``; returns what was run (for the report on failure)."""
    for folder in ("data", "plugins"):  # what the blocks read from the clone's root
        (work / folder).symlink_to(ROOT / folder, target_is_directory=True)
    done = []
    for kind, code in blocks((ROOT / name).read_text(encoding="utf-8")):
        if _bare(code) in skip:
            continue
        if kind == "python":
            r = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True,
                               env=_env(str(work / "site")), timeout=600)
            assert r.returncode == 0, f"{name}: this block fails as pasted:\n{code}\n{r.stderr[-3000:]}"
            assert MOVED_WARNING not in r.stderr, f"{name}: this block uses a moved name:\n{code}\n{r.stderr[-3000:]}"
            done.append(code.splitlines()[0])
        elif kind == "yaml":
            import zoo
            zoo.spec(_yaml(code))
            done.append("yaml spec")
        elif kind == "shell":
            for raw in code.splitlines():
                line = _shell_line(raw)
                if line in CHECKED_ONLY:
                    _check_only(CHECKED_ONLY[line], line, work)
                    done.append("checked: " + line)
                    continue
                cmd = _shortened(line) or line
                r = subprocess.run(["bash", "-c", cmd], cwd=work, capture_output=True, text=True,
                                   env=_env(str(work / "site")), timeout=600)
                assert r.returncode == 0, f"{name}: `{cmd}` fails:\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}"
                done.append(cmd)
    return done


def _yaml(code: str) -> dict:
    import yaml
    return yaml.safe_load(code)


def test_every_readme_block_runs_as_pasted(tmp_path):
    en = blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert sum(k == "python" for k, _ in en) >= 4 and sum(k == "shell" for k, _ in en) >= 5
    run_readme("README.md", tmp_path / "en")
    skip = {_bare(c) for _, c in en}
    run_readme("README.zh.md", tmp_path / "zh", skip)


@pytest.fixture(autouse=True)
def _folders(tmp_path):
    (tmp_path / "en").mkdir()
    (tmp_path / "zh").mkdir()


#: the words of zoo's DeprecationWarning for a name that moved (zoo/deprecation.py: ``warn``)
MOVED_WARNING = " is deprecated: use "


def zoo_imports(name: str) -> list[str]:
    """Every ``import zoo...`` / ``from zoo... import ...`` statement of README ``name``'s python
    blocks, as source."""
    out = []
    for kind, code in blocks((ROOT / name).read_text(encoding="utf-8")):
        if kind != "python":
            continue
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "zoo" for a in node.names):
                out.append(ast.unparse(node))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "zoo":
                out.append(ast.unparse(node))
    return out


@pytest.mark.parametrize("name", READMES)
def test_readme_imports_no_moved_name(name):
    """The README shows only the new names (zoo/deprecation.py): each of its imports of zoo runs
    without zoo's DeprecationWarning.  The newcomer walk of issue 34 found `from zoo import
    accounting, plots` printing two of them on the first paste; the block still exited 0, so the
    runs of the blocks alone did not catch it."""
    stmts = sorted(set(zoo_imports(name)))
    assert any(s.startswith("from zoo") for s in stmts), (name, stmts)  # the reader finds them
    prog = ("import warnings\n"
            f"warnings.filterwarnings('error', message='.*{MOVED_WARNING}', category=DeprecationWarning)\n"
            f"for stmt in {stmts!r}:\n"
            "    try:\n"
            "        exec(stmt, {})\n"
            "    except DeprecationWarning as err:\n"
            "        print(f'{stmt}  ->  {err}')\n")
    r = subprocess.run([sys.executable, "-c", prog], cwd=ROOT, capture_output=True, text=True,
                       env=_env(), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not r.stdout.strip(), f"{name} imports names that moved (show the new ones):\n{r.stdout}"


#: how each README states the fast lane's size ("about 2,750 tests")
FAST_LANE_SIZE = {"README.md": r"about ([\d,]+) tests in", "README.zh.md": r"约 ([\d,]+) 个测试"}


def test_readme_says_how_many_tests_the_fast_lane_runs():
    """The README's "about N tests" for ``--lane fast`` is within 10% of what the lane collects.  The
    newcomer walk of issue 34 ran the lane (2,725 passed, 29 skipped, 3 min 51 s at load average 14)
    while the README still said about 2,400."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--lane", "fast",
                        "--collect-only"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    m = re.search(r"^(\d+)(?:/\d+)? tests? collected", r.stdout, re.M)
    assert r.returncode == 0 and m, r.stdout[-2000:] + r.stderr[-2000:]
    collected = int(m.group(1))
    for name, pattern in FAST_LANE_SIZE.items():
        said = re.findall(pattern, (ROOT / name).read_text(encoding="utf-8"))
        assert len(said) == 1, (name, said)
        stated = int(said[0].replace(",", ""))
        assert abs(stated - collected) <= 0.1 * collected, (
            f"{name} says the fast lane runs about {stated:,} tests; it collects {collected:,}")


def test_the_block_reader_finds_fenced_and_indented_blocks():
    text = "a\n\n    zoo run x  # note\n    zoo plugins\n\n```python\nprint(1)\n```\n- item\n    cont\n"
    got = blocks(text)
    assert got[0] == ("shell", "zoo run x  # note\nzoo plugins\n") and got[1] == ("python", "print(1)\n")
    assert len(got) == 2  # a list item's continuation line is not a block
    assert _shell_line("zoo run x  # note") == "zoo run x"
    assert _shortened("zoo train gpt_tiny --steps 2000 --out r") == "zoo train gpt_tiny --steps 3 --out r --no-progress"


# ---------------------------------------------------------------------- one source for numbers
def _perf_table_value(label: str, column: int, shape: str, after: str | None = None) -> str:
    """Cell ``column`` of the first PERFORMANCE.md table row labelled ``label`` whose cell matches
    the regex ``shape`` (several tables have an ``int8`` row), past the heading ``after`` if given."""
    perf = (ROOT / "docs" / "PERFORMANCE.md").read_text(encoding="utf-8")
    if after is not None:
        perf = perf[perf.index(after):]
    cells = [ln.split("|")[column + 1].strip() for ln in perf.splitlines()
             if ln.startswith(f"| {label} |") and len(ln.split("|")) > column + 2]
    return next(c for c in cells if re.fullmatch(shape, c))


#: the heading of the real-model quantisation table (issue 36) in docs/PERFORMANCE.md
REAL = "## Quantisation that keeps a real model's answers"


def test_readme_numbers_are_performance_md_numbers():
    """The int8 sentence (both languages) quotes docs/PERFORMANCE.md's tables, and no other
    figure: the real model's top-1 agreement and ΔNLL for int8, the old dynamic int8 and int4,
    their speed against the old int8, and the decode overhead of the tiny GPT and GPT-2 small."""
    pct = {k: _perf_table_value(k, 1, r"\d+\.\d%", REAL).rstrip("%")
           for k in ("int8", "int8 dynamic (zoo 0.x)", "int4")}  # "96.0%"
    dnll = _perf_table_value("int8", 2, r"[+−-]\d\.\d{4}", REAL).replace("−", "-")  # "+0.0097"
    speed = {k: _perf_table_value(k, 1, r"\d+\.\d+x", REAL).rstrip("x") for k in ("int8", "int4")}
    tiny = _perf_table_value("tiny (4L d256 h4 V8192)", 3, r"\d\.\d{3}")  # decoding: "1.013"
    gpt2 = _perf_table_value("GPT-2 small (12L d768 h12)", 3, r"\d\.\d{3}")  # "0.887"
    for name in READMES:
        text = (ROOT / name).read_text(encoding="utf-8").replace("\n", " ")
        sentence = next(s for s in re.split(r"(?<=[.。])\s", text) if "quantize_int8(model)" in s)
        figures = set(re.findall(r"(\d+\.\d+)\s*(?:x|倍)", sentence))
        assert set(speed.values()) <= figures <= {*speed.values(), tiny, gpt2}, (name, figures, sentence)
        assert set(re.findall(r"(\d+\.\d)%", sentence)) == set(pct.values()), (name, sentence)
        assert re.findall(r"[+−-]\d\.\d{4}", sentence) == [dnll], (name, sentence)
        ratio = next(s for s in re.split(r"(?<=[.。；])\s", text) if "GPT-2 small" in s and tiny in s)
        assert gpt2 in ratio, (name, ratio)
    perf = (ROOT / "docs" / "PERFORMANCE.md").read_text(encoding="utf-8")
    int8 = _perf_table_value("int8", 2, r"\d+\.\d+x")  # GPT-2 small's precision table: "2.15x"
    assert f"decode at **{int8}** float32" in perf.replace("\n", " ")  # the prose says the table's


def test_readme_q4_speed_is_performance_md_speed():
    """The q4 sentence (both languages) quotes the fused step's paired ratios against llama.cpp at
    one and two threads from docs/PERFORMANCE.md's side-by-side table, and no other ratio."""
    after = "### Where it stands: the fused q4 step"
    one = _perf_table_value("**zoo q4 (fused step)**", 2, r"\*\*\d\.\d\d\*\*", after).strip("*")
    two = _perf_table_value("**zoo q4 (fused step)**", 4, r"\*\*\d\.\d\d\*\*", after).strip("*")
    perf = (ROOT / "docs" / "PERFORMANCE.md").read_text(encoding="utf-8")
    assert f"fused q4 step at {one}x llama.cpp (one thread) and {two}x (two)" in perf
    for name in READMES:
        text = (ROOT / name).read_text(encoding="utf-8").replace("\n", " ")
        sentence = next(s for s in re.split(r"(?<=[.。])\s", text) if "quantize_q4(model)" in s)
        figures = re.findall(r"(\d+\.\d+)\s*(?:x|倍)", sentence)
        assert figures == [one, two], (name, figures, sentence)


# ---------------------------------------------------------------------- zoo.run.precision, import zoo
def test_precision_is_reachable_after_import_zoo_and_import_stays_light():
    code = ("import sys, zoo\n"
            "assert 'zoo.run.precision' not in sys.modules\n"
            "heavy = [m for m in ('gradio', 'matplotlib', 'transformers') if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "assert callable(zoo.run.precision.quantize_int8) and 'zoo.run.precision' in sys.modules\n"
            "assert 'run' in dir(zoo) and 'precision' in dir(zoo.run)\n"
            "try:\n    zoo.no_such_thing\nexcept AttributeError:\n    pass\nelse:\n    raise SystemExit(1)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------------- poet_bert's honest claim
def test_readme_and_card_state_what_poet_bert_measures_on_famous_lines():
    """The README (both languages) and poet_bert's card say it does not clearly beat the bigram,
    with the counts measured here: model and bigram top-1 on every character of the famous poems
    (scripts/train_shipped.py: FAMOUS, famous_fill)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import train_shipped
    import zoo

    model = zoo.load("poet_bert")
    got = train_shipped.famous_fill(model, model.tokenizer)
    assert got["model_top1"] < got["bigram_top1"] + 0.05 * got["hidden"]  # not clearly better
    claim_en = f"right {got['model_top1']} times of {got['hidden']}, the bigram {got['bigram_top1']}"
    assert claim_en in (ROOT / "README.md").read_text(encoding="utf-8").replace("\n", " ")
    zh = (ROOT / "README.zh.md").read_text(encoding="utf-8")
    assert f"{got['hidden']} 个字中猜对 {got['model_top1']} 个，二元模型 {got['bigram_top1']} 个" in zh
    card = (ROOT / "checkpoints" / "poet_bert" / "README.md").read_text(encoding="utf-8")
    assert claim_en in card.replace("\n", " ") and f"猜对 {got['model_top1']} 个" in card
    en = (ROOT / "README.md").read_text(encoding="utf-8")
    for prompt, answer in {"春眠不觉晓，处处闻<mask>鸟。": "啼", "床前明<mask>光，疑是地上霜。": "月",
                           "独在异<mask>为异客，每逢佳节倍思亲。": "乡"}.items():
        assert f"`{prompt}` ({answer})" in en.replace("\n", " ") and f"`{prompt}`（{answer}）" in zh
        assert zoo.fill_mask(model, prompt)[0][0]["text"] == answer, prompt  # the README's examples


# ---------------------------------------------------------------------- zoo train: estimate, Ctrl-C
def test_zoo_train_prints_an_estimate_then_a_meaningful_interruption(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "zoo.cli", "train", "gpt_tiny", "--data", str(ROOT / "data" / "poems.txt"),
         "--steps", "2000", "--out", str(out), "--fit-vocab", "--no-progress", "--log-every", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path)
    estimate = before = ""
    deadline = time.time() + 400
    while time.time() < deadline:
        line = proc.stderr.readline()
        if line.startswith("estimate before the first step:"):
            before = line
        if line.startswith("estimate:"):
            estimate = line
            break
        if not line and proc.poll() is not None:
            break
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    assert re.match(r"estimate: \d+\.\d\d s a step here, so the 1,997 steps left take about \d+", estimate), \
        (estimate, stderr[-2000:])
    import json

    recs = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    assert re.match(r"estimate before the first step: about \d+\.\d\d s a step \(one forward and "
                    r"backward timed\), so 2,000 steps take about \d+", before), (before, stderr[-2000:])
    probe, est = [r for r in recs if r.get("event") == "estimate"][:2]
    assert probe["basis"] == "probe" and probe["step"] == 0 and probe["steps_left"] == 2000
    assert est["step"] == 3 and est["steps_left"] == 1997
    assert est["s_per_step"] * 1997 <= est["estimated_s"] <= est["s_per_step"] * 1997 * 1.2
    first = stdout.splitlines()[0]
    m = re.match(r"interrupted at step (\d+) of 2,000 after \d+ s, the checkpoint of that step is "
                 r"saved: training loss \d+\.\d{4}", first)
    assert m and "{}" not in first, stdout
    assert (out / "model.safetensors").is_file()  # the checkpoint the line promises


def test_verify_of_a_plugin_not_installed_says_so_in_a_line():
    """``zoo verify linear_attention`` before the plugin is installed: one short error saying to
    install it (was: every one of the ~100 component names, 2,000 characters)."""
    env = {**_env(), "ZOO_DISABLE_PLUGIN_AUTOLOAD": "1"}
    r = subprocess.run([sys.executable, "-m", "zoo.cli", "verify", "linear_attention"], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "no component or plugin named 'linear_attention'" in r.stderr and "install the plugin" in r.stderr
    assert len(r.stderr) < 500 and "tokenizer:byte" not in r.stderr, r.stderr
