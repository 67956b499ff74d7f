"""ALFWorld's value labels on the real games: equal to an unpruned brute-force search, never above the
walkthrough, 0 exactly when won, consistent along steps, honest about an exhausted budget, and invisible to the
rollout they label."""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np
import pytest

import stepgym  # noqa: F401
from stepgym import schema
from stepgym.errors import ValueOracleError
from stepgym.values import step_value_class
from stepgym.wrappers import ValueWrapper

pytestmark = pytest.mark.usefixtures("data_dir")
ENV_ID = "StepGym/ALFWorld-v0"
SMALL_GAME = 0  # valid_seen's first game: look_at_obj_in_light, a 3-command walkthrough
BRUTE_LIMIT = 6_000  # successor states; states farther than that from a win are not brute-forced


def brute_force(env, limit: int = BRUTE_LIMIT) -> int | str | None:
    """Fewest commands to a win from ``env``'s state by breadth-first search over *every* admissible command
    (no pruning, no bound) on a separate native engine; ``"limit"`` when it needs more than ``limit`` states."""
    from stepgym.envs.alfworld.native import NativeEngine

    engine = NativeEngine(cache_size=2)
    root = env.get_state().engine
    state = engine.set_state(root)
    if state["won"]:
        return 0
    seen = {engine.key_facts().state_key()}
    frontier = deque([(root, state["admissible_commands"], 0)])
    generated = 0
    while frontier:
        snap, commands, depth = frontier.popleft()
        for command in commands:
            engine.set_state(snap)
            child = engine.step(command)
            generated += 1
            if child["won"]:
                return depth + 1
            key = engine.key_facts().state_key()
            if key not in seen:
                seen.add(key)
                frontier.append((engine.get_state(), child["admissible_commands"], depth + 1))
            if generated >= limit:
                return "limit"
    return None


@pytest.fixture(scope="module")
def wrapped():
    env = ValueWrapper(gym.make(ENV_ID, split="valid_seen").unwrapped, budget=5_000)
    yield env
    env.close()


def test_values_equal_brute_force_along_noisy_rollouts(wrapped) -> None:
    rng = np.random.default_rng(1)
    compared = 0
    for _ in range(3):
        obs, info = wrapped.reset(options={"task_id": wrapped.unwrapped.task_ids[SMALL_GAME]})
        assert info[schema.VALUE_AFTER] <= len(wrapped.unwrapped.walkthrough)
        for _ in range(6):
            truth = brute_force(wrapped.unwrapped)
            if truth != "limit" and info[schema.VALUE_EXACT]:
                assert info[schema.VALUE_REACHABLE] == (truth is not None)
                assert info[schema.VALUE_AFTER] == (0.0 if truth is None else float(truth))
                compared += 1
            expert = info[schema.EXPERT_ACTION]
            acts = info[schema.ADMISSIBLE_ACTIONS]
            action = expert if expert and rng.random() < 0.5 else acts[int(rng.integers(len(acts)))]
            before = info[schema.VALUE_AFTER]
            obs, r, term, trunc, info = wrapped.step(action)
            assert info[schema.VALUE_BEFORE] == before
            if info[schema.VALUE_EXACT] and info[schema.VALUE_REACHABLE]:
                assert info[schema.VALUE_BEFORE] <= 1.0 + info[schema.VALUE_AFTER]
            if term:
                assert info[schema.WON] and info[schema.VALUE_AFTER] == 0.0
                break
    assert compared >= 6


def test_the_walkthrough_is_optimal_step_by_step_and_zero_exactly_when_won(wrapped) -> None:
    obs, info = wrapped.reset(options={"task_id": wrapped.unwrapped.task_ids[SMALL_GAME]})
    walkthrough = wrapped.unwrapped.walkthrough
    assert info[schema.VALUE_EXACT] and info[schema.VALUE_AFTER] == brute_force(wrapped.unwrapped)
    for i, command in enumerate(walkthrough):
        obs, r, term, trunc, info = wrapped.step(command)
        left = len(walkthrough) - 1 - i
        assert info[schema.VALUE_AFTER] == left and info[schema.VALUE_GAIN] == 1.0
        assert (info[schema.VALUE_AFTER] == 0.0) == info[schema.WON]
        assert step_value_class(info) == 1


def test_reversible_moves_are_consistent_both_ways(wrapped) -> None:
    obs, info = wrapped.reset(options={"task_id": wrapped.unwrapped.task_ids[SMALL_GAME]})
    gos = sorted(a for a in info[schema.ADMISSIBLE_ACTIONS] if a.startswith("go to "))[:3]
    here = wrapped.step(gos[0])[-1]
    for target in gos[1:]:
        there = wrapped.step(target)[-1]
        back = wrapped.step(gos[0])[-1]  # back where we were: the same state
        assert back[schema.STATE_KEY] == here[schema.STATE_KEY]
        assert there[schema.VALUE_EXACT] and back[schema.VALUE_EXACT]
        assert abs(there[schema.VALUE_AFTER] - back[schema.VALUE_AFTER]) <= 1.0


def test_an_exhausted_budget_is_said_in_the_label() -> None:
    env = ValueWrapper(gym.make(ENV_ID, split="valid_seen").unwrapped, budget=0, cache_size=0)
    game = env.unwrapped.task_ids[60]
    obs, info = env.reset(options={"task_id": game})
    *_, info = env.step(info[schema.ADMISSIBLE_ACTIONS][0])
    # no search at all: the expert's completion, an upper bound, never called exact
    assert info[schema.VALUE_EXACT] is False
    assert info[schema.VALUE_REACHABLE] is True and info[schema.VALUE_AFTER] >= 1.0
    assert env.oracle.stats["bound"] >= 1
    plain = gym.make(ENV_ID, split="valid_seen", expert=False).unwrapped
    env = ValueWrapper(plain, budget=0, cache_size=0)
    obs, info = env.reset(options={"task_id": game})
    assert info[schema.VALUE_EXACT] is False  # at the start: the walkthrough bounds it
    *_, info = env.step(info[schema.ADMISSIBLE_ACTIONS][0])
    assert info[schema.VALUE_EXACT] is False and info[schema.VALUE_REACHABLE] is False  # unknown, said so
    assert info[schema.VALUE_GAIN] == 0.0


def test_labels_do_not_change_the_rollout() -> None:
    actions = []
    runs = []
    for wrap in (False, True):
        env = gym.make(ENV_ID, split="valid_seen").unwrapped
        if wrap:
            env = ValueWrapper(env, budget=300)
        obs, info = env.reset(seed=7)
        rng = np.random.default_rng(3)
        out = [(obs, info[schema.EXPERT_ACTION], info[schema.STATE_KEY])]
        for t in range(8):
            if not wrap:
                acts = info[schema.ADMISSIBLE_ACTIONS]
                expert = info[schema.EXPERT_ACTION]
                actions.append(
                    expert if expert and rng.random() < 0.5 else acts[int(rng.integers(len(acts)))]
                )
            obs, r, term, trunc, info = env.step(actions[t])
            out.append((obs, r, info[schema.EXPERT_ACTION], info[schema.STATE_KEY]))
            if term:
                break
        runs.append(out)
    assert runs[0] == runs[1]


def test_the_textworld_engine_is_refused_at_wrap_time() -> None:
    env = gym.make(ENV_ID, split="valid_seen", engine="textworld").unwrapped
    with pytest.raises(ValueOracleError, match='engine="native"'):
        ValueWrapper(env)


def test_a_detour_next_to_a_labelled_state_gets_a_bound_from_the_cache() -> None:
    # no expert: without the cache, an out-of-budget search would have no bound at all ("unknown")
    env = ValueWrapper(gym.make(ENV_ID, split="valid_seen", expert=False).unwrapped, budget=5_000)
    obs, info = env.reset(options={"task_id": env.unwrapped.task_ids[SMALL_GAME]})
    first = env.unwrapped.walkthrough[0]
    *_, info = env.step(first)
    here, value = first, info[schema.VALUE_AFTER]
    assert info[schema.VALUE_EXACT]
    detour = next(a for a in info[schema.ADMISSIBLE_ACTIONS] if a.startswith("go to ") and a != here)
    env.oracle.budget = 60  # one layer of the search: enough to meet the cached state one step back
    *_, info = env.step(detour)
    assert info[schema.VALUE_REACHABLE] is True
    assert info[schema.VALUE_AFTER] <= 1.0 + value  # going back is one step, and the value there is known
