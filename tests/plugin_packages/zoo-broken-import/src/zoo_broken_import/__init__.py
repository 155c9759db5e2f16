"""A plugin whose import fails: it needs a module nobody installed."""
import zoo
import zoo_this_dependency_is_not_installed  # noqa: F401  -> ModuleNotFoundError at import


@zoo.hookimpl
def register_attention(register):  # never reached
    raise AssertionError("unreachable")
