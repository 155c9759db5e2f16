"""zoo layers against PyTorch's own Transformer modules, with weights copied across.

PyTorch's masks mean the opposite of zoo's: in ``nn.MultiheadAttention`` / ``nn.Transformer`` a True
in ``src_key_padding_mask`` or a boolean ``attn_mask`` means "do NOT attend".  The conversion happens
here, once, in plain sight.
"""
import torch
from torch import nn

import zoo

D, H, FF = 32, 4, 64


def _copy_self_attn(zattn, mha: nn.MultiheadAttention):
    zattn.qkv.weight.copy_(mha.in_proj_weight)  # (3D, D): q, k, v rows stacked, as zoo fuses them
    zattn.qkv.bias.copy_(mha.in_proj_bias)
    zattn.out.weight.copy_(mha.out_proj.weight)
    zattn.out.bias.copy_(mha.out_proj.bias)


def _copy_cross_attn(zattn, mha: nn.MultiheadAttention):
    zattn.q.weight.copy_(mha.in_proj_weight[:D])
    zattn.q.bias.copy_(mha.in_proj_bias[:D])
    zattn.kv.weight.copy_(mha.in_proj_weight[D:])
    zattn.kv.bias.copy_(mha.in_proj_bias[D:])
    zattn.out.weight.copy_(mha.out_proj.weight)
    zattn.out.bias.copy_(mha.out_proj.bias)


def _copy_ffn(block, layer):
    block.ffn.up.weight.copy_(layer.linear1.weight)
    block.ffn.up.bias.copy_(layer.linear1.bias)
    block.ffn.down.weight.copy_(layer.linear2.weight)
    block.ffn.down.bias.copy_(layer.linear2.bias)


def _copy_norm(znorm, norm: nn.LayerNorm):
    znorm.weight.copy_(norm.weight)
    znorm.bias.copy_(norm.bias)


SPEC = dict(vocab_size=50, max_len=16, d_model=D, num_heads=H, d_ff=FF, dropout=0.0,
            scale_embeddings=False, positions="none", attention="sdpa",
            norm={"kind": "layernorm", "placement": "post"}, ffn={"kind": "mlp", "activation": "relu"})


@torch.no_grad()
def test_post_norm_encoder_layer_equals_nn_transformer_encoder_layer():
    torch.manual_seed(0)
    model = zoo.build(dict(SPEC, arch="encoder", num_layers=1, head="none"), seed=0).eval()
    ref = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation="relu", batch_first=True,
                                     norm_first=False).eval()
    block = model.encoder.blocks[0]
    _copy_self_attn(block.attn, ref.self_attn)
    _copy_ffn(block, ref)
    _copy_norm(block.attn_res.norm, ref.norm1)
    _copy_norm(block.ffn_res.norm, ref.norm2)

    ids = torch.randint(1, 50, (3, 9))
    real = torch.ones(3, 9, dtype=torch.bool)
    real[1, 6:] = False
    real[2, 4:] = False
    x = model.tok_emb(ids)
    ours = model(ids, attention_mask=real)  # head none: hidden states
    theirs = ref(x, src_key_padding_mask=~real)  # PyTorch: True = ignore
    diff = (ours - theirs)[real].abs().max()
    assert diff < 1e-5, diff
    # the inverted convention really matters: passing zoo's mask unchanged is wrong
    wrong = ref(x, src_key_padding_mask=real)
    assert (ours[1] - wrong[1])[real[1]].abs().max() > 1e-2  # (row 0 would be all NaN there)


@torch.no_grad()
def test_encoder_decoder_equals_nn_transformer():
    torch.manual_seed(0)
    spec = dict(SPEC, arch="encoder_decoder", num_layers=2, decoder={"num_layers": 3})
    model = zoo.build(spec, seed=0).eval()
    ref = nn.Transformer(D, H, num_encoder_layers=2, num_decoder_layers=3, dim_feedforward=FF,
                         dropout=0.0, activation="relu", batch_first=True, norm_first=False).eval()
    # nn.Transformer appends a LayerNorm after each stack even in post-norm; zoo's post-norm stacks
    # end with the last block's norm, so compare the stacks themselves.
    ref.encoder.norm = None
    ref.decoder.norm = None
    for zb, tl in zip(model.encoder.blocks, ref.encoder.layers):
        _copy_self_attn(zb.attn, tl.self_attn)
        _copy_ffn(zb, tl)
        _copy_norm(zb.attn_res.norm, tl.norm1)
        _copy_norm(zb.ffn_res.norm, tl.norm2)
    for zb, tl in zip(model.decoder.blocks, ref.decoder.layers):
        _copy_self_attn(zb.attn, tl.self_attn)
        _copy_cross_attn(zb.cross, tl.multihead_attn)
        _copy_ffn(zb, tl)
        _copy_norm(zb.attn_res.norm, tl.norm1)
        _copy_norm(zb.cross_res.norm, tl.norm2)
        _copy_norm(zb.ffn_res.norm, tl.norm3)

    src = torch.randint(1, 50, (2, 7))
    tgt = torch.randint(1, 50, (2, 5))
    src_real = torch.ones(2, 7, dtype=torch.bool)
    src_real[1, 5:] = False
    ours = model(src, tgt, src_padding=src_real, return_hidden=True)
    causal_blocked = torch.ones(5, 5, dtype=torch.bool).triu(1)  # PyTorch: True = blocked
    theirs = ref(model.tok_emb(src), model.tok_emb(tgt), tgt_mask=causal_blocked,
                 src_key_padding_mask=~src_real, memory_key_padding_mask=~src_real)
    assert (ours - theirs).abs().max() < 1e-5
