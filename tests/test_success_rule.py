"""What counts as success is written once (``schema.Trajectory.success``): rollout, the evaluation summary and the
recordings agree on it, also for a custom env that reports no ``WON``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

from stepgym import schema
from stepgym.llm_eval import summarise_records
from stepgym.recording import GroupRecorder, find_recordings, read_recording
from stepgym.rollout import evaluate_agent, play_episode
from stepgym.trainers.evaluate import summarise


class OneStep(gym.Env):
    """A custom env without ``WON``: one step, then the given reward and final info."""

    observation_space = gym.spaces.Text(100)
    action_space = gym.spaces.Text(100)

    def __init__(self, reward: float, final: dict[str, Any], task_type: str | None = "t") -> None:
        self.reward, self.final, self.task_type = reward, final, task_type
        self.task_ids = ["only"]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        info = {schema.TASK_ID: "only"}
        if self.task_type is not None:
            info[schema.TASK_TYPE] = self.task_type
        return "go", info

    def step(self, action: str):
        return "done", self.reward, True, False, {schema.TASK_ID: "only", **self.final}


class Say:
    def reset(self) -> None:
        pass

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return "x"


CASES = [
    (OneStep(0.5, {schema.EXACT_MATCH: 1.0}), True),  # exact match counts, whatever the reward
    (OneStep(1.0, {schema.EXACT_MATCH: 0.0}), False),  # ... and a failed match is a failure even at reward 1
    (OneStep(1.0, {}), True),  # neither: a return of at least 1
    (OneStep(0.9, {}), False),
    (OneStep(5.0, {schema.WON: False}), False),  # WON, when reported, decides
]


@pytest.mark.parametrize(("env", "expected"), CASES)
def test_rollout_and_eval_agree(env, expected, tmp_path):
    traj = play_episode(env, Say())
    assert traj.success is expected and schema.is_success(traj) is expected
    rolled = evaluate_agent(env, Say(), progress=False)
    assert rolled.episodes[0]["won"] is expected
    assert rolled.success_by_type() == {"t": (int(expected), 1), "all": (int(expected), 1)}
    assert summarise([traj], budgets=[1])["success"] == float(expected)
    recorder = GroupRecorder(tmp_path, meta={"source": "test"})  # what `stepgym rollout --record` writes
    recorder.record_trajectories([traj])
    (episode,) = read_recording(find_recordings(tmp_path)[0]).episodes
    assert episode["won"] is expected
    assert summarise_records([episode], budgets=[1])["success"] == float(expected)  # `stepgym eval`'s summary


def test_a_missing_task_type_has_one_name():
    env = OneStep(1.0, {}, task_type=None)
    traj = play_episode(env, Say())
    assert traj.task_type == schema.UNTYPED
    assert evaluate_agent(env, Say(), progress=False).success_by_type() == {
        schema.UNTYPED: (1, 1),
        "all": (1, 1),
    }
    assert summarise([traj], budgets=[1])["per_type"] == {schema.UNTYPED: {"n": 1, "success": 1.0}}
    assert schema.success_by_type([("a", True), ("", False), (None, True), ("a", False)]) == {
        "a": (1, 2),
        schema.UNTYPED: (1, 2),
    }
