"""What an env's value oracle gives: the :class:`Value` of one state, and the oracle's interface.

An env that knows its true step values declares an oracle at :func:`~stepgym.envs.register` (``value_oracle=
"module:factory"``; stepgym's own envs keep theirs in their folder, ``stepgym/envs/<env>/values.py``), and
:class:`~stepgym.values.ValueWrapper` labels every step with it. This module is the contract between the two: it
sits beside the envs, so an env's oracle imports nothing above them.

A value is the oracle's *cost-to-go*: the fewest actions from a state to success. It is a property of the world
state and the task only (never of the step budget left, nor of how the state was reached), so it is cached by
``(task id, state key)``. Unreachable success is not written as infinity (info must stay JSON): the cost is 0.0 and
``reachable`` is False. Whether a number is exact or an upper bound is always said (``exact``); an oracle that
cannot tell reports ``reachable=False, exact=False`` ("unknown"), never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Remember", "StepsToWinOracle", "Value", "ValueOracle"]


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
