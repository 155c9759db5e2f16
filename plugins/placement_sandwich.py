"""``sandwich``: a norm before *and* after each sub-layer, inside the residual branch.

    x = x + norm_out(f(norm_in(x)))

Pre-norm keeps the residual path an identity, but nothing bounds what each sub-layer *adds* to it:
in deep or low-precision training a few branches can grow large and destabilise everything
downstream.  Normalising the branch's output as well caps each contribution.  Introduced as
"Sandwich-LN" in CogView (Ding et al., 2021) and used by Gemma 2/3 ("pre- and post-norm"), which pair
it with RMSNorm.  Each sub-layer owns two norms; the stack still ends with a final norm, as pre-norm.
"""
from __future__ import annotations

import zoo
from zoo.components import Placement


class SandwichNorm(Placement):
    final_norm = True

    def __init__(self, config, ctx, make_norm):
        super().__init__(config, ctx, make_norm)
        self.norm = make_norm()      # on the way in (as pre-norm)
        self.post_norm = make_norm()  # on the branch's output, before the residual sum

    def enter(self, x):
        return self.norm(x)

    def exit(self, x, y):
        return x + self.branch(y)

    def branch(self, y):  # what the sub-layer adds to the stream (the inside view's hook_*_out)
        return self.post_norm(y)


@zoo.hookimpl
def register_placements(register):
    register("sandwich", SandwichNorm)
