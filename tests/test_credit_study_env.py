"""StepGym/CreditFamily-v0: each knob does what the study relies on (determinism, a reachable optimum, fatal vs
recoverable mistakes, aliased observations, distractors, dense rewards, the exact chance level, bad input)."""

from __future__ import annotations

import itertools
from functools import partial

import gymnasium as gym
import numpy as np
import pytest

import stepgym  # noqa: F401
from stepgym import schema
from stepgym.envs.credit.family import DECISIVE
from stepgym.testing import check_text_env

ENV = "StepGym/CreditFamily-v0"


def make(**kw):
    return gym.make(ENV, **kw)


def expert_episode(env, task_id):
    obs, info = env.reset(options={"task_id": task_id})
    total, steps = 0.0, 0
    while True:
        obs, r, term, trunc, info = env.step(info[schema.EXPERT_ACTION])
        total, steps = total + r, steps + 1
        if term or trunc:
            return total, steps, info


def walk_to_decisive(env, task_id):
    """Reset and take the expert's actions up to the first decisive station; returns its info."""
    obs, info = env.reset(options={"task_id": task_id})
    while not info[DECISIVE]:
        obs, *_, info = env.step(info[schema.EXPERT_ACTION])
    return obs, info


def wrong_take(info):
    right = info[schema.EXPERT_ACTION]
    return next(a for a in info[schema.ADMISSIBLE_ACTIONS] if a.startswith("take ") and a != right)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"horizon": 6, "n_decisive": 3, "alias": True},
        {"horizon": 5, "irreversible": False, "reward": "dense", "n_distractors": 3},
    ],
)
def test_passes_the_env_checks_and_is_deterministic(kw):
    check_text_env(partial(make, **kw))
    a, b = make(**kw), make(**kw)
    for seed in range(3):
        oa, ia = a.reset(seed=seed)
        ob, ib = b.reset(seed=seed)
        assert (oa, ia) == (ob, ib)
        rng = np.random.default_rng(seed)
        for _ in range(12):
            act = ia[schema.ADMISSIBLE_ACTIONS][rng.integers(len(ia[schema.ADMISSIBLE_ACTIONS]))]
            ra, rb = a.step(act), b.step(act)
            assert ra == rb
            ia = ra[-1]
            if ra[2] or ra[3]:
                break


def test_tasks_are_a_function_of_the_task_id_across_instances():
    one, two = make(horizon=12, n_decisive=3), make(horizon=12, n_decisive=3)
    for tid in one.unwrapped.task_ids[:5]:
        assert expert_episode(one, tid) == expert_episode(two, tid)
    assert not set(one.unwrapped.task_ids) & set(make(split="valid").unwrapped.task_ids)


@pytest.mark.parametrize(
    "kw",
    [
        {"horizon": 5},
        {"horizon": 40, "n_decisive": 4, "n_distractors": 4},
        {"horizon": 20, "n_decisive": 20, "reward": "dense", "alias": True},
        {"horizon": 10, "n_decisive": 0, "irreversible": False},
    ],
)
def test_the_expert_is_optimal_wins_every_task_in_horizon_steps(kw):
    env = make(**kw)
    u = env.unwrapped
    for tid in u.task_ids:
        total, steps, info = expert_episode(env, tid)
        assert info[schema.WON] and steps == u.horizon and total == pytest.approx(1.0)
    assert u.optimal_success == 1.0


def test_dense_reward_pays_each_correct_decisive_choice():
    env = make(horizon=8, n_decisive=3, reward="dense")
    obs, info = walk_to_decisive(env, env.unwrapped.task_ids[0])
    assert env.step("inspect wall")[1] == 0.0
    assert env.step(info[schema.EXPERT_ACTION])[1] == pytest.approx(0.25)


def test_an_irreversible_mistake_can_never_be_undone():
    env = make(horizon=3, n_decisive=1, n_choices=2, n_distractors=1, slack=3)
    tid = env.unwrapped.task_ids[1]
    _, info = env.reset(options={"task_id": tid})
    prefix = []
    while not info[DECISIVE]:  # the expert's actions up to the decisive station, then the mistake
        prefix.append(info[schema.EXPERT_ACTION])
        *_, info = env.step(prefix[-1])
    shown = [a for a in info[schema.ADMISSIBLE_ACTIONS] if a.startswith("take ")]
    prefix.append(wrong_take(info))
    *_, info = env.step(prefix[-1])
    assert info[schema.EXPERT_ACTION] is None and "doomed=1" in info[schema.SUBGOAL_KEY]
    # everything admissible anywhere, plus one action that never is
    vocab = ["go forward", "inspect wall", "take key", *shown]
    left = env.unwrapped.max_steps - len(prefix)
    for tail in itertools.product(vocab, repeat=left):  # every continuation up to the step limit: none wins
        env.reset(options={"task_id": tid})
        for a in prefix:
            env.step(a)
        for a in tail:
            _, r, term, trunc, info = env.step(a)
            assert not info[schema.WON] and r == 0.0
            if term or trunc:
                break


def test_a_recoverable_mistake_costs_one_step_and_the_expert_still_wins():
    env = make(horizon=6, n_decisive=2, irreversible=False)
    tid = env.unwrapped.task_ids[0]
    obs, info = walk_to_decisive(env, tid)
    before = info[schema.STATE_KEY]
    obs, r, term, trunc, info = env.step(wrong_take(info))
    assert info[schema.STATE_KEY] == before and not info[schema.EFFECTIVE] and info[schema.ADMISSIBLE]
    assert info[schema.EXPERT_ACTION] is not None
    while not (term or trunc):
        obs, r, term, trunc, info = env.step(info[schema.EXPERT_ACTION])
    assert info[schema.WON] and env.unwrapped._steps == 7


def test_alias_makes_different_states_look_the_same():
    env = make(horizon=12, n_decisive=1, alias=True)
    tid = env.unwrapped.task_ids[0]
    seen: dict[str, set[str]] = {}

    def record(obs, info):
        seen.setdefault(obs, set()).add(info[schema.STATE_KEY])

    obs, info = walk_to_decisive(env, tid)
    obs, *_, info = env.step(wrong_take(info))  # doomed, and it does not show
    record(obs, info)
    obs, info = env.reset(options={"task_id": tid})
    while not (info[DECISIVE]):
        record(obs, info)
        obs, *_, info = env.step(info[schema.EXPERT_ACTION])
    obs, *_, info = env.step(info[schema.EXPERT_ACTION])
    record(obs, info)
    aliased = [keys for keys in seen.values() if len(keys) > 1]
    assert aliased, "alias=True must map different exact states to one observation"
    assert any(
        any("carry=-" in k for k in keys) and any("carry=-" not in k for k in keys) for keys in aliased
    )
    # without alias, the same walk never shows one observation for two exact states
    plain = make(horizon=12, n_decisive=1)
    obs, info = plain.reset(options={"task_id": tid})
    seen_plain = {obs: info[schema.STATE_KEY]}
    while not (info[schema.WON]):
        obs, *_, info = plain.step(info[schema.EXPERT_ACTION])
        assert seen_plain.setdefault(obs, info[schema.STATE_KEY]) == info[schema.STATE_KEY]


def test_distractors_are_admissible_and_change_nothing():
    env = make(horizon=4, n_distractors=3)
    obs, info = env.reset(options={"task_id": env.unwrapped.task_ids[0]})
    inspects = [a for a in info[schema.ADMISSIBLE_ACTIONS] if a.startswith("inspect ")]
    assert len(inspects) == 3
    for a in inspects:
        obs, r, term, trunc, nxt = env.step(a)
        assert nxt[schema.ADMISSIBLE] and not nxt[schema.EFFECTIVE] and r == 0.0
        assert nxt[schema.STATE_KEY] == info[schema.STATE_KEY]


@pytest.mark.parametrize("action", ["fly away", "take key", "", "go  forward!" * 3])
def test_bad_actions_get_an_invalid_action_observation(action):
    env = make(horizon=5)
    obs, info = env.reset(options={"task_id": env.unwrapped.task_ids[0]})
    obs, r, term, trunc, nxt = env.step(action)
    assert obs == "Nothing happens." and r == 0.0 and not term
    assert not nxt[schema.ADMISSIBLE] and nxt[schema.INVALID_REASON]
    assert nxt[schema.STATE_KEY] == info[schema.STATE_KEY]


@pytest.mark.parametrize(
    "kw",
    [
        {"horizon": 10, "n_decisive": 1},
        {"horizon": 8, "n_decisive": 3, "irreversible": False, "n_distractors": 2},
    ],
)
def test_random_success_is_the_chance_level(kw):
    env = make(**kw)
    u = env.unwrapped
    rng = np.random.default_rng(0)
    wins, n = 0, 2000
    for ep in range(n):
        obs, info = u.reset(seed=ep)
        while True:
            acts = info[schema.ADMISSIBLE_ACTIONS]
            obs, r, term, trunc, info = u.step(acts[rng.integers(len(acts))])
            if term or trunc:
                break
        wins += info[schema.WON]
    assert abs(wins / n - u.random_success()) < 4 * np.sqrt(0.25 / n)


@pytest.mark.parametrize(
    "kw",
    [
        {"horizon": 0},
        {"n_decisive": 11},
        {"n_choices": 1},
        {"n_distractors": 99},
        {"reward": "often"},
        {"slack": -1},
        {"split": "test"},
    ],
)
def test_bad_knobs_are_refused(kw):
    with pytest.raises(ValueError):
        make(**kw)


def test_unknown_task_id_is_refused():
    env = make()
    with pytest.raises(ValueError, match="unknown task_id"):
        env.reset(options={"task_id": "credit-train-00000"})
