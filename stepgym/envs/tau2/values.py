"""StepGym/Tau2-v0's values for :class:`~stepgym.wrappers.ValueWrapper`: the expert's steps to go, as a bound.

The user is a person (an LLM, or the deterministic stand-in), so no search can prove the fewest agent messages to
success: the value is the gold path's remaining length from the current databases
(:meth:`~stepgym.envs.tau2.env.Tau2Env.steps_to_go_bound`), an upper bound (``exact`` False), and unknown once the
databases left the gold path (a wrong write).
"""

from __future__ import annotations

from typing import Any

from stepgym.envs.oracle import Value

__all__ = ["Tau2BoundOracle"]


class Tau2BoundOracle:
    """Inexact values: ``cost`` is the steps-to-go bound; reachable while the databases are on the gold path."""

    unit_gain = False
    cacheable = False  # the bound follows the conversation (reads made, info said), not only the state key

    def __init__(self, env: Any, budget: int = 0):
        self.env = env

    def value(self, info: dict[str, Any], remember: Any = None) -> Value:
        from stepgym import schema

        if info.get(schema.REWARD_INFO) is not None or (self.env._orch is not None and self.env._orch.done):
            reward = float(self.env._reward_info.get("reward", 0.0))
            return Value.won(reward) if reward >= 1.0 else Value.unreachable(reward)
        bound = self.env.steps_to_go_bound()
        if bound is None:
            return Value.unknown()
        return Value(float(bound), False, True, 1.0)
