"""ARG labels on every valid ALFWorld game (274): walkthroughs are all Rea and PA with zero drift, and an inserted
invalid action is non-Rea, non-PA and raises every earlier step's drift by one."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import stepgym  # noqa: F401
from stepgym import schema
from stepgym.reference_graph import AgenticReferenceGraph, label_trajectory
from stepgym.rollout import play_episode
from stepgym.wrappers.arg import ARGWrapper

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("data_dir")]


class Replay:
    """Plays a fixed list of commands (the env's walkthrough, possibly with an error inserted)."""

    def __init__(self, env, insert_at=None):
        self.env, self.insert_at, self.todo = env, insert_at, []

    def reset(self):
        self.todo = list(self.env.unwrapped.walkthrough)
        if self.insert_at is not None:
            self.todo.insert(self.insert_at, "go to the moon")

    def act(self, obs, info):
        return self.todo.pop(0)


@pytest.mark.parametrize("split", ["valid_seen", "valid_unseen"])
def test_walkthroughs_and_inserted_errors(split):
    base = gym.make("StepGym/ALFWorld-v0", split=split, expert=False, game_cache_size=2).unwrapped
    arg = AgenticReferenceGraph()
    clean = {}
    for tid in base.task_ids:
        traj = play_episode(base, Replay(base), options={"task_id": tid})
        assert traj.success, tid
        arg.add_trajectory(traj)
        clean[tid] = traj
    assert arg.is_dag() and arg.stats()["tasks"] == len(base.task_ids)
    env = ARGWrapper(base, graph=arg)
    rng = np.random.default_rng(0)
    for tid, traj in clean.items():
        n = len(traj.steps)
        # The clean walkthrough: all Rea, all PA (each step reaches a new sub-goal state), zero drift.
        labels = label_trajectory(arg, traj)
        assert labels.reasonable == labels.progress == [True] * n, tid
        assert labels.future_drift == [0.0] * n
        # An invalid action inserted before walkthrough step k, played live through the wrapper.
        k = int(rng.integers(n))
        live = play_episode(env, Replay(base, insert_at=k), options={"task_id": tid})
        final = live.steps[-1].info
        assert final[schema.WON], tid
        expected = [True] * k + [False] + [True] * (n - k)
        assert final[schema.ARG_LABELS]["reasonable"] == expected, (tid, k)
        assert final[schema.ARG_LABELS]["progress"] == expected, (tid, k)
        assert final[schema.ARG_LABELS]["future_drift"] == [1.0] * (k + 1) + [0.0] * (n - k), (tid, k)
