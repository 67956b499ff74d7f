"""Shapers registered by name, the way verl registers its advantage estimators.

A registry entry is the pure function itself plus the pipeline *stage* it belongs to (see
:mod:`stepgym.trainers.shapers.compose` for the order). Other trainers can look a shaper up by the name used in a
config file (``get("gigpo")``) without importing its module by path. Registration happens when
``stepgym.trainers.shapers`` is imported; third parties may register their own functions under new names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["STAGES", "ShaperEntry", "available", "get", "register"]

#: Pipeline stages in the §0 order (``sampling`` happens before shaping, ``loss`` after it).
STAGES = ("sampling", "reward", "base", "step", "token", "step_norm", "loss", "schedule")


@dataclass(frozen=True)
class ShaperEntry:
    name: str
    fn: Callable[..., Any]
    stage: str
    summary: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


_REGISTRY: dict[str, ShaperEntry] = {}


def register(
    name: str, *, stage: str, summary: str = "", overwrite: bool = False
) -> Callable[[Callable], Callable]:
    """Decorator: register ``fn`` under ``name`` for ``stage``. Re-registering a name needs ``overwrite=True``."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; expected one of {STAGES}")

    def deco(fn: Callable) -> Callable:
        if name in _REGISTRY and not overwrite and _REGISTRY[name].fn is not fn:
            raise ValueError(
                f"a shaper named {name!r} is already registered ({_REGISTRY[name].fn.__module__})"
            )
        doc = summary or (fn.__doc__ or "").strip().split("\n", 1)[0]
        _REGISTRY[name] = ShaperEntry(name=name, fn=fn, stage=stage, summary=doc)
        return fn

    return deco


def get(name: str) -> ShaperEntry:
    """The entry registered under ``name`` (call it like the function)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no shaper named {name!r}; registered: {sorted(_REGISTRY)}") from None


def available(stage: str | None = None) -> list[str]:
    """Registered names, optionally only those of one stage."""
    return sorted(n for n, e in _REGISTRY.items() if stage is None or e.stage == stage)
