"""What :class:`~stepgym.values.ValueWrapper` does with an oracle's values: the gain rule, the LRU cache, the
classifier. The values themselves and the oracle's interface are :mod:`stepgym.envs.oracle` (beside the envs,
whose folders hold their oracles)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from stepgym import schema
from stepgym.envs.oracle import Value
from stepgym.errors import StepGymError

__all__ = ["TaskMemo", "ValueCache", "step_gain", "step_value_class"]


def step_gain(before: Value, after: Value, unit: bool = False) -> float:
    """The gain rule of ``schema.VALUE_GAIN`` (documented there and in docs/values.md)."""
    if not before.reachable:
        return 0.0  # nothing left to lose (or unknown: no claim)
    if not after.reachable:
        return -1.0 if after.exact else 0.0  # proved lost is harmful; unknown makes no claim
    if after.best_reward < before.best_reward:
        return -1.0
    gain = before.cost - after.cost
    if unit:
        return float((gain > 0) - (gain < 0))
    return float(gain)


class ValueCache:
    """A bounded LRU of ``(task id, state key) -> Value``, with hit/miss counts for the benchmark."""

    def __init__(self, max_size: int = 200_000):
        if max_size < 0:
            raise ValueError(f"cache size must be >= 0, got {max_size}")
        self.max_size = int(max_size)
        self._data: OrderedDict[tuple[str, str], Value] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: tuple[str, str]) -> Value | None:
        value = self._data.get(key)
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        self._data.move_to_end(key)
        return value

    def peek(self, key: tuple[str, str]) -> Value | None:
        """The cached value, without counting a hit or a miss or refreshing it (an oracle's look-ups)."""
        return self._data.get(key)

    def put(self, key: tuple[str, str], value: Value) -> None:
        """Store ``value`` unless an exact value is already known (an exact value is never replaced by a bound)."""
        if self.max_size == 0:
            return
        old = self._data.get(key)
        if old is not None and old.exact and not value.exact:
            return
        if old is not None and not old.exact and not value.exact and old.cost <= value.cost and old.reachable:
            return  # keep the tighter upper bound
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.max_size:
            self._data.popitem(last=False)

    def clear(self) -> None:
        self._data.clear()
        self.hits = self.misses = 0


class TaskMemo:
    """The :class:`~stepgym.envs.oracle.Remember` of one task over a :class:`ValueCache`."""

    def __init__(self, cache: ValueCache, task: str):
        self._cache, self._task = cache, task

    @property
    def caching(self) -> bool:
        """Whether values are kept at all (``cache_size=0``: every step runs the oracle, and an oracle that
        shares what it proved with others of the process does not either)."""
        return self._cache.max_size > 0

    def __call__(self, state_key: str, value: Value) -> None:
        self._cache.put((self._task, state_key), value)

    def recall(self, state_key: str) -> Value | None:
        return self._cache.peek((self._task, state_key))


def step_value_class(info: dict[str, Any]) -> int:
    """-1 harmful, +1 helpful, 0 neutral, from one step's value labels (what the fidelity benchmark separates on).

    Harmful: the gain is negative (a longer way to success, success made unreachable, the best reachable reward
    dropped: the gain rule folds the last two into -1). Helpful: the gain is positive. Everything else, including
    a step whose after-value is unknown, is neutral.
    """
    try:
        gain = info[schema.VALUE_GAIN]
    except KeyError:
        raise StepGymError(
            f"step_value_class needs {schema.VALUE_GAIN!r} in the step's info: wrap the env in "
            "stepgym.wrappers.ValueWrapper (reset's info has no gain)"
        ) from None
    if gain < 0:
        return -1
    if gain > 0:
        return 1
    return 0
