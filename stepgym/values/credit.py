"""The value oracle of ``CreditToy-v0`` and ``CreditFamily-v0``: their optimum is known by construction.

Both envs say it themselves (``steps_to_win()``: the fewest actions to win from the current state, None when no
action can win any more), so the oracle is exact for every state and costs a few attribute reads. The tests check
it against a brute-force breadth-first search over copies of the env.
"""

from __future__ import annotations

from typing import Any

from stepgym.values.base import Remember, Value

__all__ = ["CreditOracle"]


class CreditOracle:
    """Exact values from the env's own ``steps_to_win()`` (``budget`` is not needed and ignored)."""

    unit_gain = False

    def __init__(self, env: Any, budget: int = 0):
        self.env = env

    def value(self, info: dict[str, Any], remember: Remember) -> Value:
        steps = self.env.steps_to_win()
        if steps is None:
            return Value.unreachable()
        return Value(float(steps), True, True, 1.0)
