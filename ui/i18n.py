"""English / 中文 for every label and message of the UI.

Every visible string of the app is a key in :data:`STRINGS` with an English and a Chinese text.  Tabs
create their components with :meth:`Translator.add`, which remembers which attribute (``label``,
``value``, ``info``, ``placeholder``) shows which key; the language switch then returns one
``gr.update`` per remembered component (:meth:`Translator.updates`).  Handlers format their messages
with :func:`t` and the language held in a ``gr.State``.

A ``zoo.ZooError`` carries the id of its message and its params (:mod:`zoo.messages`);
:func:`format_error` words its problem and fix in the page's language from them (:data:`ERRORS_ZH`;
the UI's own errors, :func:`ui_error`, from :data:`STRINGS`) and wraps its parts (where / what /
valid options / fix) in localised headings.  No English error text is ever read back.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from zoo import messages as _messages

from .paths import shown_paths

LANGS = {"English": "en", "中文": "zh"}
DEFAULT = "en"

#: key -> (English, 中文).  Keep both columns filled: tests check that no key lacks a translation.
STRINGS: dict[str, tuple[str, str]] = {
    # ------------------------------------------------------------------ app shell
    "app.title": ("zoo — a Transformer model zoo", "zoo — Transformer 模型动物园"),
    "app.intro": ("Assemble GPT / BERT / T5 from pluggable parts, run shipped checkpoints, look inside "
                  "attention, and check every kernel against a naive reference. Everything runs on "
                  "this machine; nothing is sent anywhere.",
                  "用可插拔的组件拼装 GPT / BERT / T5，运行自带的检查点，观察注意力内部，并把每个注意力实现"
                  "与朴素参考实现对拍。一切都在本机运行，不向外发送任何数据。"),
    "app.language": ("Language", "语言"),
    "tab.build": ("Build", "搭建"),
    "tab.run": ("Run", "运行"),
    "tab.inspect": ("Inspect", "观察"),
    "tab.compare": ("Compare", "对比"),
    "tab.verify": ("Verify", "校验"),
    "tab.plugins": ("Plugins", "插件"),
    "tab.interp": ("Interpret", "解释"),
    "tab.experiments": ("Experiments", "实验"),
    # ------------------------------------------------------------------ errors
    "err.title": ("Error", "错误"),
    "err.where": ("Where", "位置"),
    "err.what": ("Problem", "问题"),
    "err.options": ("Valid options", "可选值"),
    "err.fix": ("Fix", "修改建议"),
    "err.internal": ("Something went wrong inside zoo ({kind}). The details are in the server log.",
                     "zoo 内部出错（{kind}），详情见服务器日志。"),
    "err.limit": ("{field} = {value} is above this UI's limit of {limit}",
                  "{field} = {value} 超过了界面允许的上限 {limit}"),
    "err.limit_fix": ("use a smaller value (the limits keep one browser from exhausting the machine)",
                      "请改用更小的值（上限用来防止单个浏览器耗尽本机资源）"),
    # ------------------------------------------------------------------ a stored checkpoint's budget (ui/budget.py)
    "budget.weights": ("checkpoint '{name}' needs {need} for its weights, more than the budget of {limit} ({why})",
                       "检查点 '{name}' 的权重需要 {need}，超过了预算 {limit}（{why}）"),
    "budget.weights_fix": ("pick a checkpoint that fits (the valid options), free memory on the server, or start "
                           "the UI on a machine with more memory",
                           "请选择放得下的检查点（见可选值），释放服务器内存，或在内存更大的机器上启动界面"),
    "budget.card": ("size: weights {weights} (budget {limit}, {why}); one request holds at most {n} tokens "
                    "(prompt + new) of max_len {max_len}, a KV cache of {kv}.",
                    "大小：权重 {weights}（预算 {limit}，{why}）；每次请求最多 {n} 个 token（提示 + 生成），"
                    "模型的 max_len 为 {max_len}，KV 缓存 {kv}。"),
    "budget.cap_tokens": ("The model's max_len {max_len} is capped per request at {n} tokens by this UI, not refused.",
                          "本界面把每次请求限制在 {n} 个 token（模型的 max_len 为 {max_len}），而不是拒绝它。"),
    "budget.cap_work": ("The model's max_len {max_len} is capped per request at {n} tokens by this UI: a request "
                        "does at most {flops} FLOPs of work (2 × parameters per token).",
                        "本界面把每次请求限制在 {n} 个 token（模型的 max_len 为 {max_len}）：每次请求的计算量最多 "
                        "{flops} FLOPs（每个 token 约 2 × 参数量）。"),
    "budget.prompt_too_long": ("the prompt is {n} tokens; one request holds at most {cap} here (the model's "
                               "max_len is {max_len})",
                               "提示有 {n} 个 token；这里每次请求最多 {cap} 个（模型的 max_len 为 {max_len}）"),
    "budget.too_many_fix": ("give a shorter text", "请给出更短的文本"),
    "budget.inspect_copy": ("the Inspect tab's private copy of the model (a trace swaps kernels for its run) needs "
                            "about {need}, more than the budget of {limit} ({why})",
                            "观察页的模型私有副本（追踪时会临时替换注意力实现）大约需要 {need}，超过了预算 {limit}（{why}）"),
    "budget.inspect_copy_fix": ("free memory on the server, or inspect a smaller checkpoint",
                                "请释放服务器内存，或观察更小的检查点"),
    "err.arg_call": ("called with the wrong arguments ({detail})", "调用的参数不对（{detail}）"),
    "err.arg_call_fix": ("send the fields this action takes", "请按此操作所需的字段发送"),
    "build.takes_number": ("{field} takes a number, got {value}", "{field} 只接受数，实际是 {value}"),
    "build.takes_number_fix": ("type a number for {field}", "请为 {field} 输入一个数"),
    "build.one_value": ("a form field takes one value, got {value}", "表单字段只接受一个值，实际是 {value}"),
    "build.one_value_fix": ("choose or type one value for {field}", "请为 {field} 选择或输入一个值"),
    "build.unknown_form_field": ("unknown form field '{field}'", "未知的表单字段 '{field}'"),
    "build.component_gone": ("the component is no longer in the YAML", "YAML 里已经没有这个组件"),
    "build.component_gone_fix": ("edit the YAML directly", "请直接编辑 YAML"),
    "exp.empty": ("the experiment is empty", "实验是空的"),
    "exp.empty_fix": ("pick a shipped experiment or type its YAML", "请选一个自带的实验，或输入它的 YAML"),
    "exp.no_shipped": ("no shipped experiment named '{name}'", "没有名为 '{name}' 的自带实验"),
    "exp.no_shipped_fix": ("pick one from the list", "请从列表中选一个"),
    "interp.unknown_kind": ("unknown kind '{kind}'", "未知的类别 '{kind}'"),
    "err.bad_name": ("'{name}' is not a checkpoint name", "'{name}' 不是检查点名称"),
    "err.bad_name_fix": ("pick a name from the list; paths are not accepted",
                         "请从列表中选择名称；不接受路径"),
    "err.unknown_ckpt": ("no checkpoint named '{name}'", "没有名为 '{name}' 的检查点"),
    "err.no_ckpt": ("choose a checkpoint first", "请先选择一个检查点"),
    "err.empty_text": ("type some text first", "请先输入文本"),
    "run.card_heads": ("{n} heads", "{n} 个注意力头"),
    "err.empty_text_fix": ("type a prompt in the box, or pick one of the examples", "请在框中输入提示，或选用一个示例"),
    "err.matrix": ("{name} must be a table of numbers with {shape}", "{name} 必须是 {shape} 的数字表格"),
    # ------------------------------------------------------------------ build tab
    "build.intro": ("Pick a preset or fill in the form; the YAML on the right follows every change, and "
                    "editing the YAML updates the form. Component parameters come from each "
                    "component's config, so installed plugins appear here automatically.",
                    "选择一个预设或填写表单；右侧的 YAML 随表单实时更新，直接编辑 YAML 也会同步回表单。"
                    "组件参数来自每个组件自己的配置，所以安装的第三方插件会自动出现在这里。"),
    "build.preset": ("Start from preset", "从预设开始"),
    "build.no_preset": ("no preset named '{name}'", "没有名为 '{name}' 的预设"),
    "build.no_preset_fix": ("pick one from the list", "请从列表中选一个"),
    "build.load": ("Load preset", "载入预设"),
    "build.arch": ("Architecture", "架构"),
    "build.name": ("Name", "名称"),
    "build.vocab_size": ("Vocabulary size", "词表大小"),
    "build.max_len": ("Maximum length", "最大长度"),
    "build.d_model": ("d_model (width)", "d_model（宽度）"),
    "build.num_layers": ("Layers", "层数"),
    "build.num_heads": ("Heads", "头数"),
    "build.num_kv_heads": ("Key/value heads (0 = same as heads)", "键/值头数（0 表示与头数相同）"),
    "build.d_ff": ("d_ff (0 = 4 × d_model)", "d_ff（0 表示 4 × d_model）"),
    "build.dropout": ("Dropout", "Dropout"),
    # "build.<field>" of each component family: derived from the family table (family_strings)
    "build.params_heading": ("Component parameters", "组件参数"),
    "build.no_params": ("The chosen components take no parameters.", "所选组件没有参数。"),
    "build.stack_note": ("Per-stack overrides (`encoder:` / `decoder:` sections) and list masks are "
                         "edited in the YAML.",
                         "按栈覆盖（`encoder:` / `decoder:` 段）和组合掩码请直接在 YAML 中编辑。"),
    "build.yaml": ("Spec (YAML)", "模型规格（YAML）"),
    "build.valid": ("Valid spec: {params} parameters.", "规格有效：共 {params} 个参数。"),
    "build.invalid": ("Invalid spec", "规格无效"),
    "build.table": ("Parameters per component", "各组件参数量"),
    "build.stale": ("The spec above is invalid: fix it to see its structure.",
                    "上面的规格无效：改正后才能看到它的结构。"),
    "hint.future": ("{where}mask '{mask}' lets the decoder see later tokens: it cannot generate text left "
                    "to right (use mask: causal, or prefix for a prefix LM)",
                    "{where}掩码 '{mask}' 让解码器看到后面的词：它无法从左到右生成文本（请用 mask: causal，"
                    "前缀语言模型用 prefix）"),
    "hint.encoder_causal": ("{where}this encoder only looks left (causal mask); BERT-style encoders use "
                            "mask: bidirectional", "{where}这个编码器只能看左边（因果掩码）；BERT 式编码器用 "
                            "mask: bidirectional"),
    "hint.window": ("{where}{kind} {size} ≥ max_len {max_len}: it covers every position, so it restricts "
                    "nothing", "{where}{kind} {size} ≥ max_len {max_len}：它覆盖所有位置，等于没有限制"),
    "hint.no_positions": ("{where}positions: none in a bidirectional stack: the model sees a bag of words "
                          "(word order is invisible)", "{where}双向栈没有位置编码：模型看到的是一袋词，"
                          "看不出词序"),
    "hint.batchnorm": ("{where}batchnorm mixes statistics across the batch and padding: for teaching, "
                       "not for real models", "{where}batchnorm 会在整个 batch 和 padding 之间混合统计量："
                       "用于教学，不适合真实模型"),
    "hint.narrow": ("{where}head_dim {hd} is very narrow: each head can hardly tell tokens apart",
                    "{where}head_dim {hd} 太窄：每个头几乎分不清不同的词"),
    "hint.dropout": ("dropout {p} is very high: most of each layer's signal is dropped in training",
                     "dropout {p} 太高：训练时每层大部分信号被丢弃"),
    "build.diagram": ("Block structure", "模块结构"),
    "build.cost": ("FLOPs and memory against sequence length", "FLOPs 与显存随序列长度的变化"),
    "build.memory": ("Cost per forward (batch 1, float32)", "每次前向的开销（batch 1，float32）"),
    "col.seq_len": ("length T", "长度 T"),
    "col.flops": ("FLOPs", "浮点运算"),
    "col.core_share": ("attention core share", "注意力核心占比"),
    "col.mem_params": ("parameters", "参数内存"),
    "col.mem_scores": ("score matrices", "注意力分数矩阵"),
    "col.mem_kv": ("KV cache", "KV 缓存"),
    "build.save_name": ("Checkpoint name", "检查点名称"),
    "build.save_info": ("saved under the runs folder; it then appears in Run, Inspect and Compare",
                        "保存到 runs 目录，之后可在运行、观察、对比页中选择"),
    "build.seed": ("Seed", "随机种子"),
    "build.shipped": ("'{name}' is a shipped checkpoint", "'{name}' 是自带的检查点"),
    "build.other_name": ("choose another name", "换一个名称"),
    "build.save": ("Save as checkpoint (random weights)", "保存为检查点（随机权重）"),
    "build.saved": ("Saved `{name}` ({params} parameters) to `{path}`.",
                    "已保存 `{name}`（{params} 个参数）到 `{path}`。"),
    "diag.encoder": ("encoder", "编码器"),
    "diag.decoder": ("decoder", "解码器"),
    "diag.token_embeddings": ("token embeddings", "词嵌入"),
    "diag.positions": ("positions", "位置编码"),
    "diag.pos_embed": ("added to the embeddings", "加到嵌入上"),
    "diag.pos_qk": ("rotates q and k", "旋转 q 和 k"),
    "diag.pos_bias": ("a bias on the attention scores", "加在注意力分数上的偏置"),
    "diag.pos_none": ("no positional information", "没有位置信息"),
    "diag.heads": ("{h} heads", "{h} 个头"),
    "diag.kv_heads": ("{h} key/value heads", "{h} 个键/值头"),
    "diag.mask": ("mask", "掩码"),
    "diag.self_attention": ("self-attention", "自注意力"),
    "diag.cross_attention": ("cross-attention", "交叉注意力"),
    "diag.cross_note": ("queries from the decoder, keys and values from the encoder output",
                        "查询来自解码器，键和值来自编码器输出"),
    "diag.ffn": ("feed-forward", "前馈网络"),
    "diag.residual": ("+ residual", "+ 残差"),
    "diag.placement": ("placement", "归一化位置"),
    "diag.final_norm": ("final norm", "最终归一化"),
    "diag.lm_head": ("LM head", "语言模型输出头"),
    "diag.tied": ("tied to the embeddings", "与嵌入共享权重"),
    "diag.head": ("head", "任务头"),
    "diag.pooling": ("{how} pooling → {n} labels", "{how} 池化 → {n} 个类别"),
    "col.component": ("component", "组件"),
    "col.params": ("parameters", "参数量"),
    "col.share": ("share", "占比"),
    "col.total": ("total", "合计"),
    # ------------------------------------------------------------------ run tab
    "run.intro": ("Choose a shipped or saved checkpoint. Decoders continue your text (streamed), "
                  "encoders fill in the mask token, encoder-decoders map input to output.",
                  "选择自带或保存的检查点。解码器会续写文本（流式输出），编码器填充掩码位置，"
                  "编码器-解码器把输入映射为输出。"),
    "run.checkpoint": ("Checkpoint", "检查点"),
    "run.refresh": ("Refresh list", "刷新列表"),
    "run.prompt": ("Input text", "输入文本"),
    "run.examples": ("Examples: one click picks the checkpoint and runs it",
                     "示例：点一下即选中检查点并运行"),
    "run.room": ("room: at most {n} tokens in a sequence (max_len), so new tokens are capped by what the "
                 "prompt leaves", "容量：一个序列最多 {n} 个 token（max_len），生成的 token 数不超过提示剩下的空间"),
    "run.max_new_tokens_info": ("capped by what the model's max_len leaves after the prompt",
                         "不超过模型的 max_len 在提示之后剩下的空间"),
    "run.output": ("Output", "输出"),
    "run.gen_defaults": ("generation settings of this checkpoint (its generation_config), where the controls "
                         "start: {items}", "本检查点自带的生成设置（generation_config），控件从这些值开始：{items}"),
    "run.temperature": ("Temperature (0 = greedy)", "温度（0 为贪心）"),
    "run.top_k": ("Top-k (0 = off)", "Top-k（0 为关闭）"),
    "run.top_p": ("Top-p (1 = off)", "Top-p（1 为关闭）"),
    "run.max_new_tokens": ("Max new tokens", "最多生成的 token 数"),
    "run.seed": ("Seed", "随机种子"),
    "run.repetition_penalty": ("Repetition penalty (1 = off)", "重复惩罚（1 为关闭）"),
    "run.repetition_penalty_info": ("Makes characters already in the text less likely (greedy decoding "
                            "too): small models otherwise loop, 风吹吹吹吹",
                            "让文中已出现的字更不容易再出现（贪心解码同样适用）：小模型否则会打转，如 风吹吹吹吹"),
    "run.num_beams": ("Beams (1 = off)", "束搜索宽度（1 为关闭）"),
    "run.num_beams_info": ("Beam search keeps this many candidate texts and returns the most likely "
                           "one (temperature 0 for classic beam search); the text appears at the end",
                           "束搜索同时保留这么多条候选文本，返回概率最高的一条（温度设为 0 即经典束搜索）；"
                           "文本在搜索结束时一次显示"),
    "run.length_penalty": ("Length penalty (beams)", "长度惩罚（束搜索）"),
    "run.no_repeat_ngram_size": ("No repeated n-grams (0 = off)", "禁止重复的 n 元组（0 为关闭）"),
    "run.go": ("Run", "运行"),
    "run.mask_hint": ("Encoders: write {mask} where a token is missing.",
                      "编码器：在缺失的位置写 {mask}。"),
    "run.no_tokenizer": ("this checkpoint has no tokenizer, so it cannot read text",
                         "该检查点没有分词器，无法读取文本"),
    "run.no_tokenizer_fix": ("train it with a tokenizer (see `zoo train`) or choose a shipped checkpoint",
                             "请带分词器训练它（见 `zoo train`），或选择自带的检查点"),
    "run.contract": ("input: {text}", "输入约定：{text}"),
    "run.contract_unreadable": ("input: unreadable ({problem})", "输入约定：无法读取（{problem}）"),
    "run.card_english": ("English", "English（英文原文）"),
    # a converted checkpoint's parity line: English as zoo.convert.certificate_text words it
    "run.cert": ("Parity with {reference}: max |Δlogit| {max}, mean |Δ| {mean}, top-1 agreement {top1}% "
                 "({dtype}, {probe}; zoo {zoo}, torch {torch}, {date})",
                 "与 {reference} 对拍：最大 |Δlogit| {max}，平均 |Δ| {mean}，top-1 一致率 {top1}%"
                 "（{dtype}，{probe}；zoo {zoo}，torch {torch}，{date}）"),
    "run.cert_none": ("Converted from transformers without a parity certificate (the source model was not "
                      "available at conversion: run `zoo convert --certify`)",
                      "由 transformers 模型转换而来，没有对拍证书（转换时源模型不可用：请运行 `zoo convert --certify`）"),
    "run.cert_gguf": ("Converted from the GGUF file {source} ({details}) without a parity certificate (a GGUF "
                      "file has no transformers folder to compare with)",
                      "由 GGUF 文件 {source}（{details}）转换而来，没有对拍证书（GGUF 文件没有可对比的 transformers 文件夹）"),
    "run.gguf_arch": ("architecture {arch}", "架构 {arch}"),
    "run.gguf_quant": ("quantised {kind}", "量化类型 {kind}"),
    "run.gguf_tensors": (": {tensors} tensors", "：张量 {tensors}"),
    "run.gguf_stored": ("stored as {tensors} tensors", "存储为 {tensors} 张量"),
    "run.note": ("note", "提示"),
    "run.fill_header": ("position", "位置"),
    "run.candidates": ("candidates (probability)", "候选（概率）"),
    "run.speed": ("**{rate:.1f} tokens/s** · {mb:.1f} MB read per token · {pct:.1f}% of the memory "
                  "roofline ({bw:.1f} GB/s, measured on this machine)",
                  "**每秒 {rate:.1f} 个 token** · 每个 token 读取 {mb:.1f} MB · 达到内存带宽上限"
                  "（本机实测 {bw:.1f} GB/s）的 {pct:.1f}%"),
    "run.speed_why": ("Why: each new token reads every weight from memory once and does a single "
                      "multiply-add with it, so decoding waits on memory bandwidth (memory-bound), "
                      "while the prompt's prefill reuses each weight for all of its tokens and is "
                      "limited by arithmetic (compute-bound).",
                      "原因：每生成一个 token 都要把全部权重从内存读一遍，而每个权重只做一次乘加，"
                      "所以解码的速度受内存带宽限制（访存受限）；而处理提示的预填充阶段，每个权重被"
                      "提示中的所有 token 复用，速度受算力限制（计算受限）。"),
    # ------------------------------------------------------------------ run tab: chat mode
    "chat.heading": ("Chat", "对话"),
    "chat.ready": ("This checkpoint carries a chat template: each message is written into the model's own "
                   "conversation format (open \"Prompt the model reads\" to see it) and the reply stops at "
                   "{stops}. The generation settings above apply here too.",
                   "该检查点带有对话模板：每条消息都按模型自己的对话格式写入提示（展开“模型读到的提示”即可看到），"
                   "回复在 {stops} 处停止。上面的生成设置同样适用于对话。"),
    "chat.ready_turn": ("This checkpoint carries a chat template: each message is written into the model's own "
                        "conversation format (open \"Prompt the model reads\" to see it), which ends every turn "
                        "with the end-of-turn token {turn}; the reply stops there (or at {others}). The generation "
                        "settings above apply here too.",
                        "该检查点带有对话模板：每条消息都按模型自己的对话格式写入提示（展开“模型读到的提示”即可看到），"
                        "模板在每轮结尾写下结束标记 {turn}；回复在那里停止（或在 {others} 处）。上面的生成设置同样适用于对话。"),
    "chat.unavailable": ("This checkpoint carries a chat template, but it cannot be opened here: {why}",
                         "该检查点带有对话模板，但这里无法打开它：{why}"),
    "chat.dropped_capped": ("the {n} oldest messages no longer fit in the {cap} tokens this UI gives one request "
                            "(the model's max_len is {max_len}) with room for a reply: the model did not see them "
                            "(they stay on screen)",
                            "最早的 {n} 条消息已放不进本界面每次请求的 {cap} 个 token（模型的 max_len 为 {max_len}）"
                            "并给回复留出空间：模型没有看到它们（它们仍显示在屏幕上）"),
    "chat.none": ("No chat mode: this checkpoint carries no chat template (the conversation format an "
                  "instruct model was tuned on), so it cannot hold a conversation. To get one, convert an "
                  "instruct model whose folder has tokenizer_config.json or chat_template.jinja "
                  "(`zoo convert HF_DIR runs/NAME`), or a GGUF file (`zoo convert FILE.gguf runs/NAME`): its "
                  "template comes along and this mode appears.",
                  "没有对话模式：该检查点不带对话模板（指令模型微调时所用的对话格式），所以无法进行对话。"
                  "要得到模板，请转换一个目录中有 tokenizer_config.json 或 chat_template.jinja 的指令模型"
                  "（`zoo convert HF_DIR runs/NAME`），或一个 GGUF 文件（`zoo convert FILE.gguf runs/NAME`）："
                  "模板会随之保存，这里就会出现对话模式。"),
    "chat.chatbot": ("Conversation", "对话记录"),
    "chat.system": ("System message (optional)", "系统消息（可选）"),
    "chat.message": ("Your message", "你的消息"),
    "chat.placeholder": ("Type a message, then Enter or Send", "输入消息，按回车或点发送"),
    "chat.send": ("Send", "发送"),
    "chat.clear": ("Clear conversation", "清空对话"),
    "chat.prompt": ("Prompt the model reads (the conversation rendered with the checkpoint's template)",
                    "模型读到的提示（用检查点的模板渲染的对话）"),
    "chat.dropped": ("the {n} oldest messages no longer fit in the model's max_len of {max_len} tokens with "
                     "room for a reply: the model did not see them (they stay on screen)",
                     "最早的 {n} 条消息已放不进模型的 max_len（{max_len} 个 token）并给回复留出空间："
                     "模型没有看到它们（它们仍显示在屏幕上）"),
    "chat.empty": ("type a message first", "请先输入一条消息"),
    "chat.empty_fix": ("write something in the message box", "在消息框里写点内容"),
    "chat.no_template": ("checkpoint '{name}' carries no chat template", "检查点 '{name}' 不带对话模板"),
    "chat.no_template_fix": ("convert an instruct model (`zoo convert HF_DIR runs/NAME`) or a GGUF file, or "
                             "continue text with the box above",
                             "转换一个指令模型（`zoo convert HF_DIR runs/NAME`）或 GGUF 文件，或用上面的输入框续写文本"),
    "chat.too_long": ("the message needs {n} tokens in the template's format, the model reads at most {max_len}",
                      "这条消息按模板格式需要 {n} 个 token，而模型最多读 {max_len} 个"),
    "chat.too_long_capped": ("the message needs {n} tokens in the template's format; one request holds at most "
                             "{cap} here (the model's max_len is {max_len})",
                             "这条消息按模板格式需要 {n} 个 token；这里每次请求最多 {cap} 个（模型的 max_len 为 {max_len}）"),
    "chat.too_long_fix": ("write a shorter message", "请写一条更短的消息"),
    "chat.full": ("the conversation already has {n} messages, the most this page keeps",
                  "对话已有 {n} 条消息，达到本页面保存的上限"),
    "chat.full_fix": ("clear the conversation", "请清空对话"),
    "chat.no_room": ("max new tokens is 0: the reply would be empty", "最多生成的 token 数为 0：回复会是空的"),
    "chat.no_room_fix": ("set max new tokens to 1 or more", "把最多生成的 token 数设为 1 或更多"),
    # ------------------------------------------------------------------ inspect tab
    "inspect.intro": ("Run a checkpoint once on your text and look at its attention, layer by layer "
                      "and head by head.", "在你的文本上运行一次检查点，逐层、逐头观察注意力。"),
    "inspect.text": ("Text", "文本"),
    "inspect.layer": ("Layer", "层"),
    "inspect.head": ("Head", "头"),
    "inspect.stack": ("Stack", "栈"),
    "inspect.go": ("Inspect", "观察"),
    "inspect.next": ("Most likely next tokens", "最可能的下一个词"),
    "inspect.output": ("Model output (the decoder's rows)", "模型输出（解码器各行）"),
    "inspect.heatmap": ("Attention heatmap (hover a cell; click a query token)",
                        "注意力热力图（鼠标悬停看数值；点击查询词看各头）"),
    "attn.title": ("attention weights", "注意力权重"),
    "attn.query": ("query", "查询"),
    "attn.key": ("key", "键"),
    "attn.layer": ("layer", "层"),
    "attn.head": ("head", "头"),
    "attn.weight": ("weight", "权重"),
    "attn.hover": ("Hover a cell to read its query, key, layer, head and weight.",
                   "把鼠标移到格子上，查看它的查询词、键、层、头和权重。"),
    "attn.click": ("Click a query token (left column) to see what it attends to in every layer and head.",
                   "点击左列的查询词，查看它在每一层、每个头里关注哪些词。"),
    "attn.across": ("every layer and head", "各层各头"),
    "inspect.grid": ("All layers × heads", "所有层 × 头"),
    "inspect.mask": ("Mask pattern", "掩码形状"),
    "inspect.positions": ("Positional encoding", "位置编码"),
    "inspect.experts": ("Router: tokens per expert (mixture of experts)", "路由：每个专家的词元数（专家混合）"),
    "inspect.calc_heading": ("Step-by-step attention calculator", "逐步注意力计算器"),
    "inspect.calc_intro": ("The lecture's three-token example. Edit any number of Q, K or V (add rows "
                           "for more tokens) and every step is recomputed: scores = Q·Kᵀ → scaled "
                           "by 1/√d_k → masked → softmax → weighted sum of V.",
                           "讲义里的三个词的例子。修改 Q、K、V 中的任意数字（加行即加词），每一步都会重新计算："
                           "打分 Q·Kᵀ → 乘以 1/√d_k → 掩码 → softmax → 对 V 加权求和。"),
    "inspect.calc_mask": ("Mask", "掩码"),
    "inspect.calc_go": ("Calculate", "计算"),
    "inspect.calc_reset": ("Reset to the lecture example", "恢复讲义示例"),
    "calc.scores": ("1. scores = Q · Kᵀ", "1. 打分 scores = Q · Kᵀ"),
    "calc.scaled": ("2. scaled = scores / √d_k", "2. 缩放 scaled = scores / √d_k"),
    "calc.masked": ("3. masked (−inf where the mask forbids)", "3. 掩码（不允许的位置为 −inf）"),
    "calc.weights": ("4. weights = softmax(row)", "4. 权重 weights = softmax(每行)"),
    "calc.output": ("5. output = weights · V", "5. 输出 output = weights · V"),
    "calc.row0": ("Row 0 by hand", "手算第 0 行"),
    "calc.dk": ("d_k = {dk}, √d_k = {sq}", "d_k = {dk}，√d_k = {sq}"),
    "calc.scores_line": ("scores: Q0 · K_j = {vals}", "打分：Q0 · K_j = {vals}"),
    "calc.scaled_line": ("scaled: divide by {sq} → {vals}", "缩放：除以 {sq} → {vals}"),
    "calc.exp_line": ("softmax: exp = {vals}, sum = {total}", "softmax：exp = {vals}，和 = {total}"),
    "calc.weights_line": ("weights = exp / sum = {vals} (sum 1)", "权重 = exp / 和 = {vals}（和为 1）"),
    "calc.out_line": ("output = Σ_j w_j · V_j = {vals}", "输出 = Σ_j w_j · V_j = {vals}"),
    "calc.hand_line": ("by hand with the weights rounded to 4 places: {terms} = {vals} (the last digit "
                       "differs from the exact value only through that rounding)",
                       "用保留 4 位小数的权重手算：{terms} = {vals}（末位与精确值的差别只来自这次舍入）"),
    "calc.kernel_check": ("The registered `eager` kernel gives the same output (max |difference| = "
                          "{err}).", "注册的 `eager` 注意力实现给出相同的输出（最大绝对差 = {err}）。"),
    "calc.masked_out": ("masked out", "被掩盖"),
    "calc.mask_table": ("mask (1 = may attend)", "掩码（1 = 可以关注）"),
    "calc.fix_numbers": ("type plain numbers in every cell", "每个格子里填普通数字"),
    "calc.fix_shape": ("make every row the same length; K and V need one row per key",
                       "每行长度一致；K 和 V 每个键一行"),
    "calc.fix_finite": ("use finite numbers", "请用有限的数字"),
    "inspect.no_layer": ("layer {n} does not exist", "第 {n} 层不存在"),
    "inspect.no_stack": ("'{value}' is not a stack", "'{value}' 不是一个层栈"),
    "inspect.no_stack_fix": ("pick encoder, decoder or cross (the model's own are listed)",
                             "请选择 encoder、decoder 或 cross（列出的是本模型有的）"),
    "inspect.no_head": ("head {n} does not exist", "第 {n} 个头不存在"),
    # ------------------------------------------------------------------ compare tab
    "compare.intro": ("Two specs or checkpoints side by side on the same input: outputs, parameter "
                      "counts, speed.", "在同一输入上并排比较两个规格或检查点：输出、参数量、速度。"),
    "compare.a": ("Model A", "模型 A"),
    "compare.b": ("Model B", "模型 B"),
    "compare.pick": ("Preset or checkpoint", "预设或检查点"),
    # a Textbox label is plain text (no Markdown): quotes, not backticks
    "compare.override": ("Override (YAML mapping, e.g. \u201cattention: eager\u201d)",
                         "覆盖字段（YAML 映射，例如 \u201cattention: eager\u201d）"),
    "compare.seq_len": ("Sequence length", "序列长度"),
    "compare.go": ("Compare", "对比"),
    "compare.table": ("Side by side", "并排对比"),
    "compare.same_weights": ("Models A and B share weights where their tensors match, so output "
                             "differences come from the architecture, not from initialisation.",
                             "A、B 两个模型在张量形状一致处共享权重，因此输出差异来自结构而不是初始化。"),
    "compare.row.arch": ("architecture", "架构"),
    "compare.row.params": ("parameters", "参数量"),
    "compare.row.components": ("components", "组件"),
    "compare.row.tokens": ("tokens in the forward", "前向的 token 数"),
    "compare.tokens_capped": ("{T} of the {asked} asked (max_len {max_len})", "{T}（要求 {asked}，max_len 为 {max_len}）"),
    "compare.row.ms": ("forward time (ms, median of 5)", "前向耗时（毫秒，5 次中位数）"),
    "compare.row.out": ("output shape", "输出形状"),
    "compare.row.diff": ("max |A − B| of outputs", "输出最大绝对差 |A − B|"),
    "compare.row.text": ("output on the prompt (greedy)", "对提示词的输出（贪心）"),
    "compare.prompt": ("Prompt (for checkpoints that read text)", "提示词（用于能读取文本的检查点）"),
    "compare.row.shared": ("tensors B received (from A, or from its own checkpoint)",
                           "B 获得的张量数（来自 A，或来自它自己的检查点）"),
    "compare.metric": ("metric", "指标"),
    "compare.bad_yaml": ("invalid YAML: {exc}", "YAML 语法错误：{exc}"),
    "compare.not_mapping": ("overrides must be a mapping of spec fields", "覆盖字段必须是规格字段的映射"),
    "compare.mapping_fix": ("write e.g. `positions: rope` or `norm: {kind: layernorm, placement: post}`",
                            "例如写 `positions: rope` 或 `norm: {kind: layernorm, placement: post}`"),
    "compare.unknown_source": ("unknown source '{source}'", "未知的来源 '{source}'"),
    "compare.seq_len_min": ("the sequence length must be at least 1", "序列长度至少为 1"),
    "compare.from_own": ("{n} (from B's own checkpoint)", "{n}（来自 B 自己的检查点）"),
    "compare.identical": ("(identical specs)", "（两个规格相同）"),
    # ------------------------------------------------------------------ verify tab
    "verify.intro": ("Run the reference checks of zoo's conformance kit (`zoo.testing`, the same checks "
                     "`zoo verify` and a plugin's tests run): every registered attention kernel against "
                     "the naive per-query loop (no mask, causal, a boolean mask, a score bias, suffix "
                     "queries, grouped-query heads), its fully masked rows and its weights; every mask "
                     "rule under a KV-cache offset; every position scheme decoding with a KV cache. Each "
                     "row shows the measured error; each case's error is in its note.",
                     "运行 zoo 一致性测试套件（`zoo.testing`，与 `zoo verify` 和插件测试所用的检查相同）中的"
                     "参考校验：每个注册的注意力实现都与朴素逐查询循环对拍（无掩码、因果、布尔掩码、分数偏置、"
                     "后缀查询、分组查询头），并检查整行被掩盖的情形和注意力权重；每条掩码规则在 KV 缓存偏移下"
                     "检查；每种位置编码在带 KV 缓存的解码中检查。每行给出实测误差，各子情形的误差见备注。"),
    "verify.go": ("Run checks", "运行校验"),
    "verify.table": ("Results", "结果"),
    "verify.kit_names": ("Components for the full conformance kit (empty = all; slow)",
                         "完整一致性测试套件要检查的组件（留空表示全部；较慢）"),
    "verify.kit_go": ("Run conformance kit", "运行一致性测试套件"),
    "verify.summary": ("{passed} of {total} checks passed.", "{total} 项校验中通过 {passed} 项。"),
    "verify.skipped": ("{n} not applicable (skipped).", "{n} 项不适用（跳过）。"),
    "verify.progress": ("Cases run: {done} of {total}.", "已运行 {done} / {total} 个用例。"),
    "col.check": ("check", "校验"),
    "col.subject": ("component", "组件"),
    "col.case": ("case", "情形"),
    "col.reference": ("reference", "参考"),
    "col.error": ("max |error|", "最大绝对误差"),
    "col.tolerance": ("tolerance", "容差"),
    "col.result": ("result", "结果"),
    "col.note": ("note", "说明"),
    "verify.pass": ("pass", "通过"),
    "verify.fail": ("FAIL", "失败"),
    "verify.skip": ("skipped", "跳过"),
    # ------------------------------------------------------------------ plugins
    "plugins.intro": ("Every plugin seen by the registry: built-in or from an installed distribution, "
                      "its components, and any error it raised while loading.",
                      "注册表看到的每个插件：内置或来自已安装的发行包、它注册的组件，以及加载时出现的错误。"),
    "plugins.table": ("Plugins", "插件"),
    "plugins.components": ("Components", "组件"),
    "col.plugin": ("plugin", "插件"),
    "col.version": ("version", "版本"),
    "col.source": ("source", "来源"),
    "col.status": ("status", "状态"),
    "col.family": ("family", "类别"),
    "col.name": ("name", "名称"),
    "col.description": ("description", "说明"),
    "plugins.ok": ("ok", "正常"),
    "plugins.builtin": ("builtin", "内置"),
    "plugins.distribution": ("distribution {name}", "安装包 {name}"),
    # ------------------------------------------------------------------ interpret (issue 26)
    "interp.intro": ("Look inside like TransformerLens: the logit lens (the prediction after each layer), head "
                     "scores (which heads attend like induction, previous-token or duplicate-token heads) and "
                     "activation patching (which layer and position carry the answer from a clean prompt into "
                     "a corrupted one). Hover a cell to read its value. A checkpoint without a tokenizer "
                     "takes token ids separated by spaces.",
                     "像 TransformerLens 一样观察模型内部：logit lens（每一层之后的预测）、注意力头分数（哪些头像归纳头、"
                     "前一词元头或重复词元头那样分配注意力）和激活修补（哪一层、哪个位置把答案从干净提示带到被破坏的提示）。"
                     "把鼠标移到格子上可读出数值。没有分词器的检查点请输入以空格分隔的词元编号。"),
    "interp.text": ("Prompt (the clean one for patching)", "提示（修补时为干净提示）"),
    "interp.corrupted": ("Corrupted prompt (same number of tokens)", "被破坏的提示（词元数相同）"),
    "interp.lens": ("Logit lens", "逐层读出（logit lens）"),
    "interp.scores": ("Head scores", "注意力头分数"),
    "interp.kind": ("Head kind", "头的类型"),
    "interp.patch": ("Patch", "激活修补"),
    "interp.embed": ("embeddings", "嵌入"),
    "interp.layer": ("layer {i}", "第 {i} 层"),
    "interp.head": ("head {i}", "头 {i}"),
    "interp.lens_title": ("Top token after each layer (colour: its probability)",
                          "每一层之后概率最高的词元（颜色：其概率）"),
    "interp.scores_title": ("{kind} score of every head on this prompt", "每个头在此提示上的 {kind} 分数"),
    "interp.scores_random": ("{kind} score of every head (random tokens repeated twice: the prompt has no repeats)",
                             "每个头的 {kind} 分数（提示中没有重复，改用重复两次的随机词元）"),
    "interp.patch_title": ("Clean residual stream patched in, per layer and position: 0 = corrupted "
                           "({lo:.2f}), 1 = clean ({hi:.2f}) log-probability of the clean next token",
                           "逐层、逐位置放回干净的残差流：0 = 被破坏（{lo:.2f}），1 = 干净（{hi:.2f}），"
                           "指标为干净提示下一个词元的对数概率"),
    "interp.ids_only": ("this checkpoint has no tokenizer: give token ids separated by spaces",
                        "此检查点没有分词器：请输入以空格分隔的词元编号"),
    "interp.ids_fix": ("for example: 5 17 42 8 5 17 42", "例如：5 17 42 8 5 17 42"),
    "interp.ids_range": ("token ids must be between 0 and {v} - 1", "词元编号必须在 0 到 {v} - 1 之间"),
    "interp.length": ("{n} tokens: give between 2 and {max}", "{n} 个词元：请给出 2 到 {max} 个"),
    "interp.one_stack": ("lenses and patching read one residual stream; an encoder-decoder has two",
                         "lens 与修补只读取一条残差流，而编码器-解码器有两条"),
    "interp.same_length": ("the clean prompt has {a} tokens, the corrupted one {b}",
                           "干净提示有 {a} 个词元，被破坏的提示有 {b} 个"),
    "interp.length_capped": ("{n} tokens: give between 2 and {max} (this tab reads at most {max} of the model's "
                             "max_len {max_len} tokens: per request, and a wider heatmap is unreadable)",
                             "{n} 个词元：请给出 2 到 {max} 个（本页最多读取 {max} 个 token，模型的 max_len 为 "
                             "{max_len}：按每次请求计，而且更宽的热力图也看不清）"),
    "interp.lens_over": ("the logit lens of {L} rows × {T} tokens × {V} vocabulary entries needs about {need}, more "
                         "than the budget of {limit} ({why})",
                         "{L} 行 × {T} 个 token × {V} 个词表项的 logit lens 大约需要 {need}，超过了预算 {limit}（{why}）"),
    "interp.patch_work": ("patching {L} layers × {T} positions runs {forwards} forwards of {T} tokens, about {flops} "
                          "FLOPs, more than this UI's {limit} per request: patching takes at most {n} tokens for "
                          "this checkpoint",
                          "修补 {L} 层 × {T} 个位置要运行 {forwards} 次前向、每次 {T} 个 token，约 {flops} FLOPs，"
                          "超过了本界面每次请求的 {limit}：对这个检查点，修补最多 {n} 个 token"),
    "interp.patch_fix": ("give shorter prompts (the line under the checkpoint says how many tokens patching takes)",
                         "请给出更短的提示（检查点下方的说明写着修补最多能取多少个 token）"),
    "interp.room": ("{name}: {L} layers, max_len {max_len}. Here a text holds 2 to {cap} tokens; patching runs "
                    "layers × tokens forwards, so it takes at most {patch} tokens for this checkpoint.",
                    "{name}：{L} 层，max_len 为 {max_len}。这里文本可以有 2 到 {cap} 个 token；修补要运行"
                    "“层数 × token 数”次前向，所以对这个检查点最多 {patch} 个 token。"),
    "interp.same_length_fix": ("change tokens without adding or removing any", "只替换词元，不要增删"),
    # ------------------------------------------------------------------ experiments
    "exp.intro": ("Which variant is better, and why: pick a shipped experiment or edit its YAML (checked as "
                  "you type), run its quick version and watch the curves, then read the table: mean ± 95% "
                  "interval over seeds (Student t), the paired difference against the reference variant and "
                  "a verdict that never claims more than the intervals allow.",
                  "哪种变体更好、为什么：选择一个内置实验或编辑其 YAML（输入时即校验），运行其快速版本并观察"
                  "曲线，然后阅读结果表：各种子的均值 ± 95% 置信区间（Student t）、相对参考变体的配对差值，"
                  "以及不超出区间所能支持的结论。"),
    "exp.pick": ("Shipped experiment", "内置实验"),
    "exp.yaml": ("Experiment (YAML)", "实验（YAML）"),
    "exp.valid": ("Valid: **{name}**, quick version: {variants} variants × {seeds} seeds = {trials} trials "
                  "on task `{task}`, {steps} steps each.",
                  "有效：**{name}**，快速版本：{variants} 个变体 × {seeds} 个种子 = {trials} 次试验，"
                  "任务 `{task}`，每次 {steps} 步。"),
    "exp.run": ("Run quick version", "运行快速版本"),
    "exp.report": ("Show full report", "显示完整报告"),
    "exp.progress": ("Trials", "试验进度"),
    "exp.curves": ("Training loss (mean over seeds, min-max shaded)", "训练损失（各种子均值，阴影为最小-最大）"),
    "exp.table": ("Results", "结果"),
    "exp.figures": ("Figures of the committed full report", "已提交完整报告的图"),
    "exp.trial": ("Trial", "试验"),
    "exp.open": ("Open in Inspect", "在观察页打开"),
    "exp.opened": ("Checkpoint **{name}** is ready: choose it in the checkpoint list of Inspect or Run.",
                   "检查点 **{name}** 已就绪：在“观察”或“运行”页的检查点列表中选择它。"),
    "exp.no_trial": ("no finished trial named '{trial}' in this run", "本次运行中没有名为 '{trial}' 的已完成试验"),
    "exp.no_trial_fix": ("run the experiment, wait for a trial to finish, then pick it from the list",
                         "先运行实验，等待某个试验完成，再从列表中选择它"),
    "exp.report_lang": ("The committed report below is the experiment's record, shown as it was written (in "
                        "English).", "下面的已提交报告是实验的原始记录，按写成时的样子（英文）显示，不做翻译。"),
    "exp.no_report": ("No committed report for {name}.", "{name} 没有已提交的报告。"),
    "exp.starting": ("Starting {folder} …", "正在启动 {folder} …"),
    "exp.running": ("Running in `{folder}`: {done} of {total} trials finished.",
                    "正在 `{folder}` 中运行：已完成 {done}/{total} 次试验。"),
    "exp.finished": ("Finished in `{folder}`: {done} of {total} trials.", "已完成，位于 `{folder}`：{done}/{total} 次试验。"),
    # -- a second run of the same YAML (issue 34)
    "exp.fresh": ("Fresh run (earlier results moved aside, kept)", "重新运行（先前的结果移到一旁并保留）"),
    "exp.fresh_hint": ("To start fresh, tick **{fresh}** and press **{run}** again.",
                       "要从头开始，请勾选 **{fresh}**，再按 **{run}**。"),
    "exp.v.na": ("n/a", "无法判断"),
    "exp.v.na_one_seed": ("n/a (one seed: no interval)", "无法判断（只有一个种子：没有区间）"),
    "exp.v.past_only_metric": ("a past-only metric", "只看过去的指标"),
    "exp.status.pending": ("waiting", "等待中"),
    "exp.status.running": ("training", "训练中"),
    "exp.status.done": ("done", "完成"),
    "exp.status.failed": ("failed", "失败"),
    "exp.status.mismatched": ("not counted (its record does not match)", "不计入（记录与试验不符）"),
    "exp.col.trial": ("trial", "试验"),
    "exp.col.status": ("status", "状态"),
    "exp.col.step": ("step", "步数"),
    "exp.col.loss": ("loss", "损失"),
    "exp.col.variant": ("variant", "变体"),
    "exp.col.params": ("parameters", "参数量"),
    "exp.col.flops": ("training FLOPs", "训练 FLOPs"),
    "exp.col.metric": ("metric", "指标"),
    "exp.col.n": ("seeds", "种子数"),
    "exp.col.mean": ("mean ± 95% interval", "均值 ± 95% 区间"),
    "exp.col.diff": ("difference vs reference [95%]", "相对参考的差值 [95%]"),
    "exp.col.verdict": ("verdict", "结论"),
    "exp.v.reference": ("reference", "参考"),
    "exp.too_many": ("the quick version has {n} trials; this UI runs at most {limit}",
                     "快速版本有 {n} 次试验；本界面最多运行 {limit} 次"),
    "exp.too_many_fix": ("use fewer variants or seeds in the quick: block, or run it with `zoo experiment run`",
                         "在 quick: 中减少变体或种子数，或用 `zoo experiment run` 运行"),
    "exp.too_long": ("the quick version trains {n} steps per trial; this UI runs at most {limit}",
                     "快速版本每次试验训练 {n} 步；本界面最多 {limit} 步"),
    "exp.too_long_fix": ("lower quick: budget: steps, or run it with `zoo experiment run`",
                         "降低 quick: budget: steps，或用 `zoo experiment run` 运行"),
    "exp.busy": ("another experiment is running ({folder})", "另一个实验正在运行（{folder}）"),
    "exp.busy_fix": ("wait for it to finish (its trials use every core), then run again",
                     "等它结束（它的试验占用全部 CPU 核心）后再运行"),
    "exp.v.better": ("better", "更好"),
    "exp.v.worse": ("worse", "更差"),
    "exp.v.noise": ("within noise", "在噪声范围内"),
    "exp.v.higher": ("higher", "更高"),
    "exp.v.lower": ("lower", "更低"),
    "exp.v.no_effect": ("no meaningful difference", "无实质差异"),
    "exp.v.noise_holm": ("within noise (after Holm)", "在噪声范围内（经 Holm 校正）"),
    "exp.v.pending": ("pending", "待定"),
    "exp.v.smoke": ("{verdict} (smoke test)", "{verdict}（冒烟测试）"),
    "exp.v.sees_future": ("not comparable: {variant} sees the future (trained without the look-ahead mask)",
                          "不可比较：{variant} 能看到未来（训练时没有前瞻掩码）"),
    "exp.v.sees_future_tf": ("not comparable: {variant} sees the future (teacher-forced metric; judge on {primary})",
                             "不可比较：{variant} 能看到未来（教师强制的指标；请以 {primary} 判断）"),
}

def lang_code(lang: Any) -> str:
    """``"English"``, ``"中文"``, ``"en"``, ``"zh"`` or None -> ``"en"`` / ``"zh"``."""
    if lang in ("zh", "中文"):
        return "zh"
    return "en"


# ---------------------------------------------------------------------- component families
#: What the UI calls each component family (English, 中文), by family name: the Build form's label
#: (``build.<field>``) and the family word in translated errors.  The keys come from the family table
#: (:data:`zoo.components.FAMILIES`), not from this dict: a family without a row here is still labelled
#: ("router (component)", "router（组件）") until someone adds its translation.
FAMILY_LABELS: dict[str, tuple[str, str]] = {
    "attention": ("Attention kernel", "注意力实现"),
    "mask": ("Mask", "掩码"),
    "position": ("Positional encoding", "位置编码"),
    "norm": ("Norm", "归一化"),
    "placement": ("Norm placement", "归一化位置"),
    "ffn": ("Feed-forward", "前馈网络"),
    "tokenizer": ("Tokenizer", "分词器"),
    "task": ("Task", "任务"),
}


def _families() -> tuple:
    from zoo import components  # read when called: a row added to the table is seen at once

    return components.FAMILIES


def family_label(family: Any) -> tuple[str, str]:
    """(English, 中文) name of a family row (:class:`zoo.components.Family`)."""
    word = family.field or family.name
    return FAMILY_LABELS.get(family.name) or (f"{word} (component)", f"{word}（组件）")


def family_strings() -> dict[str, tuple[str, str]]:
    """``build.<field>`` -> (English, 中文) for every family a model spec names."""
    return {f"build.{f.field}": family_label(f) for f in _families() if f.field is not None}


def option_strings() -> dict[str, tuple[str, str]]:
    """``run.<option>`` -> (English, 中文) for every generation option the Run tab shows that has no
    label in :data:`STRINGS` yet (a new option is labelled by its name until translated)."""
    from zoo.run.options import GenerationOptions  # read when called, like the family table

    out = {}
    for f in dataclasses.fields(GenerationOptions):
        if f.metadata["option"].step is not None and f"run.{f.name}" not in STRINGS:
            out[f"run.{f.name}"] = (f.name.replace("_", " "), f"{f.name}（生成选项）")
    return out


def basic_strings() -> dict[str, tuple[str, str]]:
    """``build.<field>`` -> (English, 中文) for every basic spec setting the Build form shows
    (:data:`zoo.model.spec.BASIC_FIELDS`) that has no label in :data:`STRINGS` yet (labelled by its name
    until translated)."""
    from zoo.model.spec import BASIC_FIELDS

    return {f"build.{f}": (f.replace("_", " "), f"{f}（规格字段）") for f in BASIC_FIELDS
            if f"build.{f}" not in STRINGS}


#: the UI's argument contract (ui.common.check_arguments), one key per expected type: same fields
#: in both languages
for _base, (_en, _zh) in {"str": ("text", "文本"), "int": ("a whole number", "整数"), "float": ("a number", "数"),
                          "bool": ("true or false", " true 或 false"), "list": ("a list", "列表"),
                          "dict": ("a mapping", "映射")}.items():
    STRINGS[f"err.arg_{_base}"] = (f"{{name}} must be {_en}, got {{got}}", f"{{name}} 应为{_zh}，实际是 {{got}}")
    STRINGS[f"err.arg_{_base}_fix"] = (f"send {_en} for {{name}}", f"请为 {{name}} 给出{_zh}")
    # an empty field (None) is said, not shown as a value: "实际是 nothing" read as English (issue 34)
    STRINGS[f"err.arg_{_base}_none"] = (f"{{name}} must be {_en}, got nothing", f"{{name}} 应为{_zh}，但没有给出值")


def all_strings() -> dict[str, tuple[str, str]]:
    """Every key :func:`t` knows: :data:`STRINGS`, the family labels, new generation options and
    new basic spec settings."""
    return {**family_strings(), **option_strings(), **basic_strings(), **STRINGS}


def family_word_zh(word: str) -> str:
    """A family's name or spec field (``position``, ``positions``) in Chinese; other words unchanged
    (``head`` is the spec's task head, not a component family)."""
    for f in _families():
        if word in (f.name, f.field):
            return family_label(f)[1]
    return "任务头" if word == "head" else word


def t(key: str, lang: Any = DEFAULT, **fmt: Any) -> str:
    """The text of ``key`` in ``lang``, formatted with ``fmt``.  An unknown key is a programming
    error and raises KeyError (tests walk every key)."""
    pair = STRINGS.get(key) or family_strings().get(key) or \
        (option_strings().get(key) if key.startswith("run.") else None) or \
        (basic_strings().get(key) if key.startswith("build.") else None)
    if pair is None:
        raise KeyError(key)
    en, zh = pair
    text = zh if lang_code(lang) == "zh" else en
    return text.format(**fmt) if fmt else text


#: The engine's messages in Chinese: message id (:data:`zoo.messages.MESSAGES`) -> (``what``,
#: ``fix``) templates with the same parameters as the English ones (tests/ui/test_ui_messages.py).
#: An error is worded from its id and params (:func:`error_text`), never from its English text, so
#: rewording the engine's English keeps the Chinese; an error without an id, or with an id missing
#: here, is shown in English.  "where" and the valid options stay as raised (field names, names).
ERRORS_ZH: dict[str, tuple[str | None, str | None]] = {
    "hint.did_you_mean": (None, "是不是想写 '{suggestion}'？"),
    "hint.remove_it": (None, "删除这一项"),
    "hint.example": (None, "例如 {example}"),
    "hint.pass_integer_in": (None, "请给出 [{lo}, {hi}] 内的整数"),
    "hint.pass_number_in": (None, "请给出 {span} 内的数"),
    "hint.pass_positive_int": (None, "请给出正整数（最大 {hi}）"),
    "registry.unknown_family": ("未知的组件族 '{family}'", None),
    "registry.unknown_component": ("没有名为 '{name}' 的{family}", "安装提供它的插件，或改用已注册的名称"),
    "registry.broken_plugins": (None, "加载失败的插件：{plugins}，详见 `zoo plugins`"),
    "value.expected": ("应为 {expected}，实际是 {value}", None),
    "value.expected_list": ("应为列表，实际是 {value}", None),
    "value.expected_bool": ("应为 true 或 false，实际是 {value}", None),
    "value.expected_int": ("应为整数，实际是 {value}", None),
    "value.expected_number": ("应为数字，实际是 {value}", None),
    "value.expected_finite": ("应为有限的数字，实际是 {value}", None),
    "value.expected_string": ("应为字符串，实际是 {value}", None),
    "value.invalid": ("无效的值 {value}", None),
    "value.positive_int": ("必须是正整数，实际是 {value}", None),
    "param.at_least": ("{name} 必须 >= {minimum}，实际是 {value}", None),
    "value.must_be_finite": ("必须是有限的数，实际是 {value}", None),
    "value.must_be_finite_at_least": ("必须是 >= {minimum} 的有限数，实际是 {value}", None),
    "value.must_be_finite_positive": ("必须是有限的正数，实际是 {value}", None),
    "value.must_be_bool": ("必须是 true 或 false，实际是 {value}", None),
    "value.must_be_positive_int": ("必须是正整数，实际是 {value}", None),
    "value.must_be_int": ("必须是整数，实际是 {value}（{type}）", None),
    "value.must_be_int_in": ("必须是 [{lo}, {hi}] 内的整数，实际是 {value}", None),
    "value.must_be_number": ("必须是数，实际是 {value}（{type}）", None),
    "value.must_be_in": ("必须在 {span} 内，实际是 {value}", None),
    "value.not_a_number": ("不是数：{value}", None),
    "option.fix_temperature": (None, "贪心解码请用 do_sample=False，不要把 temperature 设为 0"),
    "option.fix_top_p": (None, "更小的 top_p 只会留下最可能的那个词元：请改用 do_sample=False"),
    "option.fix_repetition_penalty": (None, "1 表示关闭；1.1 到 1.3 会温和地抑制重复"),
    "option.integer_at_least": ("{name} 必须是 >= {low} 的整数，实际是 {value}", None),
    "option.integer_in": ("{name} 必须是 {span} 内的整数，实际是 {value}", None),
    "option.number_above": ("{name} 必须是 > {low} 的有限数，实际是 {value}", None),
    "option.number_in": ("{name} 必须是 {span} 内的有限数，实际是 {value}", None),
    "spec.no_source": ("没有名为 '{name}' 的规格文件或预设", "请给出 YAML 文件的路径，或预设名称之一"),
    "spec.unknown_override": ("未知的覆盖项 '{field}'", "只能覆盖规格字段"),
    "spec.unknown_field": ("未知字段 '{field}'", None),
    "spec.missing_field": ("缺少必填字段 '{field}'", "在规格中加上 `{field}: ...`"),
    "spec.unknown_arch": ("未知的架构 '{arch}'", None),
    "spec.unknown_parameter": ("'{kind}' 没有名为 '{param}' 的参数", None),
    "spec.component_refused": ("{text}", None),  # the plugin's own words, as it raised them
    "spec.component_docs": (None, "查看该组件的说明（`zoo components`）"),
    "spec.dropout": ("dropout 必须在 [0, 1) 内，实际是 {value}", None),
    "spec.derived_default": (None, "省略它（或写 null）即使用默认值 {default}"),
    "spec.dense_d_ff_default": (None, "省略它（或写 null）即使用 d_ff"),
    "spec.unknown_head_param": ("任务头没有名为 '{param}' 的参数", None),
    "spec.unknown_head": ("未知的任务头 '{head}'", None),
    "spec.unknown_init": ("未知的初始化方案 '{scheme}'", None),
    "spec.unknown_init_param": ("init 没有名为 '{param}' 的参数", None),
    "spec.unknown_pooling": ("未知的池化方式 '{pooling}'", None),
    "spec.not_per_stack": ("'{field}' 不能按栈覆盖", "把它移到顶层"),
    "spec.heads_divide": ("d_model {d_model} 不能被 num_heads {num_heads} 整除",
                          "把 num_heads 改成能整除 d_model 的数，或显式设置 head_dim"),
    "spec.kv_heads_divide": ("num_heads {num_heads} 不是 num_kv_heads {num_kv_heads} 的整数倍",
                             "请用 num_heads 的约数（1 = 多查询注意力，num_heads = 多头注意力）"),
    "yaml.invalid_at": ("YAML 语法错误（第 {line} 行第 {column} 列）：{problem}", None),
    "yaml.invalid": ("YAML 语法错误：{problem}", None),
    "yaml.fix": (None, "修正 YAML 语法"),
    "yaml.too_large": ("YAML 超过了 {kib} KiB", "一份规格只有几 KB"),
    "yaml.not_text": ("应为 YAML 文本，实际是 {type}", None),
    "yaml.too_deep": ("YAML 嵌套超过了 {depth} 层{at}", "规格只嵌套 2-3 层；请把它展平"),
    "yaml.bad_value": ("无法读取 YAML 的值：「{detail}」", "给这个值加上引号，或改正它"),
    "yaml.recursive_alias": ("YAML 别名指向包含它自己的节点（第 {line} 行）", "删除这个递归的别名"),
    "yaml.expands": ("YAML 展开后超过 {limit} 个值（别名，第 {line} 行）", "删除嵌套的锚点/别名（'&a'、'*a'）"),
    "yaml.duplicate_key": ("重复的键 {key}（第 {line} 行）", "两项只保留一项"),
    "spec.not_mapping": ("规格必须是字段的映射，实际是 {type}", "文件以字段开头，例如 `arch: decoder`"),
    "compat.undeclared": ("{purpose}需要 {capability}，但{family} '{name}'（插件 {plugin}）没有声明这一能力",
                          "把 {field} 换成可选值之一，例如 {example}"),
    "budget.tensor": ("搭建这个模型需要的内存超过了预算 {limit}（{why}）：{field} = {value} 产生形状为 {shape} "
                      "的张量，{size}", None),
    "budget.tensor_layers": ("搭建这个模型需要的内存超过了预算 {limit}（{why}）：{field} = {value} 产生形状为 "
                             "{shape} 的张量，所有层合计 {size}", None),
    "budget.repeats": ("搭建这个模型需要的内存超过了预算 {limit}（{why}）：模型需要 {total}；{field} = {value} "
                       "使 '{name}' {shape} 连同每层的其余部分重复这么多次", None),
    "budget.allocated": ("搭建这个模型需要的内存超过了预算 {limit}（{why}）：在这个 {size} 的张量之前已分配 "
                         "{allocated}；{field} = {value} 使每层的张量都重复这么多次", None),
    "budget.makes": ("搭建这个模型需要的内存超过了预算 {limit}（{why}）：模型需要 {total}；{field} = {value} "
                     "使 '{name}' 的形状为 {shape}，{size}", None),
    "budget.fix": (None, "调小 {field}，或传入更大的预算照样搭建（zoo.build / zoo.load(..., budget=BYTES)，"
                         "zoo build --budget SIZE）"),
    "tokenizer.missing": ("给了文本，但模型没有分词器",
                          "传入 tokenizer=zoo.tokenizer('byte')（或 'char'、'hf'），或用 "
                          "zoo.save(model, path, tokenizer=tok) 保存检查点"),
    "generate.encoder_only": ("纯编码器模型不生成文本",
                              "请用 zoo.run.pipelines.fill_mask(model, text) 或 zoo.run.pipelines.classify(...)"),
    "generate.too_long": ("提示（{prompt} 个 token）加上最多生成的 {new} 个 token 超过了 max_len {max_len}",
                          "最多生成 {room} 个 token"),
    "generate.too_many": ("最多生成的 token 数 {new} 超过了 max_len {max_len}", None),
    "generate.nothing_to_choose": ("生成第 {step} 个新 token 时，规则 {rules} 把 {row} 的所有 token 都禁掉了：没有可选的 token",
                                   "放宽一条规则（更大的 vocab_limit、更小的 no_repeat_ngram_size、更少的 "
                                   "suppress_tokens / bad_words），或少生成一些（max_new_tokens 小于 {step}）"),
    "chat.sandbox": ("模板试图做沙箱禁止的操作：「{detail}」", "请使用模型发布的模板"),
    "chat.refused": ("模板拒绝了这段对话：「{detail}」", "遵守该模型的对话规则（例如 user 与 assistant 交替）"),
    "chat.failed": ("模板在这段对话上出错：{error}：「{detail}」", "对照模板读取的内容检查这些消息的字段"),
    "experiment.unknown_field": ("未知字段 {field}", None),
    "experiment.missing_field": ("缺少必填字段 '{field}'", "加上 `{field}: ...`"),
    "checkpoint.resave": (None, "请重新保存它；zoo 只读取有效的 safetensors 文件"),
    "checkpoint.too_short": ("文件太短，不是 safetensors 文件", None),
    "checkpoint.header_length": ("文件头长度 {n} 超过了文件本身或 {mib} MiB", None),
    "checkpoint.header_json": ("文件头不是有效的 JSON：「{detail}」", None),
    "checkpoint.header_object": ("文件头不是 JSON 对象", None),
    "checkpoint.metadata_strings": ("__metadata__ 必须是字符串到字符串的映射", None),
    "checkpoint.entry_fields": ("应为 {{dtype, shape, data_offsets}}", None),
    "checkpoint.unknown_dtype": ("未知的数据类型 {dtype}", None),
    "checkpoint.bad_shape": ("无效的形状 {shape}", None),
    "checkpoint.offsets": ("data_offsets {offsets} 超出了数据区（{size} 字节）", "文件被截断或已损坏；请重新保存"),
    "checkpoint.size_mismatch": ("形状 {shape}、类型 {dtype} 却有 {n} 字节", None),
    "checkpoint.corrupt": ("检查点损坏或被截断：{cause}", None),
    "transaction.busy": ("'{root}' 正在被 {who} 写入（它持有 {lock}）",
                         "请等它写完（zoo.save(..., wait=True) 会等待），或写到另一个文件夹"),
    "input.outside_contract": ("{text} 不在 {name} 的输入约定之内：「{description}」（「{reason}」）",
                               "请给出类似 {example} 的输入"),
    "spec.init_value": ("必须是 (0, 100] 之间的有限数，实际是 {value}", "例如 std: 0.02（GPT-2），gain: 1.0"),
    "manifest.malformed": ("{manifest} 格式不对：{value}", None),
    "manifest.fix": (None, "用 zoo 重新保存这个文件夹，或删除 {manifest}，按文件现状读取"),
    "experiment.not_mapping": ("实验必须是字段的映射，实际是 {type}", "文件以 `name: ...` 开头"),
    "experiment.bad_name": ("无效的名称 {name}", "只用小写字母、数字和 '_'"),
    "experiment.quick_nested": ("quick 块里不能再嵌套 quick 块", None),
    "experiment.no_variant": ("没有名为 {name} 的变体", None),
    "experiment.baseline_key": ("{key} 不是变体设置的键", None),
    "experiment.budget_kind": ("必须恰好是 {{steps: N}}、{{tokens: N}}、{{flops: N}} 之一（可另加 params: N）",
                               "例如 budget: {{flops: 2e12}} 做等计算量的比较，或 {{steps: 400, params: 2e5}} "
                               "做等参数量的比较"),
    "experiment.grid_lists": ("必须把每个键映射到非空的取值列表", None),
    "experiment.metric_names": ("必须是指标名称的列表", None),
    "experiment.unknown_metric": ("任务 '{task}' 没有指标 {metric}", None),
    "experiment.no_task_metric": ("任务 '{task}' 没有指标 {metric}", "请写该任务的指标之一，或 eval_loss"),
    "experiment.success_mapping": ("必须是映射 {{指标: 一个种子算作成功所须达到的阈值}}", None),
    "experiment.min_effect_mapping": ("必须是映射 {{指标: 值得下结论的最小差异}}", None),
    "experiment.tune_mapping": ("必须把覆盖键映射到要扫描的取值列表", None),
    "experiment.tune_two_values": ("调参轴至少需要两个不同的值，实际是 {values}",
                                   "扫描取值，例如 {key}: [1.0e-3, 3.0e-3, 1.0e-2]；或搜索一个范围，例如 {key}: "
                                   "{{low: 1.0e-4, high: 1.0e-2, log: true}}；或在 train: / base: 中只设一个值"),
    "experiment.range_field": ("未知的范围字段 {field}", None),
    "experiment.range_missing": ("范围需要 low 和 high 两项；缺少 {field}", None),
    "experiment.range_order": ("范围需要 low < high，实际 low 为 {low}，high 为 {high}",
                               "交换两者；或不调这一项，把那一个值写在 train: / base: 中"),
    "experiment.range_log": ("对数范围需要 low > 0，实际是 {low}", "把 low 调到 0 以上，或设 log: false"),
    "experiment.train_mapping": ("必须是训练选项的映射", None),
    "experiment.set_by_experiment": ("'{key}' 由实验本身设定（budget、seeds、task）", None),
    "experiment.overrides_mapping": ('必须是覆盖项的映射', None),
    "experiment.baseline_kind": ('必须是变体名称，或映射 {{键: 值}}', None),
    "experiment.probe_texts": ('必须是一段文本或文本列表（每段 1-200 个字符）', None),
    "experiment.plugin_names": ('必须是插件入口名称的列表', None),
    "experiment.must_be_text": ('必须是文本', None),
    "experiment.executor_mapping": ('必须是 submitit 参数的映射', None),
    "experiment.values_distinct": ('取值必须互不相同', None),
    "experiment.tune_no_key": ('没有给出要扫描的键', None),
    "experiment.base_kind": ('必须是预设名称或规格映射，实际是 {type}', None),
    "experiment.override_key": ('无效的覆盖键 {key}', '请写字段名或带点的路径（norm.placement、train.lr）'),
    "experiment.variants_or_grid": ('`variants:`（列表）和 `grid:`（列表的映射）恰好给一个', None),
    "experiment.variants_list": ('必须是非空的 {{name, set}} 列表', None),
    "experiment.variant_mapping": ('每个变体都是带 `name`（以及 `set:` 覆盖项）的映射', None),
    "experiment.variant_field": ('未知的变体字段', None),
    "experiment.variant_name": ('无效的变体名称 {name}', '只用字母、数字和 _ . = , + -'),
    "experiment.grid_size": ('网格生成 {size} 个变体；最多只安排 {limit} 个', '每个键少给几个值，或把实验拆开'),
    "experiment.variants_count": ('{size} 个变体；最多只安排 {limit} 个', None),
    "experiment.variant_twice": ('两个变体都叫 {name}', '给每个变体起不同的名字'),
    "experiment.seeds_kind": ('必须是个数或整数列表', None),
    "experiment.seed_count": ('种子个数必须在 [1, 100] 内，实际是 {value}', None),
    "experiment.seeds_distinct": ('种子必须互不相同', None),
    "experiment.seeds_values": ('必须是个数，或互不相同的非负整数列表，实际是 {value}', None),
    "experiment.task_kind": ('必须是任务名称，或 {{kind: 名称, ...参数}}', None),
    "experiment.tolerance_alone": ('须与 params: N 一起给出', '加上 params: N，或删除它'),
    "experiment.max_steps": ('最多 {limit} 步，实际是 {value}', None),
    "experiment.must_be_integer": ('必须是整数', None),
    "experiment.tune_overlap": ('同一个键不能既由 tune 扫描又由变体设定', '把它从变体（或 tune）中删除'),
    "experiment.plugin_missing": ('这个实验需要插件 {plugin}，但它没有安装',
                                  '在 zoo 克隆的根目录运行 `pip install ./plugins/{package}`（它随仓库提供，不在 PyPI 上）；'
                                  '正在运行的 zoo ui 重启后才会列出它'),
    "experiment.plugin_missing_package": ('这个实验需要插件 {plugin}，但它没有安装',
                                          '请用 pip 安装提供它的包（按 zoo 的命名：`{package}`）；正在运行的 zoo ui 重启后才会列出它'),
    "experiment.select_metric": ("无法按 {metric} 选择：它不是任务 '{task}' 中有方向的指标", None),
    "experiment.no_validation": ("任务 '{task}' 没有可用来选择的验证集",
                                 "请在合成任务（copy、mqar、lag、modadd 等）上调参，或只在一个设置下比较"),
    "experiment.unknown_train_option": ("未知的训练选项 {option}", None),
    "threshold.not_mapping": ("阈值是含 metric 和 value 的映射，实际是 {value}", None),
    "threshold.unknown_field": ("未知的阈值字段 {field}", "只用 metric、value 和 stop"),
    "threshold.metric_name": ("必须是指标名称，实际是 {value}", None),
    "threshold.list": ("必须是阈值的列表，实际是 {value}", None),
    "threshold.stop": (None, "stop: true 让训练在达到阈值处停下"),
    "threshold.same_metric": ("两个阈值生成了同一个指标 {metric}", "删除其中一个"),
    "input.unknown_characters": ("{text} 的 {counted} 个字符中有 {count} 个是 {name} 的分词器不认识的（{shown}）："
                                 "模型会把它们读成 <unk>", None),
    "input.alphabet": (None, "请用模型字母表中的字符"),
    "input.like": (None, "请给出类似 {example} 的文本"),
    "experiment.task_arch": ("任务 '{task}' 训练的是 {task_arch} 模型；这个规格是 {arch}", "请改用 {task_arch} 的基础规格"),
    "experiment.no_step": ("按这个预算，变体 {variant} 一步也训练不了（每步 {flops} FLOPs）", "请提高预算"),
    "experiment.tune_range_run": ("tune.{key} 是一个范围，`zoo experiment run` 无法按网格扫描它",
                                  "用 `zoo experiment tune FILE --trials N` 搜索它，或列出要扫描的值，"
                                  "例如 {key}: [1.0e-3, 3.0e-3, 1.0e-2]"),
    "experiment.code_changed": ("规划实验之后代码变了：「{changes}」", "再运行一次同样的命令：它会用现在的代码重新规划试验"),
    "experiment.mismatched": ("{n} 个已完成的试验与本次运行不符：「{shown}{more}」",
                              "传入 --rerun-mismatched（rerun_mismatched=True）重新训练它们，或换一个 --out"),
    "experiment.trials_failed": ("{n} 个试验失败；第一个：{trial}：{cause}",
                                 "查看结果文件夹中的 {trial}/worker.log；再运行一次同样的命令即可重试它们（已完成的试验会保留）"),
    "experiment.out_symlink": ("结果文件夹 '{folder}' 是符号链接；zoo 不会通过链接写入", "请传入真实的文件夹"),
    "experiment.out_not_folder": ("'{folder}' 已存在，但不是文件夹（而是文件、FIFO 或设备）", "请传入 --out 新文件夹"),
    "experiment.record_bad": ("文件夹中的 {record} 不可用：「{reason}」", "换一个 --out，或删除这个文件夹"),
    "experiment.other_experiment": ("这个文件夹存放的是另一个实验的结果（{name}，或设置不同的本实验）",
                                    "换一个 --out，或删除这个文件夹"),
    "experiment.trial_symlink": ("{folder} 是符号链接；zoo 不会通过链接写入或删除", "请删除这个链接"),
    # -- a second run of the same folder, and what the plan refuses up front (issue 34)
    "experiment.reused": ("{total} 个试验中有 {n} 个取自 '{folder}' 中先前的运行（已完成的试验不会再训练）", None),
    "experiment.reused_fix": (None, "要从头开始，请传入 --fresh（先前的文件夹会被移到一旁，不会删除任何内容）或换一个 --out"),
    "experiment.set_aside": ("先前的结果已移到 '{folder}'（保留，未删除）", None),
    "experiment.aside_full": ("'{folder}' 旁边已经移放了 {limit} 次先前的运行",
                              "请删除或移走一些 '{folder}.earlier-N' 文件夹，或换一个 --out"),
    "experiment.fix_variant_max_len": (None, "在变体 {variant} 的 set: 中设 max_len: {need}（或更大）"),
    "results.none": ("这个文件夹里没有实验结果", "请传入 `zoo experiment run` 的 --out 文件夹"),
    "results.record_bad": ("文件夹中的 {record} 不可用：「{reason}」", "请把实验重新运行到一个新的 --out"),
    "results.trials_bad": ("文件夹中的 {record} 已损坏（{kind}：其中的试验不是试验记录）", "请把实验重新运行到一个新的 --out"),
    "train.loss_nonfinite": ("第 {step} 步的损失变成了 {loss}；训练已停止且未保存；{kept}",
                             "调低学习率（--lr）或保持梯度裁剪开启（--grad-clip），然后从保留的检查点继续训练"),
    "train.weight_nonfinite": ("第 {step} 步：权重 {name} 变成了非有限值（{kind}）；训练已停止，未保存它",
                               "调低学习率（--lr）或保持梯度裁剪开启（--grad-clip），然后从保留的检查点继续训练"),
    "train.weight_nonfinite_kept": ("第 {step} 步：权重 {name} 变成了非有限值（{kind}）；训练已停止，未保存它；{kept}",
                                    "调低学习率（--lr）或保持梯度裁剪开启（--grad-clip），然后从保留的检查点继续训练"),
    "task.symbols": ("任务需要 {n} 个符号；最多只有 {limit} 个", "请使用最多 {room} 个符号的词表"),
    "task.heldout_draw": ("在留出划分的一侧抽不到足够的样本", "请把留出比例设在 0.05 到 0.5 之间"),
    "task.vocab": ("任务有 {n} 个 token，规格的 vocab_size 是 {vocab_size}", "请让词表大小与任务一致"),
    "task.max_len": ("任务需要长为 {need} 个 token 的序列，max_len 却是 {max_len}", "在基础规格中设 max_len: {need}（或更大）"),
    "train.tensorboard_missing": ("tensorboard=True 需要 tensorboard 包",
                                  "pip install 'zoo-transformers[track]'（或 pip install tensorboard），或者不用 tensorboard 训练"),
    "train.tensorboard_symlink": ("{folder} 是符号链接", "请删除它：zoo 只在运行文件夹内写入"),
    "train.kept_step": ("'{out}' 保留着第 {saved} 步的检查点", None),
    "train.kept_nothing": ("什么都没有保存", None),
    "train.kept_last": ("'{out}' 保留着上一次正常的保存", None),
}

#: What the YAML parser (PyYAML) says most often, in Chinese; anything else is shown as it said it,
#: in 「」 (its own words, quoted).
YAML_PROBLEMS_ZH = {
    "did not find expected node content": "缺少应有的值",
    "expected the node content, but found '<stream end>'": "缺少应有的值（文本已结束）",
    "expected <block end>, but found '?'": "缩进不一致",
    "did not find expected key": "缺少应有的键（常见原因：缩进不齐）",
    "mapping values are not allowed here": "此处不能出现映射值（常见原因：冒号后少了空格，或缩进不对）",
    "could not find expected ':'": "缺少应有的 ':'",
    "found unexpected end of stream": "文本意外结束（引号或括号没有闭合？）",
    "found undefined alias": "用到了未定义的别名",
    "did not find expected ',' or ']'": "缺少应有的 ',' 或 ']'",
    "did not find expected ',' or '}'": "缺少应有的 ',' 或 '}'",
    "found character '\\t' that cannot start any token": "制表符不能用来缩进，请改用空格",
    "expected <block end>, but found '<block sequence start>'": "列表的缩进与上一级不一致",
    "expected <block end>, but found '<block mapping start>'": "映射的缩进与上一级不一致",
    "expected <block end>, but found '-'": "列表项的缩进与上一级不一致",
    "expected ',' or ']', but got '<stream end>'": "列表的 ']' 没有闭合",
    "expected ',' or '}', but got '<stream end>'": "映射的 '}' 没有闭合",
}


def yaml_problem_zh(problem: Any) -> str:
    """The YAML parser's ``problem`` in Chinese (:data:`YAML_PROBLEMS_ZH`), else quoted in 「」."""
    text = str(problem)
    return YAML_PROBLEMS_ZH.get(text) or f"「{text}」"


#: How the engine says where a memory budget came from (``why`` of :func:`zoo.guard.run_budget.budget`),
#: in Chinese; another (a process limit, a GPU: with figures) is quoted in 「」 by :func:`budget_why`.
BUDGET_WHY_ZH = {
    "available memory on cpu": "本机 CPU 当前的可用内存",
    "free memory on cpu": "本机 CPU 当前的空闲内存",
    "no limit (memory size unknown)": "不设上限（内存大小未知）",
    "zoo.guard.run_budget.BUDGET": "由 `zoo.guard.run_budget.BUDGET` 设定",
    "the budget you set": "你设定的预算",
}


def budget_why(why: Any, lang: Any = DEFAULT) -> str:
    """Where a memory budget came from, in ``lang`` (English: as the engine says it)."""
    text = str(why)
    if lang_code(lang) != "zh":
        return text
    return BUDGET_WHY_ZH.get(text) or f"「{text}」"


#: The Chinese of an input contract's one-line summary (:meth:`zoo.run.input_contract.InputContract.summary`,
#: whose :data:`~zoo.run.input_contract.SUMMARY_WORDS` are the English): the description and the
#: example are the checkpoint author's own text, quoted as written.
CONTRACT_WORDS_ZH = {"description": "「{description}」", "rules": "（{rules}）", "rule_sep": "；",
                     "normalize": "先做规范化 {names}", "list_sep": "、", "pattern": "须整体匹配正则 `{pattern}`",
                     "validator": "校验器 `{call}`", "example": "；示例：`{example}`"}


def contract_words(lang: Any) -> dict | None:
    """The templates of an input contract's summary in ``lang`` (None: the engine's English)."""
    return CONTRACT_WORDS_ZH if lang_code(lang) == "zh" else None


#: The Chinese of each kind of translatable parameter value (:attr:`zoo.messages.Message.words`: an id
#: declares which of its parameters is a component family, the YAML parser's problem, or where a
#: memory budget came from).
_WORDS_ZH = {_messages.FAMILY: lambda word: family_word_zh(str(word)), _messages.YAML_PROBLEM: yaml_problem_zh,
             _messages.BUDGET_ORIGIN: lambda why: budget_why(why, "zh")}
#: The UI's own messages are :data:`STRINGS` keys; as message ids they read ``ui.KEY``.
UI_PREFIX = "ui."


def _join_zh(parts: list[str]) -> str:
    """Fix sentences joined the Chinese way: "；" between them, nothing after a question."""
    return "".join(p + ("" if i == len(parts) - 1 or p.endswith(("？", "?")) else "；")
                   for i, p in enumerate(parts))


def _error_parts(exc: Any) -> Any:
    """``exc`` itself, or a kept record of one (a mapping, ``ui.common.error_record``) as an object
    with the error's attributes."""
    if isinstance(exc, dict):
        from types import SimpleNamespace

        return SimpleNamespace(**{"where": None, "options": None, "fix": None, "message_id": None,
                                  "params": {}, "fix_ids": (), **exc})
    return exc


def error_text(exc: Any, lang: Any = DEFAULT) -> tuple[str, str | None]:
    """``(what, fix)`` of a ``ZooError`` (or its kept record, a mapping) in ``lang``, worded from its
    message id and params; its English as raised when it has no id or ``lang`` has no entry for it."""
    exc = _error_parts(exc)
    what, fix = getattr(exc, "what", None) or str(exc), getattr(exc, "fix", None)
    message_id, code = getattr(exc, "message_id", None), lang_code(lang)
    params, fix_ids = getattr(exc, "params", None) or {}, tuple(getattr(exc, "fix_ids", ()))
    if message_id and message_id.startswith(UI_PREFIX):  # the UI's own: its keys, as t() words them
        if code == "zh" and str(params.get("why")) in BUDGET_WHY_ZH:  # a memory budget's origin (ui/budget.py)
            params = {**params, "why": BUDGET_WHY_ZH[str(params["why"])]}
        from zoo.messages import cap  # each part as long as the English one may be (MAX_PART)

        fixes = [_fix_text(k[len(UI_PREFIX):], code, params) for k in fix_ids]
        return cap(t(message_id[len(UI_PREFIX):], code, **params)), cap(("；" if code == "zh" else "; ").join(fixes) or None)
    if not message_id or code != "zh":
        return what, fix
    from zoo import messages

    params = _parts_zh(params)  # a sentence inside (messages.cause / messages.part): in Chinese too

    done = messages.render(message_id, params, fix_ids, ERRORS_ZH, words=_WORDS_ZH, join=_join_zh)
    return done if done is not None else (what, fix)


def _parts_zh(params: dict, depth: int = 0) -> dict:
    """``params`` with each sentence inside the error (a param ``P`` beside ``P_id`` and
    ``P_params``: :func:`zoo.messages.cause`, :func:`zoo.messages.part`) worded in Chinese from its
    id -- its own inner sentences too -- or, a foreign library's own text (torch, safetensors, the
    OS) or an id without a Chinese entry, its English quoted in 「」: a value the page shows as it
    was raised, not a sentence left untranslated."""
    from zoo import messages

    out = dict(params)
    for name in [k for k in params if f"{k}_id" in params and f"{k}_params" in params]:
        inner, mid, inner_params = None, params.get(f"{name}_id"), params.get(f"{name}_params")
        if isinstance(mid, str) and mid in ERRORS_ZH and isinstance(inner_params, dict) and depth < 4:
            try:
                inner = messages.render(mid, _parts_zh(inner_params, depth + 1), (), ERRORS_ZH,
                                        words=_WORDS_ZH, join=_join_zh)
            except (KeyError, IndexError, ValueError):  # a record whose params do not fit the id
                inner = None
        out[name] = inner[0] if inner is not None else f"「{params.get(name)}」"
    return out


def cause_text(exc: Any, lang: Any = DEFAULT) -> str:
    """The problem of ``exc`` (a ``ZooError``) as a part of another sentence, in ``lang``: worded
    from its id (:func:`error_text`); in Chinese, an error without a Chinese entry is its English
    quoted in 「」 (a value shown as it was raised, not a sentence left untranslated)."""
    what = error_text(exc, lang)[0]
    if lang_code(lang) != "zh":
        return what
    message_id = getattr(exc, "message_id", None)
    done = bool(message_id) and (message_id.startswith(UI_PREFIX) or message_id in ERRORS_ZH)
    return what if done else f"「{what}」"


def _fix_text(key: str, lang: Any, params: dict) -> str:
    """The UI's fix sentence ``key`` in ``lang``, formatted with the error's params when it names
    them (a fix may also hold literal braces, a YAML example: then it is shown as written)."""
    from zoo.messages import fields

    text = t(key, lang)
    try:
        names = fields(text)
        return text.format(**params) if names and names <= set(params) else text
    except (ValueError, KeyError, IndexError):
        return text


def ui_error(cls: type, key: str, *, fix: str | None = None, where: str | None = None,
             options: Any = None, **params: Any) -> Exception:
    """The UI's own error: :data:`STRINGS` ``key`` formatted with ``params`` (and ``fix``, another
    key), as a ``cls`` (a ``ZooError``) in English whose message id is ``ui.KEY`` -- worded in the
    page's language when shown, and again after a language switch: ``raise ui_error(CheckpointError,
    "err.bad_name", fix="err.bad_name_fix", where="checkpoint", name=name)``."""
    return cls(t(key, "en", **params), where=where, options=options, fix=_fix_text(fix, "en", params) if fix else None,
               message_id=UI_PREFIX + key, params=params, fix_ids=(UI_PREFIX + fix,) if fix else ())


def format_error(exc: "BaseException | dict", lang: Any = DEFAULT) -> str:
    """A ``ZooError`` (or its kept record) as plain text with localised headings (where / problem /
    options / fix), its problem and fix in ``lang`` (:func:`error_text`).  A server path in any part
    is named as the page names files (``runs/NAME/...``, :func:`ui.paths.shown_paths`)."""
    exc = _error_parts(exc)
    what, fix = error_text(exc, lang)
    where = shown_paths(getattr(exc, "where", None))
    what, fix = shown_paths(what), shown_paths(fix)
    options = [shown_paths(str(o)) for o in getattr(exc, "options", None) or ()]
    lines = []
    if where:
        lines.append(f"{t('err.where', lang)}: {where}")
    lines.append(f"{t('err.what', lang)}: {what}")
    if options:
        lines.append(f"{t('err.options', lang)}: {', '.join(map(str, options))}")
    if fix:
        lines.append(f"{t('err.fix', lang)}: {fix}")
    return "\n".join(lines)


_TEMPLATE = re.compile(r"\{([a-z_]+\.[a-z_.]+)\}")


def keys_of(key: "str | tuple[str, ...]") -> list[str]:
    """The i18n keys a registered attribute refers to (a key, a template, or a tuple of keys)."""
    if callable(key):
        return list(getattr(key, "i18n_keys", ()))
    if isinstance(key, (tuple, list)):
        return list(key)
    return _TEMPLATE.findall(key) if "{" in key else [key]


class Translator:
    """Remembers which component attribute shows which key, for the language switch."""

    def __init__(self, lang: str = DEFAULT):
        self.lang = lang_code(lang)
        self.items: list[tuple[Any, dict[str, str]]] = []
        #: outputs a handler wrote in some language: (outputs, render, inputs), see :meth:`keep`
        self.kept: list[tuple[list, Any, list]] = []

    def __call__(self, key: str, **fmt: Any) -> str:
        return t(key, self.lang, **fmt)

    def add(self, component, **attrs: "str | tuple[str, ...]"):
        """Register ``component`` so that each ``attr=key`` is re-translated on a language switch;
        returns the component (use it inline: ``tr.add(gr.Button(tr("x")), value="x")``).  ``key`` may
        be a template (``value="### {inspect.calc_heading}"``), a tuple of keys, or a function of the
        language returning the new value (a table rebuilt with translated headers: the frontend
        ignores a headers-only update)."""
        self.items.append((component, attrs))
        return component

    def keep(self, outputs: list, render, inputs: list) -> None:
        """Register tab outputs whose text a handler wrote in the language of that moment (a speed
        line, a table's headers, a summary): on a language switch ``render(lang, *values of inputs)``
        draws them again in the new language from the data of the last result.  ``inputs`` hold that
        data: usually a ``gr.State`` the handler fills beside its outputs (never text already
        translated), or the components the result was computed from.  ``render`` returns one value
        per output (a single value for one output; ``gr.skip()`` leaves one as it is), or None when
        there is nothing to draw yet.  A value is merged with the component's own label update, so
        each component gets one update per switch."""
        self.kept.append((list(outputs), render, list(inputs)))

    @property
    def components(self) -> list:
        return [c for c, _ in self.items]

    @property
    def switch_inputs(self) -> list:
        """The components whose values the language switch reads (every :meth:`keep` input, once)."""
        return _unique(c for _, _, inputs in self.kept for c in inputs)

    @property
    def switch_outputs(self) -> list:
        """The components the language switch writes: every registered one, then every kept output."""
        return _unique([c for c, _ in self.items] + [c for outputs, _, _ in self.kept for c in outputs])

    def switch(self, lang: Any, values: "list | tuple" = ()) -> list:
        """One update per :attr:`switch_outputs` component for a switch to ``lang``: its labels
        (:meth:`updates`) merged with what the kept renders draw from ``values`` (the current values
        of :attr:`switch_inputs`, in that order)."""
        import gradio as gr

        merged = {id(c): dict(u) for (c, _), u in zip(self.items, self.updates(lang))}
        value_of = dict(zip(map(id, self.switch_inputs), values))
        for outputs, render, inputs in self.kept:
            try:
                drawn = render(lang_code(lang), *[value_of.get(id(c)) for c in inputs])
            except Exception as exc:  # noqa: BLE001 - a switch always switches; the output stays as it was
                import logging

                from zoo.errors import ZooError

                log = logging.getLogger("zoo.ui")
                if isinstance(exc, ZooError):  # a refusal of what the page holds: one line, no traceback
                    log.warning("not re-drawn in %s (%s): %s", lang_code(lang),
                                getattr(render, "__qualname__", render), exc.what)
                else:  # a bug in the render: its traceback, for whoever reads the log
                    log.exception("re-rendering %s in %s failed", render, lang)
                continue
            if drawn is None:
                continue
            drawn = drawn if len(outputs) > 1 else (drawn,)
            for c, v in zip(outputs, drawn):
                if not (isinstance(v, dict) and v.get("__type__") == "update"):
                    v = {"__type__": "update", "value": v}
                u = merged.setdefault(id(c), {"__type__": "update"})
                if "value" in v:
                    u.pop("headers", None)  # a drawn table carries its translated headers itself
                u.update(v)
        return [gr.update(**{k: v for k, v in merged.get(id(c), {}).items() if k != "__type__"})
                for c in self.switch_outputs]

    def updates(self, lang: Any) -> list:
        import gradio as gr

        def text(key):  # a key, a template "## {key}", keys (headers), or a function of the language
            if callable(key):
                return key(lang)
            if isinstance(key, (tuple, list)):
                return [t(k, lang) for k in key]
            if "{" in key:
                return _TEMPLATE.sub(lambda m: t(m.group(1), lang), key)
            return t(key, lang)

        return [gr.update(**{attr: text(key) for attr, key in attrs.items()}) for _, attrs in self.items]


def _unique(items) -> list:
    """``items`` without repeats (by identity), in order."""
    seen, out = set(), []
    for c in items:
        if id(c) not in seen:
            seen.add(id(c))
            out.append(c)
    return out
