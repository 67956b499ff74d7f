"""The value oracle of ``StepGym/Sokoban-v0``: the env's exact solver (:mod:`stepgym.envs.sokoban.solver`).

The solver's steps-to-go count the env's own actions (one move or push each), so the cost is exact on every
state: a solved room costs 0, a deadlocked one is proved unreachable (``Value.unreachable()``: its gain rule then
labels the step that made it so -1). ``best_reward`` is 1.0 while the room can still be solved (success, as the
other envs' oracles count it; gym-sokoban's shaped reward is the env's reward, not the value). A state past the
solver's budget (``max_solver_states``; never on 6×6 rooms) is "unknown", never a guess. The solver keeps one
table per level, shared by the env copies of a process, so a state costs a dict look-up after the first query of
its task.
"""

from __future__ import annotations

from typing import Any

from stepgym.envs.oracle import Remember, Value

__all__ = ["SokobanOracle"]


class SokobanOracle:
    """Exact values from ``env.solution()`` (``budget`` is ignored: the env's ``max_solver_states`` bounds the
    search)."""

    unit_gain = False

    def __init__(self, env: Any, budget: int = 0):
        self.env = env

    def value(self, info: dict[str, Any], remember: Remember) -> Value:
        solution = self.env.solution()
        if solution.cost is None:
            return Value.unreachable() if solution.exact else Value.unknown()
        return Value(float(solution.cost), True, True, 1.0)
