"""Lazy package exports (PEP 562), written once for every stepgym package that has them.

A package lists what it exports and where each name lives; a name's module is imported on first use, so
``import stepgym`` stays fast and an optional dependency (pettingzoo, torch) loads only when its export is used::

    __getattr__, __dir__ = lazy_exports(__name__, {"GroupEnv": "stepgym.group", "wrappers": "stepgym.wrappers:"})

Each value is ``"module"`` (the attribute of the export's own name in that module), ``"module:attr"`` (another
attribute name) or ``"module:"`` (the module itself). A resolved value is cached in the package's namespace.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (its ``__name__``) for the lazy ``exports``."""
    table = dict(exports)

    def __getattr__(name: str) -> Any:
        spec = table.get(name)
        if spec is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name, sep, attr = spec.partition(":")
        module = importlib.import_module(module_name)
        value = module if sep and not attr else getattr(module, attr or name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__
