"""Old import paths of moved modules and names, kept working for one release with a ``DeprecationWarning``.

Why one table instead of a stub file per old path: a stub would be a second copy of each module's name list, and
the old paths are all gone next release, when this module and its table go with them. ``import stepgym`` installs
the finder below first on ``sys.meta_path`` (it answers only for the old paths, which no file provides any more:
an editable install's finder would otherwise look them up in the source tree it was installed from); importing an
old path warns and returns the new module itself, so ``stepgym.downloads is stepgym.cli.download``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any

__all__ = ["MOVED_MODULES", "install", "moved"]

#: old module path -> new module path
MOVED_MODULES: dict[str, str] = {
    "stepgym.download": "stepgym.fetch",
    "stepgym.downloads": "stepgym.cli.download",
    "stepgym.trainers.cli": "stepgym.cli.train",
    "stepgym.wrappers.arg_cli": "stepgym.cli.arg",
    "stepgym.envs.searchqa.cli": "stepgym.cli.searchqa",
    "stepgym.envs.webshop.cli": "stepgym.cli.webshop",
}


def _warn(old: str, new: str) -> None:
    warnings.warn(
        f"{old} moved to {new}; the old name goes away in the next release", DeprecationWarning, stacklevel=3
    )


def moved(old: str, module: str, name: str) -> Any:
    """``module.name`` after warning that ``old`` is its deprecated name (for a module's ``__getattr__``)."""
    _warn(old, f"{module}.{name}")
    return getattr(importlib.import_module(module), name)


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves an old module path of :data:`MOVED_MODULES` to the new module."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> ModuleType:
        new = MOVED_MODULES[spec.name]
        _warn(spec.name, new)
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:  # the new module is already executed
        return None


def install() -> None:
    """Put the finder on ``sys.meta_path`` once."""
    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModuleFinder())
