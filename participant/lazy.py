"""Package attributes imported on first use (PEP 562), so that importing a package for one light
name (a spec, an error class) does not load everything the package offers."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, homes: dict[str, tuple[str, ...]]) -> tuple[Callable, Callable]:
    """``__getattr__`` and ``__dir__`` for ``package`` whose public names live in the submodules
    ``homes`` maps to them (``{".client": ("Client", ...)}``); a name is imported from its home
    on first access and then kept in the package's namespace."""
    home_of = {name: module for module, names in homes.items() for name in names}
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str):
        if name not in home_of:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home_of[name], package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *home_of])

    return __getattr__, __dir__
