"""StepGym/Sokoban-v0: the checker battery, rooms and play equal to gym-sokoban 0.0.6, exact values against a plain
breadth-first search written here, bad actions, tasks and splits, and one run through GroupEnv + ValueWrapper +
the text interface."""

from __future__ import annotations

import contextlib
import functools
import io
import random
import warnings
from collections import deque

import gymnasium as gym
import numpy as np
import pytest

import stepgym  # noqa: F401 - registers the envs
from stepgym import schema
from stepgym.envs.sokoban import SokobanEnv
from stepgym.envs.sokoban.game import ACTIONS, Level
from stepgym.envs.sokoban.generation import RoomGenerationError, generate_room
from stepgym.envs.sokoban.solver import SokobanSolver
from stepgym.testing import FUZZ_ACTIONS, check_text_env
from stepgym.values import ValueWrapper, step_value_class

ENV_ID = "StepGym/Sokoban-v0"
# gym-sokoban renders an RGB frame on reset with imageio's deprecated v2 reader
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:gym_sokoban.*")
SYMBOLS = {0: "#", 1: "_", 2: "O", 3: "√", 4: "X", 5: "P"}


@functools.cache
def _upstream():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stderr(io.StringIO()):  # old gym prints an "unmaintained" banner
            pytest.importorskip("gym_sokoban", reason="the reference: pip install -e '.[sokoban]'")
            from gym_sokoban.envs.sokoban_env import SokobanEnv as UpstreamEnv
    return UpstreamEnv


@contextlib.contextmanager
def _global_seed(seed: int):
    """Seed the global RNGs for upstream's side only, and put them back afterwards."""
    py_state, np_state = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed)
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


def _upstream_env(dim, num_boxes, seed, max_steps=100):
    env = _upstream()(dim_room=dim, num_boxes=num_boxes, max_steps=max_steps, reset=False)
    with _global_seed(seed), contextlib.redirect_stdout(io.StringIO()):  # its retries print
        env.reset()
    return env


def _upstream_grid(env) -> str:
    """Upstream's room_state as text, with RAGEN's 'S' for the player on a target."""
    rows = []
    for state_row, fixed_row in zip(env.room_state.tolist(), env.room_fixed.tolist(), strict=True):
        rows.append(
            "".join(
                "S" if s == 5 and f == 2 else SYMBOLS[s] for s, f in zip(state_row, fixed_row, strict=True)
            )
        )
    return "\n".join(rows)


# ---------------------------------------------------------------------------------------------------------------
# The battery
# ---------------------------------------------------------------------------------------------------------------
def test_checker_determinism_and_fuzz() -> None:
    check_text_env(lambda: gym.make(ENV_ID).unwrapped)
    check_text_env(lambda: gym.make(ENV_ID, dim_room=(7, 7), num_boxes=2, split="test").unwrapped, seed=3)


def test_bad_actions_are_invalid_observations_and_leave_the_world() -> None:
    env = gym.make(ENV_ID)
    _, info = env.reset(options={"task_id": "sokoban-6x6-1-2"})
    key = info[schema.STATE_KEY]
    for bad in (*FUZZ_ACTIONS, "u p", "north", "push up", "upp", 3, None, b"\xff"):
        obs, reward, terminated, truncated, info = env.step(bad)
        assert obs.startswith("Invalid action:") and obs.endswith(
            env.unwrapped.level.render(env.unwrapped.state)
        )
        assert (
            info[schema.ADMISSIBLE] is False
            and info[schema.EFFECTIVE] is False
            and info[schema.INVALID_REASON]
        )
        assert info[schema.STATE_KEY] == key and reward == pytest.approx(-0.1) and not terminated
        if truncated:
            env.reset(options={"task_id": "sokoban-6x6-1-2"})
    for word in ("UP", " Down ", "left", "Right"):  # any case, any surrounding space
        _, _, _, _, info = env.step(word)
        assert info[schema.ADMISSIBLE] is True


# ---------------------------------------------------------------------------------------------------------------
# Equality with gym-sokoban 0.0.6
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("dim", "num_boxes", "seeds"),
    [((6, 6), 1, range(120)), ((7, 7), 2, [*range(30), 51, 53]), ((6, 8), 1, range(10))],
)
def test_rooms_equal_gym_sokoban(dim, num_boxes, seeds) -> None:
    retried = 0
    for seed in seeds:
        upstream = _upstream_env(dim, num_boxes, seed)
        room = generate_room(seed, dim, num_boxes)
        assert np.array_equal(np.array(room.fixed), upstream.room_fixed), seed
        assert np.array_equal(np.array(room.state), upstream.room_state), seed
        retried += room.attempts > 1
    if num_boxes == 2:
        assert retried, "no seed exercised upstream's retry of a failed generation"


@pytest.mark.parametrize(("dim", "num_boxes", "split"), [((6, 6), 1, "train"), ((7, 7), 2, "test")])
def test_random_play_equals_gym_sokoban(dim, num_boxes, split) -> None:
    """Observations, rewards and termination on random actions; an invalid action is upstream's no-op (0)."""
    rng = np.random.default_rng(0)
    env = gym.make(ENV_ID, dim_room=dim, num_boxes=num_boxes, split=split, max_steps=40)
    won = 0
    for episodes, task_id in enumerate(env.unwrapped.task_ids[:25]):
        seed = env.unwrapped.seed_of(task_id)
        upstream = _upstream_env(dim, num_boxes, seed, max_steps=40)
        obs, info = env.reset(options={"task_id": task_id})
        assert obs == _upstream_grid(upstream)
        done = False
        # half of the episodes follow the expert now and then, so solved rooms (+1, +10) are compared too
        expert_rate = 0.5 if episodes % 2 else 0.0
        while not done:
            if rng.random() < expert_rate and info[schema.EXPERT_ACTION]:
                k = ACTIONS.index(info[schema.EXPERT_ACTION])
                action, up_action = ACTIONS[k], k + 1
            else:
                k = int(rng.integers(5))
                action, up_action = (ACTIONS[k], k + 1) if k < 4 else ("wait", 0)
            obs, reward, terminated, truncated, info = env.step(action)
            _, up_reward, up_done, up_info = upstream.step(up_action, observation_mode="tiny_rgb_array")
            assert obs.endswith(_upstream_grid(upstream)), (task_id, action)
            assert reward == up_reward, (task_id, action)
            assert (terminated or truncated) == up_done
            if up_done:
                assert terminated == up_info["all_boxes_on_target"]
                assert truncated == (up_info["maxsteps_used"] and not up_info["all_boxes_on_target"])
            done = terminated or truncated
            won += terminated
    assert won >= 3  # the comparison covered solved rooms


def test_generation_failure_is_a_clear_deterministic_error() -> None:
    with pytest.raises(RoomGenerationError, match="no Sokoban room after 3 attempts for seed 5"):
        generate_room(5, (4, 4), 2, max_attempts=3)
    with pytest.raises(RoomGenerationError, match="after 3 attempts"):
        generate_room(5, (4, 4), 2, max_attempts=3)  # the same seed fails the same way


# ---------------------------------------------------------------------------------------------------------------
# Exact values against a plain breadth-first search (no pruning), written independently of the env's rules
# ---------------------------------------------------------------------------------------------------------------
def _grid_of(level: Level) -> list[str]:
    return [
        "".join("#" if level.walls[r * level.width + c] else "." for c in range(level.width))
        for r in range(level.height)
    ]


def _brute_force_cost(grid: list[str], targets: set, player: tuple, boxes: frozenset, limit: int = 200_000):
    """Fewest moves to every box on a target by breadth-first search over (player, boxes); None if none."""
    if boxes <= targets:
        return 0
    seen = {(player, boxes)}
    queue = deque([(player, boxes, 0)])
    while queue:
        (pr, pc), bx, d = queue.popleft()
        for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            nr, nc = pr + dr, pc + dc
            if grid[nr][nc] == "#":
                continue
            nb = bx
            if (nr, nc) in bx:
                br, bc = nr + dr, nc + dc
                if grid[br][bc] == "#" or (br, bc) in bx:
                    continue
                nb = (bx - {(nr, nc)}) | {(br, bc)}
            if nb <= targets:
                return d + 1
            key = ((nr, nc), nb)
            if key not in seen:
                seen.add(key)
                assert len(seen) < limit
                queue.append(((nr, nc), nb, d + 1))
    return None


def _reachable_states(level: Level, start, cap: int):
    seen, queue = {start}, deque([start])
    while queue and len(seen) < cap:
        s = queue.popleft()
        if level.solved(s):
            continue
        for a in range(4):
            nxt, _, _ = level.move(s, a)
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return sorted(seen)


@pytest.mark.parametrize(
    ("dim", "num_boxes", "seeds", "per_room"), [((6, 6), 1, range(8), 400), ((7, 7), 2, range(3), 60)]
)
def test_solver_equals_brute_force_search(dim, num_boxes, seeds, per_room) -> None:
    rng = random.Random(0)
    dead = checked = 0
    for seed in seeds:
        room = generate_room(seed, dim, num_boxes)
        level, start = Level.from_rooms(room.fixed, room.state)
        solver = SokobanSolver(level)
        grid = _grid_of(level)
        targets = {level.xy(t) for t in level.targets}
        states = _reachable_states(level, start, cap=20_000)
        for state in rng.sample(states, min(per_room, len(states))):
            truth = _brute_force_cost(
                grid, targets, level.xy(state[0]), frozenset(level.xy(b) for b in state[1])
            )
            got = solver.solve(state)
            assert got.exact and got.cost == truth, (seed, level.render(state), got, truth)
            checked += 1
            if truth is None:
                dead += 1
                assert got.action is None
            elif truth > 0:  # the expert's action is optimal
                nxt, _, _ = level.move(state, ACTIONS.index(got.action))
                assert solver.solve(nxt).cost == truth - 1
    assert checked > 150 and dead > 10  # both solvable and deadlocked states were compared


def test_deadlocks_are_detected_and_sound() -> None:
    fixed = tuple(
        tuple(r)
        for r in (
            [0] * 6,
            [0, 1, 1, 1, 1, 0],
            [0, 1, 1, 2, 1, 0],
            [0, 1, 1, 1, 1, 0],
            [0, 1, 1, 1, 1, 0],
            [0] * 6,
        )
    )
    state = [list(r) for r in fixed]
    state[1][1], state[3][2] = 4, 5  # a box in the top-left corner
    level, s = Level.from_rooms(fixed, tuple(map(tuple, state)))
    solver = SokobanSolver(level)
    assert solver.dead(s) and solver.solve(s).cost is None and solver.solve(s).exact
    assert (
        _brute_force_cost(_grid_of(level), {level.xy(t) for t in level.targets}, (3, 2), frozenset({(1, 1)}))
        is None
    )


# ---------------------------------------------------------------------------------------------------------------
# Tasks, values, wrappers
# ---------------------------------------------------------------------------------------------------------------
def test_task_ids_splits_and_determinism() -> None:
    train, test = SokobanEnv(split="train"), SokobanEnv(split="test", n_tasks=50)
    assert train.task_ids[:2] == ("sokoban-6x6-1-0", "sokoban-6x6-1-1") and len(train.task_ids) == 10_000
    assert test.task_ids[0] == "sokoban-6x6-1-1000000" and not set(train.task_ids) & set(test.task_ids)
    assert SokobanEnv(search_depth=30).task_ids[0] == "sokoban-6x6-1-d30-0"
    for bad in (
        "sokoban-6x6-1-1000000",
        "sokoban-7x7-1-3",
        "sokoban-6x6-1-03",
        "nonsense",
        "sokoban-6x6-1--1",
    ):
        with pytest.raises(ValueError, match="unknown task_id"):
            train.reset(options={"task_id": bad})
    assert (
        train.reset(options={"task_id": "sokoban-6x6-1-999999"})[1][schema.TASK_ID] == "sokoban-6x6-1-999999"
    )
    a, b = SokobanEnv().reset(seed=7), SokobanEnv().reset(seed=7)
    assert a == b
    for kwargs in (
        {"split": "dev"},
        {"dim_room": (3, 9)},
        {"num_boxes": 0},
        {"search_depth": 1},
        {"n_tasks": 0},
    ):
        with pytest.raises(ValueError):
            SokobanEnv(**kwargs)


def test_value_labels_are_exact_along_expert_and_harmful_play() -> None:
    env = ValueWrapper(gym.make(ENV_ID))
    obs, info = env.reset(options={"task_id": "sokoban-6x6-1-0"})
    assert info[schema.VALUE_AFTER] == 4.0 and info[schema.VALUE_EXACT]
    gains = []
    while True:
        obs, reward, terminated, truncated, info = env.step(info[schema.EXPERT_ACTION])
        gains.append(info[schema.VALUE_GAIN])
        if terminated or truncated:
            break
    assert gains == [1.0] * 4 and info[schema.WON] and info[schema.VALUE_AFTER] == 0.0
    # task 0: the box is right above the player, its target up and to the left
    env.reset(options={"task_id": "sokoban-6x6-1-0"})
    gains = []
    for action in ("down", "right", "left", "up", "up", "left"):
        _, _, _, _, info = env.step(action)
        gains.append(info[schema.VALUE_GAIN])
    # a bump into the wall wastes a step (0), a detour costs one (-1), coming back gains it (+1), a push up gains
    # one (+1); the second push up puts the box against the top wall, off target: lost (-1), then nothing (0)
    assert gains == [0.0, -1.0, 1.0, 1.0, -1.0, 0.0]
    assert step_value_class(info) == 0
    assert (
        info[schema.VALUE_REACHABLE] is False
        and info[schema.VALUE_EXACT]
        and info[schema.EXPERT_ACTION] is None
    )


def test_group_value_and_text_interface_run() -> None:
    from stepgym import GroupEnv
    from stepgym.wrappers.text import make_text_env, resolve_format

    fmt = resolve_format(ENV_ID)
    assert fmt.name == "sokoban"
    env = make_text_env(ENV_ID, prompt_as_observation=True, inner_wrappers=[ValueWrapper])
    prompt, info = env.reset(options={"task_id": "sokoban-6x6-1-0"})
    assert (
        "'√' box on a target" in prompt and "######" in prompt and "'up', 'down', 'left', 'right'" in prompt
    )
    prompt, _, _, _, info = env.step("<think>box above me</think><action>Up</action>")
    assert info[schema.FORMAT_VALID] and info[schema.PARSED_ACTION] == "up" and info[schema.VALUE_GAIN] == 1.0
    _, _, _, _, info = env.step("up!")
    assert not info[schema.FORMAT_VALID] and info[schema.STATE_KEY] == "player=(3,3);boxes=(2,3)"

    group = GroupEnv(ENV_ID, group_size=3, wrappers=[ValueWrapper])
    obs, infos = group.reset(options={"task_id": "sokoban-6x6-1-4"})
    assert len({infos[a][schema.TASK_ID] for a in group.agents}) == 1
    results = {}
    while group.agents:
        actions = {
            a: (infos[a][schema.EXPERT_ACTION] or "up") if a == "rollout_0" else "left" for a in group.agents
        }
        obs, rewards, term, trunc, step_infos = group.step(actions)
        infos.update(step_infos)
        for a in actions:
            results.setdefault(a, []).append(step_infos[a][schema.VALUE_GAIN])
    assert infos["rollout_0"][schema.WON] and all(g == 1.0 for g in results["rollout_0"])


def test_arg_hints_and_feedback_wrappers() -> None:
    from stepgym.graph_seeding import seed_graph_from_expert
    from stepgym.reference_graph import AgenticReferenceGraph
    from stepgym.wrappers import ARGWrapper, EnvFeedbackWrapper, HintWrapper

    arg = AgenticReferenceGraph()
    assert seed_graph_from_expert(arg, gym.make(ENV_ID), ["sokoban-6x6-1-0"]) == 1
    env = ARGWrapper(gym.make(ENV_ID), graph=arg)
    _, info = env.reset(options={"task_id": "sokoban-6x6-1-0"})
    _, _, _, _, info = env.step(info[schema.EXPERT_ACTION])
    assert info[schema.ARG_REASONABLE] and info[schema.ARG_PROGRESS]
    env = HintWrapper(EnvFeedbackWrapper(gym.make(ENV_ID, max_steps=3)))
    env.reset(options={"task_id": "sokoban-6x6-1-0"})
    for action in ("up", "up", "left"):  # the second push up loses the room
        _, _, terminated, truncated, info = env.step(action)
    assert truncated and not terminated and info[schema.ERROR_STEPS] and info[schema.HINTS]


@pytest.mark.network
def test_served_env_equals_in_process() -> None:
    """``stepgym serve`` over OpenEnv's websocket messages answers what the env answers in-process."""
    from _serve_reference import local_episode, served_episode

    local = local_episode(ENV_ID, {"split": "test"}, 5, 200)
    assert local[-1]["terminated"]
    assert served_episode(ENV_ID, {"split": "test"}, 5, [s["action"] for s in local[1:]]) == local


def test_a_search_past_its_budget_is_exact_or_unknown_never_a_guess() -> None:
    answers = set()
    for seed in range(6):
        room = generate_room(seed, (7, 7), 2)
        level, start = Level.from_rooms(room.fixed, room.state)
        truth = SokobanSolver(level).solve(start)
        for budget in (2, 20, 200):
            got = SokobanSolver(level, max_states=budget).solve(start)
            assert (got.exact and got.cost == truth.cost) or (not got.exact and got.cost is None), (
                seed,
                budget,
            )
            if got.exact and got.cost:
                nxt, _, _ = level.move(start, ACTIONS.index(got.action))
                assert SokobanSolver(level).solve(nxt).cost == truth.cost - 1
            answers.add(got.exact)
    assert answers == {True, False}  # both outcomes occurred
    env = ValueWrapper(gym.make(ENV_ID, dim_room=(7, 7), num_boxes=2, max_solver_states=2))
    _, info = env.reset(options={"task_id": "sokoban-7x7-2-0"})
    assert info[schema.VALUE_EXACT] is False and info[schema.EXPERT_ACTION] is None
