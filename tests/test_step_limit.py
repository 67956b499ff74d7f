"""The step limit has one name: every registered env takes ``max_steps=``, and every CLI env option works on it."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import stepgym  # noqa: F401 - registers the envs
from stepgym.cli import main
from stepgym.envs import ENV_IDS
from stepgym.errors import InvalidArgumentError


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_rollout_max_steps_on_every_env(env_id, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("STEPGYM_DEBUG", raising=False)
    out = tmp_path / "episodes.jsonl"
    argv = ["rollout", "--env", env_id, "--max-steps", "3", "--limit", "1", "--agent", "random"]
    assert main([*argv, "--no-progress", "--out", str(out)]) == 0, capsys.readouterr().err
    episodes = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(episodes) == 1
    assert 1 <= episodes[0]["steps"] <= 3


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_rollout_bad_max_steps_is_one_line(env_id, capsys):
    assert main(["rollout", "--env", env_id, "--max-steps", "-2", "--limit", "1", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "--max-steps" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_data_root_is_ignored_by_data_free_envs(tmp_path, capsys):
    argv = ["rollout", "--env", "StepGym/CreditToy-v0", "--max-steps", "2", "--limit", "1", "--no-progress"]
    assert main([*argv, "--data-root", str(tmp_path)]) == 0


def test_unknown_env_option_names_the_known_ones(capsys):
    argv = ["rollout", "--env", "StepGym/CreditToy-v0", "--env-kwarg", "max_turns=3", "--no-progress"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "max_turns" in err and "max_steps" in err and "Traceback" not in err


def test_searchqa_max_steps_counts_the_answer_turn():
    env = gym.make("StepGym/SearchQA-v0", max_steps=3)
    try:
        assert env.unwrapped.max_steps == 3 and env.unwrapped.max_turns == 2
        assert env.spec.max_episode_steps == 3
    finally:
        env.close()
    env = gym.make("StepGym/SearchQA-v0", max_turns=2, max_steps=3)  # agreeing keywords are fine
    env.close()
    with pytest.raises(InvalidArgumentError, match="max_turns=4 contradicts max_steps=3"):
        gym.make("StepGym/SearchQA-v0", max_turns=4, max_steps=3)
    with pytest.raises(InvalidArgumentError, match="max_steps must be >= 1"):
        gym.make("StepGym/SearchQA-v0", max_steps=0)


def test_searchqa_forced_answer_turn_under_max_steps():
    env = gym.make("StepGym/SearchQA-v0", max_steps=2)
    try:
        env.reset(seed=0)
        obs, _, terminated, truncated, _ = env.step("<think>a</think><search>anything</search>")
        assert "<information>" in obs and not (terminated or truncated)
        # the last of max_steps turns may only answer: a search there is not run and truncates
        obs, reward, terminated, truncated, _ = env.step("<think>b</think><search>anything</search>")
        assert truncated and not terminated and reward == 0.0
    finally:
        env.close()


def test_credit_family_max_steps_and_slack():
    env = gym.make("StepGym/CreditFamily-v0", horizon=4, max_steps=6)
    assert env.unwrapped.max_steps == 6 and env.unwrapped.slack == 2
    env.close()
    env = gym.make("StepGym/CreditFamily-v0", horizon=4, slack=2, max_steps=6)
    env.close()
    with pytest.raises(InvalidArgumentError, match="contradicts horizon=4 \\+ slack=1"):
        gym.make("StepGym/CreditFamily-v0", horizon=4, slack=1, max_steps=6)
    env = gym.make("StepGym/CreditFamily-v0", horizon=4, max_steps=3)  # below the optimum: nothing can win
    assert env.unwrapped.slack == -1 and env.unwrapped.random_success() == 0.0
    env.close()


def _made_limit(env_id: str, kwargs: dict) -> int:
    env = gym.make(env_id, **kwargs)
    try:
        assert env.spec.max_episode_steps == env.unwrapped.max_steps
        return env.unwrapped.max_steps
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_eval_and_train_pass_max_steps_to_every_env(env_id):
    from stepgym.cli.endpoint import _checked, build_parser
    from stepgym.trainers.config import EnvConfig

    args = build_parser().parse_args(
        ["--model", "m", "--env", env_id, "--max-steps", "3", "--data-root", "/none"]
    )
    kwargs = dict(_checked(args)["env_kwargs"])  # `stepgym eval`'s env options
    assert kwargs["max_steps"] == 3
    kwargs.pop(
        "data_root", None
    )  # checked above to be accepted or dropped; the real data root is $STEPGYM_DATA
    assert _made_limit(env_id, kwargs) == 3
    assert _made_limit(env_id, EnvConfig(id=env_id, max_steps=4).make_kwargs(None)) == 4  # `stepgym train`'s
