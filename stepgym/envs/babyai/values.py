"""The value oracle of ``StepGym/BabyAI-v0``: the env's own solver (A* over the level's full state).

The env answers for its current state (:meth:`~stepgym.envs.babyai.env.BabyAIEnv.solution`): the exact fewest
actions to success (or proved unreachable) when the search finishes within the env's ``search_budget``, else an
upper bound marked inexact (the shorter of the best success the search found and the BabyAI bot's completion),
or unknown when neither reached success. The env uses the same answer for its expert, so the expert's action
has gain +1 wherever the value is exact. ``budget`` (``ValueWrapper``'s, ALFWorld's unit) is not used: the env's
``search_budget`` is the one budget. ``tests/test_env_babyai.py`` checks the values against a brute-force
breadth-first search over deep copies of the level.
"""

from __future__ import annotations

from typing import Any

from stepgym import schema
from stepgym.envs.oracle import Remember, Value

__all__ = ["BabyAIOracle"]


class BabyAIOracle:
    """Values from the BabyAI env's solver (``budget`` is ignored: the env's ``search_budget`` applies)."""

    unit_gain = False

    def __init__(self, env: Any, budget: int = 0):
        self.env = env

    def value(self, info: dict[str, Any], remember: Remember) -> Value:
        if info.get(schema.WON):
            return Value.won()
        sol = self.env.solution()
        if sol.cost is None:
            return Value.unreachable() if sol.exact else Value.unknown()
        return Value(float(sol.cost), sol.exact, True, 1.0)
