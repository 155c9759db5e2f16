"""Issue 22, goal 7: every entry point fuzzed, generated from signatures -- not a hand list.

Two generators:

* **the public API**: every callable in ``zoo.__all__`` (and the public functions of ``zoo.train``,
  ``zoo.run.generate`` and ``zoo.io.tokenizers``), called with arguments drawn from strategies derived from
  each parameter's *annotation* (``int`` -> edge integers, ``float`` -> NaN/inf/huge/tiny,
  ``str | os.PathLike`` -> hostile paths, ``bool`` -> booleans and look-alikes, ``Any`` -> all of
  them) and, for a few parameter *names* with a meaning (``model``, ``source``, ``ids``, ``text``),
  a mix of valid values and hostile ones;
* **the command line**: every ``zoo`` sub-command's click parameters, read off the command
  (``click.INT`` -> integer-looking and not-integer strings, ``click.Choice`` -> its choices and
  others, paths -> hostile paths, flags -> present or not).

The property is the issue's promise: the call returns, or raises a ``ZooError`` (on the command
line: exits 0, or 2 with one line) -- never another exception, never a hang (a per-call alarm).
Example budgets are fixed (``max_examples`` 20 per function, 15 per command) and derandomized, so
the run is reproducible and takes a bounded time.

Running as any user, nothing here may write outside a temporary folder: generated paths are relative
(the test runs in a fresh working directory) or fixed hostile targets that must be refused
(``/dev/null``, ``/proc/self/...``).
"""
from __future__ import annotations

import contextlib
import inspect
import io
import math
import os
import signal
import typing
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zoo

HANG_S = 30
SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))

# ---------------------------------------------------------------------- value strategies
EDGE_INTS = [-1, 0, 1, 2, 3, 7, 2 ** 31, 2 ** 63, 2 ** 70, -(2 ** 63) - 1]
EDGE_FLOATS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-300, 5e-324, 1e300, -1.5, 0.5, 1.0]
HOSTILE_STRS = ["", "\x00", "a\x00b", "gpt_tiny", "bert_tiny", "t5_tiny", "nope", "a" * 5000,
                "\ud800", "../../etc/passwd", "/dev/zero", "/dev/null", "/proc/self", "/", ".",
                "{", "[[[[", "kind: sdpa", "1e999", "-1", "nan", "sdpa", "byte", "char", "cpu",
                "cuda:99", "float64", "int8", "中文", "x" * 300]
READ_PATHS = ["/dev/zero", "/dev/urandom", "/dev/null", "/proc/self", "/", "fifo", "missing.safetensors",
              "a" * 300, "a\x00b", "", ".", "../outside", "good", "good/model.safetensors",
              "spec.yaml", "link_out", "loop", "notjson.safetensors"]
WRITE_PATHS = ["/dev/null", "/proc/self/nope", "fifo", "a" * 300, "a\x00b", "", "file_here/sub",
               "file_here", "loop/x", "new_dir/x.safetensors", "good", "missing_parent/deep/x",
               "ro/x"]

scalar = st.one_of(st.sampled_from(EDGE_INTS), st.sampled_from(EDGE_FLOATS), st.booleans(),
                   st.none(), st.sampled_from(HOSTILE_STRS), st.binary(max_size=8))
anything = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                        st.dictionaries(st.sampled_from(
                                                            HOSTILE_STRS[:8]), inner, max_size=3)),
                        max_leaves=6)


class Env:
    """The world the calls happen in: a tiny model, its checkpoint, a FIFO, a symlink out, a loop."""

    def __init__(self, root: Path):
        self.root = root
        self.model = zoo.build("gpt_tiny", num_layers=1, d_model=16, num_heads=2, vocab_size=300,
                               max_len=16, seed=0)
        self.model.tokenizer = zoo.tokenizer("byte")
        self.encoder = zoo.build("bert_tiny", num_layers=1, d_model=16, num_heads=2, vocab_size=300,
                                 max_len=16, seed=0)
        self.encoder.tokenizer = zoo.tokenizer("byte")
        zoo.save(self.model, root / "good")
        (root / "spec.yaml").write_text("arch: decoder\nvocab_size: 32\nd_model: 8\nnum_layers: 1\n"
                                        "num_heads: 2\nmax_len: 16\n")
        (root / "data.txt").write_text("春眠不觉晓，处处闻啼鸟。\n\n夜来风雨声，花落知多少。\n" * 3)
        (root / "notjson.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{nope!!}")
        (root / "file_here").write_text("x")
        os.mkfifo(root / "fifo")
        (root / "link_out").symlink_to("/etc")
        (root / "loop").symlink_to(root / "loop")
        (root / "ro").mkdir()
        (root / "ro").chmod(0o500)


def strategy_for(name: str, annotation, env: Env, writes: bool):
    """A strategy for one parameter, from its name (when it has a meaning) or its annotation."""
    paths = st.sampled_from(WRITE_PATHS if writes else READ_PATHS)
    by_name = {
        "model": st.one_of(st.just(env.model), st.just(env.encoder), scalar),
        "source": st.one_of(st.sampled_from(["gpt_tiny", "bert_tiny", "spec.yaml", "good"]), paths,
                            scalar),
        "ids": st.one_of(st.lists(st.integers(-3, 400), max_size=5),
                         st.lists(st.lists(st.integers(0, 299), min_size=1, max_size=4), max_size=2),
                         scalar),
        "text": st.one_of(st.text(max_size=30), scalar),
        "inputs": st.one_of(st.text(max_size=20), st.just("a<mask>b"), scalar),
        "data": st.one_of(st.just("data.txt"), paths, scalar),
        "out": st.one_of(paths, st.just("run_out")),
        "path": paths, "kind": st.one_of(st.sampled_from(["byte", "char", "hf"]), scalar),
        "family": st.one_of(st.sampled_from(["attention", "norm", "tokenizer"]), scalar),
        # amounts of work: hostile types and signs, but no legitimately huge request
        "max_new_tokens": st.one_of(st.integers(-2, 3), scalar.filter(
            lambda v: not (isinstance(v, int) and not isinstance(v, bool) and v > 3))),
        "steps": st.one_of(st.integers(-1, 2), st.sampled_from([2.5, "2", None, math.nan])),
    }
    if name in by_name:
        return by_name[name]
    text = str(annotation)
    if "PathLike" in text:
        return st.one_of(paths, scalar)
    if text in ("int", "int | None"):
        return st.one_of(st.sampled_from(EDGE_INTS), scalar)
    if text in ("float", "float | None"):
        return st.one_of(st.sampled_from(EDGE_FLOATS), scalar)
    if text in ("bool",):
        return st.one_of(st.booleans(), scalar)
    if text in ("str", "str | None"):
        return st.one_of(st.sampled_from(HOSTILE_STRS), st.text(max_size=10), scalar)
    return anything


# ---------------------------------------------------------------------- the public API
def _public():
    import zoo.run.generate as gen
    import zoo.io.tokenizers as toks
    import zoo.train as tr

    out = {}
    for mod, names in ((zoo, zoo.__all__), (tr, ["train"]),
                       (gen, [n for n in ("generate", "generate_text", "stream") if hasattr(gen, n)]),
                       (toks, ["tokenizer", "from_json", "check_text", "check_ids", "get_tokenizer"])):
        for n in names:
            obj = getattr(mod, n, None)
            if obj is None or not callable(obj) or n == "hookimpl":
                continue
            if isinstance(obj, type) and issubclass(obj, BaseException):
                continue  # constructing an exception is not an entry point
            out[f"{mod.__name__}.{n}"] = obj
    return out


PUBLIC = _public()
WRITERS = {"zoo.save", "zoo.train.train"}


def _call_with_alarm(fn, *args, **kwargs):
    def alarm(signum, frame):
        raise TimeoutError(f"no answer within {HANG_S} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_S)
    try:
        return fn(*args, **kwargs)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("fuzz")
    e = Env(root)
    cwd = os.getcwd()
    os.chdir(root)
    yield e
    os.chdir(cwd)
    (root / "ro").chmod(0o700)


def _arguments(fn, name: str, env: Env):
    """A strategy of ``(args, kwargs)`` for ``fn``: required parameters always, optional ones
    sometimes, ``**kwargs`` as a few hostile keys."""
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - string annotations that do not resolve: use the raw text
        hints = {}
    writes = name in WRITERS
    required, optional, var_kw = [], [], False
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            var_kw = True
            continue
        if p.kind is p.VAR_POSITIONAL:
            continue
        strat = strategy_for(p.name, hints.get(p.name, p.annotation), env, writes)
        (required if p.default is p.empty else optional).append((p, strat))

    @st.composite
    def build(draw):
        args, kwargs = [], {}
        for p, strat in required:
            value = draw(strat)
            if p.kind is p.KEYWORD_ONLY:
                kwargs[p.name] = value
            else:
                args.append(value)
        for p, strat in optional:
            if draw(st.booleans()):
                kwargs[p.name] = draw(strat)
        if var_kw and draw(st.booleans()):
            keys = ["num_layers", "d_model", "vocab_size", "attention", "bogus", "lr", "text",
                    "specials", "path", "json", "budget", "seed"]
            kwargs.update(draw(st.dictionaries(st.sampled_from(keys), scalar, max_size=2)))
        return args, kwargs

    return build()


#: Public functions the fuzzer still breaks, each with what it found (strict: a fix makes the test
#: XPASS and fail, so the entry is removed with the fix).  Empty since zoo.run.arguments (issue 22):
#: classify, fill_mask, generate, stream and trace check their model and ids.
KNOWN: dict[str, str] = {}


def _public_param(name):
    marks = [pytest.mark.xfail(strict=True, reason=KNOWN[name])] if name in KNOWN else []
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", [_public_param(n) for n in sorted(PUBLIC)])
def test_public_function_returns_or_raises_zoo_error(name, env):
    fn = PUBLIC[name]

    @settings(max_examples=20, **SETTINGS)
    @given(call=_arguments(fn, name, env))
    def check(call):
        args, kwargs = call
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                _call_with_alarm(fn, *args, **kwargs)
            except zoo.ZooError as exc:
                assert not isinstance(exc, zoo.errors.ZooInternalError), \
                    f"an escape the API's boundary caught (a bug): {exc}"
                assert len(str(exc)) < 3000
    check()


def test_the_generator_covers_the_public_api():
    """Not a hand list: a new public function is fuzzed without editing this file."""
    assert {"zoo.build", "zoo.load", "zoo.save", "zoo.spec", "zoo.tokenizer", "zoo.trace",
            "zoo.train.train", "zoo.run.generate.generate"} <= set(PUBLIC)
    assert len(PUBLIC) >= 20


# ---------------------------------------------------------------------- the command line
def _commands():
    import importlib

    import click

    from zoo.cli import COMMANDS

    out = {}
    for name, (module, _) in COMMANDS.items():
        if name in ("ui",):  # starts a server: covered by the UI tests
            continue
        cmd = importlib.import_module(f"zoo.commands.{module}").command
        if isinstance(cmd, click.Group):
            for sub, subcmd in cmd.commands.items():
                out[f"{name} {sub}"] = subcmd
        else:
            out[name] = cmd
    return out


COMMANDS = _commands()
INT_STRS = ["-1", "0", "1", "2", "3", "9223372036854775808", "1e3", "abc", "", "nan"]
FLOAT_STRS = ["nan", "inf", "-inf", "0", "-1", "1e-300", "1e300", "0.5", "abc", ""]
CAPPED = {"steps", "repeats", "warmup", "max_new_tokens", "new_tokens", "candidates", "seq_len",
          "prompt_len", "batch", "train_batch", "threads", "batch_size", "eval_every"}


def _cli_value(param, env: Env):
    import click

    t = param.type
    if isinstance(t, click.Choice):
        return st.one_of(st.sampled_from(list(t.choices)), st.sampled_from(["nope", ""]))
    if isinstance(t, click.types.IntParamType):
        if param.name in CAPPED:
            return st.sampled_from(["-1", "0", "1", "2", "abc", "", "2.5"])
        return st.sampled_from(INT_STRS)
    if isinstance(t, click.types.FloatParamType):
        return st.sampled_from(FLOAT_STRS)
    if isinstance(t, (click.Path, click.File)) or param.name in ("out", "save_to", "out_dir", "path"):
        return st.sampled_from(WRITE_PATHS + READ_PATHS)
    return st.one_of(st.sampled_from(HOSTILE_STRS + ["good", "spec.yaml", "data.txt", "gpt_tiny",
                                                     "hf:fifo", "hf:/dev/zero", "name=[[[",
                                                     "num_layers=2", "vocab_size=1000000000"]),
                     st.text(max_size=8))


def _argv(cmd, env: Env):
    import click

    @st.composite
    def build(draw):
        argv = []
        for p in cmd.params:
            if isinstance(p, click.Argument):  # one or two of a variadic (none = "all": long)
                n = 1 if p.nargs == 1 else draw(st.integers(1, 2))
                argv += [draw(_cli_value(p, env)) for _ in range(n)]
            elif draw(st.booleans()):
                flag = max(p.opts, key=len)
                if p.is_flag:
                    argv.append(flag)
                else:
                    argv += [flag, draw(_cli_value(p, env))]
        return argv

    return build()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_exits_0_or_reports_a_user_error(name, env):
    import click

    from zoo.cli import cli

    words = name.split()

    @settings(max_examples=15, **SETTINGS)
    @given(argv=_argv(COMMANDS[name], env))
    def check(argv):
        args = [*words, *[a.replace("\x00", "") for a in argv]]  # argv cannot carry NUL
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                _call_with_alarm(cli.main, args=args, prog_name="zoo", standalone_mode=False)
            except (zoo.ZooError, click.ClickException, click.exceptions.Exit):
                pass  # exit 2 with one line (or click's own usage error), or a clean exit
    check()


def test_the_generator_covers_every_command():
    from zoo.cli import COMMANDS as ALL

    assert {n.split()[0] for n in COMMANDS} == set(ALL) - {"ui"}
