"""Foreign templates run in a box: Jinja's immutable sandbox inside a worker process with bounded
memory, time, recursion and output.

A chat template comes with a checkpoint or a Hugging Face folder: it is code someone else wrote.
Jinja's ``ImmutableSandboxedEnvironment`` stops it reaching Python's internals or mutating the
values it is given, but not from dividing by zero, looping ``range(99999)`` inside
``range(99999)``, building ``'x' * 10**9``, nesting 5,000 parentheses (Python's compiler recurses
until it overflows) or printing a function (its repr shows a memory address).  Refusing each of those
one by one never ends; so a template is compiled and rendered in a separate worker process:

* **memory**: the worker's address space is capped (``RLIMIT_AS``) at what it holds after start-up
  plus :data:`MEMORY_BYTES`; an allocation past it is a ``MemoryError`` there, not here;
* **time**: a render that has not answered after :data:`SECONDS` gets the worker killed (SIGKILL)
  and a fresh one started on the next call;
* **output**: the prompt is streamed chunk by chunk and refused past :data:`MAX_OUTPUT_CHARS`;
* **recursion and nesting**: a ``RecursionError``, a compile-time ``SyntaxError`` ("too many
  statically nested blocks") or a crash of the worker itself stays in the worker;
* **what is printed**: only text, numbers, booleans, ``None`` and lists / dicts of those (a
  function, a macro, a ``cycler`` or a loop object printed is refused);
* **everything else the template raises** comes back by kind: Jinja's syntax, security and
  template errors and Python's ``TypeError`` / ``ValueError`` / ``KeyError`` / ``IndexError`` /
  ``AttributeError`` / ``OverflowError`` are raised again here (so the caller words them), the rest
  (``ZeroDivisionError``, ``RuntimeError`` from ``cycler()``, ...) is a :class:`Stopped` with the
  exception's type.

The environment is transformers' ``apply_chat_template``'s: ``trim_blocks``, ``lstrip_blocks``,
loop controls, the ``{% generation %}`` tag, ``raise_exception``, ``strftime_now``, a ``tojson`` that
keeps non-ASCII and HTML characters, ``namespace`` without underscore attributes.

The worker runs this file by path (``python -P FILE``): it imports no part of zoo, only ``jinja2``,
so it starts in a fraction of a second; one worker serves the process (thread-safe, restarted
after a fork).  Cost: one round trip through a pipe per render (tens of microseconds) on top of
Jinja's own time.
"""
from __future__ import annotations

import json
import os
import struct
import sys

#: address space the worker may take beyond what it holds once started (bytes)
MEMORY_BYTES = 512 * 1024 ** 2
#: seconds a compile or render may take before the worker is killed
SECONDS = 5.0
#: longest prompt a template may render (characters)
MAX_OUTPUT_CHARS = 8_000_000
#: seconds the worker may take to start
START_SECONDS = 60.0
#: how deep a printed list / dict is looked into
_PRINT_DEPTH = 16

_HEADER = struct.Struct("<Q")


def _send(stream, obj) -> None:
    data = json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


# ====================================================================== the worker (its own process)
def _environment():
    """Jinja's immutable sandbox with transformers' settings and helpers."""
    import json as _json
    from datetime import datetime

    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """``{% generation %}...{% endgeneration %}`` marks the assistant's tokens for training
        masks; rendering a prompt just outputs its body (as transformers does without tracking)."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # Jinja's own tojson escapes <, >, & for HTML; a prompt must keep them
        return _json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                           sort_keys=sort_keys)

    class Namespace(jinja2.utils.Namespace):
        """``namespace(...)`` without underscore attributes (no route to Python internals)."""

        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                Namespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            Namespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"a namespace attribute may not start with '_': {name[:40]!r}")

    def finalize(value):
        if not _printable(value, jinja2.Undefined, 0):
            raise _Printed(type(value).__name__)
        return value

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, finalize=finalize,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, namespace=Namespace,
                       strftime_now=lambda fmt: datetime.now().strftime(fmt),
                       dict=lambda *a, **k: dict(*a, **k))
    return env


class _Printed(Exception):
    """The template printed something that is not text or data (a function, a loop object)."""


def _printable(value, undefined, depth: int) -> bool:
    if value is None or isinstance(value, (str, int, float, bool, undefined)):
        return True
    if depth >= _PRINT_DEPTH:
        return False
    if isinstance(value, (list, tuple)):
        return all(_printable(v, undefined, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(_printable(k, undefined, depth + 1) and _printable(v, undefined, depth + 1)
                   for k, v in value.items())
    return False


#: exceptions raised again in the caller's process by name (their text is the template's)
_RERAISED = ("TemplateSyntaxError", "SecurityError", "TemplateError", "TypeError", "ValueError",
             "KeyError", "IndexError", "AttributeError", "OverflowError")


def _answer(env, cache: dict, req: dict) -> dict:
    import jinja2

    template = req["template"]
    compiled = cache.get(template)
    if compiled is None:
        try:
            compiled = env.from_string(template)
        except jinja2.exceptions.TemplateSyntaxError as exc:
            return {"raise": "TemplateSyntaxError", "detail": str(exc.message or exc)[:400],
                    "line": exc.lineno}
        except (SyntaxError, RecursionError, MemoryError) as exc:  # Python's compiler gave up
            return {"stop": "nesting", "detail": f"{type(exc).__name__}: {str(exc)[:200]}"}
        except Exception as exc:  # noqa: BLE001 - the template is the cause, named by its type
            return {"stop": "compile", "detail": f"{type(exc).__name__}: {str(exc)[:200]}"}
        cache[template] = compiled
        if len(cache) > 64:
            cache.pop(next(iter(cache)))
    if req.get("op") == "compile":
        return {"ok": ""}
    limit = int(req.get("max_chars", MAX_OUTPUT_CHARS))
    parts, n = [], 0
    try:
        for chunk in compiled.generate(**req["variables"]):
            n += len(chunk)
            if n > limit:
                return {"stop": "size", "detail": str(n)}
            if chunk:  # a loop printing nothing must not fill the memory with empty chunks
                parts.append(chunk)
        return {"ok": "".join(parts)}
    except _Printed as exc:
        return {"stop": "prints", "detail": str(exc)[:80]}
    except MemoryError:
        return {"stop": "memory", "detail": ""}
    except RecursionError:
        return {"stop": "recursion", "detail": ""}
    except jinja2.exceptions.SecurityError as exc:
        return {"raise": "SecurityError", "detail": str(exc)[:400]}
    except jinja2.exceptions.TemplateError as exc:  # raise_exception(...), an undefined call
        return {"raise": "TemplateError", "detail": str(exc)[:400]}
    except Exception as exc:  # noqa: BLE001 - sorted by type below
        kind = type(exc).__name__
        if kind in _RERAISED:
            return {"raise": kind, "detail": str(exc)[:400]}
        return {"stop": "failed", "detail": f"{kind}: {str(exc)[:200]}"}


def _serve() -> None:
    """The worker's loop: requests on stdin, answers on stdout, until stdin closes."""
    import resource

    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing printed by accident reaches the channel
    env = _environment()
    env.from_string("{{ x }}").render(x=1)  # import what rendering imports before the cap
    with open("/proc/self/status", encoding="ascii") as fh:
        held = next((int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:")), 0)
    cap = held + int(os.environ.get("ZOO_SANDBOX_MEMORY", MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))  # a template never writes a file
    cache: dict = {}
    _send(out, {"ready": os.getpid(), "cap": cap})
    while True:
        head = inp.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return
        (n,) = _HEADER.unpack(head)
        req = json.loads(inp.read(n).decode("utf-8", "surrogatepass"))
        try:
            answer = _answer(env, cache, req)
        except MemoryError:
            answer = {"stop": "memory", "detail": ""}
        except RecursionError:
            answer = {"stop": "recursion", "detail": ""}
        try:
            _send(out, answer)
        except MemoryError:  # the prompt fit the size bound but not the memory to send it
            _send(out, {"stop": "memory", "detail": ""})


if __name__ == "__zoo_sandbox__":
    _serve()
    raise SystemExit(0)


# ====================================================================== the caller's side
import select  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

from ..errors import ZooError  # noqa: E402

_BOOT = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__zoo_sandbox__')"


class Stopped(ZooError):
    """A template stopped by the box (time, memory, output size, nesting, what it printed, an
    exception Python raised in it); ``kind`` says which."""

    kind: str = "failed"


_STOPS = {
    "memory": ("rendering the template needs more than {mib} MiB of memory (for example "
               "'x' * 10**9, or a huge indent)", "use the model's published template"),
    "size": ("the template renders a prompt of more than {limit:,} characters",
             "use the model's published template, or a shorter conversation"),
    "time": ("the template did not finish rendering within {seconds:g} s (a loop that runs too "
             "long?)", "use the model's published template"),
    "recursion": ("the template recurses too deeply (a macro calling itself without end?)",
                  "use the model's published template"),
    "nesting": ("the template nests too deeply to compile ({detail})",
                "use the model's published template (real ones nest a few levels)"),
    "compile": ("the template cannot be compiled: {detail}", "fix the template"),
    "prints": ("the template prints a {detail} object, not text: only strings, numbers and "
               "lists / dicts of them can be part of a prompt",
               "print the value's fields, e.g. {{{{ message['content'] }}}}, not the object"),
    "failed": ("the template failed on this conversation: {detail}",
               "check the messages' fields against what the template reads"),
    "crashed": ("the template renderer stopped ({detail})", "use the model's published template"),
    "start": ("the template renderer could not start: {detail}",
              "check that jinja2 is installed for this Python"),
    "data": ("the template's variables must be plain data (JSON): {detail}",
             "pass strings, numbers, lists and dicts"),
}


def _stopped(kind: str, detail: str = "", **extra) -> Stopped:
    from .files import clip

    what, fix = _STOPS[kind]
    exc = Stopped(what.format(detail=clip(detail, 200), mib=MEMORY_BYTES // 2 ** 20,
                              limit=MAX_OUTPUT_CHARS, seconds=SECONDS, **extra),
                  where="chat_template", fix=fix)
    exc.kind = kind
    return exc


class _Worker:
    def __init__(self):
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-P", "-c", _BOOT, os.path.abspath(__file__)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                cwd="/", close_fds=True, start_new_session=True)
        except OSError as exc:
            raise _stopped("start", f"{type(exc).__name__}: {exc}") from exc
        self.owner = os.getpid()
        try:
            hello = self._read(START_SECONDS)
        except Stopped as exc:
            self.kill()
            raise _stopped("start", exc.what) from None
        if "ready" not in hello:
            self.kill()
            raise _stopped("start", str(hello)[:200])

    def _read_exact(self, n: int, until: float) -> bytes:
        fd = self.proc.stdout.fileno()
        chunks, got = [], 0
        while got < n:
            left = until - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise _stopped("time")
            block = os.read(fd, min(n - got, 1 << 20))
            if not block:
                code = self.proc.poll()
                why = (f"killed by signal {-code}" if code is not None and code < 0 else
                       f"exit status {code}" if code is not None else "its output closed")
                raise _stopped("crashed", why)
            chunks.append(block)
            got += len(block)
        return b"".join(chunks)

    def _read(self, seconds: float) -> dict:
        until = time.monotonic() + seconds
        (n,) = _HEADER.unpack(self._read_exact(_HEADER.size, until))
        return json.loads(self._read_exact(n, until).decode("utf-8", "surrogatepass"))

    def ask(self, req: dict, seconds: float) -> dict:
        try:
            _send(self.proc.stdin, req)
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise _stopped("crashed", f"{type(exc).__name__}") from exc
        return self._read(seconds)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


_WORKER: _Worker | None = None
_LOCK = threading.Lock()


def _worker() -> _Worker:
    global _WORKER
    if _WORKER is not None and (_WORKER.owner != os.getpid() or _WORKER.proc.poll() is not None):
        if _WORKER.owner == os.getpid():
            _WORKER.kill()
        _WORKER = None  # a fork's copy is the parent's: never used here
    if _WORKER is None:
        _WORKER = _Worker()
    return _WORKER


def _stop_worker() -> None:
    global _WORKER
    with _LOCK:
        if _WORKER is not None and _WORKER.owner == os.getpid():
            _WORKER.kill()
        _WORKER = None


import atexit  # noqa: E402

atexit.register(_stop_worker)


def render(template: str, variables: dict | None = None, *, compile_only: bool = False,
           max_chars: int | None = None, seconds: float | None = None) -> str:
    """``template`` rendered with ``variables`` in the box (``compile_only``: only compiled, to
    report a broken template early).  Raises Jinja's ``TemplateSyntaxError`` / ``SecurityError`` /
    ``TemplateError`` or Python's ``TypeError`` ... ``OverflowError`` as the template raised them
    (text only: no object crosses the process boundary), or :class:`Stopped`."""
    req = {"op": "compile" if compile_only else "render", "template": template,
           "max_chars": MAX_OUTPUT_CHARS if max_chars is None else int(max_chars)}
    try:
        req["variables"] = json.loads(json.dumps(variables or {}, ensure_ascii=False))
    except (TypeError, ValueError, RecursionError) as exc:
        raise _stopped("data", f"{type(exc).__name__}: {exc}") from exc
    limit = SECONDS if seconds is None else seconds
    with _LOCK:
        w = _worker()
        try:
            answer = w.ask(req, limit)
        except Stopped:
            w.kill()  # timed out or died: the next call starts a fresh one
            global _WORKER
            _WORKER = None
            raise
    if "ok" in answer:
        return answer["ok"]
    if "stop" in answer:
        raise _stopped(answer["stop"], answer.get("detail", ""))
    return _raise_again(answer)


def _raise_again(answer: dict):
    import builtins

    import jinja2

    kind, detail = answer.get("raise"), str(answer.get("detail", ""))
    if kind == "TemplateSyntaxError":
        raise jinja2.exceptions.TemplateSyntaxError(detail, answer.get("line") or 1)
    if kind == "SecurityError":
        raise jinja2.exceptions.SecurityError(detail)
    if kind == "TemplateError":
        raise jinja2.exceptions.TemplateError(detail)
    if kind in _RERAISED:
        raise getattr(builtins, kind)(detail)
    raise _stopped("failed", f"{kind}: {detail}")
