"""What every value oracle shares: the :class:`Value` of one state, the gain rule, the LRU cache, the classifier.

A value is the oracle's *cost-to-go*: the fewest actions from a state to success. It is a property of the world
state and the task only (never of the step budget left, nor of how the state was reached), so it is cached by
``(task id, state key)``. Unreachable success is not written as infinity (info must stay JSON): the cost is 0.0 and
``reachable`` is False. Whether a number is exact or an upper bound is always said (``exact``); an oracle that
cannot tell reports ``reachable=False, exact=False`` ("unknown"), never a guess.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

from stepgym import schema
from stepgym.errors import StepGymError

__all__ = [
    "Remember",
    "StepsToWinOracle",
    "TaskMemo",
    "Value",
    "ValueCache",
    "ValueOracle",
    "step_gain",
    "step_value_class",
]


@dataclass(frozen=True)
class Value:
    """The ground truth of one state.

    Attributes:
        cost: fewest actions to success (0.0 when won, and when success is not reachable).
        exact: ``cost`` (or the unreachability) is proved; False: an upper bound, or unknown if not ``reachable``.
        reachable: success can still be reached (False with ``exact`` True: proved unreachable).
        best_reward: the best episode reward still reachable (the reward earned, once the episode is over).
    """

    cost: float
    exact: bool
    reachable: bool
    best_reward: float

    def __post_init__(self) -> None:
        if not self.cost >= 0.0 or self.cost == float("inf"):
            raise ValueError(f"a value's cost must be finite and >= 0, got {self.cost}")
        if not self.reachable and self.cost != 0.0:
            raise ValueError("an unreachable value has cost 0.0 (reachable=False says it is unreachable)")

    @classmethod
    def won(cls, reward: float = 1.0) -> Value:
        return cls(0.0, True, True, float(reward))

    @classmethod
    def unreachable(cls, reward: float = 0.0) -> Value:
        return cls(0.0, True, False, float(reward))

    @classmethod
    def unknown(cls) -> Value:
        return cls(0.0, False, False, 0.0)

    @property
    def known(self) -> bool:
        return self.exact or self.reachable


class Remember(Protocol):
    """What an oracle gets to share the cache of its task: call it to store what it learnt about *other* states
    (``state key -> Value``), ``recall`` to read one (None if not cached)."""

    def __call__(self, state_key: str, value: Value) -> None: ...

    def recall(self, state_key: str) -> Value | None: ...


class ValueOracle(Protocol):
    """One env's source of ground-truth values (see :mod:`stepgym.values`).

    ``value(info, remember)`` returns the value of the env's *current* state (``info`` is the info the env just
    returned) and must leave the env exactly as it was. ``unit_gain`` True makes the gain the sign of the cost
    change (Search-QA, whose cost is a stage, not an action count). An oracle may set ``cacheable = False`` when it
    follows the episode (Search-QA's gathered evidence): it is then asked on every step.
    """

    unit_gain: bool

    def value(self, info: dict[str, Any], remember: Remember) -> Value: ...


class StepsToWinOracle:
    """The oracle of an env that knows its own optimum: exact values from the env's ``steps_to_win()`` (the fewest
    actions to win from the current state, ``None`` when no action can win any more). The credit toys know it by
    construction, TextCraft from its exact solver; ``budget`` is not needed and ignored."""

    unit_gain = False

    def __init__(self, env: Any, budget: int = 0):
        self.env = env

    def value(self, info: dict[str, Any], remember: Remember) -> Value:
        steps = self.env.steps_to_win()
        if steps is None:
            return Value.unreachable()
        return Value(float(steps), True, True, 1.0)


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
    """The :class:`Remember` of one task over a :class:`ValueCache`."""

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
