"""Issue 35: ``zoo inspect`` writes its figures and inspect.json through zoo's one writer
(zoo.guard.transaction.write_file, root=OUT): a symlink planted at OUT/inspect.json or
OUT/mask.png pointing outside OUT is refused and the file it points to is left as it was (it was
overwritten before); OUT that is a FIFO is a ZooError, not a raw FileExistsError."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

import zoo
from zoo.cli import cli


@pytest.fixture(scope="module")
def ck(tmp_path_factory):
    d = tmp_path_factory.mktemp("inspect")
    tok = zoo.tokenizer("char", text="注意力")
    model = zoo.build("gpt_tiny", num_layers=1, vocab_size=tok.vocab_size, seed=0)
    return zoo.save(model, d / "ck", tokenizer=tok)


def _inspect(ck, out):
    return CliRunner().invoke(cli, ["inspect", str(ck), "--text", "注意力", "--out", str(out)])


@pytest.mark.parametrize("name", ["inspect.json", "mask.png", "attention_grid.png"])
def test_a_symlink_in_out_is_refused_and_its_target_kept(ck, tmp_path, name):
    secret = tmp_path / "secret.txt"
    secret.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(secret)
    res = _inspect(ck, out)
    assert isinstance(res.exception, zoo.ZooError) and "is a symlink" in str(res.exception), res.output
    assert res.exception.where == f"inspect.out: {name}"
    assert secret.read_text() == "keep me"


def test_out_that_is_a_file_or_a_fifo_is_refused(ck, tmp_path):
    import os

    out = tmp_path / "file"
    out.write_text("x")
    res = _inspect(ck, out)  # click's own check (file_okay=False): a usage error
    assert res.exit_code == 2 and "is a file" in res.output, res.output
    assert out.read_text() == "x"
    os.mkfifo(tmp_path / "fifo")
    res = _inspect(ck, tmp_path / "fifo")
    assert isinstance(res.exception, zoo.ZooError) and "is not a folder" in str(res.exception), res.output


def test_inspect_still_writes_every_file_and_no_temporary(ck, tmp_path):
    res = _inspect(ck, tmp_path / "out")
    assert res.exit_code == 0, res.output
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert "inspect.json" in names and "mask.png" in names and not [n for n in names if n.endswith(".tmp")]
    assert (tmp_path / "out" / "mask.png").read_bytes()[:4] == b"\x89PNG"
