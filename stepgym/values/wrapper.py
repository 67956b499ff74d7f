"""``ValueWrapper``: the ground-truth value labels (``schema.VALUE_*``) on every step of a stepgym env.

The wrapper finds the oracle for the unwrapped env at wrap time (:func:`oracle_for`), so an env it knows nothing
about fails there with :class:`~stepgym.errors.ValueOracleError`, not with a wrong label later. Per step it costs
one cache lookup of the state after the action (the state before is the previous step's); only a state seen first
runs the oracle. The env underneath is never stepped or changed by the oracles (they work on copies/snapshots),
so a wrapped rollout is the same rollout as an unwrapped one, plus keys.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import gymnasium as gym

from stepgym import schema
from stepgym.envs import EnvEntry, registered_envs
from stepgym.envs.oracle import Value, ValueOracle
from stepgym.errors import ValueOracleError
from stepgym.values.base import TaskMemo, ValueCache, step_gain

__all__ = ["DEFAULT_BUDGET", "ValueWrapper", "oracle_for"]

DEFAULT_BUDGET = 500
"""ALFWorld's default search budget (successor states generated per uncached state); see docs/values.md."""


def _load(path: str) -> Any:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def _declared(env: gym.Env) -> tuple[str, EnvEntry] | None:
    """The registration of ``env``: by its spec's id, else by the class of a registered entry point (an env built
    directly, without ``gym.make``). Only the classes ``env``'s type derives from are looked up (their modules are
    imported already, an env of that class exists), so this imports nothing."""
    base = env.unwrapped
    entries = registered_envs()
    spec = getattr(base, "spec", None) or getattr(env, "spec", None)
    if spec is not None and spec.id in entries:
        return spec.id, entries[spec.id]
    mro = type(base).__mro__
    best: tuple[int, str, EnvEntry] | None = (
        None  # the most derived registered class wins (a subclass's own entry)
    )
    for env_id, entry in entries.items():
        module_name, _, name = entry.entry_point.partition(":")
        for depth, cls in enumerate(mro):
            # an entry point may name its class through its package ("stepgym.envs.sokoban:SokobanEnv")
            if cls.__name__ != name or not (cls.__module__ + ".").startswith(module_name + "."):
                continue
            if getattr(sys.modules.get(module_name), name, None) is cls and (best is None or depth < best[0]):
                best = (depth, env_id, entry)
    return None if best is None else (best[1], best[2])


def oracle_for(env: gym.Env, budget: int = DEFAULT_BUDGET) -> ValueOracle:
    """The value oracle of ``env`` (unwrapped first): the env's own ``value_oracle(budget)`` method when it has
    one, else the ``value_oracle`` its registration declared (:func:`stepgym.envs.register`).

    Raises :class:`~stepgym.errors.ValueOracleError` when there is none: with the env's own reason when it declared
    ``no_values`` (its state is too large for exact values, say), else saying how an env provides one.
    """
    base = env.unwrapped
    own = getattr(base, "value_oracle", None)
    if callable(own):
        return own(budget)
    found = _declared(env)
    if found is not None and found[1].value_oracle is not None:
        return _load(found[1].value_oracle)(base, budget)
    what = found[0] if found is not None else f"{type(base).__module__}.{type(base).__qualname__}"
    if found is not None and found[1].no_values:
        raise ValueOracleError(f"{what} has no exact step values: {found[1].no_values}")
    raise ValueOracleError(
        f"ValueWrapper has no value oracle for {what}: declare one with stepgym.envs.register(..., "
        "value_oracle='module:factory') or give the env a value_oracle(budget) method (see docs/values.md)"
    )


class ValueWrapper(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Adds ``VALUE_BEFORE``, ``VALUE_AFTER``, ``VALUE_GAIN``, ``VALUE_EXACT``, ``VALUE_REACHABLE`` and
    ``VALUE_BEST_REWARD`` to every step's info (reset's info gets the initial state's ``VALUE_AFTER``,
    ``VALUE_EXACT``, ``VALUE_REACHABLE`` and ``VALUE_BEST_REWARD``).

    Example (the expert's step is optimal: the cost-to-go drops by one)::

        >>> import gymnasium as gym
        >>> import stepgym
        >>> from stepgym import schema
        >>> from stepgym.values import step_value_class
        >>> env = ValueWrapper(gym.make("StepGym/CreditToy-v0"))
        >>> obs, info = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step(info[schema.EXPERT_ACTION])
        >>> info[schema.VALUE_BEFORE], info[schema.VALUE_AFTER], info[schema.VALUE_GAIN]
        (5.0, 4.0, 1.0)
        >>> step_value_class(info), info[schema.VALUE_EXACT]
        (1, True)

    Args:
        env: a stepgym env with an oracle (ALFWorld native engine, WebShop, Search-QA, CreditToy, CreditFamily),
            or any env with a ``value_oracle(budget)`` method. Its info must carry ``TASK_ID`` and ``STATE_KEY``.
        budget: ALFWorld's search budget, in successor states generated per uncached state (others ignore it).
        cache_size: states kept in the LRU (0: no cache, every step runs the oracle).
        enabled: False passes every call straight through (no oracle, no keys, no cost).

    Raises:
        ValueOracleError: at wrap time, when the env has no oracle (or lacks a fact its oracle needs).
    """

    def __init__(
        self, env: gym.Env, budget: int = DEFAULT_BUDGET, cache_size: int = 200_000, enabled: bool = True
    ):
        gym.utils.RecordConstructorArgs.__init__(self, budget=budget, cache_size=cache_size, enabled=enabled)
        super().__init__(env)
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        self.enabled = bool(enabled)
        self.budget = int(budget)
        self.oracle: ValueOracle | None = oracle_for(env, self.budget) if self.enabled else None
        self.cache = ValueCache(cache_size)
        self._task = ""
        self._value: Value | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        if self.oracle is None:
            return obs, info
        self._task = str(self._need(info, schema.TASK_ID))
        self._value = value = self._value_of(info)
        info[schema.VALUE_AFTER] = value.cost
        info[schema.VALUE_EXACT] = value.exact
        info[schema.VALUE_REACHABLE] = value.reachable
        info[schema.VALUE_BEST_REWARD] = value.best_reward
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.oracle is None:
            return obs, reward, terminated, truncated, info
        before = self._value
        if before is None:
            raise RuntimeError("ValueWrapper.step() before reset()")
        after = self._value_of(info)
        self._value = after
        info[schema.VALUE_BEFORE] = before.cost
        info[schema.VALUE_AFTER] = after.cost
        info[schema.VALUE_GAIN] = step_gain(before, after, self.oracle.unit_gain)
        info[schema.VALUE_EXACT] = before.exact and after.exact
        info[schema.VALUE_REACHABLE] = after.reachable
        info[schema.VALUE_BEST_REWARD] = after.best_reward
        return obs, reward, terminated, truncated, info

    def _value_of(self, info: dict[str, Any]) -> Value:
        assert self.oracle is not None
        key = (self._task, str(self._need(info, schema.STATE_KEY)))
        memo = TaskMemo(self.cache, self._task)
        if not getattr(self.oracle, "cacheable", True):  # an oracle that follows the episode sees every step
            return self.oracle.value(info, memo)
        value = self.cache.get(key)
        if value is None:
            value = self.oracle.value(info, memo)
            self.cache.put(key, value)
        return value

    @staticmethod
    def _need(info: dict[str, Any], key: str) -> Any:
        if key not in info:
            raise ValueOracleError(f"ValueWrapper needs {key!r} in every info; the env did not write it")
        return info[key]
