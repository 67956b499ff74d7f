"""TextCraft's value oracle: the exact fewest ``get`` + ``craft`` commands to the goal, from the inventory.

The env's solver (:mod:`stepgym.envs.textcraft.solver`) is exact for every state (its docstring and
docs/textcraft.md give the argument; ``tests/test_env_textcraft.py`` checks it against a brute-force search over
engine commands), so every label is exact. A goal no command sequence can craft is left out of the task lists,
and what a task can reach from its empty start it can reach from every state (``get`` is unlimited and holding
more never hurts), so ``VALUE_REACHABLE`` is always True; a step that uses up held items an optimal plan needed
(a craft with the wrong wood, say) raises the cost: a negative gain.
"""

from __future__ import annotations

from typing import Any

from stepgym.values.base import Remember, Value

__all__ = ["TextCraftOracle"]


class TextCraftOracle:
    """Exact values from the env's ``steps_to_win()`` (``budget`` is not needed and ignored)."""

    unit_gain = False

    def __init__(self, env: Any, budget: int = 0):
        self.env = env

    def value(self, info: dict[str, Any], remember: Remember) -> Value:
        steps = self.env.steps_to_win()
        if steps is None:
            return Value.unreachable()
        return Value(float(steps), True, True, 1.0)
