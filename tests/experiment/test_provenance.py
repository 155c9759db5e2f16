"""Results bind what produced them (issue 33 goal 2, issue 35.3): a trial's key and result.json
carry the zoo version, the git commit and dirty flag, the source digest of every plugin module the
model and task use, and the sha256 of its checkpoint weights and of its spec/options; a resume or a
report refuses a trial whose code, checkpoint or record disagrees, naming what changed."""
import importlib
import json
import sys

import pytest

import zoo.experiment as ze
from zoo.experiment.run import code_identity, used_components
from zoo.experiment.spec import ExperimentError
from zoo.registry import Registry, set_registry

TASK_SRC = '''"""A tmp task plugin (the copy task under another name) whose source the test edits."""
import zoo
from zoo.plugins.task_copy import Copy, CopyConfig


class TmpCopy(Copy):
    pass


@zoo.hookimpl
def register_tasks(register):
    register("h1_tmp_copy", TmpCopy, config=CopyConfig)
'''


def tiny(task="copy"):
    return {"name": "prov", "base": {"preset": "gpt_tiny", "num_layers": 1, "d_model": 32, "num_heads": 2,
                                     "d_ff": 64, "max_len": 16},
            "variants": [{"name": "a", "set": {}}, {"name": "b", "set": {"positions": "rope"}}],
            "seeds": 2, "task": {"kind": task, "length": 4, "vocab": 6},
            "train": {"batch_size": 8, "eval_every": 1000, "save_every": 1000}, "budget": {"steps": 3},
            "metrics": ["acc"]}


def test_the_key_names_the_code():
    t, rope = ze.plan(tiny())[1], ze.plan(tiny())[2]
    assert used_components(t.spec, "copy") == [
        ("activation", "gelu"), ("attention", "sdpa"), ("ffn", "mlp"), ("mask", "causal"),
        ("norm", "layernorm"), ("placement", "pre"), ("position", "sinusoidal"), ("task", "copy")]
    assert ("position", "rope") in used_components(rope.spec, "copy")
    assert "zoo.plugins.pos_rope" in rope.code["sources"] and "zoo.plugins.pos_rope" not in t.code["sources"]
    code = t.code
    assert code["zoo"] == zoo_version()
    assert "zoo.plugins.task_copy" in code["sources"] and len(code["sources"]["zoo.plugins.task_copy"]) == 64
    assert any(m.startswith("zoo.plugins.attention_") for m in code["sources"])  # the attention kernel's module
    assert (code["git"] is None) == bool(code["git_note"])  # a checkout: commit + dirty; else said so
    if code["git"]:
        assert len(code["git"]["commit"]) == 40 and isinstance(code["git"]["dirty"], bool)
    other = json.loads(json.dumps(t.to_dict()))
    other["code"]["sources"]["zoo.plugins.task_copy"] = "0" * 64
    assert ze.Trial.from_dict(other).key() != t.key()  # other code: another trial


def zoo_version():
    from zoo.version import __version__
    return __version__


def test_a_plugin_edit_between_runs_is_refused_naming_the_file(tmp_path, monkeypatch):
    src = tmp_path / "pkg" / "h1_tmp_task_plugin.py"
    src.parent.mkdir()
    src.write_text(TASK_SRC, encoding="utf-8")
    monkeypatch.syspath_prepend(str(src.parent))
    # a registry of this test's own: the tmp plugin never leaks into the process-wide one (it did,
    # and the later every-task-has-a-paragraph test failed on its one-line docstring)
    reg = Registry()
    reg.add_plugin(importlib.import_module("h1_tmp_task_plugin"), name="h1_tmp_task")
    old = set_registry(reg)
    try:
        edited_between_runs(tmp_path, src)
    finally:
        set_registry(old)
        sys.modules.pop("h1_tmp_task_plugin", None)


def edited_between_runs(tmp_path, src):
    out = tmp_path / "out"
    exp = tiny("h1_tmp_copy")
    first = ze.run(exp, out=out, executor="inline", threads=1, report=False)
    assert first.done
    rec = json.loads((first.trials[0].folder / "result.json").read_text())
    assert "h1_tmp_task_plugin" in rec["code"]["sources"] and len(rec["weights_sha256"]) == 64
    assert len(rec["spec_sha256"]) == 64 and len(rec["record_sha256"]) == 64
    # the plugin's source changes (a comment is enough: the digest is of the file)
    src.write_text(TASK_SRC + "# edited\n", encoding="utf-8")
    with pytest.raises(ExperimentError) as e:
        ze.run(exp, out=out, executor="inline", threads=1, report=False)
    assert "h1_tmp_task_plugin changed" in str(e.value) and "--rerun-mismatched" in e.value.fix
    res = ze.Results.from_dir(out)  # the report marks them, never counts them
    assert {t.status for t in res.trials} == {"mismatched"}
    assert "not counted" in res.markdown() and "h1_tmp_task_plugin changed" in res.markdown()
    again = ze.run(exp, out=out, executor="inline", threads=1, report=False, rerun_mismatched=True)
    assert again.done and all(t.result["finished"] > rec["finished"] for t in again.trials)


def test_swapped_checkpoints_and_an_edited_record_are_refused(tmp_path):
    out = tmp_path / "out"
    res = ze.run(tiny(), out=out, executor="inline", threads=1, report=False)
    a0, a1 = (out / "trials" / "a" / f"seed{s}" / "model.safetensors" for s in (0, 1))
    tmp = a0.with_name("x")
    a0.rename(tmp)
    a1.rename(a0)
    tmp.rename(a1)
    res.refresh()
    bad = {t.id: t.reason for t in res.trials if t.status == "mismatched"}
    assert set(bad) == {"a/seed0", "a/seed1"} and "swapped" in bad["a/seed0"]
    assert all(r["n"] == 0 for r in res.table() if r["variant"] == "a")
    with pytest.raises(ExperimentError) as e:
        ze.run(tiny(), out=out, executor="inline", threads=1, report=False)
    assert "2 finished trial(s) do not match" in str(e.value)
    # an edited result.json (a better number typed in) is refused too
    f = out / "trials" / "b" / "seed0" / "result.json"
    rec = json.loads(f.read_text())
    rec["metrics"]["acc"] = 1.0
    f.write_text(json.dumps(rec))
    assert "edited" in {t.id: t.reason for t in res.refresh().trials}["b/seed0"]
    fixed = ze.run(tiny(), out=out, executor="inline", threads=1, report=False, rerun_mismatched=True)
    assert fixed.done and {t.status for t in fixed.trials} == {"done"}
