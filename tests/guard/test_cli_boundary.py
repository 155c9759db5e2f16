"""Issue 35: the command line's error boundary -- an exception that is not a ZooError (a bug in zoo or
a plugin) leaves ``zoo`` as one line naming the command (exit status 1, a user error is 2), and
``zoo --debug`` raises it as a ZooError whose ``__cause__`` is the original."""
from __future__ import annotations

import pytest

import zoo
from zoo import cli


def _boom(*args, **kwargs):
    raise KeyError("a bug inside")


def test_a_bug_is_one_line_naming_the_command(monkeypatch, capsys):
    import zoo.commands.check as check

    monkeypatch.setattr(check.command, "callback", _boom)
    with pytest.raises(SystemExit) as e:
        cli.main(["check", "anything"])
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "zoo check: unexpected KeyError" in err and "--debug" in err


def test_debug_raises_a_zoo_error_with_the_original_as_cause(monkeypatch):
    import zoo.commands.check as check

    monkeypatch.setattr(check.command, "callback", _boom)
    with pytest.raises(zoo.ZooError) as e:
        cli.main(["--debug", "check", "anything"])
    assert e.value.where == "zoo check" and isinstance(e.value.__cause__, KeyError)


def test_a_user_error_stays_status_2(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        cli.main(["check", str(tmp_path / "missing")])
    assert e.value.code == 2 and "unexpected" not in capsys.readouterr().err
