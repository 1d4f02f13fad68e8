"""Names a package exports but imports only when first used (PEP 562)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, modules: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``modules[name]`` when ``name`` is first
    read: an adapter a process does not use costs it nothing."""

    def __getattr__(name: str) -> Any:
        if name in modules:
            return getattr(importlib.import_module(modules[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
