"""stepgym's ALFWorld engine is the real one: same text, commands and wins as raw TextWorld + ALFWorld wrappers."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import stepgym  # noqa: F401
from stepgym import schema

pytestmark = pytest.mark.usefixtures("data_dir")


def _raw_env(game_file):
    import textworld
    import textworld.gym
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    infos = textworld.EnvInfos(won=True, admissible_commands=True)
    env_id = textworld.gym.register_game(
        str(game_file), infos, max_episode_steps=100, wrappers=[AlfredDemangler(), AlfredInfos]
    )
    return textworld.gym.make(env_id)


def test_same_observations_commands_and_wins_as_raw_textworld():
    env = gym.make("StepGym/ALFWorld-v0", split="valid_unseen", expert=False)
    games = env.unwrapped.games[::19]
    rng = np.random.default_rng(0)
    compared = 0
    for game in games:
        raw = _raw_env(game.game_file)
        raw_obs, raw_info = raw.reset()
        for episode in range(2):  # the second episode checks the in-place reset
            if episode:
                raw_obs, raw_info = raw.reset()
            obs, info = env.reset(options={"task_id": game.task_id})
            assert obs == raw_obs
            assert info[schema.ADMISSIBLE_ACTIONS] == raw_info["admissible_commands"]
            for _ in range(12):
                cmds = raw_info["admissible_commands"]
                action = cmds[int(rng.integers(len(cmds)))]
                raw_obs, raw_score, raw_done, raw_info = raw.step(action)
                obs, reward, terminated, _, info = env.step(action)
                assert obs == raw_obs, action
                assert info[schema.ADMISSIBLE_ACTIONS] == raw_info["admissible_commands"]
                assert info[schema.WON] == raw_info["won"] and terminated == bool(raw_done)
                compared += 1
                if raw_done:
                    break
        raw.close()
    assert compared > 100
