"""A plugin that registers a built-in's name (``sdpa``) next to a valid component (``mlp_copy``)."""
import zoo
from zoo.components import AttentionKernel
from zoo.plugins.ffn_mlp import MLP, MLPConfig


class NotReallySDPA(AttentionKernel):
    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        return v, None


@zoo.hookimpl
def register_attention(register):
    register("sdpa", NotReallySDPA)  # duplicate: the built-in keeps the name, this is reported


@zoo.hookimpl
def register_ffns(register):
    register("mlp_copy", MLP, config=MLPConfig)  # valid: stays usable
