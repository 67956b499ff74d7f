"""Record episodes as :class:`stepgym.schema.Trajectory` (what counts as a success is
:attr:`stepgym.schema.Trajectory.success`).

:class:`EpisodeRecorder` is the one way stepgym turns ``reset``/``step`` results into a trajectory: GroupEnv,
HintWrapper and ARGWrapper record through it, and so does :func:`stepgym.rollout.play_episode`, which every
agent-driven recording (evaluation, the reference graph's ``seed_from_*``, the trainer's ARG seeding) goes through.
"""

from __future__ import annotations

from typing import Any

from stepgym import schema

__all__ = ["EpisodeRecorder"]


class EpisodeRecorder:
    """Accumulates ``reset`` and ``step`` results into a :class:`~stepgym.schema.Trajectory`.

    The info dicts are stored by reference (the same objects the env returned), so a key a wrapper adds later to
    the last step's info (hints, peer hindsight) shows in the record too.
    """

    def __init__(self) -> None:
        self.trajectory: schema.Trajectory | None = None
        self._obs = ""

    def start(self, observation: Any, info: dict[str, Any]) -> schema.Trajectory:
        tid = info.get(schema.TASK_ID, "")
        self.trajectory = schema.Trajectory(str(tid), observation, info, [])
        self._obs = observation
        return self.trajectory

    def add(
        self,
        action: Any,
        observation: Any,
        reward: float,
        terminated: bool,
        truncated: bool,
        info: dict[str, Any],
    ) -> schema.Step:
        if self.trajectory is None:
            raise RuntimeError("EpisodeRecorder.add before start")
        step = schema.Step(
            self._obs, action, float(reward), observation, bool(terminated), bool(truncated), info
        )
        self.trajectory.steps.append(step)
        self._obs = observation
        return step
