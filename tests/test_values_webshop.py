"""WebShop's value labels against a breadth-first search over the real engine's transitions and rewards, along
expert and noisy rollouts; the best reward equals the best a brute force over the target's options finds."""

from __future__ import annotations

import itertools
from collections import deque

import gymnasium as gym
import numpy as np
import pytest

import stepgym  # noqa: F401
from stepgym import schema
from stepgym.envs.webshop.engine import ShopState
from stepgym.values import step_value_class
from stepgym.wrappers import ValueWrapper

pytestmark = pytest.mark.usefixtures("data_dir")
BRUTE_LIMIT = 20_000


def brute_force(env, queries: list[str], best: float, depth_limit: int) -> int | str | None:
    """Fewest actions to buying with reward >= ``best`` by breadth-first search over the engine's transitions
    (every clickable, and ``queries`` as the searches), at most ``depth_limit`` deep; None: none that short."""
    engine, goal = env.core.engine, env.goal
    start: ShopState = env.state
    seen = {start}
    frontier = deque([(start, 0)])
    generated = 0
    while frontier:
        state, depth = frontier.popleft()
        if depth >= depth_limit:
            return None
        page = engine.page(state, goal)
        actions = [f"search[{q}]" for q in queries] if page.has_search_bar else []
        actions += [f"click[{k}]" for k in page.clickables if k != "search"]
        for action in actions:
            child, problem = engine.transition(state, action)
            generated += 1
            if problem or child in seen:
                continue
            if child.page == "done":
                if engine.reward(child, goal)[0] >= best - 1e-9:
                    return depth + 1
                continue
            seen.add(child)
            frontier.append((child, depth + 1))
            if generated > BRUTE_LIMIT:
                return "limit"
    return None


@pytest.fixture(scope="module")
def env():
    e = ValueWrapper(gym.make("StepGym/WebShop-v0", split="test").unwrapped)
    yield e
    e.close()


def test_values_equal_a_brute_force_over_the_engine(env) -> None:
    rng = np.random.default_rng(0)
    compared = 0
    for episode in range(4):
        obs, info = env.reset(seed=episode)
        facts = env.oracle._goals[env.unwrapped.goal.task_id]
        for _ in range(8):
            value = info[schema.VALUE_AFTER]
            if info[schema.VALUE_EXACT] and info[schema.VALUE_REACHABLE] and 0 < value <= 4:
                raw = env.unwrapped
                best = info[schema.VALUE_BEST_REWARD]
                assert brute_force(raw, facts.queries, best, int(value) - 1) is None  # nothing shorter
                assert brute_force(raw, facts.queries, best, int(value)) == value  # and this long exists
                compared += 1
            action = info[schema.EXPERT_ACTION]
            clicks = [c for c in info[schema.WEBSHOP_AVAILABLE]["clickables"] if c != "search"]
            if clicks and rng.random() < 0.35:
                action = f"click[{clicks[int(rng.integers(len(clicks)))]}]"
            before = info[schema.VALUE_AFTER]
            obs, r, term, trunc, info = env.step(action)
            assert info[schema.VALUE_BEFORE] == before
            if info[schema.VALUE_REACHABLE]:
                assert info[schema.VALUE_BEFORE] <= 1.0 + info[schema.VALUE_AFTER]
            if term:
                won = r >= info[schema.VALUE_BEST_REWARD] - 1e-9
                assert info[schema.VALUE_REACHABLE] == won and (info[schema.VALUE_AFTER] == 0.0)
                assert step_value_class(info) == (1 if won else -1)
                break
    assert compared >= 8


def test_the_best_reward_is_at_least_the_targets_best_option_choice(env) -> None:
    for episode in range(3):
        obs, info = env.reset(seed=10 + episode)
        raw = env.unwrapped
        engine, goal = raw.core.engine, raw.goal
        groups = engine.catalogue.by_asin[goal.asin]["options"]
        best = 0.0
        for pick in itertools.product(*[[None, *v] for v in groups.values()]):
            opts = tuple(sorted((g, v) for g, v in zip(groups, pick, strict=True) if v is not None))
            best = max(best, engine.reward(ShopState("done", asin=goal.asin, options=opts), goal)[0])
        assert info[schema.VALUE_BEST_REWARD] >= best - 1e-9


def test_buying_the_wrong_product_is_harmful(env) -> None:
    obs, info = env.reset(seed=0)
    *_, info = env.step(info[schema.EXPERT_ACTION])  # the expert's search: a results page
    target = env.unwrapped.goal.asin.lower()
    other = next(
        c for c in info[schema.WEBSHOP_AVAILABLE]["clickables"] if c.startswith("b0") and c != target
    )
    *_, info = env.step(f"click[{other}]")
    best = info[schema.VALUE_BEST_REWARD]
    obs, r, term, trunc, info = env.step("click[buy now]")
    assert term and r < best  # this product earns less than the best reachable
    assert info[schema.VALUE_REACHABLE] is False and info[schema.VALUE_EXACT] is True
    assert info[schema.VALUE_GAIN] == -1.0 and step_value_class(info) == -1
    assert info[schema.VALUE_BEST_REWARD] == r  # what is left once bought: the reward earned
