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


def _variants(cmd: str) -> list[str]:
    """Ways a model can garble a command: invisible and control characters, padding, case, inner spaces."""
    return [
        cmd + "\x00",
        "\u200b" + cmd,
        cmd + " " * 1500,
        "  " + cmd + "\t\n",
        "\u3000" + cmd + "\xa0",
        cmd.upper(),
        cmd.replace(" ", "  "),
        cmd + "\x1b[0m",
        "",
        "x" * 10_000,
        cmd,
    ]


def test_garbled_commands_are_played_as_raw_textworld_plays_them():
    """By default every string is read as raw TextWorld reads it (stripped, then matched exactly)."""
    env = gym.make("StepGym/ALFWorld-v0", split="valid_unseen", expert=False, max_steps=90)
    rng = np.random.default_rng(1)
    played = rejected = 0
    for game in env.unwrapped.games[::45]:
        raw = _raw_env(game.game_file)
        _, raw_info = raw.reset()
        env.reset(options={"task_id": game.task_id})
        for _ in range(6):
            cmds = raw_info["admissible_commands"]
            for action in _variants(cmds[int(rng.integers(len(cmds)))]):
                before = raw_info["admissible_commands"]
                raw_obs, _, raw_done, raw_info = raw.step(action)
                obs, _, terminated, _, info = env.step(action)
                assert obs == raw_obs, repr(action[:40])
                assert info[schema.ADMISSIBLE_ACTIONS] == raw_info["admissible_commands"]
                assert info[schema.ADMISSIBLE] == (action.strip() in before)
                assert terminated == bool(raw_done)
                played += info[schema.ADMISSIBLE]
                rejected += not info[schema.ADMISSIBLE]
                if raw_done:
                    break
            if raw_done:
                break
        raw.close()
    assert played > 10 and rejected > 10
