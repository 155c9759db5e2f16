"""Errors carry message ids, not English to match (issue 31, goal 4): the engine words a ``ZooError``
from its catalogue (``zoo.messages.MESSAGES``: id -> English templates), keeps the id and the params
on the error, and the UI words it in 中文 from its own catalogue (``ui.i18n.ERRORS_ZH``) -- so
rewording the English never loses the Chinese, and no regular expression reads error text."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import zoo
from zoo import messages
from zoo.errors import ParamError, UnknownComponentError, ZooError
from zoo.messages import MESSAGES, Message, fields
from zoo.ui import common, i18n

ROOT = Path(__file__).resolve().parents[2]


def test_every_engine_message_has_chinese_with_the_same_parameters():
    assert set(MESSAGES) == set(i18n.ERRORS_ZH), set(MESSAGES) ^ set(i18n.ERRORS_ZH)
    for mid, en in MESSAGES.items():
        zh_what, zh_fix = i18n.ERRORS_ZH[mid]
        for part, en_text, zh_text in (("what", en.what, zh_what), ("fix", en.fix, zh_fix)):
            assert (en_text is None) == (zh_text is None), (mid, part)
            assert fields(en_text) == fields(zh_text), (mid, part, fields(en_text), fields(zh_text))


def test_every_message_id_is_raised_somewhere():
    """No dead entries: each id is named by a raise site (or a ``fix=``) in the engine or a plugin."""
    source = "\n".join(p.read_text(encoding="utf-8") for folder in ("zoo", "plugins")
                       for p in (ROOT / folder).rglob("*.py") if p.name != "messages.py")
    unused = [mid for mid in MESSAGES if f'"{mid}"' not in source]
    assert not unused, unused


def _raised(make) -> ZooError:
    with pytest.raises(ZooError) as info:
        make()
    return info.value


# (what raises, its message id, words of the Chinese problem, words of the Chinese fix)
REAL = [
    (lambda: zoo.build("gpt_tiny", budget=1000), "budget.tensor_layers",
     "搭建这个模型需要的内存超过了预算 1.0 KB", "调小 d_model，或传入更大的预算"),
    (lambda: zoo.build("gpt_tiny", budget=2e6), "budget.makes", "模型需要 3.6 MB；vocab_size = 512", "调小 vocab_size"),
    (lambda: zoo.build("gpt_tiny", attention="banana"), "registry.unknown_component",
     "没有名为 'banana' 的注意力实现", "安装提供它的插件，或改用已注册的名称"),
    (lambda: zoo.spec("gpt_tiny", attention="sdpx"), "registry.unknown_component",
     "没有名为 'sdpx' 的注意力实现", "是不是想写 'sdpa'？"),
    (lambda: zoo.spec("gpt_tiny", mask={"kind": "sliding_window", "window": -1}), "param.at_least",
     "window 必须 >= 1，实际是 -1", "查看该组件的说明"),  # a plugin's config, through make_config
    (lambda: zoo.spec("gpt_tiny", num_heads=3), "spec.heads_divide", "d_model 128 不能被 num_heads 3 整除",
     "显式设置 head_dim"),
    (lambda: zoo.spec("arch: [\n"), "yaml.invalid_at", "YAML 语法错误（第 2 行第 1 列）", "修正 YAML 语法"),
    (lambda: zoo.io.tokenizers.get_tokenizer(object()), "tokenizer.missing", "给了文本，但模型没有分词器",
     "zoo.tokenizer('byte')"),
    (lambda: zoo.guard.compat.require(zoo.spec("gpt_tiny", attention="sdpa"), "returns_weights", "a heatmap"),
     "compat.undeclared", "a heatmap需要 returns weights，但注意力实现 'sdpa'", "把 attention 换成可选值之一"),
    (lambda: zoo.build("gpt_tiny", max_len=8).generate(torch.ones(1, 6, dtype=torch.long), 4),
     "generate.too_long", "提示（6 个 token）加上最多生成的 4 个 token 超过了 max_len 8", "最多生成 3 个 token"),
]


@pytest.mark.parametrize("make,mid,problem,fix", REAL, ids=[r[1] for r in REAL])
def test_real_errors_read_in_chinese_from_their_id(make, mid, problem, fix):
    exc = _raised(make)
    assert exc.message_id == mid, (exc.message_id, str(exc))
    zh_what, zh_fix = i18n.error_text(exc, "zh")
    assert problem in zh_what and fix in zh_fix, (zh_what, zh_fix)
    assert i18n.error_text(exc, "en") == (exc.what, exc.fix)  # English: as raised
    text = i18n.format_error(exc, "zh")
    assert f"问题: {zh_what}" in text and f"修改建议: {zh_fix}" in text


def test_rewording_the_english_keeps_the_chinese(monkeypatch):
    declared = MESSAGES["registry.unknown_component"].words  # {family} is a family's name: the id says so
    monkeypatch.setitem(MESSAGES, "registry.unknown_component",
                        Message("there is no {family} called '{name}'", "install one that provides it", declared))
    exc = _raised(lambda: zoo.build("gpt_tiny", attention="banana"))
    assert exc.what == "there is no attention called 'banana'" and exc.fix == "install one that provides it"
    assert "no attention named" not in str(exc)  # the English follows the catalogue...
    text = i18n.format_error(exc, "zh")  # ...and the Chinese does not depend on it
    assert "问题: 没有名为 'banana' 的注意力实现" in text and "修改建议: 安装提供它的插件，或改用已注册的名称" in text


def test_a_value_is_worded_by_the_kind_its_id_declares_not_by_its_parameters_name(monkeypatch):
    """``why`` of a budget is where the budget came from (worded in Chinese); a ``why`` of another
    message is that message's own value, shown as given (the catalogue keyed the wording on the
    name: a plugin's ``why`` was read as a budget's origin)."""
    from zoo import messages

    origin = "available memory on cpu"
    budget = ZooError.of("budget.makes", where="d_model", limit="1 GB", why=origin, total="2 GB",
                         field="d_model", value=9, name="w", shape="(9, 9)", size="1 GB", fix="budget.fix")
    assert "本机 CPU 当前的可用内存" in i18n.error_text(budget, "zh")[0]
    monkeypatch.setitem(MESSAGES, "plugin_x.reason", Message("cannot use it: {why}"))
    monkeypatch.setitem(i18n.ERRORS_ZH, "plugin_x.reason", ("无法使用：{why}", None))
    own = ZooError.of("plugin_x.reason", where="x", why=origin)
    assert i18n.error_text(own, "zh")[0] == f"无法使用：{origin}"  # its own value, as given
    monkeypatch.setitem(MESSAGES, "plugin_x.reason", Message("cannot use it: {why}", None,
                                                             (("why", messages.BUDGET_ORIGIN),)))
    assert i18n.error_text(own, "zh")[0] == "无法使用：本机 CPU 当前的可用内存"  # declared: a budget's origin


def test_an_error_without_an_id_or_a_translation_is_shown_in_english(monkeypatch):
    plain = ZooError("something only English", where="x", fix="do this")
    assert plain.message_id is None and plain.params == {}
    assert i18n.format_error(plain, "zh") == "位置: x\n问题: something only English\n修改建议: do this"
    monkeypatch.delitem(i18n.ERRORS_ZH, "spec.heads_divide")
    exc = _raised(lambda: zoo.spec("gpt_tiny", num_heads=3))
    assert i18n.error_text(exc, "zh") == (exc.what, exc.fix)


def test_an_error_with_an_id_keeps_its_english_and_its_params():
    exc = UnknownComponentError.of("registry.unknown_component", where="attention.kind", options=["sdpa"],
                                   family="attention", name="sdpx", suggestion="sdpa", plugins="half",
                                   fix=("hint.did_you_mean", "registry.broken_plugins"))
    assert str(exc) == ("attention.kind: no attention named 'sdpx'. valid options: sdpa. fix: did you mean "
                        "'sdpa'?; plugins that failed to load: half, see `zoo plugins`.")
    assert exc.params["name"] == "sdpx" and exc.fix_ids == ("hint.did_you_mean", "registry.broken_plugins")
    assert i18n.error_text(exc, "zh")[1] == "是不是想写 'sdpa'？加载失败的插件：half，详见 `zoo plugins`"
    with pytest.raises(KeyError):
        ZooError.of("no.such.id")
    with pytest.raises(KeyError):
        ZooError.of("spec.heads_divide", d_model=3)  # a missing param is a bug, not a message


def test_a_plugin_config_raises_a_value_error_with_an_id():
    from zoo.plugins.masks import SlidingWindowConfig

    with pytest.raises(ValueError) as info:  # plain callers of a config still catch a ValueError
        SlidingWindowConfig(window=0)
    assert isinstance(info.value, ParamError) and info.value.message_id == "param.at_least"
    assert info.value.params == {"name": "window", "minimum": 1, "value": 0}


def test_a_plugin_may_add_its_own_message():
    messages.add("test_plugin.rank", what="rank {r} is too large", fix="use a rank below {limit}")
    try:
        messages.add("test_plugin.rank", what="rank {r} is too large", fix="use a rank below {limit}")  # again: fine
        with pytest.raises(ValueError):
            messages.add("test_plugin.rank", what="something else")
        exc = zoo.SpecError.of("test_plugin.rank", r=9, limit=4)
        assert str(exc) == "rank 9 is too large. fix: use a rank below 4."
        assert i18n.error_text(exc, "zh") == (exc.what, exc.fix)  # no Chinese for it: its English
    finally:
        del MESSAGES["test_plugin.rank"]


def test_the_uis_own_errors_carry_their_keys():
    with pytest.raises(zoo.CheckpointError) as info:
        common.check_name("../etc", "zh")  # raised in English whatever the page's language...
    exc = info.value
    assert exc.message_id == "ui.err.bad_name" and exc.what == "'../etc' is not a checkpoint name"
    assert i18n.error_text(exc, "zh") == ("'../etc' 不是检查点名称", "请从列表中选择名称；不接受路径")  # ...worded here
    record = common.error_record(exc)
    assert common.error_again("zh", record) == common.error_markdown(exc, "zh")


#: the one regular expression ui/i18n.py may hold: ``{key}`` placeholders in label templates
LABEL_REGEX_USERS = {"keys_of", "updates"}


def test_no_regular_expression_reads_error_text_in_i18n():
    """ui/i18n.py words errors from their ids: a regex in it (over error text or anything but the
    label templates) fails here, as do the old regex tables' names."""
    tree = ast.parse((ROOT / "ui" / "i18n.py").read_text(encoding="utf-8"))
    patterns = {t.id for node in tree.body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name) and "re." in ast.unparse(node.value)}
    assert patterns == {"_TEMPLATE"}, patterns

    def uses_re(node):
        return any((isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "re")
                   or (isinstance(n, ast.Name) and n.id in patterns) for n in ast.walk(node))

    functions = [f for node in tree.body for f in (node.body if isinstance(node, ast.ClassDef) else [node])
                 if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]  # module-level and methods
    users = {f.name for f in functions if uses_re(f)}
    assert users <= LABEL_REGEX_USERS, users - LABEL_REGEX_USERS
    for gone in ("translate_error_text", "retranslate", "_ERRORS_ZH", "_template_patterns"):
        assert not hasattr(i18n, gone), gone
    assert all(isinstance(v, tuple) and len(v) == 2 for v in i18n.ERRORS_ZH.values())
