"""ValueWrapper on the credit envs: the labels equal a brute-force search over copies of the env, the wrapper only
adds keys, a custom env without an oracle fails at wrap time, and the classifier reads the gain rule."""

from __future__ import annotations

import copy
from collections import deque

import gymnasium as gym
import numpy as np
import pytest

import stepgym  # noqa: F401  (registers the envs)
from stepgym import schema
from stepgym.envs.base import TextEnv
from stepgym.envs.oracle import Value
from stepgym.errors import StepGymError, ValueOracleError
from stepgym.values import ValueCache, step_gain, step_value_class
from stepgym.wrappers import ValueWrapper

VALUE_KEYS = (
    schema.VALUE_BEFORE,
    schema.VALUE_AFTER,
    schema.VALUE_GAIN,
    schema.VALUE_EXACT,
    schema.VALUE_REACHABLE,
    schema.VALUE_BEST_REWARD,
)


def brute_force(env: TextEnv, info: dict) -> int | None:
    """Fewest actions to a win from ``env``'s current state, by breadth-first search over deep copies."""
    if info[schema.WON]:
        return 0
    start = copy.deepcopy(env)
    start.max_steps = 10**6  # the step limit is not part of a state's value
    frontier = deque([(start, info, 0)])
    seen = {info[schema.STATE_KEY]}
    while frontier:
        node, node_info, depth = frontier.popleft()
        for action in node_info[schema.ADMISSIBLE_ACTIONS]:
            child = copy.deepcopy(node)
            *_, child_info = child.step(action)
            if child_info[schema.WON]:
                return depth + 1
            key = child_info[schema.STATE_KEY]
            if key not in seen:
                seen.add(key)
                frontier.append((child, child_info, depth + 1))
    return None


CREDIT_ENVS = [
    ("StepGym/CreditToy-v0", {}),
    ("StepGym/CreditToy-v0", {"n_rooms": 5, "n_distractors": 3}),
    ("StepGym/CreditFamily-v0", {"horizon": 5, "n_decisive": 2}),
    ("StepGym/CreditFamily-v0", {"horizon": 4, "n_decisive": 2, "irreversible": False, "n_distractors": 2}),
]


@pytest.mark.parametrize(("env_id", "kwargs"), CREDIT_ENVS)
def test_credit_values_equal_brute_force_on_random_rollouts(env_id: str, kwargs: dict) -> None:
    env = ValueWrapper(gym.make(env_id, **kwargs).unwrapped)
    rng = np.random.default_rng(0)
    checked = 0
    for episode in range(12):
        obs, info = env.reset(seed=episode)
        prev_value = info[schema.VALUE_AFTER]
        done = False
        while not done:
            truth = brute_force(env.unwrapped, info)
            assert info[schema.VALUE_REACHABLE] == (truth is not None)
            assert info[schema.VALUE_AFTER] == (0.0 if truth is None else float(truth))
            assert info[schema.VALUE_EXACT] is True
            assert info[schema.VALUE_BEST_REWARD] == (1.0 if truth is not None else 0.0)
            checked += 1
            acts = info[schema.ADMISSIBLE_ACTIONS]
            # mostly the expert, sometimes a random action: both optimal and harmful steps occur
            expert = info[schema.EXPERT_ACTION]
            action = expert if expert and rng.random() < 0.6 else acts[int(rng.integers(len(acts)))]
            obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            assert info[schema.VALUE_BEFORE] == prev_value
            before, after = info[schema.VALUE_BEFORE], info[schema.VALUE_AFTER]
            if info[schema.VALUE_REACHABLE]:
                assert before <= 1.0 + after  # one action moves the cost-to-go down by at most one
                assert info[schema.VALUE_GAIN] == before - after
            prev_value = after
        if info[schema.WON]:
            assert info[schema.VALUE_AFTER] == 0.0 and info[schema.VALUE_REACHABLE]
    assert checked > 50


def test_the_expert_gains_one_per_step_and_a_fatal_step_is_harmful() -> None:
    env = ValueWrapper(gym.make("StepGym/CreditToy-v0").unwrapped)
    obs, info = env.reset(options={"task_id": env.unwrapped.task_ids[1]})
    start = info[schema.VALUE_AFTER]
    gains = []
    while True:
        obs, r, term, trunc, info = env.step(info[schema.EXPERT_ACTION])
        gains.append(info[schema.VALUE_GAIN])
        if term or trunc:
            break
    assert gains == [1.0] * len(gains) and len(gains) == start
    assert [step_value_class(info)] == [1]

    obs, info = env.reset(options={"task_id": env.unwrapped.task_ids[1]})
    info = _walk_to_key(env, info)
    wrong = next(a for a in info[schema.ADMISSIBLE_ACTIONS] if a.startswith("take ") and a != "take key")
    obs, r, term, trunc, info = env.step(wrong)
    assert info[schema.VALUE_REACHABLE] is False and info[schema.VALUE_GAIN] == -1.0
    assert step_value_class(info) == -1
    obs, r, term, trunc, info = env.step("wait")  # already lost: nothing more to lose
    assert info[schema.VALUE_GAIN] == 0.0 and step_value_class(info) == 0


def _walk_to_key(env: gym.Env, info: dict) -> dict:
    while info[schema.EXPERT_ACTION] != "take key":
        *_, info = env.step(info[schema.EXPERT_ACTION])
    return info


def test_a_wasted_step_is_neutral() -> None:
    env = ValueWrapper(gym.make("StepGym/CreditFamily-v0", horizon=3).unwrapped)
    env.reset(seed=0)
    *_, info = env.step("inspect wall")
    assert info[schema.VALUE_GAIN] == 0.0 and step_value_class(info) == 0
    assert info[schema.VALUE_BEFORE] == info[schema.VALUE_AFTER] == 3.0


def test_the_wrapper_only_adds_keys_and_disabled_adds_none() -> None:
    plain = gym.make("StepGym/CreditFamily-v0", horizon=4, n_decisive=2).unwrapped
    wrapped = ValueWrapper(gym.make("StepGym/CreditFamily-v0", horizon=4, n_decisive=2).unwrapped)
    off = ValueWrapper(gym.make("StepGym/CreditFamily-v0", horizon=4, n_decisive=2).unwrapped, enabled=False)
    assert off.oracle is None
    runs = []
    for env in (plain, wrapped, off):
        obs, info = env.reset(seed=3)
        out = [(obs, dict(info))]
        for action in ["take stone", "go forward", "inspect wall", "take cup", "go forward", "go forward"]:
            obs, r, term, trunc, info = env.step(action)
            out.append((obs, r, term, trunc, dict(info)))
            if term or trunc:
                break
        runs.append(out)
    strip = [
        [
            tuple(
                {k: v for k, v in x.items() if k not in VALUE_KEYS} if isinstance(x, dict) else x for x in s
            )
            for s in run
        ]
        for run in runs
    ]
    assert strip[0] == strip[1] == strip[2]
    assert all(set(VALUE_KEYS) <= set(s[-1]) for s in runs[1][1:])
    assert not any(set(VALUE_KEYS) & set(s[-1]) for s in runs[2])
    assert schema.VALUE_GAIN not in runs[1][0][1] and schema.VALUE_AFTER in runs[1][0][1]


def test_wrapped_env_passes_the_env_checker() -> None:
    from stepgym.testing import check_text_env

    check_text_env(lambda: ValueWrapper(gym.make("StepGym/CreditToy-v0").unwrapped))


def test_cache_serves_repeated_states_and_is_bounded() -> None:
    for size in (100, 3):
        env = ValueWrapper(gym.make("StepGym/CreditToy-v0").unwrapped, cache_size=size)
        for _ in range(2):
            obs, info = env.reset(options={"task_id": env.unwrapped.task_ids[0]})
            while True:
                *_, term, trunc, info = env.step(info[schema.EXPERT_ACTION])
                if term or trunc:
                    break
        assert len(env.cache) == min(size, 6)  # six states on the expert's path
        assert env.cache.hits == (
            6 if size == 100 else 0
        )  # the second pass is served by the large cache only
    cache = ValueCache(10)
    cache.put(("t", "s"), Value(3.0, True, True, 1.0))
    cache.put(("t", "s"), Value(5.0, False, True, 1.0))  # a bound never replaces an exact value
    assert cache.get(("t", "s")) == Value(3.0, True, True, 1.0)


class _NoFacts(TextEnv):
    """A custom env that knows nothing about values."""

    def _reset_task(self, options):
        return "hi", {schema.TASK_ID: "x", schema.STATE_KEY: "s"}

    def _step_action(self, action, problem):
        return "hi", 0.0, False, {schema.TASK_ID: "x", schema.STATE_KEY: "s"}


def test_an_env_without_an_oracle_fails_at_wrap_time() -> None:
    with pytest.raises(ValueOracleError, match=r"no value oracle for .*_NoFacts"):
        ValueWrapper(_NoFacts(max_steps=3))
    assert (
        ValueWrapper(gym.make("StepGym/CreditToy-v0")).oracle is not None
    )  # found through gym.make's wrappers


class _OwnOracle(_NoFacts):
    def value_oracle(self, budget):
        class Oracle:
            unit_gain = False

            def value(self, info, remember):
                return Value(2.0, True, True, 1.0)

        return Oracle()


def test_a_custom_env_brings_its_own_oracle_and_needs_the_state_key() -> None:
    env = ValueWrapper(_OwnOracle(max_steps=3))
    obs, info = env.reset(seed=0)
    assert info[schema.VALUE_AFTER] == 2.0
    assert env.step("x")[-1][schema.VALUE_GAIN] == 0.0

    class NoKey(_OwnOracle):
        def _reset_task(self, options):
            return "hi", {schema.TASK_ID: "x"}

    with pytest.raises(ValueOracleError, match="state_key"):
        ValueWrapper(NoKey(max_steps=3)).reset(seed=0)


def test_gain_rule_and_classifier_edge_cases() -> None:
    at3, at2 = Value(3.0, True, True, 1.0), Value(2.0, True, True, 1.0)
    assert step_gain(at3, at2) == 1.0 and step_gain(at2, at3) == -1.0
    assert step_gain(at3, Value.unreachable()) == -1.0
    assert step_gain(at3, Value.unknown()) == 0.0  # no claim without proof
    assert step_gain(Value.unreachable(), Value.unreachable()) == 0.0
    assert step_gain(Value(2.0, True, True, 1.0), Value(0.0, True, True, 0.5)) == -1.0  # best reward dropped
    assert step_gain(Value(2.0, True, True, 1.0), Value.won(), unit=True) == 1.0
    with pytest.raises(ValueError):
        Value(float("inf"), True, True, 1.0)
    with pytest.raises(ValueError):
        Value(3.0, True, False, 0.0)
    with pytest.raises(StepGymError, match="value_gain"):
        step_value_class({})
