"""An env's rarely-set settings as one frozen dataclass, still settable by name through ``gym.make``.

An env whose constructor would take more than eight parameters keeps the common keywords and gathers the rest in
a config dataclass (``SearchQAConfig``, ``WebShopConfig``, ...), named in its ``options_class`` attribute. The
constructor takes ``config=`` (an instance) and ``**options`` (any of its fields by name, as ``gym.make``, presets
and the command line pass them): :func:`env_config` merges the two and refuses an unknown name in one line, and
:func:`stepgym.envs.check_env_kwargs` lists the fields among the env's options.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any, TypeVar

from stepgym.errors import InvalidArgumentError

__all__ = ["env_config"]

T = TypeVar("T")


def env_config(cls: type[T], config: T | None, options: Mapping[str, Any], owner: type) -> T:
    """``config`` (default ``cls()``) with the fields named in ``options`` set (a keyword wins over ``config``).

    Raises :class:`~stepgym.errors.InvalidArgumentError` (one line) for a name that is no field of ``cls``,
    naming what ``owner`` (the class whose constructor was called) takes: its own keywords and the fields.
    """
    if config is not None and not isinstance(config, cls):
        raise InvalidArgumentError(
            f"{owner.__name__}: config must be a {cls.__name__}, got {type(config).__name__}"
        )
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(options) - set(names))
    if unknown:
        own = [
            p.name
            for p in inspect.signature(owner.__init__).parameters.values()  # type: ignore[misc]
            if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        ]
        raise InvalidArgumentError(
            f"{owner.__name__} takes no option {', '.join(unknown)}; its options are {', '.join([*own, *names])}"
        )
    base = cls() if config is None else config
    return dataclasses.replace(base, **options) if options else base  # type: ignore[type-var]
