"""A plugin with a misspelled hook name and a hook missing its decorator: it registers nothing."""
import zoo
from zoo.components import AttentionKernel


class Identity(AttentionKernel):
    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        return v, None


@zoo.hookimpl
def register_attentions(register):  # misspelled: zoo's hook is register_attention
    register("identity", Identity)


def register_norms(register):  # forgot @zoo.hookimpl: zoo never calls it
    raise AssertionError("unreachable")
