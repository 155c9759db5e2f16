"""Names that moved: the old spelling keeps working for a while, with a ``DeprecationWarning``.

A module whose public names moved ends with ``__getattr__ = moved(__name__, {"old": "new.module"})``
(PEP 562): ``from zoo.build import load_or_build`` still works and says where the name lives now.
The new module is imported only when the old name is used, so a moved name never turns into an
import that runs up the house (``tests/test_architecture.py`` checks the import graph)."""
from __future__ import annotations

import importlib
import warnings
from typing import Any, Callable


def moved(module: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for ``module`` forwarding each name of ``names`` (old name ->
    ``"new.module"`` or ``"new.module:new_name"``) with a ``DeprecationWarning``."""
    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        target, _, new_name = names[name].partition(":")
        new_name = new_name or name
        warnings.warn(f"{module}.{name} is deprecated: use {target}.{new_name}", DeprecationWarning,
                      stacklevel=2)
        return getattr(importlib.import_module(target), new_name)
    return __getattr__


def moved_method(cls_name: str, name: str, target: str) -> Callable[..., Any]:
    """A deprecated method of ``cls_name`` that became the function ``target``
    (``"module:function"``) taking the object as its ``registry=`` keyword; resolved when called."""
    module, _, func = target.partition(":")

    def method(self, *args: Any, **kwargs: Any) -> Any:
        warnings.warn(f"{cls_name}.{name} is deprecated: use {module}.{func}(..., registry=...)",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(module), func)(*args, registry=self, **kwargs)

    method.__name__ = name
    method.__doc__ = f"Deprecated: :func:`{module}.{func}` with ``registry=self``."
    return method
