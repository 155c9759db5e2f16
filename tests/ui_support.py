"""Shared helpers of the UI tests: small checkpoints with tokenizers in a temporary checkpoint folder,
and a UI server on a free local port."""
from __future__ import annotations

import contextlib
import socket
from pathlib import Path

import zoo

CORPUS = "The cat sat on the mat. 床前明月光，疑是地上霜。<mask>"


def make_checkpoints(folder: Path) -> dict[str, Path]:
    """Save tiny random decoder / encoder / encoder-decoder checkpoints (with tokenizers) under
    ``folder``: ``ui_gpt`` (byte tokenizer), ``ui_bert`` (char tokenizer with <mask>), ``ui_t5``."""
    folder.mkdir(parents=True, exist_ok=True)
    byte = zoo.tokenizer("byte")
    char = zoo.tokenizer("char", text=CORPUS)
    small = dict(d_model=32, num_heads=4, d_ff=64, max_len=128)
    out = {}
    gpt = zoo.build("gpt_tiny", seed=0, vocab_size=byte.vocab_size, num_layers=2, name="ui_gpt", **small)
    out["ui_gpt"] = zoo.save(gpt, folder / "ui_gpt", tokenizer=byte)
    bert = zoo.build("bert_tiny", seed=0, vocab_size=char.vocab_size, num_layers=2, name="ui_bert", **small)
    out["ui_bert"] = zoo.save(bert, folder / "ui_bert", tokenizer=char)
    t5 = zoo.build("t5_tiny", seed=0, vocab_size=byte.vocab_size, name="ui_t5",
                   encoder={"num_layers": 1}, decoder={"num_layers": 1}, **small)
    out["ui_t5"] = zoo.save(t5, folder / "ui_t5", tokenizer=byte)
    bare = zoo.build("gpt_tiny", seed=0, vocab_size=64, num_layers=1, name="ui_bare", **small)
    out["ui_bare"] = zoo.save(bare, folder / "ui_bare")  # no tokenizer
    return out


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_app(lang: str = "en"):
    """Start the whole UI on 127.0.0.1:<free port> in this process; yields the base URL."""
    from zoo.ui.app import build_app, launch

    demo = build_app(lang)
    port = free_port()
    launch(demo, port=port, block=False)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


def run_checkpoint_name() -> str:
    """The checkpoint the Run flows use: a shipped decoder checkpoint when one exists, else ui_gpt."""
    for name in zoo.list_checkpoints():
        if name.startswith("ui_"):
            continue
        try:
            spec = zoo.load_spec(name)
        except zoo.ZooError:
            continue
        meta = zoo.read_metadata(name)
        if spec.arch == "decoder" and "zoo.tokenizer" in meta:
            return name
    return "ui_gpt"


@contextlib.contextmanager
def checkpoints_env(tmp_path_factory):
    """``ZOO_CHECKPOINTS`` pointing at a fresh folder of :func:`make_checkpoints` and ``ZOO_RUNS`` at a
    fresh runs folder, for the duration; the environment is restored afterwards."""
    import os

    ckpts = tmp_path_factory.mktemp("ckpts")
    make_checkpoints(ckpts)
    old = {k: os.environ.get(k) for k in ("ZOO_CHECKPOINTS", "ZOO_RUNS")}
    os.environ["ZOO_CHECKPOINTS"] = str(ckpts)
    os.environ["ZOO_RUNS"] = str(tmp_path_factory.mktemp("runs"))
    try:
        yield ckpts
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def app_with_checkpoints(tmp_path_factory, lang: str = "en"):
    """The whole UI as a ``gr.Blocks`` (not served) over :func:`checkpoints_env`."""
    with checkpoints_env(tmp_path_factory):
        from zoo.ui.app import build_app

        yield build_app(lang)


@contextlib.contextmanager
def serve_with_checkpoints(tmp_path_factory):
    """A UI server whose checkpoint folder holds :func:`make_checkpoints` and whose runs folder is
    fresh; the environment is restored afterwards.  Yields the server's URL."""
    with checkpoints_env(tmp_path_factory), running_app() as url:
        yield url
