"""Helpers the TRL adapter's modules share: the env maker, the text format of its envs, and the
cross-process gather / broadcast (one process: no-ops)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym

from stepgym import _deps
from stepgym.group import EnvFactory
from stepgym.wrappers.text import FORMATS, resolve_format

_deps.require("trl", "trl", what="the TRL integration")


def format_name(make: Callable[[], gym.Env], fmt: Any) -> Any:
    """The text format for the envs ``make`` builds: ``fmt`` when given, else the env's declared one
    (:func:`~stepgym.wrappers.text.resolve_format`'s rule and error, read on a probe copy): its name when it is one
    of :data:`~stepgym.wrappers.text.FORMATS`, else the format itself (an env's own, such as tau2's, which no
    name resolves)."""
    if fmt is not None:
        return fmt
    probe = make()
    try:
        found = resolve_format(probe)
    finally:
        probe.close()
    return found.name if found.name in FORMATS else found


def env_maker(env: str | EnvFactory, env_kwargs: Mapping[str, Any] | None) -> Callable[[], gym.Env]:
    kwargs = dict(env_kwargs or {})
    if isinstance(env, str):
        return functools.partial(gym.make, env, **kwargs)
    return functools.partial(env, **kwargs)


def gather_all(trainer: Any, obj: Any) -> list[Any]:
    """``[obj of process 0, obj of process 1, ...]`` (one process: ``[obj]``)."""
    if int(trainer.accelerator.num_processes) == 1:
        return [obj]
    from accelerate.utils import gather_object

    return list(gather_object([obj]))


def broadcast(trainer: Any, obj: Any) -> Any:
    """The main process's ``obj`` on every process."""
    if int(trainer.accelerator.num_processes) == 1:
        return obj
    from accelerate.utils import broadcast_object_list

    box = [obj]
    broadcast_object_list(box, from_process=0)
    return box[0]
