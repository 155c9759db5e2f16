"""The API's error boundary (issue 35.4, :func:`zoo.errors.boundary`): a non-ZooError escaping a
public call becomes a ZooInternalError that says where, keeps the original as ``__cause__`` and is
still an instance of the original's type; the fuzzers, the hostile corpus and the UI count it as a
bug ("other exception", "internal error"), never as a refusal."""
import pytest

import zoo
import zoo.run.generate
from zoo.errors import ZooInternalError, boundary, internal_error


def _raiser(exc):
    def fn():
        raise exc
    return fn


def test_an_escape_is_a_zoo_internal_error_of_its_own_type_with_its_cause():
    original = KeyError("x")
    with pytest.raises(KeyError) as e:  # `except KeyError` around the call keeps working
        boundary(_raiser(original), where="zoo.thing")()
    err = e.value
    assert isinstance(err, ZooInternalError) and isinstance(err, zoo.ZooError)
    assert err.__cause__ is original and err.where == "zoo.thing"
    assert str(err).startswith("zoo.thing: unexpected KeyError: 'x' -- this is a bug")  # not KeyError's quoting
    with pytest.raises(FileNotFoundError):
        boundary(open)("/nonexistent/zoo/file")


def test_a_zoo_error_and_an_interrupt_pass_unchanged():
    mine = zoo.SpecError("bad", where="spec.x")
    with pytest.raises(zoo.SpecError) as e:
        boundary(_raiser(mine))()
    assert e.value is mine and not isinstance(e.value, ZooInternalError)
    with pytest.raises(KeyboardInterrupt):
        boundary(_raiser(KeyboardInterrupt()))()


def test_a_type_that_cannot_be_combined_is_a_plain_internal_error():
    try:
        b"\xff".decode()
    except UnicodeDecodeError as exc:
        err = internal_error(exc, where="w")
    assert type(err) is ZooInternalError and isinstance(err.__cause__, UnicodeDecodeError)


def test_the_front_door_and_the_model_doors_are_behind_it(monkeypatch):
    assert getattr(zoo.build, "__zoo_boundary__", False) and getattr(zoo.load, "__zoo_boundary__", False)
    model = zoo.build("gpt_tiny", num_layers=1, d_model=32, num_heads=2, d_ff=64)

    def broken(*a, **k):
        raise TypeError("a bug inside generate")
    monkeypatch.setattr(zoo.run.generate, "generate", broken)
    with pytest.raises(TypeError) as e:
        model.generate([[1, 2]], max_new_tokens=2)
    assert isinstance(e.value, ZooInternalError) and e.value.where == "model.generate"
    assert "a bug inside generate" in str(e.value)


def test_the_inside_view_checks_then_bounds(monkeypatch):
    import zoo.inside.lens as lens
    model = zoo.build("gpt_tiny", num_layers=1, d_model=32, num_heads=2, d_ff=64)
    with pytest.raises(zoo.ZooError) as e:  # bad input: a refusal, not a bug
        lens.logit_lens(model, [[1, 2], [3]])
    assert not isinstance(e.value, ZooInternalError) and "logit_lens.ids" in str(e.value)

    def broken(*a, **k):
        raise IndexError("inside")
    monkeypatch.setattr(lens, "run_with_cache", broken)
    with pytest.raises(IndexError) as e:
        lens.logit_lens(model, [[1, 2]])
    assert isinstance(e.value, ZooInternalError) and e.value.where == "logit_lens"


def test_the_fuzzers_count_it_as_a_bug(tmp_path):
    import hostile_corpus as hc

    case = hc.Case("API boundary", "an escape the boundary caught",
                   lambda ctx: boundary(_raiser(ValueError("oops")), where="zoo.x")())
    kind, _, _, detail = hc.outcome(case, hc.Ctx(tmp_path))
    assert kind == "raw" and detail.startswith("ValueError: oops")


def test_the_ui_shows_it_as_an_internal_error():
    gr = pytest.importorskip("gradio")
    from ui.common import handler

    @handler
    def on_click(text: str, lang: str = "en"):
        raise internal_error(RuntimeError("deep"), where="zoo.x")
    with pytest.raises(gr.Error) as e:
        on_click("a")
    assert "Something went wrong inside zoo (RuntimeError)" in str(e.value)
