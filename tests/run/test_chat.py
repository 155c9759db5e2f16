"""Issue 24, goal 5: chat templates (``zoo.run.chat``), ``model.chat``, ``zoo chat``.

The reference is transformers' ``apply_chat_template`` on a ``PreTrainedTokenizerFast`` built
offline around the same template, for the templates of five real families (the ``chat_template``
and special tokens of their ``tokenizer_config.json``, in tests/fixtures/chat_templates/): the
rendered text must be identical, character for character, and the ids identical too.  ``model.chat``
is checked against transformers' greedy ``generate`` on the same conversation.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

import zoo  # noqa: E402
from zoo.run.chat import ChatError, folder_template, render, template_of  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"
FAMILIES = sorted(p.stem for p in FIXTURES.glob("*.json"))
SPECIALS = ("bos_token", "eos_token", "unk_token", "pad_token")

CONVERSATIONS = {
    "one turn": [{"role": "user", "content": "Hello!"}],
    "multi turn": [{"role": "user", "content": "  Hi there  "}, {"role": "assistant", "content": "Hello! How can I help?"},
                   {"role": "user", "content": "What is 2+2? <b>&</b>"}],
    "system": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "你好，世界"},
               {"role": "assistant", "content": "Hi."}, {"role": "user", "content": "Again\nwith a newline"}],
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city (°C)",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


def word_tokenizer(extra=()):
    """A small offline tokenizers object: byte-level BPE over the 256 byte symbols (every character
    is known; no merges) plus the families' special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from zoo.convert.gguf import byte_alphabet

    specials = ["<unk>", "<s>", "</s>", "<bos>", "<eos>", "<pad>", "<|im_start|>", "<|im_end|>", "<|endoftext|>",
                "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<start_of_turn>",
                "<end_of_turn>", *extra]
    vocab = {c: i for i, c in enumerate(byte_alphabet().values())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    return tok


def hf_tokenizer(family: str):
    f = fixture(family)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=word_tokenizer(), chat_template=f["chat_template"],
                                                **{k: f[k] for k in SPECIALS if k in f})


CASES = [(f, c, g) for f in FAMILIES for c in CONVERSATIONS for g in (True, False)]


@pytest.mark.parametrize("family, convo, gen", CASES, ids=[f"{f}-{c}-{'gen' if g else 'nogen'}" for f, c, g in CASES])
def test_rendering_equals_transformers_apply_chat_template(family, convo, gen):
    f, ref = fixture(family), hf_tokenizer(family)
    msgs = CONVERSATIONS[convo]
    variables = {k: f[k] for k in SPECIALS if k in f}
    try:
        want = ref.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
    except Exception as exc:  # the template refuses (Gemma: no system role): so must zoo, with the same words
        with pytest.raises(ChatError) as e:
            render(f["chat_template"], msgs, add_generation_prompt=gen, **variables)
        assert str(exc).split("\n")[0][:40] in str(e.value)
        return
    got = render(f["chat_template"], msgs, add_generation_prompt=gen, **variables)
    assert got == want
    ids = ref.apply_chat_template(msgs, tokenize=True, add_generation_prompt=gen, return_dict=False)
    assert ref.encode(got, add_special_tokens=False) == list(ids)


def test_tools_and_tojson_render_like_transformers():
    f, ref = fixture("qwen2.5"), hf_tokenizer("qwen2.5")
    msgs = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
                "name": "get_weather", "arguments": {"city": "Paris <é>"}}}]},
            {"role": "tool", "content": "21 °C"}, {"role": "tool", "content": "sunny"}]
    want = ref.apply_chat_template(msgs, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert render(f["chat_template"], msgs, tools=TOOLS, add_generation_prompt=True, eos_token="<|im_end|>") == want
    assert '"Paris <é>"' in want  # tojson keeps non-ASCII and HTML characters


def test_the_generation_tag_and_namespace_helpers():
    tpl = ("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
           "{% generation %}{{ m['content'] }}{% endgeneration %}{% endfor %}{{ ns.n }}")
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    ref = transformers.PreTrainedTokenizerFast(tokenizer_object=word_tokenizer(), chat_template=tpl)
    assert render(tpl, msgs) == ref.apply_chat_template(msgs, tokenize=False) == "ab2"


@pytest.mark.parametrize("template, match", [
    ("{{ messages.append(1) }}", "sandbox forbids"),  # the immutable sandbox: no mutation
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "sandbox forbids|refused|failed"),
    ("{% set ns = namespace(_x=1) %}", "sandbox forbids"),
    ("{% for m in messages %}{{ m['content'] }", "does not parse"),
    ("{{ raise_exception('roles must alternate') }}", "roles must alternate"),
])
def test_hostile_or_broken_templates_are_chat_errors(template, match):
    with pytest.raises(ChatError, match=match):
        render(template, [{"role": "user", "content": "x"}])


@pytest.mark.parametrize("messages", [[], "hi", [{"content": "no role"}], [{"role": "user", "content": 5}], None])
def test_bad_conversations_are_chat_errors(messages):
    with pytest.raises(ChatError, match="messages"):
        render("{{ messages }}", messages)


# ---------------------------------------------------------------------- a model that chats
def hf_folder(tmp_path, family="smollm2"):
    """A random Llama with a word-level tokenizer and ``family``'s template, saved like a Hub folder."""
    f = fixture(family)
    tok = hf_tokenizer(family)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                   eos_token_id=tok.convert_tokens_to_ids(f["eos_token"]))
    hf = transformers.LlamaForCausalLM(cfg).eval()
    d = tmp_path / "hf"
    hf.save_pretrained(d)
    tok.save_pretrained(d)
    return d, hf, tok


def test_model_chat_equals_transformers_generate_on_the_template(tmp_path):
    d, hf, tok = hf_folder(tmp_path)
    model = zoo.convert.from_pretrained(d)
    assert template_of(model)["template"] == fixture("smollm2")["chat_template"]
    msgs = CONVERSATIONS["multi turn"]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    with torch.no_grad():
        out = hf.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=eos, pad_token_id=eos)
    new = [t for t in out[0, ids.shape[1]:].tolist() if t != eos]
    want = tok.decode(new, skip_special_tokens=True)
    reply = model.chat(msgs, max_new_tokens=12)
    assert reply == want
    assert "".join(model.chat(msgs, max_new_tokens=12, stream=True)) == want
    assert zoo.run.chat.prompt(model, msgs) == tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)


def test_the_template_survives_save_load_and_a_second_save(tmp_path):
    d, _, _ = hf_folder(tmp_path, "llama3")
    model = zoo.convert.from_pretrained(d)
    zoo.save(model, tmp_path / "a")
    a = zoo.load(tmp_path / "a")
    assert template_of(a) == template_of(model) == folder_template(d)
    assert template_of(a)["special_tokens"]["bos_token"] == "<|begin_of_text|>"
    zoo.save(a, tmp_path / "b")  # load -> save keeps it (CARRIED_EXTRAS)
    b = zoo.load(tmp_path / "b", verify=True)
    assert template_of(b) == template_of(model)
    assert zoo.run.chat.prompt(b, CONVERSATIONS["system"]).startswith("<|begin_of_text|><|start_header_id|>system")


def test_folder_templates_in_their_three_forms(tmp_path):
    tpl = fixture("zephyr")["chat_template"]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": [
        {"name": "tool_use", "template": "x"}, {"name": "default", "template": tpl}], "eos_token": {"content": "</s>"}}))
    got = folder_template(tmp_path)
    assert got["template"] == tpl and got["special_tokens"] == {"eos_token": "</s>"}
    (tmp_path / "chat_template.jinja").write_text("{{ 'jinja file wins' }}")
    assert folder_template(tmp_path)["template"] == "{{ 'jinja file wins' }}"
    (tmp_path / "chat_template.jinja").write_text("{% if %}")
    with pytest.raises(ChatError, match="does not parse"):
        folder_template(tmp_path)


def test_a_broken_template_does_not_stop_the_weights_converting(tmp_path):
    d, _, _ = hf_folder(tmp_path)
    (d / "chat_template.jinja").write_text("{% for %}")
    model = zoo.convert.from_pretrained(d)
    assert template_of(model) is None and "does not parse" in model.convert_info["chat_template_error"]


def test_chat_without_a_template_says_what_to_do(tmp_path):
    model = zoo.build("gpt_tiny")
    model.tokenizer = zoo.tokenizer("byte")
    with pytest.raises(ChatError, match="no chat template") as e:
        model.chat([{"role": "user", "content": "hi"}])
    assert "tokenizer_config.json" in e.value.fix


def test_zoo_chat_command(tmp_path, capsys):
    from click.testing import CliRunner

    from zoo.cli import cli

    d, hf, tok = hf_folder(tmp_path)
    model = zoo.convert.from_pretrained(d)
    zoo.save(model, tmp_path / "ck")
    msgs = [{"role": "user", "content": "Hello!"}]
    first = model.chat(msgs, max_new_tokens=6)
    second = model.chat(msgs + [{"role": "assistant", "content": first}, {"role": "user", "content": "What is 2+2?"}],
                        max_new_tokens=6)
    r = CliRunner().invoke(cli, ["chat", str(tmp_path / "ck"), "-m", "Hello!", "-m", "What is 2+2?", "-n", "6"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == [first, second]
    # interactive: /prompt shows the rendered next turn, /reset forgets, end of input leaves
    r = CliRunner().invoke(cli, ["chat", str(tmp_path / "ck"), "-n", "6", "--system", "Be brief."],
                           input="Hello!\n/prompt\n/reset\n/exit\n")
    assert r.exit_code == 0, r.output
    with_system = model.chat([{"role": "system", "content": "Be brief."}] + msgs, max_new_tokens=6)
    assert "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello!" in r.output
    assert f"assistant> {with_system}\n" in r.output
    zoo.save(zoo.build("gpt_tiny"), tmp_path / "plain", tokenizer=zoo.tokenizer("byte"))
    from zoo.cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["chat", str(tmp_path / "plain"), "-m", "hi"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "no chat template" in err[0] and "--template" in err[0]


def test_a_long_conversation_gets_the_room_its_context_leaves(tmp_path):
    d, _, _ = hf_folder(tmp_path)
    model = zoo.convert.from_pretrained(d)  # max_len 256
    msgs = [{"role": "user", "content": "x" * 100}]
    n = len(model.tokenizer.encode(zoo.run.chat.prompt(model, msgs)))
    pieces = list(model.chat(msgs, max_new_tokens=1000, stream=True, stop_tokens=[]))
    assert 1 <= len(pieces) <= 256 - n + 1  # each piece is at least one token
    with pytest.raises(zoo.ZooError, match="exceeds max_len"):  # what the cap avoids
        model.generate(zoo.run.chat.prompt(model, msgs), 1000)
    with pytest.raises(ChatError, match="reads at most 256"):
        model.chat([{"role": "user", "content": "x" * 300}])
